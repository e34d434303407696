"""Farm settings and the status vocabulary, without a farm running."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from service.config import Settings
from service.jobs.queue import public_status


def test_queue_mode_refuses_a_store_workers_cannot_reach(tmp_path: object) -> None:
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
