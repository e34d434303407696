"""The exceptions of the Python API: one class per kind of failure the service answers.

Every `devplan.Error` carries `.problem`, the problem+json body `POST /plan` (or
`POST /compile`) answers for the same request, less the two fields that only an
HTTP request has (`instance`, `request_id`). `str(error)` is the located,
compiler-style text `devplan plan` prints on stderr.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from service import errors

if TYPE_CHECKING:
    from service.planning import PlanFailure


class Error(Exception):
    """A module or request devplan could not plan or compile.

    `problem`: the service's problem+json body for the same request (`type`,
    `title`, `status`, `detail`, and `locations` / `constraints` / `errors`
    where the service gives them); `kind`: the last part of its `type` URI."""

    kind: str = errors.INTERNAL_ERROR.slug

    def __init__(self, message: str, problem: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        if problem is None:
            # Raised inside a TVM pass, the error crossed TVM's C++ boundary, which
            # rebuilds it from its class and message only (`_carried`).
            problem = _take_carried(message)
        self.problem: dict[str, Any] = problem if problem is not None else {"title": message}
        self.kind = str(self.problem.get("type", "")).rpartition("/")[2] or type(self).kind


class ParseError(Error):
    """The module does not parse or verify (problem `malformed-module`)."""

    kind = errors.MALFORMED_MODULE.slug


class TypeCheckError(ParseError):
    """The module parses but is not well typed (problem `type-error`)."""

    kind = errors.TYPE_ERROR.slug


class ConflictError(Error):
    """The device constraints conflict (problem `planning-conflict`; `.problem["constraints"]`)."""

    kind = errors.PLANNING_CONFLICT.slug


class ConfigError(Error, ValueError):
    """An option's value is invalid (problem `invalid-config`, or `validation-error`
    for a value the request schema refuses)."""

    kind = errors.INVALID_CONFIG.slug


class PlanTimeoutError(Error, TimeoutError):
    """Planning (or compiling) did not finish within its time limit."""

    kind = errors.SOLVER_TIMEOUT.slug


class ModuleTooLargeError(Error, MemoryError):
    """The module needs more memory than planning or compiling may use."""

    kind = errors.MODULE_TOO_LARGE.slug


class TVMUnavailableError(Error, ImportError):
    """A Relax module (or a compile) where TVM cannot be imported."""

    kind = errors.TVM_UNAVAILABLE.slug


class CompileError(Error):
    """The planned module could not be lowered or compiled (`compile-failed`,
    `unsupported-construct`, `invalid-target`)."""

    kind = errors.COMPILE_FAILED.slug


class RunCheckError(CompileError):
    """The run check could not run (`invalid-check`) or failed (`run-check-failed`)."""

    kind = errors.RUN_CHECK_FAILED.slug


class InternalError(Error):
    """A bug in devplan (problem `internal-error`)."""


# Which class each problem kind raises (a kind not listed: InternalError).
CLASS_OF: dict[str, type[Error]] = {
    errors.MALFORMED_MODULE.slug: ParseError,
    errors.TYPE_ERROR.slug: TypeCheckError,
    errors.PLANNING_CONFLICT.slug: ConflictError,
    errors.INVALID_CONFIG.slug: ConfigError,
    errors.VALIDATION_ERROR.slug: ConfigError,
    errors.SOLVER_TIMEOUT.slug: PlanTimeoutError,
    errors.COMPILE_TIMEOUT.slug: PlanTimeoutError,
    errors.MODULE_TOO_LARGE.slug: ModuleTooLargeError,
    errors.TVM_UNAVAILABLE.slug: TVMUnavailableError,
    errors.COMPILE_FAILED.slug: CompileError,
    errors.UNSUPPORTED_MODULE.slug: CompileError,
    errors.INVALID_TARGET.slug: CompileError,
    errors.INVALID_CHECK.slug: RunCheckError,
    errors.RUN_CHECK_FAILED.slug: RunCheckError,
}

ALL_ERRORS: tuple[type[Error], ...] = (Error, InternalError, *dict.fromkeys(CLASS_OF.values()))


def problem_of(failure: PlanFailure) -> dict[str, Any]:
    """The problem+json body the service answers for `failure` (no instance, no request id)."""
    from service.problems import failure_to_problem, problem_body

    problem = failure_to_problem(failure)
    return problem_body(problem.kind, problem.detail, None, **problem.extra)


def error_of(failure: PlanFailure) -> Error:
    """The exception of a failure: its class by kind, its problem as the service's."""
    cls = CLASS_OF.get(failure.kind, InternalError)
    return cls(failure.report, problem_of(failure))


def validation_error(errors_: list[dict[str, Any]]) -> ConfigError:
    """A ConfigError for values the request schema refuses, with the body of the
    service's 422 validation-error (`errors`: loc, msg, type; `loc` under `body`)."""
    from service.problems import VALIDATION_ERROR, problem_body

    first = errors_[0]
    where = ".".join(str(p) for p in first["loc"])
    detail = f"{where}: {first['msg']}"
    return ConfigError(f"error: {detail}", problem_body(VALIDATION_ERROR, detail, None, errors=errors_))


# --------------------------------------------------------------------------
# Crossing TVM's C++ boundary (devplan.PlanDevices)

_lock = threading.Lock()
_carried: dict[str, dict[str, Any]] = {}
_MAX_CARRIED = 64


def carry(error: Error) -> None:
    """Keep `error`'s problem for the copy TVM rebuilds from its message when it
    leaves a pass (TVM's FFI keeps the class and the message, nothing else)."""
    with _lock:
        if len(_carried) >= _MAX_CARRIED:
            _carried.pop(next(iter(_carried)))
        _carried[str(error)] = error.problem


def _take_carried(message: str) -> dict[str, Any] | None:
    with _lock:
        return _carried.pop(message, None)


def register_with_tvm() -> None:
    """Register every error class with TVM's FFI, so an error raised inside
    `devplan.PlanDevices` reaches the caller of the pass as its own class."""
    from tvm_ffi import core
    from tvm_ffi.error import register_error

    for cls in ALL_ERRORS:
        name = f"devplan.{cls.__name__}"
        if name not in core.ERROR_NAME_TO_TYPE:
            register_error(name, cls)
