"""The real server (uvicorn subprocess on loopback) against the CLI, schemathesis and concurrency."""

from __future__ import annotations

import re
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, settings

from service.examples import PLAN_EXAMPLES
from tests._service import run_devplan

ROOT = Path(__file__).resolve().parents[2]


def cli_plan(module: str, *flags: str) -> subprocess.CompletedProcess[str]:
    return run_devplan("plan", "-", *flags, stdin=module)


def cli_flags(request: dict[str, Any]) -> list[str]:
    import json

    flags = []
    if request.get("virtual_devices"):
        flags += ["--virtual-devices", json.dumps(request["virtual_devices"])]
    if "default_device" in request:
        flags += ["--default-device", request["default_device"]]
    if "host_device" in request:
        flags += ["--host-device", request["host_device"]]
    return flags


@pytest.mark.parametrize("name", ["plain", "cpu_annotation"])
def test_swagger_examples_match_the_cli(server: Any, name: str) -> None:
    request = PLAN_EXAMPLES[name]["value"]
    r = httpx.post(server.base_url + "/plan", json=request, timeout=60)
    assert r.status_code == 200, r.text
    cli = cli_plan(request["module"], *cli_flags(request))
    assert cli.returncode == 0, cli.stderr
    assert r.json()["module"] == cli.stdout


def test_conflict_example_matches_the_cli(server: Any) -> None:
    request = PLAN_EXAMPLES["conflict"]["value"]
    r = httpx.post(server.base_url + "/plan", json=request, timeout=60)
    assert r.status_code == 422, r.text
    cli = cli_plan(request["module"], *cli_flags(request))
    assert cli.returncode == 3
    http_locations = sorted((c["line"], c["column"]) for c in r.json()["constraints"])
    cli_locations = sorted((int(a), int(b)) for a, b in re.findall(r"<stdin>:(\d+):(\d+)", cli.stderr))
    assert http_locations == cli_locations


@pytest.mark.parametrize("model", ["mlp.relay", "resnet18.annotated.relay"])
def test_corpus_model_matches_the_cli(server: Any, corpus_dir: Path, model: str) -> None:
    text = (corpus_dir / model).read_text()
    r = httpx.post(server.base_url + "/plan", json={"module": text}, timeout=120)
    assert r.status_code == 200, r.text
    cli = cli_plan(text)
    assert cli.returncode == 0, cli.stderr
    assert r.json()["module"] == cli.stdout


def test_request_id_and_json_logs(server: Any) -> None:
    import json

    r = httpx.get(server.base_url + "/healthz", headers={"X-Request-ID": "e2e-log-check"})
    assert r.headers["x-request-id"] == "e2e-log-check"
    httpx.post(
        server.base_url + "/plan", json={"module": "def @main("}, headers={"X-Request-ID": "e2e-bad-module"}
    )
    time.sleep(0.2)
    records = [json.loads(line) for line in server.log_text().splitlines() if line.startswith("{")]
    assert records, "the server logs JSON lines"
    assert any(r.get("request_id") == "e2e-bad-module" and r.get("status") == 400 for r in records)
    assert all({"ts", "level", "logger", "msg"} <= set(r) for r in records)


# --------------------------------------------------------------------------
# Contract fuzzing


def _schemathesis_schema() -> Any:
    import schemathesis

    return schemathesis.openapi.from_path(ROOT / "openapi.yaml")


def _schema_without_coverage() -> Any:
    """The schema with schemathesis' coverage phase off: for /compile, where every valid
    request is a real TVM compile and the phase derives dozens of variants of the worked
    example, and for the default stage's contract test (the phase makes thousands of
    variants of the /plan bodies, half a minute; the slow stage runs it)."""
    import schemathesis
    from schemathesis.config import SchemathesisConfig

    config = SchemathesisConfig.from_dict({"phases": {"coverage": {"enabled": False}}})
    return schemathesis.openapi.from_path(ROOT / "openapi.yaml", config=config)


schema = _schemathesis_schema()
quick_schema = _schema_without_coverage().exclude(operation_id="compile")
compile_schema = _schema_without_coverage().include(operation_id="compile")


