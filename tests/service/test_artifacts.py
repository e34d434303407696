"""The artifact store (quota, LRU and age eviction, temporaries, open files)
and the /compile cache key. No TVM needed: libraries here are plain bytes."""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from service.artifacts import (
    KEYED_FIELDS,
    UNKEYED_FIELDS,
    ArtifactStore,
    cache_key,
    code_digest,
    installed_code_digest,
)
from service.models import CompileRequest

ROOT = Path(__file__).resolve().parents[2]
KIB = 1024


def put_bytes(store: ArtifactStore, key: str, data: bytes) -> str:
    """Store `data` as a compile would: a temporary file moved into place."""
    tmp = store.new_temp()
    tmp.write_bytes(data)
    sha = hashlib.sha256(data).hexdigest()
    store.put(key, tmp, sha, {"artifact_id": sha, "size_bytes": len(data)})
    return sha


def set_mtime(path: Path, t: float) -> None:
    os.utime(path, (t, t))


# --------------------------------------------------------------------------
# quota and LRU


def test_least_recently_used_goes_first(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path, max_bytes=3 * KIB)
    ids = [put_bytes(store, f"k{i}", bytes([i]) * KIB) for i in range(3)]
    for i, sha in enumerate(ids):  # a clear order of use: k0 oldest
        set_mtime(store.library(sha), 1_000_000 + i)
    assert store.lookup("k0") is not None  # a hit makes k0 the most recent
    new = put_bytes(store, "k3", b"\xff" * KIB)
    remaining = {p.stem for p in tmp_path.glob("*.so")}
    assert remaining == {ids[0], ids[2], new}  # k1 was least recently used
    assert store.lookup("k1") is None  # and its index entry went with it
    assert not (tmp_path / "requests" / "k1.json").exists()
    assert store.usage() <= 3 * KIB


def test_the_new_artifact_is_kept_even_alone_over_the_quota(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path, max_bytes=KIB)
    old = put_bytes(store, "old", b"a" * 512)
    big = put_bytes(store, "big", b"b" * 4 * KIB)
    assert store.library(big).exists()
    assert not store.library(old).exists()


def test_age_limit(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path, max_age_s=3600)
    stale = put_bytes(store, "stale", b"s" * 100)
    fresh = put_bytes(store, "fresh", b"f" * 100)
    set_mtime(store.library(stale), 1_000_000)
    store.evict()
    assert not store.library(stale).exists()
    assert store.library(fresh).exists()


def _writer(root: str, writer: int, count: int, size: int, quota: int) -> None:
    store = ArtifactStore(Path(root), max_bytes=quota)
    for i in range(count):
        data = bytes([writer]) * (size - 4) + i.to_bytes(4, "big")
        put_bytes(store, f"w{writer}-{i}", data)


def test_quota_holds_under_concurrent_writers(tmp_path: Path) -> None:
    """Four processes (as replicas sharing a volume) store 15 libraries each under a
    quota of 10: afterwards the quota holds, nothing half-written or orphaned is left,
    and every surviving index entry serves its library's exact bytes."""
    size, quota = 8 * KIB, 80 * KIB
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_writer, args=(str(tmp_path), w, 15, size, quota)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    store = ArtifactStore(tmp_path, max_bytes=quota)
    libraries = list(tmp_path.glob("*.so"))
    assert 0 < len(libraries) <= quota // size
    assert store.usage() <= quota
    assert not list(tmp_path.glob("tmp-*")) and not list((tmp_path / "requests").glob("*.tmp"))
    for lib in libraries:
        assert hashlib.sha256(lib.read_bytes()).hexdigest() == lib.stem
    entries = list((tmp_path / "requests").glob("*.json"))
    assert entries
    for entry in entries:
        found = store.lookup(entry.stem)
        assert found is not None and store.library(found["artifact_id"]).exists()


# --------------------------------------------------------------------------
# files being written or served


def test_eviction_skips_files_being_written_and_removes_stale_ones(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path, max_bytes=1, stale_tmp_s=600)
    writing = store.new_temp()
    writing.write_bytes(b"x" * KIB)
    left = store.new_temp()
    left.write_bytes(b"y" * KIB)
    set_mtime(left, 1_000_000)  # a replica died while writing this long ago
    store.evict()
    assert writing.exists()
    assert not left.exists()


def test_a_library_being_served_stays_readable_after_eviction(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path, max_age_s=1)
    data = os.urandom(64 * KIB)
    sha = put_bytes(store, "k", data)
    opened = store.open(sha)
    assert opened is not None and opened.size == len(data)
    set_mtime(store.library(sha), 1_000_000)
    assert store.library(sha).name in store.evict().removed
    with os.fdopen(opened.fd, "rb") as f:
        assert f.read() == data
    assert store.open(sha) is None


