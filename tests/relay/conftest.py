from __future__ import annotations

from pathlib import Path

import pytest

CORPUS = Path(__file__).resolve().parents[2].parent / "shared" / "corpus"


def corpus_files(pattern: str) -> list[Path]:
    if not CORPUS.is_dir():
        return []
    return sorted(CORPUS.glob(pattern))


@pytest.fixture(scope="session")
def corpus() -> Path:
    if not CORPUS.is_dir():
        pytest.skip(f"corpus folder {CORPUS} is absent")
    return CORPUS
