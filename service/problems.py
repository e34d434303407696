"""Errors as application/problem+json (RFC 9457): one stable `type` URI per kind.

Every exception reaching the app is turned into a problem here, the unexpected
ones included (logged with their traceback, answered without it).
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from service.errors import (
    ALL_KINDS,
    COMPILE_BUSY,
    COMPILE_FAILED,
    COMPILE_KINDS,
    COMPILE_TIMEOUT,
    INTERNAL_ERROR,
    INVALID_CHECK,
    INVALID_CONFIG,
    INVALID_TARGET,
    MALFORMED_MODULE,
    METHOD_NOT_ALLOWED,
    MODULE_TOO_LARGE,
    NOT_FOUND,
    NOT_READY,
    OVERLOADED,
    PLANNING_CONFLICT,
    REQUEST_TOO_LARGE,
    SOLVER_TIMEOUT,
    TVM_UNAVAILABLE,
    TYPE_BASE,
    UNAUTHORIZED,
    UNSUPPORTED_MODULE,
    VALIDATION_ERROR,
    ErrorKind,
    kind_of,
)
from service.logs import current_request_id
from service.planning import PlanFailure

__all__ = [
    "ALL_KINDS",
    "COMPILE_BUSY",
    "COMPILE_FAILED",
    "COMPILE_KINDS",
    "COMPILE_TIMEOUT",
    "INTERNAL_ERROR",
    "INVALID_CHECK",
    "INVALID_CONFIG",
    "INVALID_TARGET",
    "MALFORMED_MODULE",
    "METHOD_NOT_ALLOWED",
    "MODULE_TOO_LARGE",
    "NOT_FOUND",
    "NOT_READY",
    "OVERLOADED",
    "PLANNING_CONFLICT",
    "PROBLEM_MEDIA_TYPE",
    "REQUEST_TOO_LARGE",
    "RETRY_AFTER_S",
    "SOLVER_TIMEOUT",
    "TVM_UNAVAILABLE",
    "TYPE_BASE",
    "UNAUTHORIZED",
    "UNSUPPORTED_MODULE",
    "VALIDATION_ERROR",
    "ProblemError",
    "ProblemKind",
    "bounded_body",
    "bounded_text",
    "failure_to_problem",
    "install_handlers",
    "problem_body",
    "problem_response",
    "problem_responses",
]

log = logging.getLogger("devplan.service")

PROBLEM_MEDIA_TYPE = "application/problem+json"


# The kinds themselves (status, title, exit code, metric outcome) live in the one
# table, service.errors; a problem's kind is an ErrorKind.
ProblemKind = ErrorKind

# Seconds an `overloaded` answer asks the client to wait (Retry-After).
RETRY_AFTER_S = 1


class ProblemError(Exception):
    """Raise anywhere in a route to answer with this problem."""

    def __init__(self, kind: ProblemKind, detail: str | None = None, **extra: Any) -> None:
        super().__init__(detail or kind.title)
        self.kind = kind
        self.detail = detail
        self.extra = extra


# Bounds of a problem body: whatever the input, a client gets a short answer.
MAX_TOKEN_CHARS = 80  # a run of non-space characters (a token, an excerpt) in any text
MAX_TEXT_CHARS = 1000  # any one text (detail, a location's message, ...)
MAX_LIST_ITEMS = 20  # locations, constraints, errors: the first ones, then `<name>_omitted`
MAX_PROBLEM_BYTES = 8 * 1024  # the whole body, as sent (UTF-8 JSON): always below this
ELLIPSIS = "\u2026"
_LONG_TOKEN = re.compile(rf"\S{{{MAX_TOKEN_CHARS + 1},}}")
_LISTS = ("locations", "constraints", "errors")


def bounded_text(text: str, limit: int = MAX_TEXT_CHARS) -> str:
    """`text` with every token longer than MAX_TOKEN_CHARS cut to that length (ending in an
    ellipsis), and the whole cut to `limit` characters the same way."""
    if len(text) > 4 * limit:  # only what can survive is scanned (a message may be megabytes)
        text = text[: 4 * limit]
    text = _LONG_TOKEN.sub(lambda m: m.group()[: MAX_TOKEN_CHARS - 1] + ELLIPSIS, text)
    return text if len(text) <= limit else text[: limit - 1] + ELLIPSIS


def _bounded_value(value: Any, depth: int = 0) -> Any:
    """Texts bounded inside a JSON value (problem bodies nest a few levels at most)."""
    if isinstance(value, str):
        return bounded_text(value)
    if depth > 4:  # deeper than any body we build: not worth sending
        return None
    if isinstance(value, dict):
        return {bounded_text(str(k), MAX_TOKEN_CHARS): _bounded_value(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_bounded_value(v, depth + 1) for v in value[:MAX_LIST_ITEMS]]
    return value


def _json_size(body: dict[str, Any]) -> int:
    return len(json.dumps(body, ensure_ascii=False).encode("utf-8"))


def bounded_body(body: dict[str, Any]) -> dict[str, Any]:
    """The body with texts bounded and its lists capped at MAX_LIST_ITEMS, each capped list
    saying how many items it left out (`locations_omitted`, ...); if it is still not
    below MAX_PROBLEM_BYTES, the lists are halved until it is."""
    out: dict[str, Any] = {}
    keep: dict[str, int] = {}
    for key, value in body.items():
        if key in _LISTS and isinstance(value, (list, tuple)):
            keep[key] = len(value)
            out[key] = list(value)
        else:
            out[key] = _bounded_value(value)
    lists = {key: [_bounded_value(v) for v in out[key][:MAX_LIST_ITEMS]] for key in keep}
    limit = MAX_LIST_ITEMS
    while True:
        for key, total in keep.items():
            out[key] = lists[key][:limit]
            omitted = total - len(out[key])
            out.pop(f"{key}_omitted", None)
            if omitted:
                out[f"{key}_omitted"] = omitted
        if _json_size(out) < MAX_PROBLEM_BYTES:
            return out
        if limit == 0:  # many long non-ASCII texts: a tenth of each is still a message
            return {
                k: bounded_text(v, MAX_TEXT_CHARS // 10) if isinstance(v, str) else v for k, v in out.items()
            }
        limit //= 2


def problem_body(kind: ProblemKind, detail: str | None, instance: str | None, **extra: Any) -> dict[str, Any]:
    """The problem+json object, bounded (see bounded_body). A 500 carries only type, title,
    status and request id: whatever detail it had goes to the log (with the request id),
    never to the client."""
    body: dict[str, Any] = {"type": kind.type, "title": kind.title, "status": kind.status}
    if kind.status == 500:
        if detail or extra:
            log.error("internal error answered without detail: %s", detail, extra={"problem": kind.slug})
        detail, instance, extra = None, None, {}
    if detail:
        body["detail"] = detail
    if instance:
        body["instance"] = instance
    rid = current_request_id()
    if rid:
        body["request_id"] = rid
    body.update({k: v for k, v in extra.items() if v is not None})
    return bounded_body(body)


def problem_response(
    kind: ProblemKind,
    detail: str | None = None,
    instance: str | None = None,
    headers: dict[str, str] | None = None,
    **extra: Any,
) -> JSONResponse:
    return JSONResponse(
        problem_body(kind, detail, instance, **extra),
        status_code=kind.status,
        media_type=PROBLEM_MEDIA_TYPE,
        headers=headers,
    )


def failure_to_problem(failure: PlanFailure) -> ProblemError:
    """A failure (from planning.run_plan or the compile worker) as the matching problem."""
    kind = kind_of(failure.kind)
    extra: dict[str, Any] = {}
    if failure.locations and kind.status != 500:
        extra["locations"] = list(failure.locations)
    if kind is PLANNING_CONFLICT:
        extra["constraints"] = list(failure.constraints)
    return ProblemError(kind, failure.message, **extra)


def _jsonable_errors(errors: Any) -> list[dict[str, Any]]:
    """FastAPI's validation errors without the raw input echoed back (it can be 32 MiB)."""
    out = []
    for e in errors:
        item = {
            "loc": [str(p) if not isinstance(p, int) else p for p in e.get("loc", ())],
            "msg": str(e.get("msg", "")),
            "type": str(e.get("type", "")),
        }
        out.append(item)
    return out


