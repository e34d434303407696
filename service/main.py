"""Builds the FastAPI app: routes, problem handlers, middleware, offline docs, planning pool."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.staticfiles import StaticFiles
from starlette.routing import Mount

from service import __version__, sandbox
from service.api.routes import compile as compile_routes
from service.api.routes import docs, explore, health, meta, plan
from service.api.routes.plan import PlanDiffRequest
from service.auth import AccessPolicy, HostGuard, add_security_scheme
from service.config import Settings, get_settings
from service.jobs.collector import FarmCollector
from service.jobs.queue import JobQueue
from service.metrics import Metrics
from service.middleware import Admission, ServiceMiddleware
from service.pool import PlanPool
from service.problems import ALL_KINDS, PROBLEM_MEDIA_TYPE, install_handlers

log = logging.getLogger("devplan.service")

DESCRIPTION = """\
Device placement for TVM Relay modules. `POST /plan` takes a Relay module
(text as printed by TVM <= 0.19, or TVM JSON) and returns it with every
sub-expression's virtual device made explicit (`on_device` / `device_copy`),
reproducing TVM's `PlanDevices`, solved with Z3. Conflicting constraints are
explained with source locations.

Errors are `application/problem+json` (RFC 9457); `type` is one of:
""" + "\n".join(f"- `{k.type}` ({k.status}): {k.title}" for k in ALL_KINDS)


def create_app(settings: Settings | None = None) -> FastAPI:
    """A fresh app with its own settings, metrics registry and planning pool."""
    settings = settings or get_settings()
    metrics = Metrics()
    pool = PlanPool(
        settings.pool_size,
        settings.pool_kind,
        queue_timeout_s=settings.queue_timeout_ms / 1000,
        log_level=settings.log_level,
        memory_limit_bytes=settings.worker_memory_bytes,
        memory_per_input_byte=settings.memory_per_input_byte,
    )
    metrics.pool_slots.labels("configured").set_function(lambda: pool.status().configured)
    metrics.pool_slots.labels("effective").set_function(lambda: pool.status().effective)
    metrics.pool_slots.labels("busy").set_function(lambda: pool.status().busy)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await pool.start()
        log.info("planning pool ready (%s)", pool.describe())
        # Which sandbox layers work here, found once, logged, shown by /readyz.
        app.state.sandbox = await asyncio.to_thread(sandbox.startup, settings, "service")
        try:
            yield
        finally:
            await pool.close()

    app = FastAPI(
        title="devplan",
        version=__version__,
        description=DESCRIPTION,
        docs_url=None,
        redoc_url=None,
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.metrics = metrics
    app.state.pool = pool
    # Graphviz runs at once (POST /plan/picture): one per planning slot, each may use its memory limit.
    app.state.picture_slots = asyncio.Semaphore(settings.pool_size)
    if settings.queue_url:
        # Queue mode: one queue client per app, whose collector reads the farm's state from Redis.
        app.state.job_queue = JobQueue(settings)
        metrics.registry.register(FarmCollector(app.state.job_queue))

    app.include_router(plan.router)
    app.include_router(explore.router)  # POST /plan/picture
    app.include_router(explore.page_router)  # GET /explore
    app.include_router(compile_routes.compile_router)  # TVM is imported only inside its worker
    app.include_router(health.router)
    app.include_router(meta.router)
    app.include_router(docs.router)
    app.mount(docs.STATIC_PREFIX, StaticFiles(directory=docs.swagger_ui_dir()), name="swagger-ui")
    app.mount(explore.STATIC_PREFIX, StaticFiles(directory=explore.static_dir()), name="explore")
    install_handlers(app)

    known_paths = {r.path for r in app.routes if not isinstance(r, Mount) and hasattr(r, "path")}
    mount_prefixes = {r.path for r in app.routes if isinstance(r, Mount)}
    app.add_middleware(
        ServiceMiddleware,
        metrics=metrics,
        max_body_bytes=settings.max_body_bytes,
        known_paths=known_paths,
        mount_prefixes=mount_prefixes,
        admission=Admission(settings.admission_requests, settings.admission_bytes),
        policy=AccessPolicy.from_settings(settings, static_prefixes=tuple(mount_prefixes)),
        body_timeout_s=settings.body_timeout_s,
        host_guard=HostGuard.from_settings(settings),
    )
    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]
    return app


def _openapi(app: FastAPI) -> dict[str, Any]:
    """FastAPI's schema with every error response as problem+json (not FastAPI's default 422)."""
    if app.openapi_schema:
        return app.openapi_schema
    schema = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
    problem_ref = {"$ref": "#/components/schemas/Problem"}
    for path_item in schema.get("paths", {}).values():
        for operation in path_item.values():
            responses = operation.get("responses", {})
            for status, response in responses.items():
                if status.isdigit() and int(status) >= 400:
                    response["content"] = {PROBLEM_MEDIA_TYPE: {"schema": problem_ref}}
                    if status == "422" and response.get("description") == "Validation Error":
                        response["description"] = "The request does not match the schema"
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    for name in ("HTTPValidationError", "ValidationError"):
        components.pop(name, None)
    # POST /plan/diff reads its body off the event loop, so FastAPI does not see its model.
    diff_schema = PlanDiffRequest.model_json_schema(ref_template="#/components/schemas/{model}")
    for name, definition in diff_schema.pop("$defs", {}).items():
        components.setdefault(name, definition)
    components.setdefault("PlanDiffRequest", diff_schema)
    schema["components"]["schemas"] = dict(sorted(components.items()))
    add_security_scheme(schema)
    app.openapi_schema = schema
    return schema


def app_factory() -> FastAPI:
    """Entry point for `uvicorn --factory service.main:app_factory`."""
    return create_app()
