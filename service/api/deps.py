"""Dependencies the routes declare with `Annotated[..., Depends(...)]`.

They are `async def` although they only read `app.state`: FastAPI runs a plain
`def` dependency in its thread pool, a thread hop per dependency per request.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from service.config import Settings
from service.metrics import Metrics
from service.pool import PlanPool


async def get_app_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


async def get_pool(request: Request) -> PlanPool:
    pool: PlanPool = request.app.state.pool
    return pool


async def get_metrics(request: Request) -> Metrics:
    metrics: Metrics = request.app.state.metrics
    return metrics


SettingsDep = Annotated[Settings, Depends(get_app_settings)]
PoolDep = Annotated[PlanPool, Depends(get_pool)]
MetricsDep = Annotated[Metrics, Depends(get_metrics)]
