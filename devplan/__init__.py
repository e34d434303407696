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

from importlib import metadata as _metadata

from devplan._compile import compile
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
from devplan._pass import PlanDevices
from devplan._plan import Cost, Plan, plan

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
