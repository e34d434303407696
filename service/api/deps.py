"""Dependencies the routes declare with `Annotated[..., Depends(...)]`."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from service.config import Settings
from service.metrics import Metrics
from service.pool import PlanPool


def get_app_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


def get_pool(request: Request) -> PlanPool:
    pool: PlanPool = request.app.state.pool
    return pool


def get_metrics(request: Request) -> Metrics:
    metrics: Metrics = request.app.state.metrics
    return metrics


SettingsDep = Annotated[Settings, Depends(get_app_settings)]
PoolDep = Annotated[PlanPool, Depends(get_pool)]
MetricsDep = Annotated[Metrics, Depends(get_metrics)]
