"""Issue 19: one vocabulary across HTTP, settings and the CLI."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from service.cli import build_parser
from service.config import Settings
from service.units import PATTERN, ByteSize, coerce_bytes, parse_bytes

SIZES = [("8GiB", 8 * 2**30), ("60MB", 60 * 10**6), ("1.5KiB", 1536), ("512 mib", 512 * 2**20), ("1000", 1000)]
NOT_SIZES = ["", "GiB", "8 parsecs", "-1MiB", "8XB", "\u0668GiB", " 8GiB", "8GiB ", "1e9"]


@pytest.mark.parametrize(("text", "expected"), SIZES)
def test_a_size_means_the_same_in_every_place(text: str, expected: int, monkeypatch: pytest.MonkeyPatch) -> None:
    assert parse_bytes(text) == expected
    assert re.match(PATTERN, text)
    monkeypatch.setenv("DEVPLAN_WORKER_MEMORY_BYTES", text)
    monkeypatch.setenv("DEVPLAN_MAX_BODY_BYTES", text if expected >= 1024 else "1KiB")
    settings = Settings()
    assert settings.worker_memory_bytes == expected
    args = build_parser().parse_args(["serve", "--worker-memory-bytes", text, "--artifact-max-bytes", text])
    assert args.worker_memory_bytes == expected and args.artifact_max_bytes == expected


@pytest.mark.parametrize("text", NOT_SIZES)
def test_what_is_not_a_size_is_refused_alike(text: str) -> None:
    """The schema's pattern and the parser agree (the schema is what clients see)."""
    assert not re.match(PATTERN, text)
    with pytest.raises(ValueError):
        parse_bytes(text)


def test_zero_stays_possible_where_a_setting_allows_it() -> None:
    assert coerce_bytes("0") == 0
    assert Settings(artifact_max_bytes="0", worker_memory_bytes="0").artifact_max_bytes == 0
    with pytest.raises(ValueError):
        parse_bytes("0")


def test_byte_size_schema_offers_both_forms() -> None:
    from pydantic import TypeAdapter

    schema = TypeAdapter(ByteSize).json_schema()
    assert {alt["type"] for alt in schema["anyOf"]} == {"integer", "string"}
    assert TypeAdapter(ByteSize).validate_python("8GiB") == 8 * 2**30


# --------------------------------------------------------------------------
# The README's counts and tables match the app

README = Path(__file__).resolve().parents[2] / "README.md"
_NUMBERS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9}


def _schema() -> dict[str, Any]:
    from service.main import create_app

    schema: dict[str, Any] = create_app(Settings(pool_kind="thread", pool_size=1)).openapi()
    return schema


def _examples(schema: dict[str, Any], path: str) -> dict[str, Any]:
    body = schema["paths"][path]["post"]["requestBody"]["content"]["application/json"]
    examples: dict[str, Any] = body.get("examples", {})
    return examples


def test_readme_example_counts_match_the_schema() -> None:
    schema = _schema()
    text = " ".join(README.read_text().split())
    (sentence,) = re.findall(r'worked examples under "Try it out": ([^(]*)', text)
    claims = re.findall(r"(\w+) for `POST (/[\w/]*)`", sentence)
    assert {path for _, path in claims} >= {"/plan", "/plan/picture", "/compile"}
    for word, path in claims:
        assert _NUMBERS[word] == len(_examples(schema, path)), f"README: {word} examples for POST {path}"
    (optimize_word,) = re.findall(r"Swagger has (\w+) optimize-mode examples", text)
    optimize = [name for name in _examples(schema, "/plan") if name.startswith("optimize")]
    assert _NUMBERS[optimize_word] == len(optimize)
    assert "three worked examples" not in text


def test_readme_route_table_names_real_routes() -> None:
    schema = _schema()
    routes = {(m.upper(), p) for p, item in schema["paths"].items() for m in item} | {
        ("GET", "/docs"),  # the Swagger page and the schema itself are not in the schema
        ("GET", "/openapi.json"),
    }
    rows = re.findall(r"^\| (`[A-Z]+ [^|]+`) \|", README.read_text(), re.MULTILINE)
    named = {tuple(m.split(" ", 1)) for row in rows for m in re.findall(r"`([A-Z]+ [^`]+)`", row)}
    assert named, "the README has a route table"
    assert named <= routes, f"README rows without a route: {sorted(named - routes)}"


def test_byte_size_is_positive_and_strict() -> None:
    from pydantic import TypeAdapter, ValidationError

    adapter = TypeAdapter(ByteSize)
    for bad in ("0", 0, "8XB", True, 1.5):
        with pytest.raises(ValidationError):
            adapter.validate_python(bad, strict=True)
