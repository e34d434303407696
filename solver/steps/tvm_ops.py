"""The operator names TVM 0.19 registers (its `Op::Get` table), one per line.

Data, not code: read from the `RELAY_REGISTER_OP`, `RELAY_REGISTER_*_OP`,
`TVM_REGISTER_OP` and QNN registration macros of apache/tvm v0.19.0 `src/`
(relay, relax and tir ops share that one registry, so TVM's Relay parser
accepts each). The Relay parser of TVM 0.19 rejects any other name with
"operator `NAME` not found" before planning; so do we.
"""

from __future__ import annotations

__all__ = ["TVM_019_OPERATORS"]

TVM_019_OPERATORS: frozenset[str] = frozenset(
    """
    abs acos acosh add adv_index all annotation.bitpack_end annotation.bitpack_start
    annotation.cast_hint annotation.checkpoint annotation.compiler_begin annotation.compiler_end
    annotation.stop_fusion annotation.with_funcid any arange argmax argmin argsort argwhere asin asinh
    atan atanh auto_scheduler_layout_transform bitwise_and bitwise_not bitwise_or bitwise_xor
    broadcast_to broadcast_to_like call_lowered cast cast_like ceil clip collapse_sum_like
    collapse_sum_to concatenate contrib_reverse_reshape copy cos cosh cumprod cumsum debug device_copy
    dft divide dyn.broadcast_to dyn.expand_dims dyn.full dyn.image.resize2d dyn.nn.pad
    dyn.nn.upsampling dyn.nn.upsampling3d dyn.one_hot dyn.ones dyn.reshape dyn.sparse_to_dense
    dyn.squeeze dyn.strided_slice dyn.tile dyn.topk dyn.zeros einsum equal erf exp expand_dims fast_erf
    fast_exp fast_tanh fixed_point_multiply fixed_point_multiply_per_axis floor floor_divide floor_mod
    full full_like gather gather_nd greater greater_equal image.affine_grid image.crop_and_resize
    image.dilation2d image.grid_sample image.resize1d image.resize2d image.resize3d invert_permutation
    isfinite isinf isnan layout_transform left_shift less less_equal log log10 log2 logical_and
    logical_not logical_or logical_xor matrix_set_diag max maximum mean memory.alloc_storage
    memory.alloc_tensor memory.kill meshgrid meta_schedule_layout_transform min minimum mod multiply
    ndarray_size negative nn.adaptive_avg_pool1d nn.adaptive_avg_pool2d nn.adaptive_avg_pool3d
    nn.adaptive_max_pool1d nn.adaptive_max_pool2d nn.adaptive_max_pool3d nn.avg_pool1d nn.avg_pool2d
    nn.avg_pool2d_grad nn.avg_pool3d nn.batch_flatten nn.batch_matmul nn.batch_norm
    nn.batch_to_space_nd nn.bias_add nn.bitpack nn.bitserial_conv2d nn.bitserial_dense
    nn.contrib_conv2d_NCHWc nn.contrib_conv2d_gemm_weight_transform
    nn.contrib_conv2d_gemm_without_weight_transform nn.contrib_conv2d_winograd_nnpack_weight_transform
    nn.contrib_conv2d_winograd_weight_transform nn.contrib_conv2d_winograd_without_weight_transform
    nn.contrib_conv3d_winograd_weight_transform nn.contrib_conv3d_winograd_without_weight_transform
    nn.contrib_dense_pack nn.contrib_depthwise_conv2d_NCHWc nn.conv1d nn.conv1d_transpose nn.conv2d
    nn.conv2d_backward_weight nn.conv2d_transpose nn.conv3d nn.conv3d_transpose nn.correlation
    nn.cross_entropy nn.cross_entropy_with_logits nn.deformable_conv2d nn.dense nn.depth_to_space
    nn.dilate nn.dropout nn.fast_softmax nn.fifo_buffer nn.global_avg_pool2d nn.global_max_pool2d
    nn.group_norm nn.instance_norm nn.internal.sparse_dense_padded nn.l2_normalize nn.layer_norm
    nn.leaky_relu nn.log_softmax nn.lrn nn.matmul nn.max_pool1d nn.max_pool2d nn.max_pool2d_grad
    nn.max_pool3d nn.mirror_pad nn.nll_loss nn.pad nn.prelu nn.relu nn.softmax nn.space_to_batch_nd
    nn.space_to_depth nn.sparse_add nn.sparse_conv2d nn.sparse_dense nn.sparse_transpose nn.upsampling
    nn.upsampling3d not_equal on_device one_hot ones ones_like parser.MetaRef power prod qnn.abs
    qnn.add qnn.avg_pool2d qnn.batch_matmul qnn.concatenate qnn.contrib_dense_pack qnn.conv2d
    qnn.conv2d_transpose qnn.dense qnn.dequantize qnn.erf qnn.exp qnn.hardswish qnn.leaky_relu qnn.log
    qnn.mul qnn.quantize qnn.requantize qnn.rsqrt qnn.sigmoid qnn.simulated_dequantize
    qnn.simulated_quantize qnn.softmax qnn.sqrt qnn.subtract qnn.tanh random.multinomial random.normal
    random.threefry_generate random.threefry_split random.uniform reinterpret relax.add relax.arange
    relax.argmax relax.argmin relax.argsort relax.assert_op relax.astype relax.bitwise_and
    relax.bitwise_or relax.bitwise_xor relax.broadcast_to relax.builtin.alloc_tensor
    relax.builtin.stop_lift_params relax.call_builtin_with_ctx relax.call_dps_packed
    relax.call_inplace_packed relax.call_pure_packed relax.call_tir relax.call_tir_inplace
    relax.call_tir_with_grad relax.ccl.allgather relax.ccl.allreduce relax.ccl.broadcast_from_worker0
    relax.ccl.scatter_from_worker0 relax.clip relax.collapse_sum_like relax.collapse_sum_to
    relax.concat relax.cumprod relax.cumsum relax.dequantize relax.dist.annotate_sharding
    relax.dist.call_tir_local_view relax.dist.redistribute relax.dist.redistribute_replica_to_shard
    relax.divide relax.dynamic_strided_slice relax.einsum relax.equal relax.ewise_fma relax.expand_dims
    relax.eye relax.eye_like relax.flatten relax.flip relax.floor_divide relax.full relax.full_like
    relax.gather_elements relax.gather_nd relax.grad.avg_pool2d_backward relax.grad.end_checkpoint
    relax.grad.max_pool2d_backward relax.grad.nll_loss_backward relax.grad.no_grad
    relax.grad.start_checkpoint relax.grad.take_backward relax.greater relax.greater_equal
    relax.hint_on_device relax.image.resize2d relax.inspect.tensor_byte_offset
    relax.inspect.tensor_dtype_bits relax.inspect.tensor_dtype_code relax.inspect.tensor_dtype_lanes
    relax.inspect.tensor_elem_offset relax.inspect.tensor_ndim relax.inspect.tensor_shape_i
    relax.inspect.tensor_stride_i relax.invoke_closure relax.invoke_pure_closure relax.layout_transform
    relax.less relax.less_equal relax.logical_and relax.logical_or relax.logical_xor relax.make_closure
    relax.matmul relax.max relax.maximum relax.mean relax.memory.alloc_storage
    relax.memory.alloc_tensor relax.memory.ensure_zero_offset relax.memory.kill_storage
    relax.memory.kill_tensor relax.memory.view relax.min relax.minimum relax.multinomial_from_uniform
    relax.multiply relax.nn.adaptive_avg_pool1d relax.nn.adaptive_avg_pool2d
    relax.nn.adaptive_avg_pool3d relax.nn.attention relax.nn.attention_bias relax.nn.attention_var_len
    relax.nn.avg_pool1d relax.nn.avg_pool2d relax.nn.avg_pool3d relax.nn.batch_norm relax.nn.conv1d
    relax.nn.conv1d_transpose relax.nn.conv2d relax.nn.conv2d_transpose relax.nn.conv3d
    relax.nn.cross_entropy_with_logits relax.nn.dropout relax.nn.gelu relax.nn.gelu_tanh
    relax.nn.group_norm relax.nn.layer_norm relax.nn.leakyrelu relax.nn.log_softmax relax.nn.max_pool1d
    relax.nn.max_pool2d relax.nn.max_pool3d relax.nn.nll_loss relax.nn.pad relax.nn.rms_norm
    relax.nn.silu relax.nn.softmax relax.nonzero relax.not_equal relax.null_value relax.one_hot
    relax.ones relax.ones_like relax.permute_dims relax.power relax.print relax.prod relax.quantize
    relax.repeat relax.reshape relax.rsqrt relax.scatter_elements relax.scatter_nd relax.shape_of
    relax.shape_to_tensor relax.sort relax.split relax.squeeze relax.std relax.strided_slice
    relax.subtract relax.sum relax.take relax.tensor_to_shape relax.tile relax.to_vdevice relax.topk
    relax.tril relax.triu relax.unique relax.vm.alloc_storage relax.vm.alloc_tensor
    relax.vm.call_tir_dyn relax.vm.kill_object relax.where relax.wrap_param relax.zeros
    relax.zeros_like relay.op.annotation.simulated_quantize repeat reshape reshape_like reverse
    reverse_sequence right_shift round rsqrt scatter_elements scatter_nd searchsorted sequence_mask
    shape_of sigmoid sign sin sinh slice_like sliding_window sort sparse_fill_empty_rows sparse_reshape
    sparse_to_dense split sqrt squeeze stack stft strided_set strided_slice subtract sum take tan tanh
    tile tir.TVMBackendAnyListMoveFromPackedReturn tir.TVMBackendAnyListSetPackedArg tir.acos tir.acosh
    tir.asin tir.asinh tir.atan tir.atan2 tir.atanh tir.ceil tir.clz tir.copysign tir.cos tir.cosh
    tir.ctpop tir.cuda.__activemask tir.cuda.__shfl_down_sync tir.cuda.__shfl_sync
    tir.cuda.__shfl_up_sync tir.erf tir.exp tir.exp10 tir.exp2 tir.fabs tir.floor tir.fma tir.fmod
    tir.hypot tir.isfinite tir.isinf tir.ldexp tir.log tir.log10 tir.log1p tir.log2
    tir.metal.simd_shuffle tir.metal.simd_shuffle_down tir.metal.simd_shuffle_up tir.nearbyint
    tir.nextafter tir.popcount tir.pow tir.prefetch tir.q_multiply_shift tir.q_multiply_shift_per_axis
    tir.round tir.rsqrt tir.sigmoid tir.sin tir.sinh tir.sqrt tir.tan tir.tanh tir.trunc
    tir.tvm_warp_activemask tir.tvm_warp_shuffle tir.tvm_warp_shuffle_down tir.tvm_warp_shuffle_up topk
    torch_op transpose trilu trunc trunc_divide trunc_mod unique unravel_index variance
    vision.all_class_non_max_suppression vision.get_valid_counts vision.multibox_prior
    vision.multibox_transform_loc vision.non_max_suppression vision.proposal
    vision.regular_non_max_suppression vision.roi_align vision.roi_pool vision.yolo_reorg
    vm.invoke_tvm_op vm.reshape_tensor vm.shape_of where zeros zeros_like
    """.split()  # noqa: SIM905 (a word list keeps a 520-name table readable)
)
