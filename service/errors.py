"""Every error kind of the service and the CLI, in one table.

A kind is named by its slug (the last part of the problem+json `type` URI and
the `kind` of a `planning.PlanFailure`). Everything else is derived from this
table: the HTTP status and title of the problem (`service.problems`), the exit
code of `devplan plan` (`service.cli`) and the outcome label of the
`devplan_plans` metric (`service.metrics`, `POST /plan`). This module imports
nothing heavy, so the CLI can use it without loading FastAPI.
"""

from __future__ import annotations

from dataclasses import dataclass

TYPE_BASE = "https://devplan.dev/problems/"

# Exit codes of `devplan plan` (its documented contract).
EXIT_OK = 0
EXIT_USAGE = 1
EXIT_MALFORMED = 2
EXIT_CONFLICT = 3
EXIT_TIMEOUT = 4
# `devplan compile`: the module could not be lowered or compiled; the run check failed or cannot run.
EXIT_COMPILE_FAILED = 7
EXIT_RUN_CHECK_FAILED = 8


class Terminated(BaseException):
    """SIGTERM arrived during `devplan compile` (exit 143), raised in the main thread so
    that the compile process is stopped and its temporaries removed on the way out."""


@dataclass(frozen=True, slots=True)
class ErrorKind:
    """One kind of failure: its problem+json status and title, its CLI exit code
    and its `devplan_plans{outcome}` label (None where the kind is not a plan outcome)."""

    slug: str
    status: int
    title: str
    exit_code: int = EXIT_USAGE
    outcome: str | None = None

    @property
    def type(self) -> str:
        """The stable problem+json `type` URI."""
        return TYPE_BASE + self.slug


# Planning failures (a PlanFailure's kind): the CLI and POST /plan both see them.
MALFORMED_MODULE = ErrorKind(
    "malformed-module", 400, "The module does not parse or verify", EXIT_MALFORMED, "malformed"
)
# The module parses but is ill-typed (TVM 0.19's InferType rejects it before planning).
TYPE_ERROR = ErrorKind("type-error", 400, "The module is not well typed", EXIT_MALFORMED, "type_error")
INVALID_CONFIG = ErrorKind(
    "invalid-config", 422, "The planning configuration is invalid", EXIT_USAGE, "invalid_config"
)
PLANNING_CONFLICT = ErrorKind(
    "planning-conflict", 422, "The device constraints conflict", EXIT_CONFLICT, "conflict"
)
SOLVER_TIMEOUT = ErrorKind("solver-timeout", 504, "Planning exceeded its time limit", EXIT_TIMEOUT, "timeout")
MODULE_TOO_LARGE = ErrorKind(
    "module-too-large", 422, "The module needs more memory than a worker may use", EXIT_USAGE, "too_large"
)
INTERNAL_ERROR = ErrorKind("internal-error", 500, "Internal server error", EXIT_USAGE, "internal")
# HTTP only.
VALIDATION_ERROR = ErrorKind("validation-error", 422, "The request does not match the schema")
REQUEST_TOO_LARGE = ErrorKind("request-too-large", 413, "The request body is too large")
REQUEST_TIMEOUT = ErrorKind("request-timeout", 408, "The request body did not arrive in time")
# A keyless loopback server answers only to its own names, and to pages of its own origin.
MISDIRECTED_HOST = ErrorKind("misdirected-host", 421, "This server does not answer to that host name")
FOREIGN_ORIGIN = ErrorKind("foreign-origin", 403, "Requests from that web page's origin are refused")
OVERLOADED = ErrorKind(
    "overloaded", 503, "The service is busy; retry after the Retry-After seconds", outcome="overloaded"
)
UNAUTHORIZED = ErrorKind("unauthorized", 401, "A valid API key is required")
NOT_READY = ErrorKind("not-ready", 503, "The service is not ready")
NOT_FOUND = ErrorKind("not-found", 404, "Not found")
METHOD_NOT_ALLOWED = ErrorKind("method-not-allowed", 405, "Method not allowed")
# POST /compile (its worker reports the first three as PlanFailure kinds).
UNSUPPORTED_MODULE = ErrorKind(
    "unsupported-construct", 422, "The module uses what TVM Relax cannot express", EXIT_COMPILE_FAILED
)
INVALID_TARGET = ErrorKind("invalid-target", 422, "A target is not valid for TVM 0.27", EXIT_COMPILE_FAILED)
COMPILE_FAILED = ErrorKind(
    "compile-failed", 422, "TVM could not compile the module for its targets", EXIT_COMPILE_FAILED
)
INVALID_CHECK = ErrorKind(
    "invalid-check", 422, "The run check cannot run on this module (turn run_check off)", EXIT_RUN_CHECK_FAILED
)
# The run check's sandboxed child broke a limit or a rule (seccomp, CPU, memory), or its run
# failed; the detail names which. Its wall-clock limit is a compile-timeout.
RUN_CHECK_FAILED = ErrorKind(
    "run-check-failed", 422, "The run check broke a sandbox limit or rule, or its run failed", EXIT_RUN_CHECK_FAILED
)
TVM_UNAVAILABLE = ErrorKind("tvm-unavailable", 503, "TVM is not installed on this server")
COMPILE_BUSY = ErrorKind("compile-busy", 503, "No compile slot became free in time")
COMPILE_TIMEOUT = ErrorKind("compile-timeout", 504, "Compiling exceeded its time limit", EXIT_TIMEOUT)
# Build farm: the queue (Redis) or the artifact store cannot be reached, a job's
# worker died more often than DEVPLAN_COMPILE_RETRIES allows, a job was cancelled.
QUEUE_UNAVAILABLE = ErrorKind("queue-unavailable", 503, "The compile queue (Redis) cannot be reached")
ARTIFACT_STORE_UNAVAILABLE = ErrorKind(
    "artifact-store-unavailable", 503, "The artifact store cannot be reached"
)
COMPILE_LOST = ErrorKind("compile-lost", 503, "The compile's worker died and its retries ran out")
COMPILE_CANCELED = ErrorKind("compile-canceled", 409, "The compile job was cancelled")
# POST /plan/picture without Graphviz.
PICTURE_UNAVAILABLE = ErrorKind("picture-unavailable", 503, "Graphviz `dot` is not installed on this server")
# Pictures are bounded: a graph too dense to lay out is refused before Graphviz starts, and
# Graphviz runs under CPU and memory limits.
PICTURE_TOO_DENSE = ErrorKind("picture-too-dense", 422, "The graph is too dense to draw")
PICTURE_LIMIT = ErrorKind("picture-limit", 504, "Drawing the picture ran past its limit")

