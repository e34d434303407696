"""One vocabulary across HTTP, settings and the CLI."""

from __future__ import annotations

import json
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
# The HTTP API page's counts and tables match the app

HTTP_API = Path(__file__).resolve().parents[2] / "docs" / "http-api.md"
_NUMBERS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9}


def _schema() -> dict[str, Any]:
    from service.main import create_app

    schema: dict[str, Any] = create_app(Settings(pool_kind="thread", pool_size=1)).openapi()
    return schema


def _examples(schema: dict[str, Any], path: str) -> dict[str, Any]:
    body = schema["paths"][path]["post"]["requestBody"]["content"]["application/json"]
    examples: dict[str, Any] = body.get("examples", {})
    return examples


def test_documented_example_counts_match_the_schema() -> None:
    schema = _schema()
    text = " ".join(HTTP_API.read_text().split())
    (sentence,) = re.findall(r'worked examples under "Try it out": ([^(]*)', text)
    claims = re.findall(r"(\w+) for `POST (/[\w/]*)`", sentence)
    assert {path for _, path in claims} >= {"/plan", "/plan/picture", "/compile"}
    for word, path in claims:
        assert _NUMBERS[word] == len(_examples(schema, path)), f"http-api.md: {word} examples for POST {path}"
    (optimize_word,) = re.findall(r"Swagger has (\w+) optimize-mode examples", text)
    optimize = [name for name in _examples(schema, "/plan") if name.startswith("optimize")]
    assert _NUMBERS[optimize_word] == len(optimize)
    assert "three worked examples" not in text


def test_documented_route_table_names_real_routes() -> None:
    schema = _schema()
    routes = {(m.upper(), p) for p, item in schema["paths"].items() for m in item} | {
        ("GET", "/docs"),  # the Swagger page, the explore page and the schema itself are not in the schema
        ("GET", "/explore"),
        ("GET", "/openapi.json"),
    }
    rows = re.findall(r"^\| (`[A-Z]+ [^|]+`) \|", HTTP_API.read_text(), re.MULTILINE)
    named = {tuple(m.split(" ", 1)) for row in rows for m in re.findall(r"`([A-Z]+ [^`]+)`", row)}
    assert named, "docs/http-api.md has a route table"
    assert named <= routes, f"http-api.md rows without a route: {sorted(named - routes)}"


def test_documented_error_table_names_every_problem_kind() -> None:
    """docs/http-api.md's error table lists every problem kind, under its status."""
    from service.errors import ALL_KINDS

    text = HTTP_API.read_text()
    table = text[text.index("| status | kinds |") :]
    table = table[: table.index("\n\n")]
    rows = {}
    for line in table.splitlines()[2:]:
        status, kinds = line.strip("|").split("|", 1)
        for code in re.findall(r"\d{3}", status):
            rows.setdefault(int(code), set()).update(re.findall(r"`([a-z-]+)`", kinds))
    missing = [(k.status, k.slug) for k in ALL_KINDS if k.slug not in rows.get(k.status, set())]
    assert not missing, f"docs/http-api.md's error table lacks {missing}"


def test_byte_size_is_positive_and_strict() -> None:
    from pydantic import TypeAdapter, ValidationError

    adapter = TypeAdapter(ByteSize)
    for bad in ("0", 0, "8XB", True, 1.5):
        with pytest.raises(ValidationError):
            adapter.validate_python(bad, strict=True)


# --------------------------------------------------------------------------
# The HTTP surface (an in-process app; thread pool: optimize plans run their own solver processes)

IDENTIFIER = re.compile(r"^[a-z][a-z0-9_]*$")


@pytest.fixture(scope="module")
def http() -> Any:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from fastapi.testclient import TestClient

    from service.main import create_app

    with TestClient(create_app(Settings(pool_kind="thread", pool_size=1, max_timeout_ms=20_000))) as client:
        yield client


def _example(name: str) -> dict[str, Any]:
    from service.examples import PLAN_EXAMPLES

    value: dict[str, Any] = json.loads(json.dumps(PLAN_EXAMPLES[name]["value"]))
    return value


