"""The S3-compatible backend (AWS S3, MinIO, Ceph RGW) through boto3.

Layout under `s3://bucket/prefix/`: `<sha256>.so` (a library, keyed by the
SHA-256 of its bytes) and `requests/<cache key>.json` (the response that named
it). Every upload is one `PutObject`, which S3 makes visible atomically: a
killed upload leaves no object, so there are no temporary objects to collect.
Eviction is the bucket's lifecycle rule (docs/farm.md): a response whose
library has expired is a miss, and the job runs again.

Credentials, region and endpoint come from boto3's own configuration
(environment, ~/.aws, instance roles); `AWS_ENDPOINT_URL_S3` points it at
MinIO, Ceph or moto. With a custom endpoint, path-style addressing is used
(most self-hosted stores do not serve bucket subdomains).
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from service.artifact_store.base import ArtifactStoreUnavailable, Download

log = logging.getLogger("devplan.artifacts")

CHUNK_BYTES = 1 << 20
INDEX_DIR = "requests"
_MISSING = {"404", "NoSuchKey", "NotFound"}


def _client() -> Any:
    """A boto3 S3 client with short connect timeouts (an unreachable store answers 503 quickly)."""
    import boto3
    from botocore.config import Config

    custom_endpoint = bool(os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL"))
    config = Config(
        connect_timeout=3,
        read_timeout=60,
        retries={"max_attempts": 2, "mode": "standard"},
        s3={"addressing_style": "path" if custom_endpoint else "auto"},
    )
    return boto3.client("s3", config=config)


def _code(err: Exception) -> str:
    response = getattr(err, "response", None) or {}
    return str(response.get("Error", {}).get("Code", ""))


@dataclass(frozen=True, slots=True)
class S3Artifacts:
    """`ArtifactBackend` over `s3://bucket/prefix` (see the module docstring)."""

    bucket: str
    prefix: str
    client: Any
    presign_ttl_s: int = 900
    scratch_dir: Path = Path(tempfile.gettempdir()) / "devplan-scratch"

    @classmethod
    def from_url(cls, url: str, *, presign_ttl_s: int = 900, client: Any = None) -> S3Artifacts:
        parsed = urlparse(url)
        if parsed.scheme != "s3" or not parsed.netloc:
            raise ValueError(f"artifact URL must be s3://bucket[/prefix], not {url!r}")
        prefix = parsed.path.strip("/")
        return cls(parsed.netloc, f"{prefix}/" if prefix else "", client or _client(), presign_ttl_s)

    @property
    def name(self) -> str:
        return "s3"

    def library_key(self, artifact_id: str) -> str:
        return f"{self.prefix}{artifact_id}.so"

    def entry_key(self, key: str) -> str:
        return f"{self.prefix}{INDEX_DIR}/{key}.json"

    def _call(self, what: str, fn: Any, **kwargs: Any) -> Any:
        """One S3 call; None for a missing key, ArtifactStoreUnavailable for everything that
        says the store cannot serve us (connection, credentials, missing bucket, 5xx)."""
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return fn(**kwargs)
        except ClientError as err:
            if _code(err) in _MISSING:
                return None
            raise ArtifactStoreUnavailable(f"s3://{self.bucket}: {what} failed: {_code(err) or err}") from None
        except BotoCoreError as err:
            raise ArtifactStoreUnavailable(f"s3://{self.bucket}: {what} failed: {err}") from None

    def lookup(self, key: str) -> dict[str, Any] | None:
        got = self._call("get", self.client.get_object, Bucket=self.bucket, Key=self.entry_key(key))
        if got is None:
            return None
        try:
            entry = json.loads(got["Body"].read())
            artifact_id = str(entry["artifact_id"])
        except (ValueError, KeyError, TypeError):
            return None
        head = self._call("head", self.client.head_object, Bucket=self.bucket, Key=self.library_key(artifact_id))
        if head is None:  # expired by the lifecycle rule: a miss
            return None
        return entry if isinstance(entry, dict) else None

    def scratch(self, job_id: str) -> Path:
        self.scratch_dir.mkdir(parents=True, exist_ok=True)
        return self.scratch_dir / f"{job_id}.so"

    def put(self, key: str, tmp: Path, artifact_id: str, response: dict[str, Any]) -> None:
        try:
            with tmp.open("rb") as body:
                self._call(
                    "put",
                    self.client.put_object,
                    Bucket=self.bucket,
                    Key=self.library_key(artifact_id),
                    Body=body,
                    ContentType="application/octet-stream",
                    Metadata={"sha256": artifact_id},
                )
            self._call(
                "put",
                self.client.put_object,
                Bucket=self.bucket,
                Key=self.entry_key(key),
                Body=json.dumps(response).encode(),
                ContentType="application/json",
            )
        finally:
            tmp.unlink(missing_ok=True)

    def open(self, artifact_id: str) -> Download | None:
        got = self._call("get", self.client.get_object, Bucket=self.bucket, Key=self.library_key(artifact_id))
        if got is None:
            return None
        body = got["Body"]

        def chunks() -> Iterator[bytes]:
            try:
                yield from body.iter_chunks(CHUNK_BYTES)
            finally:
                body.close()

        return Download(int(got["ContentLength"]), chunks())

    def presign(self, artifact_id: str) -> str | None:
        if self._call("head", self.client.head_object, Bucket=self.bucket, Key=self.library_key(artifact_id)) is None:
            return None
        url: str = self.client.generate_presigned_url(
            "get_object",
            Params={"Bucket": self.bucket, "Key": self.library_key(artifact_id)},
            ExpiresIn=self.presign_ttl_s,
        )
        return url

    def ping(self) -> None:
        got = self._call("head bucket", self.client.head_bucket, Bucket=self.bucket)
        if got is None:
            raise ArtifactStoreUnavailable(f"s3://{self.bucket}: the bucket does not exist")
