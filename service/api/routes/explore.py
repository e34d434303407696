"""POST /plan/picture (an SVG of the placement) and GET /explore (a static
page to explore placements: pin nodes, ask why)."""

from __future__ import annotations

import asyncio
import dataclasses
import html
from importlib import resources
from typing import Annotated

from fastapi import APIRouter, Body, Query, Request
from fastapi.responses import HTMLResponse, Response

from service.api.deps import MetricsDep, PoolDep, SettingsDep
from service.api.offloop import OffLoopJSONRoute
from service.api.routes.plan import PLAN_PROBLEMS, submit_plan
from service.errors import PICTURE_LIMIT, PICTURE_TOO_DENSE, PICTURE_UNAVAILABLE
from service.examples import PICTURE_EXAMPLES
from service.logs import current_request_id
from service.models import PlanRequest, to_plan_job
from service.picture import (
    MAX_NODES,
    DensityBounds,
    PictureLimit,
    PictureUnavailable,
    RenderLimits,
    dot_path,
    render_svg,
    too_dense,
)
from service.planning import PlanFailure
from service.problems import ProblemError, failure_to_problem, problem_responses

router = APIRouter(tags=["plan"], route_class=OffLoopJSONRoute)  # big bodies decode in a thread
page_router = APIRouter(include_in_schema=False)

STATIC_PREFIX = "/explore/static"
SVG_MEDIA_TYPE = "image/svg+xml"


def static_dir() -> str:
    """The page's assets, shipped in the package (no CDN, no build step)."""
    return str(resources.files("service") / "static" / "explore")


@page_router.get("/explore")
async def explore(request: Request) -> HTMLResponse:
    root = html.escape(request.scope.get("root_path", "").rstrip("/"), quote=True)
    page = resources.files("service") / "static" / "explore" / "index.html"
    return HTMLResponse(page.read_text(encoding="utf-8").replace("{{root}}", root))


@router.post(
    "/plan/picture",
    operation_id="plan_picture",
    summary="A picture of the placement (SVG)",
    description="Plans the module like `POST /plan` (same request) and draws the data-flow graph of "
    "each function: operators colored by device with a legend, copies as red edges labelled with "
    'their bytes, pinned nodes outlined, every node with its id (use it in `{"node": ID}` selectors). '
    "Over `max_nodes` operators, runs of operators on one device collapse into one node with its count; "
    "`expand` keeps the runs of the listed node ids open. Needs Graphviz `dot` on the server "
    "(503 `picture-unavailable` without it). A graph past the drawing bounds (nodes, edges, edges at one "
    "node) is a 422 `picture-too-dense` naming its counts, refused before Graphviz starts; Graphviz runs "
    "under a CPU and a memory limit (504 `picture-limit` past them).",
    response_class=Response,
    responses={
        200: {"content": {SVG_MEDIA_TYPE: {"schema": {"type": "string"}}}, "description": "The SVG."},
        **problem_responses(*PLAN_PROBLEMS, PICTURE_UNAVAILABLE, PICTURE_TOO_DENSE, PICTURE_LIMIT),
    },
)
async def plan_picture(
    http: Request,
    request: Annotated[PlanRequest, Body(openapi_examples=PICTURE_EXAMPLES)],
    settings: SettingsDep,
    pool: PoolDep,
    metrics: MetricsDep,
    max_nodes: Annotated[
        int, Query(ge=1, le=100_000, description="Operators drawn one by one before runs collapse.")
    ] = MAX_NODES,
    expand: Annotated[
        list[int], Query(max_length=100_000, description="Node ids whose collapsed runs are drawn open.")
    ] = [],  # noqa: B006 (FastAPI copies query defaults)
) -> Response:
    if dot_path() is None:
        raise ProblemError(PICTURE_UNAVAILABLE, "install Graphviz (`apt-get install graphviz`) for pictures")
    job = to_plan_job(request, settings, request_id=current_request_id())
    job = dataclasses.replace(job, picture={"max_nodes": max_nodes, "expand": tuple(expand)})
    result = await submit_plan(job, pool, metrics, count_busy=False)
    if "error" in result:
        raise failure_to_problem(PlanFailure.from_dict(result["error"]))
    picture = result["ok"]["picture"]
    bounds = DensityBounds(
        settings.picture_max_drawn_nodes, settings.picture_max_drawn_edges, settings.picture_max_edges_per_node
    )
    dense = too_dense(picture, bounds)
    if dense is not None:
        raise ProblemError(
            PICTURE_TOO_DENSE,
            dense,
            nodes=picture.get("nodes"),
            edges=picture.get("edges"),
            max_edges_per_node=picture.get("max_edges_per_node"),
        )
    limits = RenderLimits(settings.picture_cpu_s, settings.picture_memory_bytes)
    # One Graphviz at a time per planning slot: each may use its whole memory limit.
    slots: asyncio.Semaphore = http.app.state.picture_slots
    async with slots:
        try:
            svg = await asyncio.to_thread(render_svg, picture["dot"], limits)
        except PictureUnavailable as err:
            raise ProblemError(PICTURE_UNAVAILABLE, str(err)) from None
        except PictureLimit as err:
            raise ProblemError(PICTURE_LIMIT, str(err)) from None
    return Response(svg, media_type=SVG_MEDIA_TYPE)

