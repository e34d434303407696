"""Costs and types of PyTorch-exported Relax modules: every
operator of the corpus has a formula, gathers cost the rows they read, a
linear layer is one dense kernel whose transposed weight is not counted
twice, layout-only operators cost what TVM's build makes of them, and
budgets see the module's own types."""

from __future__ import annotations

from typing import Any

import pytest
import tvm
from tvm import relax

from relay.ast import Call, Op
from relay.span import RelayError
from relay.traverse import post_order
from service.relax_planning import plan_relax
from solver import PlanConfig, PlanConfigError
from solver.optimize.cost_model import has_flop_rule, op_bytes
from solver.optimize.problem import kernel_work
from solver.optimize.sizes import Sizes, dtype_bytes, module_types
from tvm_bridge.relax_plan import read_relax, relax_op_calls
from tvm_bridge.relax_translate import Translation, relax_operators, translate
from tvm_bridge.relax_write import DROPS_VDEVICE

from .corpus import MODELS, load


def _relax_ops(mod: Any) -> set[str]:
    """The operator names a module calls, from the module itself."""
    found: set[str] = set()

    def visit(e: Any) -> None:
        if isinstance(e, relax.Call) and isinstance(e.op, tvm.ir.Op):
            found.add(str(e.op.name))

    for _, func in mod.functions_items():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func, visit)
    return found


def _planner_names(translation: Translation) -> dict[str, set[str]]:
    """Relax operator -> the operator names the planner sees for its calls."""
    return {
        name: {n.op.name for n in nodes if isinstance(n, Call) and isinstance(n.op, Op)}
        for name, nodes in relax_op_calls(translation).items()
    }


def test_every_corpus_operator_has_a_formula() -> None:
    """The operator list is generated from the corpus files, offload included."""
    seen: dict[str, set[str]] = {}
    for name in MODELS:
        mod, source = load(name)
        assert _relax_ops(mod) <= relax_operators()
        for relax_name, planner in _planner_names(translate(mod, source, "optimize")).items():
            seen.setdefault(relax_name, set()).update(planner)
    # The list, all of which occur in the corpus.
    for op in ("matmul", "permute_dims", "nn.layer_norm", "nn.softmax", "nn.gelu", "sigmoid", "tanh", "take",
               "index_tensor", "strided_slice", "slice_scatter", "cos", "sin", "power", "rsqrt", "mean", "cumsum",
               "where", "clip", "nn.pad", "mod", "divide", "arange", "full", "zeros_like", "max", "squeeze",
               "broadcast_to", "expand_dims", "split", "concat", "reshape", "astype", "nn.max_pool2d"):
        assert f"relax.{op}" in seen, op
    missing = sorted(f"{r} ({p})" for r, names in seen.items() for p in names if not has_flop_rule(p))
    assert not missing, missing


def test_operator_names_are_checked_against_the_relax_registry() -> None:
    names = relax_operators()
    assert {"relax.mod", "relax.index_tensor", "relax.cos", "relax.nn.gelu"} <= names
    assert not any(n.startswith("tirx.") for n in names)
    bad = "@I.ir_module\nclass M:\n    @R.function\n    def main(x: R.Tensor((4,), \"float32\")):\n" \
          "        y = R.nn.softmaxx(x)\n        return y\n"
    with pytest.raises(RelayError) as err:
        read_relax(bad)
    assert err.value.span is not None and err.value.span.line == 5


GATHER = """
@I.ir_module
class Module:
    @R.function
    def main(table: R.Tensor((50000, 256), "float32"), ids: R.Tensor((8,), "int64")) -> R.Tensor((8, 256), "float32"):
        with R.dataflow():
            rows = R.take(table, ids, axis=0)
            out = R.nn.relu(rows)
            R.output(out)
        return out
"""


def _kernels(translation: Translation) -> dict[str, Any]:
    type_of, _ = module_types(translation.module, stated=True)
    sizes = Sizes(type_of, 1)
    roots = [f for _, f in translation.module.functions]
    sizes.run(roots)
    return {
        n.op.name: kernel_work(n, sizes, 1)
        for n in post_order(roots)
        if isinstance(n, Call) and isinstance(n.op, Op)
    }