def install_handlers(app: FastAPI) -> None:
    """Map every exception to a problem+json response."""

    @app.exception_handler(ProblemError)
    async def _problem(request: Request, exc: ProblemError) -> JSONResponse:
        # Every 503 is worth retrying (overloaded, not ready, a queue or store away), except a
        # server without TVM.
        retry = exc.kind.status == 503 and exc.kind != TVM_UNAVAILABLE
        headers = {"Retry-After": str(RETRY_AFTER_S)} if retry else None
        return problem_response(exc.kind, exc.detail, request.url.path, headers=headers, **exc.extra)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = _jsonable_errors(exc.errors())
        first = errors[0] if errors else None
        detail = "request does not match the schema"
        if first is not None:
            where = ".".join(str(p) for p in first["loc"])
            detail = f"{where}: {first['msg']}"
        # A value nested past its bound (service.models.nesting_bound) is a configuration the
        # server refuses, not a schema mismatch.
        nested = next((e for e in errors if e.get("type") == "nesting_too_deep"), None)
        if nested is not None:
            where = ".".join(str(p) for p in nested["loc"] if not str(p).startswith("function-"))
            return problem_response(
                INVALID_CONFIG, f"{where}: {nested['msg']}", request.url.path, errors=errors
            )
        return problem_response(VALIDATION_ERROR, detail, request.url.path, errors=errors)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 400 and request.method in ("POST", "PUT", "PATCH"):
            # FastAPI's "There was an error parsing the body" (e.g. bytes that are not UTF-8):
            # the body is not the documented JSON, i.e. a schema violation like any other.
            errors = [{"loc": ["body"], "msg": "the body is not valid JSON text", "type": "json_invalid"}]
            return problem_response(
                VALIDATION_ERROR, "body: the body is not valid JSON text", request.url.path, errors=errors
            )
        kind = {404: NOT_FOUND, 405: METHOD_NOT_ALLOWED, 413: REQUEST_TOO_LARGE}.get(exc.status_code)
        if kind is None:
            kind = ProblemKind(f"http-{exc.status_code}", exc.status_code, str(exc.detail or "HTTP error"))
        detail = str(exc.detail) if exc.detail and str(exc.detail).lower() != kind.title.lower() else None
        return problem_response(kind, detail, request.url.path, headers=dict(exc.headers or {}) or None)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.error("unhandled exception on %s %s", request.method, request.url.path, exc_info=exc)
        return problem_response(INTERNAL_ERROR)


