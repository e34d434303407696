"""The one ASGI middleware in front of the app: request id, body limit, metrics, access log.

Pure ASGI (no BaseHTTPMiddleware) so the body limit is enforced while the body
streams in: a request announcing or sending more than the limit is answered
413 without reading the rest.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.logs import accept_request_id, reset_request_id, set_request_id
from service.metrics import Metrics
from service.problems import INTERNAL_ERROR, PROBLEM_MEDIA_TYPE, REQUEST_TOO_LARGE, ProblemKind, problem_body

log = logging.getLogger("devplan.access")

_QUIET_ROUTES = {"/healthz", "/readyz", "/metrics"}


class ServiceMiddleware:
    def __init__(
        self,
        app: ASGIApp,
        *,
        metrics: Metrics,
        max_body_bytes: int,
        known_paths: set[str],
        mount_prefixes: set[str],
    ) -> None:
        self.app = app
        self.metrics = metrics
        self.max_body_bytes = max_body_bytes
        self.known_paths = known_paths
        self.mount_prefixes = mount_prefixes

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

        try:
            body_receive = await self._limited_receive(scope, receive, headers)
            if body_receive is None:
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
            await self._send_problem(
                send_with_id, INTERNAL_ERROR, "unexpected server error; see the server log", scope.get("path")
            )
        finally:
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

    async def _limited_receive(
        self, scope: Scope, receive: Receive, headers: dict[str, str]
    ) -> Receive | None:
        """Buffer the body up to the limit; None when it is (or announces to be) larger."""
        if scope["method"] in ("GET", "HEAD", "OPTIONS", "DELETE"):
            return receive
        declared = headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_body_bytes:
            return None
        chunks: list[bytes] = []
        size = 0
        disconnect: Message | None = None
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                disconnect = message
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                return None
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

    @staticmethod
    async def _send_problem(
        send: Send, kind: ProblemKind, detail: str, instance: str | None, close: bool = False
    ) -> None:
        body = json.dumps(problem_body(kind, detail, instance)).encode()
        headers = [
            (b"content-type", PROBLEM_MEDIA_TYPE.encode()),
            (b"content-length", str(len(body)).encode()),
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
