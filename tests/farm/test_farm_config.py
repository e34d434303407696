"""Farm settings and the status vocabulary, without a farm running."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import SecretStr, ValidationError

from service.config import Settings
from service.jobs.queue import public_status


def test_serve_and_worker_refuse_to_start_without_a_shared_store(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from service.cli import main
    from service.config import get_settings

    monkeypatch.setenv("DEVPLAN_QUEUE_URL", "redis://127.0.0.1:1/0")
    monkeypatch.delenv("DEVPLAN_ARTIFACT_URL", raising=False)
    monkeypatch.delenv("DEVPLAN_ARTIFACT_DIR_SHARED", raising=False)
    try:
        for argv in (["serve"], ["worker"]):
            assert main(argv) == 1
            err = capsys.readouterr().err
            assert "DEVPLAN_ARTIFACT_URL=s3://bucket/prefix" in err and "DEVPLAN_ARTIFACT_DIR_SHARED=1" in err
    finally:
        get_settings.cache_clear()


def test_queue_mode_refuses_a_store_workers_cannot_reach() -> None:
    with pytest.raises(ValidationError, match="DEVPLAN_ARTIFACT_URL=s3://bucket/prefix"):
        Settings(queue_url="redis://127.0.0.1:6379/0")
    assert Settings(queue_url="redis://127.0.0.1:6379/0", artifact_dir_shared=True).artifact_dir_shared
    assert Settings(queue_url="redis://127.0.0.1:6379/0", artifact_url="s3://bucket/p").artifact_url
    with pytest.raises(ValidationError, match="must be s3://"):
        Settings(artifact_url="https://bucket.example/p")


@pytest.mark.parametrize(
    ("rq_status", "result", "status"),
    [
        ("queued", None, "queued"),
        ("deferred", None, "queued"),
        ("scheduled", None, "queued"),
        ("started", None, "started"),
        ("finished", {"ok": {}}, "finished"),
        ("finished", {"error": {"kind": "compile-failed"}}, "failed"),
        ("failed", None, "failed"),
        ("stopped", None, "canceled"),
        ("canceled", None, "canceled"),
    ],
)
def test_rq_statuses_in_our_vocabulary(rq_status: str, result: dict[str, object] | None, status: str) -> None:
    assert public_status(rq_status, result) == status


def test_jobs_take_the_compile_keys_and_a_dead_redis_is_503(tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from service.main import create_app

    settings = Settings(
        pool_kind="thread",
        pool_size=1,
        queue_url="redis://127.0.0.1:1/0",  # nothing listens there
        artifact_dir=tmp_path,
        artifact_dir_shared=True,
        compile_api_keys=SecretStr("compile-key"),
    )
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        assert client.get("/jobs").status_code == 401
        assert client.get("/jobs", headers={"Authorization": "Bearer other"}).status_code == 401
        response = client.get("/jobs", headers={"Authorization": "Bearer compile-key"})
        assert response.status_code == 503
        assert response.json()["type"].endswith("/queue-unavailable")
        assert response.headers["retry-after"]
        metrics = client.get("/metrics").text
        assert metrics.count("# TYPE devplan_queue_up gauge") == 1 and "devplan_queue_up 0.0" in metrics
        ready = client.get("/readyz")
        assert ready.status_code == 503 and ready.json()["dependency"] == "redis"