def test_a_gather_costs_the_rows_it_reads() -> None:
    mod, source = read_relax(GATHER)
    work = _kernels(translate(mod, source, "optimize"))["take"]
    rows, ids, table = 8 * 256 * 4, 8 * 8, 50000 * 256 * 4
    assert work.bytes_moved == 2 * rows + ids
    assert work.bytes_moved < table // 100
    # The budget sees the rows too: with a cuda budget far below the table and
    # the relu pinned to cuda, the gather stays with its table on the cpu and
    # its rows (not a table-sized guess) are copied to cuda.
    config = PlanConfig(mode="optimize", default_device="cuda", host_device="cpu", virtual_devices=("cpu", "cuda"),
                        device_profiles={"cuda": {"memory_bytes": 1 << 20}}, timeout_ms=60_000,
                        constraints=({"select": {"op": "R.nn.relu"}, "device": "cuda"},))
    planned = plan_relax(mod, config, source)
    assert planned.copies == 1 and planned.result.cost is not None
    assert planned.result.cost.bytes_copied == rows
    out = planned.module
    kinds = {str(b.var.name): str(b.var.ty.vdevice.target.kind.name) for b in out["main"].body.blocks[0].bindings}
    assert kinds["rows"] == "llvm" and kinds["out"] == "cuda"


LINEAR = """
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor((1, 32, 768), "float32"), w: R.Tensor((3072, 768), "float32")) -> R.Tensor((1, 32, 3072), "float32"):
        with R.dataflow():
            wt = R.permute_dims(w, axes=[1, 0])
            y = R.matmul(x, wt, out_dtype="void")
            R.output(y)
        return y
"""


def test_a_linear_layer_of_any_rank_is_one_dense_kernel() -> None:
    mod, source = read_relax(LINEAR)
    translation = translate(mod, source, "optimize")
    kernels = _kernels(translation)
    body = translation.module["main"].body
    assert isinstance(body, Call) and isinstance(body.op, Op) and body.op.name == "nn.dense"
    assert "transpose" not in {n.op.name for n in post_order([body]) if isinstance(n, Call) and isinstance(n.op, Op)}
    assert kernels["nn.dense"].parts[0].flops == 2 * 32 * 3072 * 768
    # A budget that holds the weight once (plus the activations), not twice.
    weight, x, y = 3072 * 768 * 4, 32 * 768 * 4, 32 * 3072 * 4
    config = PlanConfig(mode="optimize", default_device="cuda", host_device="cpu", virtual_devices=("cpu", "cuda"),
                        device_profiles={"cuda": {"memory_bytes": weight + x + y + 4096}}, timeout_ms=60_000)
    planned = plan_relax(mod, config, source)
    assert planned.copies == 0
    ty = planned.module["main"].body.blocks[0].bindings[1].var.ty
    assert str(ty.vdevice.target.kind.name) == "cuda"


def test_layout_only_operators() -> None:
    """reshape-like operators are views (no bytes, a launch), a transpose and a
    cast move their tensor (docs/optimize.md section 5)."""
    for name in ("reshape", "expand_dims", "squeeze"):
        assert op_bytes(name, [4096], 4096) == 0
    for name in ("transpose", "cast"):
        assert op_bytes(name, [4096], 4096) == 8192
    mod, source = load("hf_bert")
    kernels = _kernels(translate(mod, source, "optimize"))
    assert kernels["reshape"].bytes_moved == 0 and kernels["transpose"].bytes_moved > 0
    assert kernels["cast"].bytes_moved > 0


def test_operators_tvm_types_off_the_device_are_listed() -> None:
    """`DROPS_VDEVICE` is what TVM 0.27 does: when TVM's inference of one of
    them keeps the vdevice, the write-back's work-around can go."""
    vd = relax.VDevice(tvm.target.Target("llvm"), 0, "global")
    x = relax.Var("x", relax.TensorType((1, 4, 4, 2), "float32", vd))
    bb = relax.BlockBuilder()
    assert DROPS_VDEVICE == {"relax.nn.pad"}
    assert bb.normalize(relax.op.nn.pad(x, [0, 0, 1, 1, 1, 1, 0, 0])).ty.vdevice is None
    assert bb.normalize(relax.op.add(x, x)).ty.vdevice is not None


def test_selectors_take_both_spellings() -> None:
    mod, source = load("hf_bert")
    outs = []
    for op in ("relax.nn.softmax", "R.nn.softmax"):
        config = PlanConfig(mode="optimize", default_device="cuda", host_device="cpu",
                            virtual_devices=("cpu", "cuda"), timeout_ms=60_000,
                            constraints=({"select": {"op": op, "index": 1}, "device": "cpu"},))
        outs.append(plan_relax(mod, config, source).module)
    tvm.ir.assert_structural_equal(outs[0], outs[1])
    softmax = [b for blk in outs[0]["main"].body.blocks for b in blk.bindings
               if isinstance(b.value, relax.Call) and str(getattr(b.value.op, "name", "")) == "relax.nn.softmax"]
    assert [str(b.var.ty.vdevice.target.kind.name) for b in softmax] == ["cuda", "llvm"]
    with pytest.raises(PlanConfigError, match="matches no operator"):
        plan_relax(mod, PlanConfig(constraints=({"select": {"op": "R.nn.softmaxx"}, "device": "cpu"},)), source)