def no_server_error(ctx: Any, response: Any, case: Any) -> bool | None:
    """Like schemathesis' not_a_server_error, except a documented answer: a 504 solver-timeout
    (a client may ask for a 1 ms time limit) or a 503 problem whose `type` the operation
    documents for 503 (e.g. /jobs on a server without a queue). Never a 500."""
    status = response.status_code
    if status == 504:
        assert response.json()["type"].endswith("/solver-timeout")
        return None
    if status == 503:
        documented = case.operation.definition.raw.get("responses", {}).get("503", {}).get("description", "")
        problem_type = response.json().get("type", "")
        if problem_type and f"`{problem_type}`" in documented:
            return None
    if status >= 500:
        raise AssertionError(f"server error {status}: {response.text[:500]}")
    return None


CONTRACT_CHECKS_DOC = (
    "status code, content type, response schema and headers conform; invalid data is rejected"
)


def _validate(case: Any, server: Any) -> None:
    from schemathesis.checks import (
        content_type_conformance,
        negative_data_rejection,
        response_headers_conformance,
        response_schema_conformance,
        status_code_conformance,
    )

    case.call_and_validate(
        base_url=server.base_url,
        checks=[
            no_server_error,
            status_code_conformance,
            content_type_conformance,
            response_schema_conformance,
            response_headers_conformance,
            negative_data_rejection,
        ],
        timeout=600,
    )


@quick_schema.parametrize()
@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
def test_openapi_contract(case: Any, server: Any) -> None:
    """Every operation but /compile, 30 examples each: """ + CONTRACT_CHECKS_DOC
    _validate(case, server)


@pytest.mark.slow
@schema.exclude(operation_id="compile").parametrize()
@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
def test_openapi_contract_with_the_coverage_phase(case: Any, server: Any) -> None:
    """Every operation but /compile with schemathesis' coverage phase too (thousands of
    boundary variants of the /plan bodies, half a minute), 30 examples each: """ + CONTRACT_CHECKS_DOC
    _validate(case, server)


@pytest.mark.slow
@pytest.mark.tvm
@compile_schema.parametrize()
@settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck))
def test_openapi_contract_compile(case: Any, server: Any) -> None:
    """POST /compile (each valid request is a real TVM compile, hence slow): """ + CONTRACT_CHECKS_DOC
    _validate(case, server)


# --------------------------------------------------------------------------
# Concurrency


def test_50_concurrent_plans_while_healthz_answers(server: Any, corpus_dir: Path) -> None:
    modules = [
        {"module": PLAN_EXAMPLES["plain"]["value"]["module"]},
        PLAN_EXAMPLES["cpu_annotation"]["value"],
        {"module": (corpus_dir / "mlp.relay").read_text()},
        {"module": (corpus_dir / "resnet18.relay").read_text()},
        {"module": (corpus_dir / "resnet50.relay").read_text()},
    ]
    requests = [modules[i % len(modules)] for i in range(50)]
    health_latencies: list[float] = []
    health_failures: list[str] = []
    done = threading.Event()

    def poll_health() -> None:
        with httpx.Client(base_url=server.base_url, timeout=5) as c:
            while not done.is_set():
                start = time.perf_counter()
                try:
                    status = c.get("/healthz").status_code
                    if status != 200:
                        health_failures.append(str(status))
                except httpx.HTTPError as err:
                    health_failures.append(repr(err))
                health_latencies.append(time.perf_counter() - start)
                time.sleep(0.05)

    def post(body: dict[str, Any]) -> int:
        with httpx.Client(base_url=server.base_url, timeout=300) as c:
            return c.post("/plan", json=body).status_code

    poller = threading.Thread(target=poll_health)
    poller.start()
    try:
        with ThreadPoolExecutor(max_workers=50) as pool:
            statuses = list(pool.map(post, requests))
    finally:
        done.set()
        poller.join()
    assert statuses == [200] * 50
    assert not health_failures
    assert len(health_latencies) >= 5
    assert max(health_latencies) < 1.0, f"slowest /healthz {max(health_latencies):.3f} s"


def test_sigterm_shuts_down_cleanly(server_factory: Any) -> None:
    srv = server_factory({"DEVPLAN_POOL_SIZE": "1"})
    srv.process.terminate()
    assert srv.process.wait(30) == 0, srv.log_text()
    assert "Traceback" not in srv.log_text()
