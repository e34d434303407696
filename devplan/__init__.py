"""devplan: device placement for TVM Relay and Relax modules, from Python.

    import devplan
    planned = devplan.plan(mod, mode="optimize", device_profiles={"cuda": {"memory_bytes": "2GB"}})
    planned.module        # the IRModule with a vdevice on every tensor
    planned.cost.predicted_ms
    seq = tvm.transform.Sequential([devplan.PlanDevices(mode="optimize")])

`plan` and `PlanDevices` take the fields of the `POST /plan` request as keywords
and run the same code as the service and the `devplan plan` command; failures
raise `devplan.Error` subclasses carrying the service's problem+json body.
See docs/python.md.
"""

from importlib import import_module as _import_module
from importlib import metadata as _metadata
from typing import TYPE_CHECKING, Any

from devplan._errors import (
    CompileError,
    ConfigError,
    ConflictError,
    Error,
    InternalError,
    ModuleTooLargeError,
    ParseError,
    PlanTimeoutError,
    RunCheckError,
    TVMUnavailableError,
    TypeCheckError,
)

if TYPE_CHECKING:
    from devplan._compile import compile
    from devplan._pass import PlanDevices
    from devplan._plan import Cost, Plan, plan

# Loaded on first use: they import the planner, the service's models and (for a module)
# TVM, which `python -m devplan` (the command) does not need before it parses its flags.
_LAZY = {
    "plan": "devplan._plan",
    "Plan": "devplan._plan",
    "Cost": "devplan._plan",
    "PlanDevices": "devplan._pass",
    "compile": "devplan._compile",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(_import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'devplan' has no attribute {name!r}")

try:
    __version__ = _metadata.version("devplan")
except _metadata.PackageNotFoundError:  # a source tree without install
    __version__ = "0.0.0+source"

__all__ = [
    "CompileError",
    "ConfigError",
    "ConflictError",
    "Cost",
    "Error",
    "InternalError",
    "ModuleTooLargeError",
    "ParseError",
    "Plan",
    "PlanDevices",
    "PlanTimeoutError",
    "RunCheckError",
    "TVMUnavailableError",
    "TypeCheckError",
    "__version__",
    "compile",
    "plan",
]


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
