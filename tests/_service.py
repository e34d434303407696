"""The service as tests start it: the `devplan` CLI in a subprocess, and the app in
process with a one-slot thread pool and its own artifact directory."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

__all__ = ["ROOT", "TestClient", "run_devplan", "thread_client"]

ROOT = Path(__file__).resolve().parents[1]


def run_devplan(
    *argv: str, stdin: str | None = None, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """`python -m service.cli ARGV...` from the repository root, its output captured as
    text; the timeout only stops a run that hangs (tests assert on the exit)."""
    return subprocess.run(
        [sys.executable, "-m", "service.cli", *argv],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=timeout,
        check=False,
    )


@contextmanager
def thread_client(**settings: Any) -> Iterator[TestClient]:
    """A TestClient of the app with a one-slot thread pool, artifacts in a fresh
    temporary directory (removed afterwards) unless `artifact_dir` is given,
    `settings` on top; server errors are answers (500), not raised."""
    from service.config import Settings
    from service.main import create_app

    with tempfile.TemporaryDirectory() as artifacts:
        settings.setdefault("artifact_dir", artifacts)
        config = Settings(pool_kind="thread", pool_size=1, **settings)
        with TestClient(create_app(config), raise_server_exceptions=False) as client:
            yield client
