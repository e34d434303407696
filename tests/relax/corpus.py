"""The Relax corpus (../shared/corpus/relax): its models, read once per
test session in either encoding."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest

from relay.span import SourceText
from tvm_bridge.relax_plan import read_relax

CORPUS = Path(__file__).resolve().parents[2] / "../shared/corpus/relax"
PUBLIC = (
    "tv_resnet18",
    "tv_mobilenet_v3_small",
    "tv_convnext_tiny",
    "tv_swin_t",
    "tv_vit_b_16",
    "hf_bert",
    "hf_gpt2",
)
MODELS = (*PUBLIC, "offload/llama_h1024_l8")


def path_of(name: str, fmt: str) -> Path:
    path = CORPUS / f"{name}.{'json' if fmt == 'json' else 'py'}"
    if not path.exists():
        pytest.skip(f"Relax corpus file {path.name} not found (expected ../shared/corpus/relax next to the repo)")
    return path


@functools.cache
def _read(name: str, fmt: str) -> tuple[Any, SourceText | None]:
    return read_relax(path_of(name, fmt).read_text(), fmt)


def load(name: str, fmt: str = "json") -> tuple[Any, SourceText | None]:
    """The module `name` as read (through the allowlisted reader) from its JSON
    or its TVMScript."""
    return _read(name, fmt)
