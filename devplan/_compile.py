"""`devplan.compile`: POST /compile in process, through the same compile process."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from devplan import _options
from devplan._errors import error_of
from service.models import CompileRequest
from service.planning import PlanFailure


def _text_of(module: Any) -> str:
    """The text /compile would be sent for `module`: a string as it is; an IRModule as
    TVM JSON, or as TVMScript when it has kernels of its own (the JSON reader refuses
    TIR's layout nodes, the TVMScript reader reads what TVM prints)."""
    if isinstance(module, str):
        return module
    import tvm

    if not isinstance(module, tvm.IRModule):
        raise TypeError(
            f"compile(): module must be a tvm.IRModule (Relax) or a str (TVMScript, Relay text, "
            f"or TVM JSON), not {type(module).__name__}"
        )
    if any(isinstance(f, tvm.tirx.PrimFunc) for _, f in module.functions_items()):
        return str(module.script(show_meta=True))
    return str(tvm.ir.save_json(module))


def compile(module: Any, output: str | Path, **options: Any) -> dict[str, Any]:  # TVM's own verb
    """Plan `module` and compile it into the library `output`, as POST /compile does."""
    from service.config import get_settings
    from service.local_compile import compile_to_file
    from service.models import CompileReport, to_plan_job

    text = _text_of(module)
    if not isinstance(output, str | Path):
        raise TypeError(f"compile(): output must be a path, not {type(output).__name__}")
    out = Path(output)
    if not out.parent.is_dir():
        raise FileNotFoundError(f"compile(): no directory {out.parent}")
    request = _options.validate("compile", text, options, CompileRequest)
    assert isinstance(request, CompileRequest)
    settings = get_settings()
    limit = max(settings.max_timeout_ms, request.timeout_ms or 0)
    job = to_plan_job(request, settings.model_copy(update={"max_timeout_ms": limit}))
    job = dataclasses.replace(job, name="<string>" if isinstance(module, str) else "<IRModule>")
    targets = dict(request.targets) if request.targets is not None else None
    try:
        answer = compile_to_file(
            job, out, settings, targets=targets, cuda_arch=request.cuda_arch, run_check=request.run_check
        )
    except PlanFailure as failure:
        raise error_of(failure) from None
    report = CompileReport.model_validate(answer["report"]).model_dump(mode="json", exclude_none=True)
    return {"path": str(out), "sha256": answer["sha256"], "size_bytes": answer["size_bytes"], "report": report}


compile.__signature__ = _options.signature(  # type: ignore[attr-defined]
    compile, module=True, model=CompileRequest, extra=("output",)
)
compile.__doc__ = f"""Plan `module` and compile it with TVM into the library `output`, as `POST /compile` does.

The same compile process, input checks, limits (DEVPLAN_COMPILE_TIMEOUT_S, ...) and, with
`run_check=True`, the same sandboxed run check as the service (docs/security.md). `module`:
a Relax `tvm.IRModule` or a str (TVMScript, Relay text, TVM JSON). Keywords: the fields of
the `POST /compile` request (those of `devplan.plan`, and):

{_options.options_doc(CompileRequest, ("targets", "cuda_arch", "run_check"))}

Returns `path`, `sha256`, `size_bytes` and `report` (/compile's report). The library loads
with `tvm.runtime.load_module` and runs with `relax.VirtualMachine`. Nothing is written on
failure, which raises a `devplan.Error` (`CompileError`, `RunCheckError`, `ConflictError`,
...) with the service's problem."""
