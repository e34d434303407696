"""GET /version and GET /metrics."""

from __future__ import annotations

import asyncio
import platform
from importlib import metadata

from fastapi import APIRouter
from fastapi.responses import Response

from service import __version__
from service.api.deps import MetricsDep
from service.models import VersionResponse

router = APIRouter(tags=["meta"])


def _dist_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


@router.get(
    "/version",
    operation_id="version",
    summary="Versions of devplan, Z3 and (if installed) TVM",
    response_model=VersionResponse,
    response_model_exclude_none=False,
)
async def version() -> VersionResponse:
    import z3

    return VersionResponse(
        devplan=__version__,
        python=platform.python_version(),
        z3=z3.get_version_string(),
        tvm=_dist_version("apache-tvm"),  # metadata only: importing TVM takes seconds
    )


@router.get(
    "/metrics",
    operation_id="metrics",
    summary="Prometheus metrics",
    response_class=Response,
    responses={
        200: {
            "content": {"text/plain": {"schema": {"type": "string"}}},
            "description": "Prometheus text format",
        }
    },
)
async def metrics(m: MetricsDep) -> Response:
    # In a thread: in queue mode the farm's collector reads Redis, which must not hold the event loop.
    return Response(await asyncio.to_thread(m.render), media_type=m.content_type)
