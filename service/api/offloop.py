"""Routes whose JSON bodies are decoded off the event loop.

FastAPI decodes a request's JSON (`Request.json()`) in the event loop before validating it: for
a body of 30 MiB that is about 0.3 s in which no other request, health checks included, is
answered. Routes built with `OffLoopJSONRoute` decode bodies over `OFF_LOOP_BYTES` in a thread
instead (the same `json.loads`, the same errors).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import Response

OFF_LOOP_BYTES = 1024 * 1024
"""Bodies up to this size decode in the loop (about 10 ms); larger ones in a thread."""


class OffLoopJSONRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            body = await self.body()
            if len(body) > OFF_LOOP_BYTES:
                self._json = await asyncio.to_thread(json.loads, body)
            else:
                self._json = json.loads(body)
        return self._json


class OffLoopJSONRoute(APIRoute):
    """An APIRoute whose handler sees an `OffLoopJSONRequest`."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def off_loop_handler(request: Request) -> Response:
            return await handler(OffLoopJSONRequest(request.scope, request.receive))

        return off_loop_handler
