"""The interface both artifact backends implement, and their shared types."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol


class ArtifactStoreUnavailable(Exception):
    """The store cannot be reached (network, credentials, the bucket's server): a 503, never a 500."""


@dataclass(frozen=True, slots=True)
class Download:
    """A stored library opened for reading: its size and its bytes in chunks (read once)."""

    size: int
    chunks: Iterator[bytes]


class ArtifactBackend(Protocol):
    """Libraries by SHA-256 and compile responses by cache key."""

    @property
    def name(self) -> str:
        """"local" or "s3" (logs, readiness)."""
        ...

    def lookup(self, key: str) -> dict[str, Any] | None:
        """The response stored under `key`, if its library is still stored."""
        ...

    def scratch(self, job_id: str) -> Path:
        """Where a compile of `job_id` writes its library before `put` (removed by whoever
        ends the job, on every path)."""
        ...

    def put(self, key: str, tmp: Path, artifact_id: str, response: dict[str, Any]) -> None:
        """Store the finished library `tmp` as `artifact_id` and `response` under `key`."""
        ...

    def open(self, artifact_id: str) -> Download | None:
        """The library for a download; None when it is not stored."""
        ...

    def presign(self, artifact_id: str) -> str | None:
        """A time-limited URL of the library (None: this backend has none)."""
        ...

    def ping(self) -> None:
        """Raise ArtifactStoreUnavailable unless the store answers."""
        ...