COMPILE_KINDS: tuple[ErrorKind, ...] = (
    UNSUPPORTED_MODULE,
    INVALID_TARGET,
    COMPILE_FAILED,
    INVALID_CHECK,
    RUN_CHECK_FAILED,
    TVM_UNAVAILABLE,
    COMPILE_BUSY,
    COMPILE_TIMEOUT,
)
FARM_KINDS: tuple[ErrorKind, ...] = (QUEUE_UNAVAILABLE, ARTIFACT_STORE_UNAVAILABLE, COMPILE_LOST, COMPILE_CANCELED)
ALL_KINDS: tuple[ErrorKind, ...] = (
    MALFORMED_MODULE,
    TYPE_ERROR,
    INVALID_CONFIG,
    PLANNING_CONFLICT,
    VALIDATION_ERROR,
    REQUEST_TOO_LARGE,
    SOLVER_TIMEOUT,
    OVERLOADED,
    MODULE_TOO_LARGE,
    UNAUTHORIZED,
    NOT_READY,
    NOT_FOUND,
    METHOD_NOT_ALLOWED,
    INTERNAL_ERROR,
    *COMPILE_KINDS,
    PICTURE_UNAVAILABLE,
    REQUEST_TIMEOUT,
    MISDIRECTED_HOST,
    FOREIGN_ORIGIN,
    PICTURE_TOO_DENSE,
    PICTURE_LIMIT,
    *FARM_KINDS,
)

BY_SLUG: dict[str, ErrorKind] = {k.slug: k for k in ALL_KINDS}

# `devplan_plans{outcome}` label values: success plus every kind that has one.
PLAN_OUTCOMES: tuple[str, ...] = ("ok", *(k.outcome for k in ALL_KINDS if k.outcome is not None))


def kind_of(slug: str) -> ErrorKind:
    """The kind named by a failure's slug; an unknown slug is an internal error."""
    return BY_SLUG.get(slug, INTERNAL_ERROR)
