"""The public decoder of the offload corpus (`../shared/corpus/relax/offload`)
and accelerate's maps of it, read once per test process."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

import pytest

OFFLOAD = Path(__file__).resolve().parents[2].parent / "shared" / "corpus" / "relax" / "offload"
needs_corpus = pytest.mark.skipif(not OFFLOAD.is_dir(), reason="corpus not found (../shared/corpus/relax/offload)")


@lru_cache(maxsize=1)
def decoder_text() -> str:
    """The public decoder as TVM JSON."""
    return (OFFLOAD / "llama_h1024_l8.json").read_text()


@lru_cache(maxsize=1)
def accelerate_maps() -> dict[float, dict[str, Any]]:
    """accelerate's maps of it by GPU budget fraction (`gpu_budget_bytes`, `device_map`)."""
    data = json.loads((OFFLOAD / "llama_h1024_l8.accelerate.json").read_text())
    return {float(m["fraction"]): m for m in data["maps"]}
