"""The artifact store of POST /compile: compiled libraries on disk, bounded by
a byte quota and an age, shared safely by replicas that mount the same volume.

Layout of `Settings.artifact_dir`:

- `<sha256>.so`: a library, named by the SHA-256 of its bytes;
- `requests/<key>.json`: the response of the request whose cache key is `key`
  (it names the library it produced);
- `tmp-*.so`, `requests/*.tmp`: files being written. Eviction skips them
  (unless they are older than `stale_tmp_s`, left by a replica that died).

Every file appears by an atomic rename of a finished temporary file. Eviction
takes an exclusive `flock` on `.lock`; storing, looking up and opening an
artifact take it shared, and a download reads through a file descriptor
opened under that lock, so eviction never deletes a file being written, and a
file being served stays readable until it is closed (POSIX unlink semantics).
Least recently used goes first: a cache hit or a download bumps the library's
mtime.

Cache key (`cache_key`): the SHA-256 of a canonical JSON document of
- the request fields in `KEYED_FIELDS`: the module, its format and language, the planning
  options (virtual devices, default and host device, constraints, mode, on_timeout,
  operator support, device profiles with memory budgets, links, cost table,
  assume_dim, copy overlap, an accelerate device map and how to take it), the targets, the CUDA arch and whether a run check was asked
  for (with defaults filled in, so leaving a field out equals sending its
  default);
- the TVM version, and a digest of the installed devplan code (the sources of
  `relay`, `solver` and `tvm_bridge`), so an upgrade never reuses an artifact.
The fields in `UNKEYED_FIELDS` (`timeout_ms`, `explain`, `output_format`,
`z3_check`, `why`, `include`, `check_types`) cannot change the library and are left out. Every request field
is in exactly one of the two lists (a test checks it), so a new field must be
classified. The key is computed before planning: a hit costs no plan.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import shutil
import stat
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from service.models import CompileRequest

log = logging.getLogger("devplan.artifacts")

CACHE_VERSION = "devplan-compile-2"

KEYED_FIELDS: tuple[str, ...] = (
    "module",
    "format",
    "language",
    "virtual_devices",
    "default_device",
    "host_device",
    "constraints",
    "mode",
    "on_timeout",
    "overlap",
    "op_support",
    "device_profiles",
    "links",
    "cost_table",
    "assume_dim",
    "overlap",
    "accelerate_device_map",
    "accelerate_device_map_as",
    "targets",
    "cuda_arch",
    "run_check",
)
"""Request fields that determine the artifact (in the cache key)."""

UNKEYED_FIELDS: tuple[str, ...] = (
    "timeout_ms",
    "explain",
    "output_format",
    "z3_check",
    "why",
    "include",
    "check_types",
)
"""Request fields that cannot change the artifact: a time limit (a plan that
finishes is the same plan), the explanation and output format of /plan's text,
Z3's confirmation of a TVM-mode plan (it cannot change the plan),
why-queries (they only read the plan), `include` (report fields of the plan) and
`check_types` (a module that fails the check gets no library; one that passes builds the same one)."""

CODE_PACKAGES = ("relay", "solver", "tvm_bridge")
"""The packages whose sources determine a compiled artifact."""

TMP_PREFIX = "tmp-"
INDEX_DIR = "requests"
LOCK_NAME = ".lock"


def tvm_version() -> str:
    """The installed apache-tvm version ("none" without TVM)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("apache-tvm")
    except PackageNotFoundError:
        return "none"


def code_digest(roots: Sequence[Path]) -> str:
    """SHA-256 over the Python sources under `roots` (relative path and bytes, sorted)."""
    h = hashlib.sha256()
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            h.update(f"{root.name}/{path.relative_to(root).as_posix()}\0".encode())
            h.update(path.read_bytes())
            h.update(b"\0")
    return h.hexdigest()


@lru_cache(maxsize=1)
def installed_code_digest() -> str:
    """`code_digest` of the installed relay, solver and tvm_bridge packages (once per process)."""
    import importlib.util

    roots = []
    for name in CODE_PACKAGES:
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            continue
        roots.append(Path(next(iter(spec.submodule_search_locations))))
    return code_digest(roots)