def test_a_failed_put_leaves_no_temporary(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    tmp = store.new_temp()
    tmp.write_bytes(b"z")
    with pytest.raises(TypeError):
        store.put("k", tmp, "0" * 64, {"artifact_id": object()})  # not JSON
    assert not tmp.exists()
    assert not list(tmp_path.rglob("*.tmp")) and not list(tmp_path.glob("tmp-*"))


# --------------------------------------------------------------------------
# the cache key

BASE: dict[str, Any] = {
    "module": '#[version = "0.0.5"]\ndef @main(%x: Tensor[(2), float32]) {\n  negative(%x)\n}\n',
    "virtual_devices": ["cpu:0", "cpu:1"],
    "default_device": "cpu:1",
    "host_device": "cpu:0",
    "targets": {"cpu": "llvm"},
}


def key(**changes: Any) -> str:
    return cache_key(CompileRequest.model_validate({**BASE, **changes}), tvm="0.27.0", code="c0")


def test_every_request_field_is_classified() -> None:
    """A new CompileRequest field must be named in KEYED_FIELDS or UNKEYED_FIELDS."""
    fields = set(CompileRequest.model_fields)
    keyed, unkeyed = set(KEYED_FIELDS), set(UNKEYED_FIELDS)
    assert not keyed & unkeyed
    assert fields == keyed | unkeyed, f"unclassified: {sorted(fields - keyed - unkeyed)}"


@pytest.mark.parametrize(
    "changes",
    [
        {"timeout_ms": 5},
        {"timeout_ms": 600_000},
        {"explain": True},
        {"output_format": "json"},
        {"z3_check": True},
        {"explain": True, "timeout_ms": 123},
        {"mode": "tvm"},  # the default, spelled out
        {"constraints": []},
    ],
)
def test_cache_hits_when_only_unkeyed_fields_change(changes: dict[str, Any]) -> None:
    assert key(**changes) == key()


KEYED_CHANGES: list[tuple[str, Any]] = [
    ("module", BASE["module"].replace("negative", "abs")),
    ("format", "text"),
    ("language", "relax"),
    ("virtual_devices", ["cpu:1", "cpu:0"]),
    ("default_device", "cpu:0"),
    ("host_device", "cpu:1"),
    ("constraints", [{"select": {"op": "negative"}, "device": "cpu:0"}]),
    ("mode", "optimize"),
    ("on_timeout", "best"),
    ("overlap", False),
    ("op_support", {"cpu:1": {"unsupported": ["negative"]}}),
    ("device_profiles", {"cpu:1": {"peak_gflops": 10.0}}),
    ("device_profiles", {"cpu:1": {"memory_bytes": 1 << 20}}),
    ("links", {"cpu:0->cpu:1": {"gbps": 3.0}}),
    ("cost_table", {"version": 1, "entries": [{"key": "negative", "device": "cpu", "ns": 5.0}]}),
    ("assume_dim", 7),
    ("overlap", False),
    ("accelerate_device_map", {"": "cpu"}),
    ("accelerate_device_map_as", "storage"),
    ("targets", {"cpu": "llvm -mcpu=skylake"}),
    ("cuda_arch", "sm_90"),
    ("run_check", True),
]


def test_keyed_changes_cover_every_keyed_field() -> None:
    assert {name for name, _ in KEYED_CHANGES} == set(KEYED_FIELDS)


@pytest.mark.parametrize(
    "field, value", KEYED_CHANGES, ids=[f"{n}-{i}" for i, (n, _) in enumerate(KEYED_CHANGES)]
)
def test_cache_misses_when_a_keyed_field_changes(field: str, value: Any) -> None:
    assert key(**{field: value}) != key()


def test_cache_misses_when_tvm_or_the_installed_code_changes(tmp_path: Path) -> None:
    request = CompileRequest.model_validate(BASE)
    assert cache_key(request, tvm="0.27.0", code="c0") != cache_key(request, tvm="0.28.0", code="c0")
    # A copy of the devplan sources, one line edited: a different digest, a different key.
    roots = [tmp_path / name for name in ("relay", "solver", "tvm_bridge")]
    for root in roots:
        shutil.copytree(ROOT / root.name, root, ignore=shutil.ignore_patterns("__pycache__"))
    before = code_digest(roots)
    assert before == code_digest(roots)  # stable
    installed_code_digest.cache_clear()  # computed once per process: this tree may have changed since
    assert before == installed_code_digest()  # what the service uses is these sources
    planner = tmp_path / "solver" / "api.py"
    planner.write_text(planner.read_text() + "\n# changed\n")
    after = code_digest(roots)
    assert after != before
    assert cache_key(request, tvm="0.27.0", code=before) != cache_key(request, tvm="0.27.0", code=after)


def test_the_default_key_uses_the_installed_tvm_and_code() -> None:
    from service.artifacts import tvm_version

    request = CompileRequest.model_validate(BASE)
    assert cache_key(request) == cache_key(request, tvm=tvm_version(), code=installed_code_digest())