def _param_bytes(mod: Any) -> int:
    total = 0
    for p in mod["main"].params:
        if str(p.name).startswith("p_"):
            n = 1
            for d in p.ty.shape.values:
                n *= int(d)
            total += n * dtype_bytes(str(p.ty.dtype))
    return total


def test_bert_with_half_its_weights_on_cuda_keeps_the_encoder_there() -> None:
    mod, source = load("hf_bert")
    budget = _param_bytes(mod) // 2
    config = PlanConfig(mode="optimize", default_device="cuda", host_device="cpu", virtual_devices=("cpu", "cuda"),
                        device_profiles={"cuda": {"memory_bytes": budget}}, timeout_ms=60_000)
    planned = plan_relax(mod, config, source)
    matmuls = [b for blk in planned.module["main"].body.blocks for b in blk.bindings
               if isinstance(b.value, relax.Call) and str(getattr(b.value.op, "name", "")) == "relax.matmul"]
    encoder = [b for b in matmuls if str(b.var.name) in _encoder_matmuls(mod)]
    assert len(encoder) == 16
    assert all(str(b.var.ty.vdevice.target.kind.name) == "cuda" for b in encoder)
    cost = planned.result.cost
    assert cost is not None and cost.per_device["cuda"].weight_bytes <= budget


def _encoder_matmuls(mod: Any) -> set[str]:
    """The 16 matmuls of BERT's two encoder layers: those of a
    `p_encoder_layer_*` weight (read through its `permute_dims`), and the
    attention products, which have no weight (the pooler's has its own)."""
    bound: dict[str, Any] = {}
    names: set[str] = set()
    for block in mod["main"].body.blocks:
        for b in block.bindings:
            bound[str(b.var.name)] = b.value
            if not (isinstance(b.value, relax.Call) and str(getattr(b.value.op, "name", "")) == "relax.matmul"):
                continue
            weights = []
            for arg in b.value.args:
                value = bound.get(str(arg.name)) if isinstance(arg, relax.Var) else None
                if isinstance(value, relax.Call) and str(getattr(value.op, "name", "")) == "relax.permute_dims":
                    inner = value.args[0]
                    if isinstance(inner, relax.Var) and str(inner.name).startswith("p_"):
                        weights.append(str(inner.name))
            if not weights or all(w.startswith("p_encoder_layer_") for w in weights):
                names.add(str(b.var.name))
    return names


def test_convnext_tvm_mode_prediction_is_near_the_optimized_one() -> None:
    mod, source = load("tv_convnext_tiny")
    config = PlanConfig(mode="optimize", default_device="cuda", host_device="cpu", virtual_devices=("cpu", "cuda"))
    cost = plan_relax(mod, config, source).result.cost
    assert cost is not None and cost.tvm_mode_predicted_ms is not None
    assert cost.tvm_mode_predicted_ms <= 2 * cost.predicted_ms


def test_binding_names_name_each_translated_node() -> None:
    """What placement records need: the binding, TVMScript's operator
    spelling and the line of each translated node."""
    from tvm_bridge.relax_translate import binding_names

    mod, source = read_relax(GATHER)
    translation = translate(mod, source, "optimize")
    names = binding_names(translation)
    body = translation.module["main"].body
    relu = names[id(body)]
    assert (relu.function, relu.var, relu.op) == ("main", "out", "R.nn.relu")
    assert relu.span is not None and relu.span.line == 8
    assert isinstance(body, Call)
    take = names[id(body.args[0])]
    assert (take.var, take.op, take.span.line if take.span else None) == ("rows", "R.take", 7)


def test_benchmark_corpus_rows_run() -> None:
    """benchmarks/relax.py --corpus stays runnable (its table is in docs/relax.md)."""
    from .._scripts import load_script

    bench = load_script("benchmarks/relax.py", "bench_relax")
    (row,) = bench.corpus_rows(("hf_bert",), 1)
    assert len(row) == len(bench.CORPUS_HEAD)
    assert row[0] == "hf_bert" and row[-2] == "0 (0)" and row[-1] > 0


def test_relay_checks_are_skipped_only_for_translated_modules() -> None:
    """A Relax name is a located parse error in a Relay module (TVM 0.19's
    parser), and planned in a translation (`language="relax"`), whose names
    the bridge checked against the Relax registry."""
    import relay
    import solver
    from relay.span import ParseError

    module = relay.parse_text("def @main(%x: Tensor[(4), int64]) {\n  relax.mod(%x, %x)\n}\n")
    with pytest.raises(ParseError) as err:
        solver.plan(module, PlanConfig())
    assert err.value.span is not None and err.value.span.line == 2
    assert solver.plan(module, PlanConfig(language="relax")).module is not None
    with pytest.raises(PlanConfigError, match="language"):
        solver.plan(module, PlanConfig(language="tir"))  # type: ignore[arg-type]
