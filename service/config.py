"""Service settings, read from `DEVPLAN_*` environment variables (pydantic-settings)."""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BeforeValidator, Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from service.sandbox import COMPILE_TIMEOUT_S, Limits
from service.units import coerce_bytes

# The run check's default limits (service/sandbox.py says how they, and COMPILE_TIMEOUT_S, were measured).
_RUN_CHECK = Limits()
# Byte sizes: an integer or `32MiB`, `8GiB`, ... (service.units), as in requests and flags.
Bytes = Annotated[int, BeforeValidator(coerce_bytes)]


def _default_pool_size() -> int:
    return max(1, min(os.cpu_count() or 1, 8))


class Settings(BaseSettings):
    """Everything an operator can tune without code; each field is `DEVPLAN_<NAME>`."""

    model_config = SettingsConfigDict(env_prefix="DEVPLAN_", extra="ignore")

    host: str = Field("127.0.0.1", description="Interface uvicorn binds to.")
    port: int = Field(8000, ge=0, le=65535, description="TCP port uvicorn binds to.")
    workers: int = Field(1, ge=1, description="uvicorn worker processes (each has its own planning pool).")
    max_body_bytes: Bytes = Field(
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
    log_queue_size: int = Field(
        1000,
        ge=1,
        description="Log records each process holds while its log output (stderr) is blocked; beyond "
        "them records are dropped and counted (devplan_log_records_dropped_total), never waited for.",
    )
    graceful_timeout_s: int = Field(
        10, ge=0, description="On SIGTERM, how long uvicorn waits for in-flight requests before closing them."
    )
    compile_timeout_s: float = Field(
        COMPILE_TIMEOUT_S,
        gt=0,
        description="POST /compile: each compile runs in its own process, killed past this (504); it "
        "bounds the run check too. The default lets every corpus model's compile and check pass.",
    )
    compile_workers: int = Field(
        1, ge=1, description="POST /compile: compiles that may run at the same time."
    )
    # The run check runs the caller's kernels, only in a sandbox (docs/security.md).
    compile_sandbox: Literal["on", "off"] = Field(
        "on",
        description="on: each run check runs in a child process under rlimits, a wall clock, a seccomp "
        "allowlist and (where it can start) bubblewrap, and each compile under its rlimits; off: both run "
        "unconfined in the compile process (benchmarks, debugging only). /readyz and the log say which.",
    )
    run_check_cpu_s: float = Field(
        _RUN_CHECK.cpu_s, gt=0, description="CPU seconds one run check may use (RLIMIT_CPU; 422 run-check-failed)."
    )
    run_check_wall_s: float = Field(
        _RUN_CHECK.wall_s,
        gt=0,
        description="Seconds one run check may last before its process group is killed (504 compile-timeout); "
        "at most what is left of compile_timeout_s.",
    )
    run_check_memory_bytes: Bytes = Field(
        _RUN_CHECK.memory_bytes,
        ge=64 * 1024 * 1024,
        description="Data segment of one run check (RLIMIT_DATA: private writable memory; 422 run-check-failed).",
    )
    run_check_file_bytes: Bytes = Field(
        _RUN_CHECK.file_bytes,
        ge=0,
        description="Largest file a run check may write (RLIMIT_FSIZE; it has no file to write).",
    )
    run_check_max_bytes: Bytes = Field(
        4 * 1024 * 1024 * 1024,
        ge=0,
        description="Largest estimated tensor data of one run check (its inputs, and every tensor the entry "
        "function binds, once per build); a run check estimated above it is refused before it runs (422 "
        "module-too-large). 0: no limit.",
    )
    compile_memory_bytes: Bytes = Field(
        16 * 1024 * 1024 * 1024,
        ge=256 * 1024 * 1024,
        description="Data segment of one compile process (RLIMIT_DATA; 422 module-too-large), also the limit of "
        "its resident set, which the web process watches as it watches planning workers; its run check gets at "
        "most this too. Its CPU seconds are limited to compile_timeout_s.",
    )
    compile_file_bytes: Bytes = Field(
        4 * 1024 * 1024 * 1024,
        ge=1024 * 1024,
        description="Largest file a compile process (and the C compiler it starts) may write: the library.",
    )
    artifact_dir: Path = Field(
        Path("artifacts"), description="Where compiled artifacts are stored (/compile)."
    )
    artifact_max_bytes: Bytes = Field(
        8 * 1024 * 1024 * 1024,
        ge=0,
        description="Byte quota of the stored libraries; beyond it the least recently used are evicted "
        "(never one being written or downloaded). 0: no quota.",
    )
    artifact_max_age_s: float = Field(
        30 * 24 * 3600.0,
        ge=0,
        description="Stored libraries unused for longer than this are evicted. 0: no age limit.",
    )
    # Admission control and memory: see docs/http-api.md, "Limits".
    max_inflight_bytes: Bytes = Field(
        128 * 1024 * 1024,
        ge=1024,
        description="Request body bytes held at once by requests in flight (running or waiting for a "
        "slot); a request beyond it gets 503 overloaded. Raised to max_body_bytes when below it.",
    )
    max_queued_requests: int = Field(
        64,
        ge=0,
        description="Requests with a body admitted beyond the planning and compile slots (they wait for a "
        "slot); one more gets 503 overloaded with Retry-After.",
    )
    max_connections: int | None = Field(
        None,
        ge=1,
        description="Connections open at once; a new one beyond it closes the connection that has waited "
        "longest without a request in progress (idle or slow), never a running request. Default: 4 x the "
        "admission bound + 64 (never below the admission bound + 16).",
    )
    header_timeout_s: float = Field(
        10.0,
        gt=0,
        description="Seconds a connection may take to send a request's head (from connecting, or from its "
        "last response); past it the connection is closed. Trickling bytes do not extend it.",
    )
    body_timeout_s: float = Field(
        60.0,
        gt=0,
        description="Seconds a request may take to send its whole body once admitted; past it the answer is "
        "408 request-timeout and its reserved bytes are released.",
    )
    allowed_hosts: str = Field(
        "",
        description="Comma-separated extra host names a keyless loopback server answers to (its Host "
        "header) and whose pages may send costly or state-changing requests (their Origin); "
        "loopback addresses and `localhost` are always allowed.",
    )
    worker_memory_bytes: Bytes = Field(
        1024 * 1024 * 1024,
        ge=0,
        description="Resident memory one planning worker may use; a plan above it is stopped (the worker "
        "killed and replaced) and answered 422 module-too-large. 0: no limit.",
    )
    memory_per_input_byte: float = Field(
        48.0,
        ge=0,
        description="Measured worker memory per byte of module text, used to reject at once (422 "
        "module-too-large) a module that cannot fit in worker_memory_bytes. 0 disables the estimate.",
    )
    # Pictures (POST /plan/picture): docs/security.md, "The web process under hostile callers".
    picture_cpu_s: float = Field(
        20.0, gt=0, description="CPU seconds one Graphviz run may use (RLIMIT_CPU; twice this as wall clock); "
        "past it the picture is a 504 picture-limit."
    )
    picture_memory_bytes: Bytes = Field(
        1024 * 1024 * 1024,
        ge=16 * 1024 * 1024,
        description="Address space of one Graphviz run (RLIMIT_AS); past it the picture is a 504 picture-limit.",
    )
    picture_max_drawn_nodes: int = Field(
        2000, ge=1, description="Nodes a picture may draw; more is a 422 picture-too-dense before Graphviz starts."
    )
    picture_max_drawn_edges: int = Field(
        4000, ge=1, description="Edges a picture may draw; more is a 422 picture-too-dense before Graphviz starts."
    )
    picture_max_edges_per_node: int = Field(
        50,
        ge=1,
        description="Edges that may meet at one drawn node (a value many operators read); more is a 422 "
        "picture-too-dense before Graphviz starts.",
    )
    api_keys: SecretStr = Field(
        SecretStr(""),
        description="Comma-separated bearer tokens; when set, every route except health, docs, static "
        "pages and (by default) /metrics needs `Authorization: Bearer <key>`.",
    )
    compile_api_keys: SecretStr = Field(
        SecretStr(""),
        description="When set, only these tokens may use /compile and /artifacts (comma-separated).",
    )
    metrics_require_key: bool = Field(False, description="Also require an API key for /metrics.")
    allow_anonymous: bool = Field(
        False,
        description="Serve on a non-loopback address without DEVPLAN_API_KEYS anyway (`devplan serve` "
        "refuses to otherwise; docs/security.md).",
    )
    # Build farm: docs/farm.md.
    queue_url: str = Field(
        "",
        description="redis://host:6379/0: compile jobs go to an RQ queue on that Redis, run by `devplan "
        "worker` processes anywhere. Empty: compiles run in this server's own processes.",
    )
    queue_name: str = Field("compile", description="The RQ queue compile jobs go to.")
    artifact_url: str = Field(
        "",
        description="s3://bucket/prefix: libraries in an S3-compatible store (boto3's own configuration: "
        "credentials, region, AWS_ENDPOINT_URL_S3). Empty: the local directory artifact_dir.",
    )
    artifact_dir_shared: bool = Field(
        False, description="artifact_dir is a mount every worker shares (allows queue mode without S3)."
    )
    compile_retries: int = Field(
        2, ge=0, description="Queue mode: how often a job whose worker died is run again before it fails."
    )
    job_result_ttl_s: int = Field(
        86_400, ge=1, description="Queue mode: how long a job's status and report stay in Redis."
    )
    worker_heartbeat_s: int = Field(
        60,
        ge=1,
        description="Queue mode: a running job whose worker sent no heartbeat for this long counts as "
        "abandoned (RQ's worker TTL); it is then retried or failed.",
    )
    worker_maintenance_s: int = Field(
        60,
        ge=1,
        description="Queue mode: how often a worker looks for abandoned jobs (RQ's maintenance interval).",
    )
    presign_ttl_s: int = Field(
        900, ge=1, description="S3 backend: lifetime of the presigned URL of GET /artifacts/{id}?redirect=true."
    )

    @model_validator(mode="after")
    def _farm_needs_shared_artifacts(self) -> Settings:
        """Queue mode: every worker must reach the artifacts (S3, or a directory they all mount)."""
        if self.queue_url and not self.artifact_url and not self.artifact_dir_shared:
            raise ValueError(
                "DEVPLAN_QUEUE_URL is set, but the artifact store is a local directory that workers on "
                "other machines cannot reach: set DEVPLAN_ARTIFACT_URL=s3://bucket/prefix, or "
                "DEVPLAN_ARTIFACT_DIR_SHARED=1 if DEVPLAN_ARTIFACT_DIR is mounted by every worker"
            )
        if self.artifact_url and not self.artifact_url.startswith("s3://"):
            raise ValueError(f"DEVPLAN_ARTIFACT_URL must be s3://bucket[/prefix], not {self.artifact_url!r}")
        return self

    @property
    def admission_requests(self) -> int:
        """Requests with a body admitted at once: every slot busy plus the queue."""
        return self.pool_size + self.compile_workers + self.max_queued_requests

    @property
    def admission_bytes(self) -> int:
        """The in-flight byte bound, never below one largest request."""
        return max(self.max_inflight_bytes, self.max_body_bytes)

    @property
    def open_connections(self) -> int:
        """Connections open at once (service.connections), kept above our admission bound."""
        if self.max_connections is not None:
            return max(self.max_connections, self.admission_requests + 16)
        return 4 * self.admission_requests + 64


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide settings, read once from the environment."""
    return Settings()
