"""Compile a lowered Relax module for its virtual devices, export it, and
run it on the Relax VM.

Pipeline: `RealizeVDevice` (propagate the plan's devices), the dtype rewrites
of `build_rewrites` (operators TVM 0.27's llvm codegen cannot build on `bool`,
computed on integers), `LegalizeOps`,
then `bind_kernel_targets` (some TVM 0.27 legalizations, conv2d and softmax
among them, drop the vdevice from their output type, which would leave
their kernels without a target and their outputs on the default device),
a default GPU schedule (dlight) when a GPU target is present, and
`tvm.compile`. A module without virtual devices compiles for one target.
"""

from __future__ import annotations

import logging
import os
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import tvm
from tvm import relax

from relay.span import ParseError

from .build_rewrites import rewrite_for_build
from .errors import BridgeError, TargetError
from .kernel_guard import REFUSED_TARGET_KINDS, check_kernels
from .lower import vdevices_of
from .targets import TargetSpec, check_tvm_target, target_map

log = logging.getLogger(__name__)

_GPU_KINDS = {"cuda", "rocm", "vulkan", "metal", "opencl", "webgpu"}
# The attribute of a kernel copied for one target: the caller's name of the kernel.
SOURCE_NAME_ATTR = "devplan.source_name"


@dataclass
class Compiled:
    """A compiled module with what running it needs: the VM devices in
    `global_infos` order and, per parameter of each function, the index of
    its device."""

    executable: Any
    devices: list[Any]
    input_devices: dict[str, list[int]]
    timings: dict[str, float] = field(default_factory=dict)
    cuda_arch: str | None = None

    def export_library(self, path: str | os.PathLike[str]) -> str:
        return export_library(self, path)


def _is_gpu(target: Any) -> bool:
    return str(target.kind.name) in _GPU_KINDS


def devices_for(mod: tvm.IRModule) -> list[Any]:
    """The runtime devices for a module's vdevices (`tvm.device(kind, id)`)."""
    out = []
    for vd in vdevices_of(mod):
        kind = str(vd.target.kind.name)
        out.append(tvm.device("cpu" if kind in ("llvm", "c") else kind, int(vd.vdevice_id)))
    return out


def _input_devices(mod: tvm.IRModule) -> dict[str, list[int]]:
    vdevs = vdevices_of(mod)
    out: dict[str, list[int]] = {}
    for gv, func in mod.functions_items():
        if not isinstance(func, relax.Function):
            continue
        indices = []
        for p in func.params:
            vd = getattr(p.ty, "vdevice", None)
            index = 0
            for i, candidate in enumerate(vdevs):
                if vd is not None and (
                    int(candidate.vdevice_id) == int(vd.vdevice_id)
                    and str(candidate.target.kind.name) == str(vd.target.kind.name)
                    and str(candidate.memory_scope) == str(vd.memory_scope)
                ):
                    index = i
                    break
            indices.append(index)
        out[gv.name_hint] = indices
    return out


