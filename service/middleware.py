"""The one ASGI middleware in front of the app: request id, Host and Origin, API keys,
admission, body limit and timeout, metrics, access log.

Pure ASGI (no BaseHTTPMiddleware) so the limits are enforced while the body
streams in: a request announcing or sending more than the limit is answered
413 without reading the rest. A keyless server reached on loopback first checks
`Host` and `Origin` (`service.auth.HostGuard`: 421, 403). Before any byte of a
body is read, the request must carry a valid API key (when keys are configured,
`service.auth`) and be admitted: requests with a body are bounded in number
(every planning and compile slot busy plus a queue) and in the bytes they hold
together, so requests waiting for a slot cannot pile up memory. Bytes are held
as they arrive, never from a declared Content-Length alone, and the whole body
must arrive within the body timeout (408 past it, its bytes released). Beyond
either bound the answer is 503 `overloaded` with `Retry-After`. Connections
themselves (idle ones, slow request heads) are bounded by service.connections.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.auth import HOST_EXEMPT_PATHS, PUBLIC_PATHS, AccessPolicy, HostGuard, bearer_token
from service.errors import FOREIGN_ORIGIN, MISDIRECTED_HOST, REQUEST_TIMEOUT
from service.logs import accept_request_id, reset_request_id, set_request_id
from service.metrics import Metrics
from service.problems import (
    INTERNAL_ERROR,
    OVERLOADED,
    PROBLEM_MEDIA_TYPE,
    REQUEST_TOO_LARGE,
    RETRY_AFTER_S,
    UNAUTHORIZED,
    ProblemKind,
    problem_body,
)

log = logging.getLogger("devplan.access")

_QUIET_ROUTES = {"/healthz", "/readyz", "/metrics"}
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


@dataclass(slots=True)
class Admission:
    """Requests with a body admitted now and the body bytes they hold (one event loop: no lock).

    `max_requests` and `max_bytes` are the bounds; a request is counted from the
    moment it is admitted until its response is sent.
    """

    max_requests: int
    max_bytes: int
    requests: int = 0
    held_bytes: int = 0

    def reserve(self, n: int) -> bool:
        """Hold `n` more body bytes if the bound allows."""
        if self.held_bytes + n > self.max_bytes:
            return False
        self.held_bytes += n
        return True


class _Refused(Exception):
    """The body could not be admitted: 413 (over the per-request limit) or 503 (over the byte bound)."""

    def __init__(self, kind: ProblemKind) -> None:
        super().__init__(kind.slug)
        self.kind = kind


class ServiceMiddleware:
    def __init__(
        self,
        app: ASGIApp,
        *,
        metrics: Metrics,
        max_body_bytes: int,
        known_paths: set[str],
        mount_prefixes: set[str],
        admission: Admission | None = None,
        policy: AccessPolicy | None = None,
        body_timeout_s: float = 60.0,
        host_guard: HostGuard | None = None,
    ) -> None:
        self.app = app
        self.metrics = metrics
        self.max_body_bytes = max_body_bytes
        self.known_paths = known_paths
        self.mount_prefixes = mount_prefixes
        self.admission = admission
        self.policy = policy
        self.body_timeout_s = body_timeout_s
        # The Host and Origin checks are for keyless servers only (service.auth.HostGuard).
        self.host_guard = host_guard if policy is None or not policy.enabled else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", ())}
        request_id = accept_request_id(headers.get("x-request-id"))
        token = set_request_id(request_id)
        start = time.perf_counter()
        status_holder = {"status": 500, "started": False}

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                status_holder["status"] = message["status"]
                status_holder["started"] = True
                message.setdefault("headers", [])
                message["headers"] = list(message["headers"]) + [
                    (b"x-request-id", request_id.encode("latin-1"))
                ]
            await send(message)

        has_body = scope["method"] in _BODY_METHODS
        admitted = False
        reserved = [0]  # body bytes this request holds in the admission bound
        try:
            misdirected = self._misdirected(scope, headers)
            if misdirected is not None:
                kind, detail = misdirected
                await self._send_problem(send_with_id, kind, detail, scope.get("path"), close=has_body)
            elif self.policy is not None and not self.policy.allows(
                scope["path"], headers.get("authorization")
            ):
                await self._unauthorized(scope, send_with_id, headers.get("authorization"), has_body)
            elif has_body and not self._admit():
                await self._overloaded(scope, send_with_id, "requests")
            else:
                admitted = has_body
                try:
                    body_receive = await self._limited_receive(scope, receive, headers, reserved)
                except _Refused as refused:
                    if refused.kind is OVERLOADED:
                        await self._overloaded(scope, send_with_id, "bytes")
                    elif refused.kind is REQUEST_TIMEOUT:
                        await self._timed_out(scope, send_with_id, reserved[0])
                    else:
                        await self._too_large(scope, send_with_id)
                else:
                    await self.app(scope, body_receive, send_with_id)
        except Exception:
            # A bug, not the client's fault: log it with the traceback, answer a problem
            # (with the request id) without it. Handled here rather than in Starlette's
            # outermost error middleware so the request id and metrics still apply.
            log.exception("unhandled exception on %s %s", scope["method"], scope["path"])
            if status_holder["started"]:
                raise
            await self._send_problem(send_with_id, INTERNAL_ERROR, None, None)
        finally:
            if admitted and self.admission is not None:
                self.admission.requests -= 1
                self.metrics.admitted.set(self.admission.requests)
                self.admission.held_bytes -= reserved[0]
                self.metrics.inflight_bytes.set(self.admission.held_bytes)
            elapsed = time.perf_counter() - start
            route = self._route_label(scope)
            status = str(status_holder["status"])
            self.metrics.requests.labels(route, scope["method"], status).inc()
            self.metrics.latency.labels(route, scope["method"], status).observe(elapsed)
            level = (
                logging.DEBUG if route in _QUIET_ROUTES and status_holder["status"] < 400 else logging.INFO
            )
            log.log(
                level,
                "%s %s %s",
                scope["method"],
                scope["path"],
                status,
                extra={
                    "method": scope["method"],
                    "path": scope["path"],
                    "status": status_holder["status"],
                    "duration_ms": round(elapsed * 1000, 3),
                },
            )
            reset_request_id(token)

    def _misdirected(self, scope: Scope, headers: dict[str, str]) -> tuple[ProblemKind, str] | None:
        """A keyless loopback server's refusal of a foreign Host (421) or Origin (403), or None."""
        guard = self.host_guard
        path = scope["path"]
        if guard is None or path in HOST_EXEMPT_PATHS or not guard.applies(scope.get("server")):
            return None
        refusal = guard.host_refusal(headers.get("host"))
        if refusal is not None:
            return MISDIRECTED_HOST, refusal
        if path in PUBLIC_PATHS or any(path.startswith(p.rstrip("/") + "/") for p in self.mount_prefixes):
            return None  # pages and docs are only read
        refusal = guard.origin_refusal(headers.get("origin"), int(scope["server"][1]))
        if refusal is not None:
            return FOREIGN_ORIGIN, refusal
        return None

    def _admit(self) -> bool:
        """Count one more request with a body, if the bound allows."""
        if self.admission is None:
            return True
        if self.admission.requests >= self.admission.max_requests:
            return False
        self.admission.requests += 1
        self.metrics.admitted.set(self.admission.requests)
        return True

    def _reserve(self, n: int, reserved: list[int]) -> None:
        if self.admission is None or n <= 0:
            return
        if not self.admission.reserve(n):
            raise _Refused(OVERLOADED)
        reserved[0] += n
        self.metrics.inflight_bytes.set(self.admission.held_bytes)

    async def _limited_receive(
        self, scope: Scope, receive: Receive, headers: dict[str, str], reserved: list[int]
    ) -> Receive:
        """Buffer the body up to the limit, holding its bytes in the admission bound.

        Raises _Refused(REQUEST_TOO_LARGE) when the body is (or announces to be)
        larger than the limit, _Refused(OVERLOADED) when its bytes do not fit the
        in-flight bound, _Refused(REQUEST_TIMEOUT) when it has not all arrived within
        the body timeout. Bytes are held as they arrive: a Content-Length announcing
        a big body that never comes holds nothing.
        """
        if scope["method"] not in _BODY_METHODS:
            return receive
        declared = headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_body_bytes:
            raise _Refused(REQUEST_TOO_LARGE)
        chunks: list[bytes] = []
        size = 0
        disconnect: Message | None = None
        deadline = asyncio.get_running_loop().time() + self.body_timeout_s
        while True:
            try:
                async with asyncio.timeout_at(deadline):
                    message = await receive()
            except TimeoutError:
                raise _Refused(REQUEST_TIMEOUT) from None
            if message["type"] == "http.disconnect":
                disconnect = message
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                raise _Refused(REQUEST_TOO_LARGE)
            self._reserve(size - reserved[0], reserved)
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                if disconnect is not None:
                    return disconnect
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        return replay

    async def _too_large(self, scope: Scope, send: Send) -> None:
        detail = f"the request body exceeds the limit of {self.max_body_bytes} bytes (DEVPLAN_MAX_BODY_BYTES)"
        await self._send_problem(send, REQUEST_TOO_LARGE, detail, scope.get("path"), close=True)

    async def _timed_out(self, scope: Scope, send: Send, received: int) -> None:
        detail = (
            f"the request body did not arrive within {self.body_timeout_s:g} s (DEVPLAN_BODY_TIMEOUT_S); "
            f"{received} bytes came"
        )
        await self._send_problem(send, REQUEST_TIMEOUT, detail, scope.get("path"), close=True)

    async def _overloaded(self, scope: Scope, send: Send, reason: str) -> None:
        assert self.admission is not None
        self.metrics.admission_rejections.labels(reason).inc()
        if reason == "requests":
            detail = f"{self.admission.max_requests} requests are already running or queued; retry later"
        else:
            detail = (
                f"requests in flight already hold {self.admission.held_bytes} of "
                f"{self.admission.max_bytes} body bytes (DEVPLAN_MAX_INFLIGHT_BYTES); retry later"
            )
        extra = [(b"retry-after", str(RETRY_AFTER_S).encode())]
        await self._send_problem(send, OVERLOADED, detail, scope.get("path"), close=True, headers=extra)

    async def _unauthorized(
        self, scope: Scope, send: Send, authorization: str | None, has_body: bool
    ) -> None:
        challenge = 'Bearer realm="devplan"'
        if bearer_token(authorization) is not None:
            challenge += ', error="invalid_token"'
            detail = "the API key is not valid for this route"
        else:
            detail = "this route needs an API key: send `Authorization: Bearer <key>`"
        extra = [(b"www-authenticate", challenge.encode())]
        await self._send_problem(send, UNAUTHORIZED, detail, scope.get("path"), close=has_body, headers=extra)

    @staticmethod
    async def _send_problem(
        send: Send,
        kind: ProblemKind,
        detail: str | None,
        instance: str | None,
        close: bool = False,
        headers: list[tuple[bytes, bytes]] | None = None,
    ) -> None:
        body = json.dumps(problem_body(kind, detail, instance), ensure_ascii=False).encode()  # as measured
        headers = [
            (b"content-type", PROBLEM_MEDIA_TYPE.encode()),
            (b"content-length", str(len(body)).encode()),
            *(headers or ()),
        ]
        if close:
            headers.append((b"connection", b"close"))
        await send({"type": "http.response.start", "status": kind.status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    def _route_label(self, scope: Scope) -> str:
        route: Any = scope.get("route")
        path = getattr(route, "path", None)
        if isinstance(path, str):
            return path
        path = scope.get("path", "")
        if path in self.known_paths:
            return str(path)
        for prefix in self.mount_prefixes:
            if path.startswith(prefix.rstrip("/") + "/"):
                return prefix
        return "unmatched"