def test_memory_budget_over_http_takes_the_sizes_the_cli_takes(http: Any) -> None:
    sized = _example("optimize_budget")
    assert sized["device_profiles"]["cuda"]["memory_bytes"] == "8MiB"
    counted = json.loads(json.dumps(sized))
    counted["device_profiles"]["cuda"]["memory_bytes"] = 8 * 2**20
    a, b = http.post("/plan", json=sized), http.post("/plan", json=counted)
    assert a.status_code == b.status_code == 200, a.text
    assert a.json()["module"] == b.json()["module"]
    assert a.json()["cost"]["per_device"] == b.json()["cost"]["per_device"]
    bad = json.loads(json.dumps(sized))
    bad["device_profiles"]["cuda"]["memory_bytes"] = "8 parsecs"
    r = http.post("/plan", json=bad)
    assert r.status_code == 422 and "is not a size" in r.text


def test_summary_says_what_compile_would_build(http: Any) -> None:
    from service.compile_targets import DEFAULT_CUDA_ARCH

    body = http.post("/plan", json=_example("cpu_annotation")).json()
    cuda = next(d for d in body["virtual_devices"] if d["device_type"] == "cuda")
    assert "-arch=sm_50" in cuda["target"]  # the planned module keeps TVM's target text
    targets = body["summary"]["compile_targets"]
    assert set(targets) == set(body["summary"]["expressions_by_device"]) == {"cpu", "cuda"}
    assert targets["cpu"].split()[0] == "llvm"
    assert f"-arch={DEFAULT_CUDA_ARCH}" in targets["cuda"] and "-keys" not in targets["cuda"]


def test_counts_are_named_for_what_they_count(http: Any) -> None:
    body = http.post("/plan", json=_example("optimize_head_on_cpu")).json()
    per_device = body["cost"]["per_device"]
    fields = {"operator_calls", "predicted_ms", "copy_ms", "kernel_ms", "overlap_hidden_ms", "weight_bytes",
              "peak_memory_bytes"}
    assert all(set(d) == fields for d in per_device.values())
    calls = sum(d["operator_calls"] for d in per_device.values())
    expressions = sum(body["summary"]["expressions_by_device"].values())
    assert 0 < calls < expressions  # every call is an expression, not every expression a call


def test_timing_keys_are_identifiers_and_unchecked_fields_are_absent(http: Any) -> None:
    optimize = http.post("/plan", json=_example("optimize_head_on_cpu")).json()
    tvm = http.post("/plan", json=_example("plain")).json()
    checked = http.post("/plan", json={**_example("plain"), "z3_check": True}).json()
    for body in (optimize, tvm, checked):
        assert all(IDENTIFIER.match(key) for key in body["solver"]["time_ms"]), body["solver"]["time_ms"]
    assert "tvm_mode" in optimize["solver"]["time_ms"]
    assert not optimize["solver"]["z3_checked"] and "variables" not in optimize["solver"]
    assert not tvm["solver"]["z3_checked"] and "variables" not in tvm["solver"]
    assert checked["solver"]["z3_checked"] and checked["solver"]["variables"] > 0
    # A field the schema documents as null with a reason keeps it.
    budget = http.post("/plan", json=_example("optimize_budget")).json()
    assert budget["cost"]["tvm_mode_predicted_ms"] is None and budget["cost"]["tvm_mode_reason"]


def test_a_timeout_above_the_servers_limit_is_a_422_that_states_it(http: Any) -> None:
    ok = http.post("/plan", json={**_example("plain"), "timeout_ms": 20_000})
    assert ok.status_code == 200
    r = http.post("/plan", json={**_example("plain"), "timeout_ms": 20_001})
    assert r.status_code == 422
    body = r.json()
    assert body["type"].endswith("/validation-error")
    assert "20000" in body["detail"] and body["errors"][0]["loc"] == ["body", "timeout_ms"]
    # The schema's bound is the default server's.
    schema = _schema()["components"]["schemas"]["PlanRequest"]["properties"]["timeout_ms"]
    assert schema["maximum"] == Settings.model_fields["max_timeout_ms"].default


MISSING_TABLE = '#[version = "0.0.5"]\ndef @main(%x: float32) {\n  on_device(%x, virtual_device=meta[VirtualDevice][3])\n}\n'


def test_messages_name_request_fields_over_http_and_flags_on_the_command_line(
    http: Any, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from service.cli import main

    r = http.post("/plan", json={"module": MISSING_TABLE})
    assert r.status_code == 422
    detail = r.json()["detail"]
    assert "`virtual_devices`" in detail and "--" not in detail
    path = tmp_path / "m.relay"
    path.write_text(MISSING_TABLE)
    assert main(["plan", str(path)]) == 1
    err = capsys.readouterr().err
    assert "`--virtual-devices`" in err and "`virtual_devices`" not in err