@relax.expr_functor.mutator
class _KernelTargetBinder(relax.PyExprMutator):  # type: ignore[misc]
    """Give every `call_tir` a vdevice on its output and a target on its
    kernel: the output's own vdevice, else its arguments', else the default."""

    def __init__(self, mod: tvm.IRModule, default: Any) -> None:
        super().__init__(mod)
        self.mod_ = mod
        self.default = default
        self.call_tir = tvm.ir.Op.get("relax.call_tir")
        self.renamed: dict[tuple[str, str], Any] = {}
        self.originals: set[Any] = set()  # kernels copied with a target

    def _arg_vdevice(self, args: Any) -> Any:
        for arg in args:
            ty = arg.ty
            if isinstance(ty, relax.TensorType) and ty.vdevice is not None:
                return ty.vdevice
            if isinstance(ty, relax.TupleType):
                for f in ty.fields:
                    if isinstance(f, relax.TensorType) and f.vdevice is not None:
                        return f.vdevice
        return None

    @staticmethod
    def _with_vdevice(ty: Any, vd: Any) -> Any:
        if isinstance(ty, relax.TensorType) and ty.vdevice is None:
            return relax.TensorType(ty.shape, ty.dtype, vdevice=vd)
        if isinstance(ty, relax.TupleType):
            return relax.TupleType([_KernelTargetBinder._with_vdevice(f, vd) for f in ty.fields])
        return ty

    def visit_call_(self, call: Any) -> Any:
        call = super().visit_call_(call)
        if not call.op.same_as(self.call_tir):
            return call
        kernel_gv = call.args[0]
        args = call.args[1].fields if isinstance(call.args[1], relax.Tuple) else [call.args[1]]
        out_types = list(call.ty_args)
        vd = None
        for ty in out_types:
            if isinstance(ty, relax.TensorType) and ty.vdevice is not None:
                vd = ty.vdevice
                break
        if vd is None:
            vd = self._arg_vdevice(args) or self.default
        if vd is None:
            return call
        new_types = [self._with_vdevice(ty, vd) for ty in out_types]
        kernel = self.mod_[kernel_gv]
        target = vd.target
        current = (
            kernel.attrs.get("target") if kernel.attrs is not None and "target" in kernel.attrs else None
        )
        if current is None or str(current.kind.name) != str(target.kind.name):
            key = (kernel_gv.name_hint, str(target))
            new_gv = self.renamed.get(key)
            if new_gv is None:
                new_gv = self.builder_.add_func(
                    kernel.with_attr("target", target), f"{kernel_gv.name_hint}_{target.kind.name}"
                )
                if kernel.attrs is not None and "global_symbol" in kernel.attrs:
                    # A caller's own kernel (TVMScript names it): the copy exports its own
                    # name, or the library would hold two functions of one symbol, and
                    # remembers the caller's name for error messages.
                    copy = self.builder_.get()[new_gv]
                    copy = copy.with_attr("global_symbol", new_gv.name_hint)
                    self.builder_.update_func(new_gv, copy.with_attr(SOURCE_NAME_ATTR, kernel_gv.name_hint))
                self.renamed[key] = new_gv
                self.originals.add(kernel_gv)
            kernel_gv = new_gv
        return relax.Call(call.op, [kernel_gv, *call.args[1:]], call.attrs, new_types, call.span)

    def run(self) -> tvm.IRModule:
        for gv, func in self.mod_.functions_items():
            if isinstance(func, relax.Function):
                self.builder_.update_func(gv, self.visit_expr(func))
        mod = self.builder_.get()
        # A copied kernel that nothing calls any more goes: the caller's kernels are
        # public (a global symbol), which DeadCodeElimination keeps, and one without a
        # target would be built for the host, a GPU kernel's loops unbound.
        used = _referenced_globals(mod)
        for gv in self.originals:
            if gv not in used:
                mod = _without(mod, gv)
        return mod


def _referenced_globals(mod: tvm.IRModule) -> set[Any]:
    """The global functions that a Relax function of `mod` refers to."""
    found: set[Any] = set()

    def visit(expr: Any) -> None:
        if isinstance(expr, tvm.ir.GlobalVar):
            found.add(expr)

    for _, func in mod.functions_items():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func, visit)
    return found


def _without(mod: tvm.IRModule, gv: Any) -> tvm.IRModule:
    """`mod` without the function `gv`."""
    functions = {g: f for g, f in mod.functions_items() if not g.same_as(gv)}
    return tvm.IRModule(functions, attrs=mod.attrs, global_infos=mod.global_infos)


def bind_kernel_targets(mod: tvm.IRModule) -> tvm.IRModule:
    """After LegalizeOps: every kernel call gets its device and target."""
    vdevs = vdevices_of(mod)
    if not vdevs:
        return mod
    mod = _KernelTargetBinder(mod, vdevs[0]).run()
    return relax.transform.DeadCodeElimination()(mod)


# Passes no compile runs. FoldConstant builds each kernel whose inputs are all constant for
# llvm and *calls* it in the compiling process, to fold its result: for a caller's own
# `T.prim_func` that runs the caller's code outside the run check's sandbox (a kernel
# calling `system()` on a constant). TVM's default pipeline for a single GPU target
# (tvm.compile with a cuda target, as a run check's reference builds it when the request
# maps `cpu` to a GPU target) and its "zero" pipeline run it; the constants are computed
# at run time instead.
NEVER_RUN_PASSES = ("FoldConstant",)