def cache_key(request: CompileRequest, *, tvm: str | None = None, code: str | None = None) -> str:
    """The canonical digest of what determines a request's artifact (see the module docstring)."""
    fields = request.model_dump(mode="json", include=set(KEYED_FIELDS))
    document = {
        "cache": CACHE_VERSION,
        "tvm": tvm_version() if tvm is None else tvm,
        "code": installed_code_digest() if code is None else code,
        "request": fields,
    }
    text = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class Eviction:
    """What one eviction pass did."""

    removed: tuple[str, ...]  # file names removed (libraries, index entries, stale temporaries)
    kept_bytes: int  # library bytes left


@dataclass(frozen=True, slots=True)
class OpenArtifact:
    """A library opened for reading: the descriptor stays valid after an eviction."""

    fd: int
    size: int


def is_regular(path: Path) -> bool:
    """True when `path` itself (not what a link points at) is a regular file."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def read_regular(path: Path) -> str:
    """The text of `path`, never through a link (OSError for a link or a directory)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as file:
        if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
            raise OSError(f"{path} is not a regular file")
        return file.read().decode()


def clear_non_file(path: Path) -> None:
    """Remove whatever is at `path` unless it is a regular file: a directory (with what it
    holds) or a link (the link, never its target). An artifact's final name is then free
    for the atomic rename that puts the artifact there."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISREG(mode):
        return
    log.warning("artifact store: removing a %s at %s", "directory" if stat.S_ISDIR(mode) else "non-file", path.name)
    if stat.S_ISDIR(mode):
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


class ArtifactStore:
    """Libraries by SHA-256 and responses by cache key, under a quota (see the module docstring)."""

    def __init__(
        self, root: Path, *, max_bytes: int = 0, max_age_s: float = 0.0, stale_tmp_s: float = 3600.0
    ) -> None:
        """`max_bytes` / `max_age_s`: 0 means no limit. `stale_tmp_s`: a temporary
        file older than this was left by a process that died (a compile is killed
        long before), and eviction removes it."""
        self.root = root
        self.max_bytes = max_bytes
        self.max_age_s = max_age_s
        self.stale_tmp_s = stale_tmp_s

    # -- paths

    def library(self, artifact_id: str) -> Path:
        return self.root / f"{artifact_id}.so"

    def _entry(self, key: str) -> Path:
        return self.root / INDEX_DIR / f"{key}.json"

    def new_temp(self) -> Path:
        """A fresh temporary library path in the store (eviction skips it); the
        caller must `discard` it on every failure path."""
        self.root.mkdir(parents=True, exist_ok=True)
        return self.root / f"{TMP_PREFIX}{uuid.uuid4().hex}.so"

    @staticmethod
    def discard(tmp: Path) -> None:
        """Remove a temporary file (missing is fine)."""
        with contextlib.suppress(OSError):
            tmp.unlink()

    # -- locking

    @contextlib.contextmanager
    def _locked(self, exclusive: bool) -> Iterator[None]:
        self.root.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.root / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            yield
        finally:
            os.close(fd)  # releases the lock

    # -- the cache

    def lookup(self, key: str) -> dict[str, Any] | None:
        """The stored response of `key`, if its library is still there (and marked used)."""
        with self._locked(exclusive=False):
            try:
                entry = json.loads(read_regular(self._entry(key)))
                library = self.library(str(entry["artifact_id"]))
                if not is_regular(library):
                    return None  # a link or a directory is no artifact
                os.utime(library, follow_symlinks=False)  # LRU: a hit counts as a use
                os.utime(self._entry(key), follow_symlinks=False)
            except (OSError, ValueError, KeyError, TypeError):
                return None
        return entry if isinstance(entry, dict) else None

    def put(self, key: str, tmp: Path, artifact_id: str, response: dict[str, Any]) -> None:
        """Move a finished temporary library into place as `<artifact_id>.so` and
        record `response` under `key`; then evict down to the quota (never this one)."""
        index = self.root / INDEX_DIR
        index.mkdir(parents=True, exist_ok=True)
        entry_tmp = index / f"{key}.{uuid.uuid4().hex}.tmp"
        try:
            entry_tmp.write_text(json.dumps(response))
            with self._locked(exclusive=False):
                # Whatever sits at a final name and is not a regular file (a directory, a link,
                # left by anything that could write here) is cleared, not followed or tripped on.
                library = self.library(artifact_id)
                clear_non_file(library)
                os.replace(tmp, library)  # same bytes if it existed: same name
                clear_non_file(self._entry(key))
                os.replace(entry_tmp, self._entry(key))
        finally:
            self.discard(tmp)
            self.discard(entry_tmp)
        self.evict(keep=(artifact_id,))

    def open(self, artifact_id: str) -> OpenArtifact | None:
        """Open a library for a download (None when absent); the caller closes `fd`."""
        with self._locked(exclusive=False):
            try:
                fd = os.open(self.library(artifact_id), os.O_RDONLY | os.O_NOFOLLOW)
            except OSError:
                return None
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                os.close(fd)
                return None
            with contextlib.suppress(OSError):
                os.utime(fd)
        return OpenArtifact(fd, os.fstat(fd).st_size)

    # -- eviction

    def usage(self) -> int:
        """Bytes of the stored libraries (temporaries excluded)."""
        return sum(size for _, size, _ in self._libraries())

    def _libraries(self) -> list[tuple[Path, int, float]]:
        out = []
        for path in self.root.glob("*.so"):
            if path.name.startswith(TMP_PREFIX):
                continue
            try:
                st = path.stat()
            except OSError:
                continue
            out.append((path, st.st_size, st.st_mtime))
        return out

    def evict(self, keep: Sequence[str] = ()) -> Eviction:
        """Remove libraries past `max_age_s`, then the least recently used until
        the rest fit in `max_bytes` (never those in `keep`), index entries whose
        library is gone, and stale temporaries. Files being written are skipped."""
        if not self.root.is_dir():
            return Eviction((), 0)
        removed: list[str] = []
        now = time.time()
        with self._locked(exclusive=True):
            libraries = sorted(self._libraries(), key=lambda item: item[2])  # oldest use first
            total = sum(size for _, size, _ in libraries)
            for path, size, mtime in libraries:
                if path.stem in keep:
                    continue
                too_old = self.max_age_s > 0 and now - mtime > self.max_age_s
                over = self.max_bytes > 0 and total > self.max_bytes
                if not (too_old or over):
                    continue
                with contextlib.suppress(OSError):
                    path.unlink()
                    total -= size
                    removed.append(path.name)
            removed.extend(self._sweep_index())
            removed.extend(self._sweep_temporaries(now))
        if removed:
            log.info("artifact store evicted %d files; %d library bytes kept", len(removed), total)
        return Eviction(tuple(removed), total)

    def _sweep_index(self) -> list[str]:
        removed = []
        for entry in (self.root / INDEX_DIR).glob("*.json"):
            try:
                artifact_id = str(json.loads(entry.read_text())["artifact_id"])
            except (OSError, ValueError, KeyError, TypeError):
                artifact_id = ""
            if not artifact_id or not self.library(artifact_id).exists():
                with contextlib.suppress(OSError):
                    entry.unlink()
                    removed.append(f"{INDEX_DIR}/{entry.name}")
        return removed

    def _sweep_temporaries(self, now: float) -> list[str]:
        removed = []
        candidates = [*self.root.glob(f"{TMP_PREFIX}*"), *(self.root / INDEX_DIR).glob("*.tmp")]
        for path in candidates:
            try:
                stale = now - path.stat().st_mtime > self.stale_tmp_s
            except OSError:
                continue
            if stale:
                with contextlib.suppress(OSError):
                    path.unlink()
                    removed.append(path.name)
        return removed