class ProblemLocation(BaseModel):
    line: int | None = Field(None, description="1-based line in the submitted module.")
    column: int | None = Field(None, description="1-based column.")
    message: str


class ConflictConstraintOut(BaseModel):
    kind: str = Field(..., description="annotation, copy, call site, parameter attribute, constraint #k, ...")
    description: str
    expression: str = Field("", description="The expression, printed short.")
    line: int | None = None
    column: int | None = None
    devices: list[str] = Field(default_factory=list, description="Devices this constraint involves.")


class Problem(BaseModel):
    """An error, as application/problem+json (RFC 9457)."""

    model_config = ConfigDict(extra="allow")

    type: str = Field(..., description="Stable URI naming the kind of problem.")
    title: str
    status: int
    detail: str | None = None
    instance: str | None = None
    request_id: str | None = None
    locations: list[ProblemLocation] | None = None
    constraints: list[ConflictConstraintOut] | None = None
    errors: list[dict[str, Any]] | None = Field(None, description="Schema violations (422 validation-error).")
    # Problem bodies stay under 8 KiB (bounded_body): each list keeps its first 20 items
    # and says how many it left out.
    locations_omitted: int | None = Field(
        None, description="Locations left out (only the first 20 are sent)."
    )
    constraints_omitted: int | None = Field(None, description="Constraints left out (the first 20 are sent).")
    errors_omitted: int | None = Field(
        None, description="Schema violations left out (the first 20 are sent)."
    )


def problem_responses(*kinds: ProblemKind) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses` entries for the given problem kinds (grouped by status)."""
    by_status: dict[int, list[ProblemKind]] = {}
    for k in kinds:
        by_status.setdefault(k.status, []).append(k)
    out: dict[int | str, dict[str, Any]] = {}
    for status, group in sorted(by_status.items()):
        out[status] = {
            "model": Problem,
            "description": "; ".join(f"{k.title} (`{k.type}`)" for k in group),
            "content": {PROBLEM_MEDIA_TYPE: {"schema": {"$ref": "#/components/schemas/Problem"}}},
        }
    return out