def _multi_device_pipeline() -> Any:
    """TVM's default Relax build pipeline without `StaticPlanBlockMemory`.

    In TVM 0.27 that pass reuses a storage block freed on one device for a
    tensor of another (it ignores vdevices), so the VM would hand a kernel an
    output buffer on the wrong device; and on functions with `If` its plan
    makes the VM crash (segfault). Such modules allocate each tensor on its
    own device instead.
    """
    from tvm.relax import backend, transform

    @tvm.transform.module_pass(opt_level=0, name="DevplanMultiDeviceBuild")  # type: ignore[untyped-decorator]
    def _pipeline(mod: tvm.IRModule, _ctx: Any) -> tvm.IRModule:
        seq = tvm.transform.Sequential(
            [
                backend.DispatchSampling(),
                backend.DispatchSortScan(),
                transform.LegalizeOps(),
                transform.RewriteDataflowReshape(),
                transform.ToNonDataflow(),
                transform.RemovePurityChecking(),
                transform.CallTIRRewrite(),
                transform.LowerAllocTensor(),
                transform.KillAfterLastUse(),
                transform.LowerRuntimeBuiltin(),
                transform.ComputePrimValue(),
                transform.VMShapeLower(),
                transform.AttachGlobalSymbol(),
            ]
        )
        return seq(mod)

    return _pipeline


def _has_if(mod: tvm.IRModule) -> bool:
    found = False

    def visit(expr: Any) -> None:
        nonlocal found
        found = found or isinstance(expr, relax.If)

    for _, func in mod.functions_items():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func, visit)
    return found


def _thread_bound(func: Any) -> bool:
    """True when some loop of the TIR function `func` is bound to GPU threads
    (a thread-binding loop or a `thread_extent` attribute). Walked with a stack:
    loop nests are as deep as the caller writes them."""
    from tvm import tirx

    stack = [func.body]
    while stack:
        node = stack.pop()
        if isinstance(node, tirx.For) and node.kind == tirx.ForKind.THREAD_BINDING:
            return True
        if isinstance(node, tirx.AttrStmt) and str(node.attr_key) in ("thread_extent", "virtual_thread"):
            return True
        if isinstance(node, tirx.SeqStmt):
            stack.extend(node.seq)
        for name in ("body", "block", "then_case", "else_case", "init"):
            child = getattr(node, name, None)
            if isinstance(child, tirx.Stmt):
                stack.append(child)
    return False


def _gpu_schedule(mod: tvm.IRModule, gpu_target: Any) -> tvm.IRModule:
    """Every kernel for a GPU target scheduled with dlight (one at a time: a
    kernel dlight cannot take would abort the others). A kernel it cannot take
    that binds no loop to GPU threads itself raises UnscheduledKernel."""
    from tvm.s_tir import dlight as dl

    from .errors import UnscheduledKernel

    schedule = dl.ApplyDefaultSchedule(
        dl.gpu.Matmul(),
        dl.gpu.GEMV(),
        dl.gpu.Reduction(),
        dl.gpu.GeneralReduction(),
        dl.gpu.Fallback(),
    )
    for gv, func in list(mod.functions_items()):
        if not isinstance(func, tvm.tirx.PrimFunc):
            continue
        target = func.attrs.get("target") if func.attrs is not None else None
        target = gpu_target if target is None else target
        if not _is_gpu(target):
            continue
        reason = "no rule matched"
        try:
            with target:
                scheduled = schedule(tvm.IRModule({gv: func}))[gv]
        except Exception as exc:  # noqa: BLE001 - dlight's rules raise on TIR they cannot read
            lines = str(exc).strip().splitlines()
            reason, scheduled = (lines[0].rstrip(":") if lines else type(exc).__name__), func
        if scheduled.attrs is not None and "tirx.is_scheduled" in scheduled.attrs:
            mod[gv] = scheduled
        elif not _thread_bound(func):
            raise UnscheduledKernel(kernel_name(func, gv), str(target.kind.name), reason)
    return mod


def _refuse_source_targets(targets: Sequence[Any]) -> None:
    """No compile for a target whose host code is C source (kernel_guard: the caller's
    names and strings would be pasted into it), nor with such a host."""
    for t in targets:
        for kind in (t.kind, t.host.kind if t.host is not None else None):
            if kind is not None and str(kind.name) in REFUSED_TARGET_KINDS:
                raise TargetError(
                    f"target kind {kind.name!r} is not accepted for compiling: its code is C source "
                    "compiled on the server, with the module's names and strings pasted in (use llvm)"
                )


