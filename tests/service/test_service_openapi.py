"""The checked-in openapi.yaml is exactly what the app generates."""

from __future__ import annotations

from pathlib import Path

import yaml

from tests._scripts import load_script

ROOT = Path(__file__).resolve().parents[2]


def _gen_openapi():  # type: ignore[no-untyped-def]
    return load_script("scripts/gen_openapi.py", "gen_openapi")


def test_openapi_yaml_is_up_to_date() -> None:
    generated = _gen_openapi().render()
    checked_in = (ROOT / "openapi.yaml").read_text(encoding="utf-8")
    assert checked_in == generated, "openapi.yaml is stale: run python scripts/gen_openapi.py"


def test_openapi_yaml_is_valid_openapi_3() -> None:
    doc = yaml.safe_load((ROOT / "openapi.yaml").read_text(encoding="utf-8"))
    assert doc["openapi"].startswith("3.")
    assert doc["components"]["schemas"]["Problem"]["properties"]["type"]
    ids = [op["operationId"] for path in doc["paths"].values() for op in path.values()]
    assert len(ids) == len(set(ids))
