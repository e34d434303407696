"""Service settings, read from `DEVPLAN_*` environment variables (pydantic-settings)."""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


def _default_pool_size() -> int:
    return max(1, min(os.cpu_count() or 1, 8))


class Settings(BaseSettings):
    """Everything an operator can tune without code; each field is `DEVPLAN_<NAME>`."""

    model_config = SettingsConfigDict(env_prefix="DEVPLAN_", extra="ignore")

    host: str = Field("127.0.0.1", description="Interface uvicorn binds to.")
    port: int = Field(8000, ge=0, le=65535, description="TCP port uvicorn binds to.")
    workers: int = Field(1, ge=1, description="uvicorn worker processes (each has its own planning pool).")
    max_body_bytes: int = Field(
        32 * 1024 * 1024, ge=1024, description="Largest accepted request body; larger requests get 413."
    )
    default_timeout_ms: int = Field(
        10_000, ge=1, description="Planning time limit when a request does not set timeout_ms."
    )
    max_timeout_ms: int = Field(120_000, ge=1, description="Upper bound applied to a request's timeout_ms.")
    pool_size: int = Field(
        default_factory=_default_pool_size, ge=1, description="Plans that may run at the same time."
    )
    pool_kind: Literal["process", "thread"] = Field(
        "process",
        description="process: worker processes, killed when a plan overruns its limit (the default); "
        "thread: threads in the server process (time limit enforced by the solver only).",
    )
    queue_timeout_ms: int = Field(
        60_000, ge=1, description="How long a request may wait for a free planning slot before 503."
    )
    log_level: Literal["critical", "error", "warning", "info", "debug"] = Field(
        "info", description="Log level of the JSON logs."
    )
    graceful_timeout_s: int = Field(
        10, ge=0, description="On SIGTERM, how long uvicorn waits for in-flight requests before closing them."
    )
    compile_timeout_s: float = Field(
        300.0,
        gt=0,
        description="POST /compile: each compile runs in its own process, killed past this (504).",
    )
    compile_workers: int = Field(
        1, ge=1, description="POST /compile: compiles that may run at the same time."
    )
    artifact_dir: Path = Field(
        Path("artifacts"), description="Where compiled artifacts are stored (/compile)."
    )


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide settings, read once from the environment."""
    return Settings()