def check_module_targets(mod: tvm.IRModule) -> None:
    """Every target a module carries, checked as the request's are (`check_target_options`:
    no option that sets process-wide LLVM or TVM state): each vdevice's (its host
    included) and each kernel's own `target` attribute. TargetError names the option."""
    seen: set[str] = set()

    def check(target: Any, where: str) -> None:
        text = str(target)
        if text not in seen:
            check_tvm_target(target, where=where)
            seen.add(text)

    for vd in vdevices_of(mod):
        check(vd.target, f"vdevice {vd.target.kind.name}:{int(vd.vdevice_id)}")

    def visit(expr: Any) -> None:
        # vdevices named in a type or a `to_vdevice` rather than in the module's table
        vd = getattr(getattr(expr, "ty", None), "vdevice", None)
        attrs = getattr(expr, "attrs", None) if isinstance(expr, relax.Call) else None
        dst = getattr(attrs, "dst_vdevice", None) if attrs is not None else None
        for found in (vd, dst):
            if found is not None and getattr(found, "target", None) is not None:
                check(found.target, f"vdevice {found.target.kind.name}:{int(found.vdevice_id)}")

    for gv, func in mod.functions_items():
        if isinstance(func, relax.Function):
            for param in func.params:
                visit(param)
            relax.analysis.post_order_visit(func, visit)
        attrs = getattr(func, "attrs", None)
        target = attrs.get("target") if attrs is not None and "target" in attrs else None
        if target is not None:
            check(target, f"the target of kernel {gv.name_hint}")


def kernel_name(func: Any, gv: Any) -> str:
    """The name a kernel has in the caller's module (its TVMScript `def` name), for
    one the bridge copied per target (`k_cuda`) too."""
    source = func.attrs.get(SOURCE_NAME_ATTR) if func.attrs is not None else None
    return str(source) if source is not None else str(gv.name_hint)


def compile(
    relax_mod: tvm.IRModule,
    targets: Mapping[str | int, TargetSpec] | None = None,
    *,
    target: TargetSpec | None = None,
    cuda_arch: str | None = None,
) -> Compiled:
    """Compile a module from `to_relax`.

    With virtual devices, every kernel is compiled for its device's target.
    Without, the module is compiled for `target` (default: the `cpu` entry
    of `targets`, i.e. llvm). Raises BridgeError when TVM fails.
    """
    timings: dict[str, float] = {}
    vdevs = vdevices_of(relax_mod)
    single = None
    if not vdevs:
        tmap = target_map(targets, cuda_arch=cuda_arch)
        spec = target if target is not None else tmap["cpu"]
        from .targets import tvm_target

        single = tvm_target(spec, cuda_arch=cuda_arch)
    _refuse_source_targets([single] if single is not None else [vd.target for vd in vdevs])
    check_module_targets(relax_mod)
    try:
        check_kernels(relax_mod)  # read_relax checked the caller's text already: the bridge's own check
    except ParseError as err:
        raise BridgeError(err.message, err.span) from None
    try:
        start = time.perf_counter()
        mod = relax.transform.RealizeVDevice()(relax_mod) if vdevs else relax_mod
        mod = rewrite_for_build(mod)
        mod = relax.transform.LegalizeOps()(mod)
        mod = bind_kernel_targets(mod)
        timings["legalize_s"] = time.perf_counter() - start
        gpu = [vd.target for vd in vdevs if _is_gpu(vd.target)]
        if single is not None and _is_gpu(single):
            gpu = [single]
        if gpu:
            start = time.perf_counter()
            mod = _gpu_schedule(mod, gpu[0])
            timings["schedule_s"] = time.perf_counter() - start
        start = time.perf_counter()
        pipeline = _multi_device_pipeline() if len(vdevs) > 1 or _has_if(mod) else "default"
        with tvm.transform.PassContext(disabled_pass=NEVER_RUN_PASSES):
            executable = tvm.compile(mod, target=single, relax_pipeline=pipeline)
        timings["build_s"] = time.perf_counter() - start
    except BridgeError:
        raise
    except Exception as exc:  # TVM's own errors: report the last line
        lines = str(exc).strip().splitlines()
        raise BridgeError(f"TVM failed to compile: {lines[-1] if lines else type(exc).__name__}") from exc
    if single is not None:
        kind = str(single.kind.name)
        devices = [tvm.device("cpu" if kind in ("llvm", "c") else kind, 0)]
    else:
        devices = devices_for(relax_mod)
    arch = None
    for t in gpu:
        if str(t.kind.name) == "cuda" and "arch" in t.attrs:
            arch = str(t.attrs["arch"])
    return Compiled(executable, devices, _input_devices(relax_mod), timings, arch)


