"""Where compiled libraries live: a local directory (the default) or an S3-compatible bucket.

Both backends answer the same questions (`ArtifactBackend`): the stored response
of a cache key, a scratch path for a library being built, an atomic put, a
streamed download and, for S3, a presigned URL. `open_store(settings)` picks
the backend from `DEVPLAN_ARTIFACT_URL` (s3://bucket/prefix) or
`DEVPLAN_ARTIFACT_DIR`. boto3 is imported only by the S3 backend.
"""

from __future__ import annotations

from service.artifact_store.base import ArtifactBackend, ArtifactStoreUnavailable, Download
from service.artifact_store.local import LocalArtifacts
from service.config import Settings

__all__ = ["ArtifactBackend", "ArtifactStoreUnavailable", "Download", "LocalArtifacts", "open_store"]


def open_store(settings: Settings) -> ArtifactBackend:
    """The backend the settings name (S3 when `artifact_url` is set, else the directory)."""
    if settings.artifact_url:
        from service.artifact_store.s3 import S3Artifacts

        return S3Artifacts.from_url(settings.artifact_url, presign_ttl_s=settings.presign_ttl_s)
    return LocalArtifacts.from_settings(settings)
