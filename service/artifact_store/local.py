"""The local-directory backend: today's `service.artifacts.ArtifactStore` (quota, LRU, flock)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from service.artifact_store.base import ArtifactStoreUnavailable, Download
from service.artifacts import TMP_PREFIX, ArtifactStore
from service.config import Settings

CHUNK_BYTES = 1 << 20


@dataclass(frozen=True, slots=True)
class LocalArtifacts:
    """`ArtifactBackend` over an `ArtifactStore` directory (shared by workers only through a mount)."""

    store: ArtifactStore

    @classmethod
    def from_settings(cls, settings: Settings) -> LocalArtifacts:
        """The store under `artifact_dir`; a temporary older than twice the compile limit is stale."""
        return cls(
            ArtifactStore(
                Path(settings.artifact_dir).resolve(),
                max_bytes=settings.artifact_max_bytes,
                max_age_s=settings.artifact_max_age_s,
                stale_tmp_s=2 * settings.compile_timeout_s + 60,
            )
        )

    @property
    def name(self) -> str:
        return "local"

    def lookup(self, key: str) -> dict[str, Any] | None:
        return self.store.lookup(key)

    def scratch(self, job_id: str) -> Path:
        # In the store itself (eviction skips `tmp-*`), so `put` is a rename on the same file system.
        self.store.root.mkdir(parents=True, exist_ok=True)
        return self.store.root / f"{TMP_PREFIX}{job_id}.so"

    def put(self, key: str, tmp: Path, artifact_id: str, response: dict[str, Any]) -> None:
        self.store.put(key, tmp, artifact_id, response)

    def open(self, artifact_id: str) -> Download | None:
        opened = self.store.open(artifact_id)
        if opened is None:
            return None
        # Read through the descriptor opened under the store's lock: an eviction meanwhile
        # unlinks the name, not these bytes (closed by the file object's finalizer too).
        file = os.fdopen(opened.fd, "rb")

        def chunks() -> Iterator[bytes]:
            with file:
                while chunk := file.read(CHUNK_BYTES):
                    yield chunk

        return Download(opened.size, chunks())

    def presign(self, artifact_id: str) -> str | None:
        return None

    def ping(self) -> None:
        try:
            self.store.root.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise ArtifactStoreUnavailable(f"artifact directory {self.store.root}: {err}") from None