def _cuda_modules(executable: Any) -> list[Any]:
    root = executable.mod if hasattr(executable, "mod") else executable
    found, stack, seen = [], [root], set()
    while stack:
        mod = stack.pop()
        if id(mod) in seen:
            continue
        seen.add(id(mod))
        if str(mod.kind) == "cuda":
            found.append(mod)
        stack.extend(mod.imports)
    return found


def nvcc_check(compiled: Compiled, arch: str | None = None) -> dict[str, float]:
    """Compile the CUDA kernels of `compiled` with nvcc (cubin for `arch`,
    default the target's) and return {"kernels_bytes", "nvcc_s"}.

    Without a CUDA driver TVM keeps CUDA kernels as source inside the
    executable (compiled when loaded on a GPU machine); this is how a
    machine without a GPU checks that the toolkit accepts them.
    """
    from tvm.support import nvcc

    start = time.perf_counter()
    total = 0
    for mod in _cuda_modules(compiled.executable):
        code = mod.inspect_source()
        if not code:
            continue  # already a binary (a GPU machine compiled it)
        target = tvm.target.Target({"kind": "cuda", "arch": arch or _cuda_arch(compiled)})
        try:
            with target:
                total += len(nvcc.compile_cuda(code, target_format="cubin", compiler="nvcc"))
        except Exception as exc:
            lines = str(exc).strip().splitlines()
            raise BridgeError(f"nvcc rejected the CUDA kernels: {lines[-1] if lines else exc}") from exc
    return {"kernels_bytes": float(total), "nvcc_s": time.perf_counter() - start}


def _cuda_arch(compiled: Compiled) -> str:
    from .targets import DEFAULT_CUDA_ARCH

    return compiled.cuda_arch or DEFAULT_CUDA_ARCH


def export_library(compiled: Compiled | Any, path: str | os.PathLike[str]) -> str:
    """Write the compiled module as a shared library; returns the path."""
    executable = compiled.executable if isinstance(compiled, Compiled) else compiled
    path = os.fspath(path)
    executable.export_library(path)
    return path


def load_library(path: str | os.PathLike[str]) -> Any:
    """Load a library written by `export_library` (give it to `run`)."""
    return tvm.runtime.load_module(os.fspath(path))


def _to_numpy(value: Any) -> Any:
    if isinstance(value, (list, tuple)) or type(value).__name__ in ("Array", "Tuple"):
        return tuple(_to_numpy(v) for v in value)
    if hasattr(value, "numpy"):
        return value.numpy()
    return value


def run(
    lib_or_exec: Compiled | Any,
    inputs: Sequence[np.ndarray],
    devices: Sequence[Any] | None = None,
    *,
    input_devices: Sequence[int] | None = None,
    func: str = "main",
) -> Any:
    """Run `func` on the Relax VM with the plan's devices; returns numpy
    arrays (tuples for tuple results).

    `devices` are the runtime devices in the module's `global_infos` order
    (default: those of a `Compiled`); `input_devices[i]` is the index of the
    device input i is placed on (default: from the function's parameters).
    """
    if isinstance(lib_or_exec, Compiled):
        executable = lib_or_exec.executable
        devices = list(devices) if devices is not None else lib_or_exec.devices
        if input_devices is None:
            input_devices = lib_or_exec.input_devices.get(func)
    else:
        executable = lib_or_exec
    return prepare_run(executable, inputs, devices, input_devices, func)()


def prepare_run(
    executable: Any,
    inputs: Sequence[np.ndarray],
    devices: Sequence[Any] | None,
    input_devices: Sequence[int] | None,
    func: str = "main",
) -> Callable[[], Any]:
    """Everything of `run` but the call: the VM made, its devices initialised and the
    inputs placed on them; the function returned runs `func` and returns numpy outputs.
    The sandbox installs its filter between the two (service/sandbox.py)."""
    if not devices:
        devices = [tvm.cpu(0)]
    if input_devices is None:
        input_devices = [0] * len(inputs)
    vm = relax.VirtualMachine(executable, list(devices))
    args = [tvm.runtime.tensor(np.asarray(x), devices[d]) for x, d in zip(inputs, input_devices)]
    function = vm[func]
    return lambda: _to_numpy(function(*args))


def timed_run(compiled: Compiled, inputs: Sequence[np.ndarray], repeat: int) -> tuple[Any, float]:
    """Run once to warm up (the first CUDA launch loads the module), then
    `repeat` times; returns the last output and the median run time in ms."""
    out = run(compiled, inputs)
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        out = run(compiled, inputs)
        times.append(time.perf_counter() - start)
    return out, statistics.median(times) * 1e3
