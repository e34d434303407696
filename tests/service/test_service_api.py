"""In-process tests of every route and every problem kind (TestClient, real process pool)."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import relay
from service.examples import CONFLICT, CPU_ANNOTATION, PLAIN, PLAN_EXAMPLES
from service.problems import ALL_KINDS, PROBLEM_MEDIA_TYPE, TYPE_BASE
from service.units import parse_bytes

PROBLEM_TYPES = {k.slug: k.type for k in ALL_KINDS}


def assert_problem(response: Any, status: int, slug: str) -> dict[str, Any]:
    """The response is an RFC 9457 problem of the given kind, without a traceback."""
    assert response.status_code == status, response.text[:2000]
    assert response.headers["content-type"].startswith(PROBLEM_MEDIA_TYPE)
    body = response.json()
    assert body["type"] == PROBLEM_TYPES[slug]
    assert body["status"] == status
    assert body["title"]
    assert "Traceback" not in response.text
    return body


def example(name: str) -> dict[str, Any]:
    return dict(PLAN_EXAMPLES[name]["value"])


# --------------------------------------------------------------------------
# POST /plan: the three Swagger examples


def test_plain_example_lands_everything_on_cuda(client: Any) -> None:
    r = client.post("/plan", json=example("plain"))
    assert r.status_code == 200, r.text[:2000]
    body = r.json()
    assert body["format"] == "text"
    assert body["summary"]["device_copies"] == []
    assert body["summary"]["expressions_by_device"], "no expressions counted"
    assert all("cuda" in device for device in body["summary"]["expressions_by_device"])
    main = body["summary"]["functions"]["@main"]
    assert "cuda" in main["result"]
    assert [p["device"] for p in main["params"]] and all("cuda" in p["device"] for p in main["params"])
    # The table is what the output's meta indices refer to; the default device (cuda) comes first.
    assert body["virtual_devices"][0]["device_type"] == "cuda"
    indices = {int(i) for i in re.findall(r"meta\[VirtualDevice\]\[(\d+)\]", body["module"])}
    assert indices and max(indices) < len(body["virtual_devices"])
    # The output is a module again, with explicit devices on the function and its params.
    planned = relay.parse_text(body["module"])
    relay.verify(planned)
    assert body["module"].count("virtual_device=meta[VirtualDevice][0]") == 3
    stats = body["solver"]
    # TVM mode skips the Z3 re-check unless asked, and says so instead of reporting zeros.
    assert stats["classes"] >= 1 and stats["z3_checked"] is False and "variables" not in stats
    assert {"parse", "print"} <= set(stats["time_ms"]) and "z3" not in stats["time_ms"]


def test_z3_check_on_request_gives_the_same_module(client: Any) -> None:
    plain = client.post("/plan", json=example("cpu_annotation"))
    checked = client.post("/plan", json={**example("cpu_annotation"), "z3_check": True})
    assert plain.status_code == checked.status_code == 200, checked.text[:2000]
    assert checked.json()["module"] == plain.json()["module"]
    stats = checked.json()["solver"]
    assert stats["z3_checked"] is True and stats["variables"] >= 1 and "z3" in stats["time_ms"]


def test_cpu_annotation_example_inserts_one_copy(client: Any) -> None:
    r = client.post("/plan", json=example("cpu_annotation"))
    assert r.status_code == 200, r.text[:2000]
    body = r.json()
    copies = body["summary"]["device_copies"]
    assert len(copies) == 1
    assert "cpu" in copies[0]["src"] and "cuda" in copies[0]["dst"]
    # The copied expression is the annotated multiply on line 3.
    assert copies[0]["line"] == 3
    assert [d["device_type"] for d in body["virtual_devices"][:2]] == ["cpu", "cuda"]
    assert "device_copy(" in body["module"]
    assert body["explanation"], "explain=true returns an explanation"
    assert any(line.startswith("device_copy at 3:") for line in body["explanation"])
    assert body["summary"]["functions"]["@main"]["params"][0]["device"].startswith("cpu")


def test_optimize_head_on_cpu_example_keeps_the_backbone_on_cuda(client: Any) -> None:
    r = client.post("/plan", json=example("optimize_head_on_cpu"))
    assert r.status_code == 200, r.text[:2000]
    body = r.json()
    cost = body["cost"]
    assert 1 <= cost["copies"] <= 2 and len(body["summary"]["device_copies"]) == cost["copies"]
    assert cost["per_device"]["cuda"]["operator_calls"] > cost["per_device"]["cpu"]["operator_calls"] >= 2
    assert cost["optimal"] is True and cost["bound_ms"] <= cost["predicted_ms"]
    assert cost["tvm_mode_predicted_ms"] is not None and cost["predicted_ms"] < cost["tvm_mode_predicted_ms"]
    assert any(line.startswith("predicted ") for line in body["explanation"])
    assert any(line.startswith("cuda ") for line in body["explanation"])
    # The same request in the TVM mode: the pins pull the backbone onto the cpu, and no cost.
    tvm = client.post("/plan", json={**example("optimize_head_on_cpu"), "mode": "tvm"}).json()
    assert "cost" not in tvm
    assert tvm["summary"]["expressions_by_device"].get("cpu", 0) > body["summary"][
        "expressions_by_device"
    ].get("cpu", 0)
    # The output is its own fixed point in the TVM mode.
    again = client.post("/plan", json={"module": body["module"], "default_device": "cuda"}).json()
    assert again["module"] == body["module"]


def test_optimize_support_conflict_example_names_pin_and_rule(client: Any) -> None:
    r = client.post("/plan", json=example("optimize_support_conflict"))
    body = assert_problem(r, 422, "planning-conflict")
    kinds = {c["kind"] for c in body["constraints"]}
    assert {"constraint #0", "operator support"} <= kinds, body["constraints"]
    assert all(c["line"] == 13 for c in body["constraints"]), body["constraints"]


def test_optimize_budget_example_respects_the_budget(client: Any) -> None:
    request = example("optimize_budget")
    budget = parse_bytes(request["device_profiles"]["cuda"]["memory_bytes"])  # "8MiB"
    r = client.post("/plan", json=request)
    assert r.status_code == 200, r.text[:2000]
    cost = r.json()["cost"]
    assert cost["per_device"].get("cuda", {"weight_bytes": 0})["weight_bytes"] <= budget
    assert cost["tvm_mode_predicted_ms"] is None and "budget" in cost["tvm_mode_reason"]
    # Without the budget the big layer goes back to cuda.
    free = client.post("/plan", json={**request, "device_profiles": {}}).json()["cost"]
    assert free["per_device"]["cuda"]["weight_bytes"] > budget


def test_optimize_fields_are_validated(client: Any) -> None:
    base = {"module": PLAIN, "mode": "optimize"}
    for bad in (
        {"mode": "fastest"},
        {"op_support": {"cuda": ["nn.relu"]}},
        {"device_profiles": {"cuda": {"peak_gflops": -1}}},
        {"device_profiles": {"cuda": {"colour": 1}}},
        {"links": {"cpu-cuda": {"gbps": 1}}},
        {"cost_table": {"version": 2, "entries": []}},
        {"assume_dim": 0},
    ):
        assert_problem(client.post("/plan", json={**base, **bad}), 422, "validation-error")


def test_cost_table_moves_an_operator(client: Any) -> None:
    """A small relu is cheapest on the cpu under the roofline (cuda's launch
    overhead dominates); a measured table that makes it slow there moves it."""
    import solver

    text = '#[version = "0.0.5"]\ndef @main(%x: Tensor[(64, 64), float32]) {\n  nn.relu(%x)\n}\n'
    key = solver.cost_key("nn.relu", [relay.TensorType((64, 64), "float32")], None)
    request = {"module": text, "mode": "optimize", "virtual_devices": ["cpu", "cuda"]}
    before = client.post("/plan", json=request).json()["cost"]
    assert set(before["per_device"]) == {"cpu"}
    table = {"version": 1, "entries": [{"key": key, "device": "cpu", "ns": 10**9}]}
    after = client.post("/plan", json={**request, "cost_table": table}).json()["cost"]
    assert after["per_device"]["cuda"]["operator_calls"] == 1 and "cpu" not in after["per_device"]
    assert after["predicted_ms"] < 1000


def test_conflict_example_explains_with_locations(client: Any) -> None:
    r = client.post("/plan", json=example("conflict"))
    body = assert_problem(r, 422, "planning-conflict")
    assert body["detail"]
    constraints = body["constraints"]
    assert len(constraints) >= 2
    lines = {c["line"] for c in constraints}
    assert {2, 3} <= lines, constraints  # the parameter attribute (line 2) and the annotation (line 3)
    devices = " ".join(d for c in constraints for d in c["devices"])
    assert "cpu" in devices and "cuda" in devices
    assert all(c["kind"] for c in constraints)
    assert {(loc["line"], loc["column"]) for loc in body["locations"]} == {
        (c["line"], c["column"]) for c in constraints if c["line"] is not None
    }


def test_output_format_json_round_trips(client: Any) -> None:
    text = client.post("/plan", json=example("cpu_annotation")).json()
    as_json = client.post("/plan", json={**example("cpu_annotation"), "output_format": "json"}).json()
    assert as_json["format"] == "json"
    assert as_json["module"].lstrip().startswith("{")
    assert relay.structural_equal(relay.load_json(as_json["module"]), relay.parse_text(text["module"]))


def test_json_input_is_detected(client: Any, corpus_dir: Path) -> None:
    from_json = client.post("/plan", json={"module": (corpus_dir / "mlp.json").read_text()})
    from_text = client.post("/plan", json={"module": (corpus_dir / "mlp.relay").read_text()})
    assert from_json.status_code == 200, from_json.text
    assert from_text.status_code == 200, from_text.text
    assert relay.structural_equal(
        relay.parse_text(from_json.json()["module"]), relay.parse_text(from_text.json()["module"])
    )


def test_corpus_model_matches_tvm(client: Any, corpus_dir: Path) -> None:
    r = client.post("/plan", json={"module": (corpus_dir / "mlp.annotated.relay").read_text()})
    assert r.status_code == 200, r.text[:2000]
    expected = relay.parse_text((corpus_dir / "mlp.annotated.planned.relay").read_text())
    assert relay.structural_equal(relay.parse_text(r.json()["module"]), expected)


def test_request_level_constraint_pins_an_op(client: Any) -> None:
    body = {"module": PLAIN, "constraints": [{"select": {"op": "nn.relu"}, "device": "cpu"}]}
    r = client.post("/plan", json=body)
    assert r.status_code == 200, r.text[:2000]
    assert r.json()["summary"]["device_copies"], "pinning relu to the cpu needs a copy from cuda"


# --------------------------------------------------------------------------
# Problems


def test_malformed_module_is_400_with_location(client: Any) -> None:
    module = '#[version = "0.0.5"]\ndef @main(%x: Tensor[(4), float32]) {\n  negative(%x\n}\n'
    body = assert_problem(client.post("/plan", json={"module": module}), 400, "malformed-module")
    loc, note = body["locations"]  # the error, then where the unclosed `(` opened
    assert loc["line"] == 4 and loc["column"] == 1, loc
    assert loc["message"]
    assert (note["line"], note["column"]) == (3, 11) and note["message"].startswith("note: ")


def test_unverifiable_module_is_400(client: Any) -> None:
    module = '#[version = "0.0.5"]\ndef @main(%x: Tensor[(4), float32]) {\n  negative(%y)\n}\n'
    body = assert_problem(client.post("/plan", json={"module": module}), 400, "malformed-module")
    assert body["locations"][0]["line"] == 3


def test_malformed_json_module_is_400(client: Any) -> None:
    assert_problem(client.post("/plan", json={"module": '{"root": 1, "nodes": [}'}), 400, "malformed-module")
    assert_problem(client.post("/plan", json={"module": "{}", "format": "json"}), 400, "malformed-module")


@pytest.mark.parametrize(
    "patch",
    [
        {"default_device": "tpu"},
        {"virtual_devices": [{"device_type": "nonsense"}]},
        {"constraints": [{"select": {"function": "@nope"}, "device": "cpu"}]},
        {"constraints": [{"select": {"param": "@main:%nope"}, "device": "cpu"}]},
    ],
    ids=["unknown-device-type", "bad-table-entry", "no-such-function", "no-such-param"],
)
def test_invalid_configuration_is_422(client: Any, patch: dict[str, Any]) -> None:
    body = assert_problem(client.post("/plan", json={"module": PLAIN, **patch}), 422, "invalid-config")
    assert body["detail"]


@pytest.mark.parametrize(
    "payload",
    [
        {},
        {"module": 5},
        {"module": PLAIN, "timeout_ms": 0},
        {"module": PLAIN, "format": "yaml"},
        {"module": PLAIN, "unknown": True},
        {"module": PLAIN, "virtual_devices": "cpu"},
        {"module": PLAIN, "constraints": [{"select": {"banana": 1}, "device": "cpu"}]},
        [],
        "just a string",
    ],
)
def test_schema_violations_are_422_problems(client: Any, payload: Any) -> None:
    body = assert_problem(client.post("/plan", json=payload), 422, "validation-error")
    assert body["errors"] and all({"loc", "msg", "type"} <= set(e) for e in body["errors"])
    assert PLAIN not in json.dumps(body), "the input is not echoed back"


def test_body_not_json_is_a_problem(client: Any) -> None:
    r = client.post("/plan", content=b"\x00\xff not json", headers={"content-type": "application/json"})
    assert_problem(r, 422, "validation-error")


def test_body_too_large_by_content_length(make_client: Any) -> None:
    with make_client(max_body_bytes=4096, pool_kind="thread", pool_size=1) as c:
        r = c.post("/plan", json={"module": "x" * 10_000})
        body = assert_problem(r, 413, "request-too-large")
        assert "4096" in body["detail"]
        assert c.post("/plan", json=example("plain")).status_code == 200


def test_body_too_large_streamed_without_length(make_client: Any) -> None:
    chunks_sent = []

    def chunks() -> Any:
        for i in range(1000):  # 1000 x 1 KiB, chunked: no Content-Length
            chunks_sent.append(i)
            yield b" " * 1024

    with make_client(max_body_bytes=8192, pool_kind="thread", pool_size=1) as c:
        r = c.post("/plan", content=chunks(), headers={"content-type": "application/json"})
        assert_problem(r, 413, "request-too-large")


def test_time_limit_is_504_and_the_pool_recovers(client: Any, slow_module: str) -> None:
    start = time.perf_counter()
    body = assert_problem(
        client.post("/plan", json={"module": slow_module, "timeout_ms": 1}), 504, "solver-timeout"
    )
    # The whole plan takes seconds; the worker is stopped at its deadline (0.2 s here).
    assert time.perf_counter() - start < 2.0
    assert "1 ms" in body["detail"]
    # The killed worker is replaced: both slots plan again.
    statuses = [client.post("/plan", json=example("plain")).status_code for _ in range(4)]
    assert statuses == [200] * 4
    assert client.get("/readyz").status_code == 200


def test_worker_crash_is_a_500_problem_and_the_pool_recovers(make_client: Any, slow_module: str) -> None:
    import os
    import signal
    import threading

    with make_client(pool_size=1) as c:
        (worker,) = c.app.state.pool._all
        killer = threading.Timer(0.5, os.kill, (worker.proc.pid, signal.SIGKILL))
        killer.start()
        r = c.post("/plan", json={"module": slow_module, "timeout_ms": 60_000})
        killer.join()
        body = assert_problem(r, 500, "internal-error")
        assert "detail" not in body  # a 500 says only type, title and request id; the log has the rest
        assert c.post("/plan", json=example("plain")).status_code == 200


def test_busy_pool_answers_503_overloaded(make_client: Any, slow_module: str) -> None:
    import threading

    with make_client(pool_size=1, queue_timeout_ms=200) as c:
        slow = threading.Thread(target=c.post, args=("/plan",), kwargs={"json": {"module": slow_module}})
        slow.start()
        time.sleep(0.3)
        body = assert_problem(c.post("/plan", json=example("plain")), 503, "overloaded")
        assert "slot" in body["detail"]
        assert c.get("/healthz").status_code == 200
        assert c.get("/readyz").status_code == 200  # busy is not unready
        slow.join()


def test_unexpected_exception_is_a_500_problem_without_traceback(make_client: Any) -> None:
    with make_client(pool_kind="thread", pool_size=1) as c:

        def boom() -> None:
            raise RuntimeError("secret internal detail")

        c.app.add_api_route("/boom", boom)
        r = c.get("/boom")
        body = assert_problem(r, 500, "internal-error")
        assert "secret internal detail" not in r.text
        assert set(body) == {"type", "title", "status", "request_id"}  # the detail is in the log only
        assert body["request_id"] == r.headers["x-request-id"]


def test_unknown_route_and_method_are_problems(client: Any) -> None:
    assert_problem(client.get("/nope"), 404, "not-found")
    assert_problem(client.get("/plan"), 405, "method-not-allowed")


ODD_BODIES: list[Any] = [
    b"",
    b"null",
    b"[]",
    b"{",
    b"\xff\xfe\x00",
    b"[" * 50_000 + b"]" * 50_000,
    json.dumps({"module": "\x00\x01\x02"}).encode(),
    json.dumps({"module": "def @main() { " + "(" * 20_000 + " }"}).encode(),
    json.dumps({"module": "{" * 1000}).encode(),
    json.dumps({"module": '{"root": 1, "nodes": [{"type_key": "NoSuchNode"}]}'}).encode(),
    json.dumps({"module": "fn"}).encode(),
    json.dumps({"module": PLAIN, "timeout_ms": 10**30}).encode(),
    json.dumps({"module": PLAIN, "virtual_devices": [{"target": {"kind": 5}}]}).encode(),
    json.dumps({"module": PLAIN, "virtual_devices": [{"target": "cuda -arch"}]}).encode(),
    json.dumps({"module": PLAIN, "default_device": {"device_type": -3}}).encode(),
    json.dumps({"module": PLAIN, "default_device": "cuda:99999999999999999999"}).encode(),
    json.dumps({"module": PLAIN, "host_device": "cuda"}).encode(),
    json.dumps({"module": CPU_ANNOTATION}).encode(),  # meta[VirtualDevice] without a table
    json.dumps({"module": CPU_ANNOTATION, "virtual_devices": ["cpu"]}).encode(),  # index past the table
    json.dumps(
        {"module": CONFLICT, "constraints": [{"select": {"op": "negative", "index": 7}, "device": "cpu"}]}
    ).encode(),
]


@pytest.mark.parametrize("raw", ODD_BODIES, ids=[f"odd{i}" for i in range(len(ODD_BODIES))])
def test_odd_inputs_never_500(client: Any, raw: bytes) -> None:
    r = client.post("/plan", content=raw, headers={"content-type": "application/json"})
    assert r.status_code < 500 or r.status_code == 504, r.text
    assert "Traceback" not in r.text
    if r.status_code >= 400:
        assert r.headers["content-type"].startswith(PROBLEM_MEDIA_TYPE)
        assert r.json()["type"].startswith(TYPE_BASE)


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    text=st.text(alphabet=st.sampled_from(list('def@main%x(){}[]:;,=."0123 fnletif\n#meta')), max_size=200)
)
def test_random_modules_never_500(client: Any, text: str) -> None:
    r = client.post("/plan", json={"module": text})
    assert r.status_code in (200, 400, 422), r.text


# --------------------------------------------------------------------------
# Other routes


def test_healthz(client: Any) -> None:
    r = client.get("/healthz")
    assert r.status_code == 200 and r.json() == {"status": "ok"}


def test_readyz_probes_z3_and_the_workers(client: Any) -> None:
    r = client.get("/readyz")
    assert r.status_code == 200
    body = r.json()
    assert body["status"] == "ready" and body["probe_ms"] > 0 and body["pool"] == "process x 2"
    assert body["workers"]["configured"] == body["workers"]["effective"] == 2
    assert body["workers"]["alive"] == 2


def test_version(client: Any) -> None:
    import z3

    body = client.get("/version").json()
    assert body["z3"] == z3.get_version_string()
    assert re.match(r"\d+\.\d+", body["devplan"])
    assert "tvm" in body


def test_metrics_count_requests_plans_and_conflicts(make_client: Any) -> None:
    with make_client(pool_kind="thread", pool_size=1) as c:
        c.post("/plan", json=example("plain"))
        c.post("/plan", json=example("conflict"))
        c.post("/plan", json={"module": "def @main("})
        r = c.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    text = r.text
    assert 'devplan_http_requests_total{method="POST",route="/plan",status="200"} 1.0' in text
    assert 'devplan_http_requests_total{method="POST",route="/plan",status="422"} 1.0' in text
    assert 'devplan_http_requests_total{method="POST",route="/plan",status="400"} 1.0' in text
    assert 'devplan_http_request_duration_seconds_count{method="POST",route="/plan",status="200"} 1.0' in text
    assert 'devplan_plans_total{outcome="ok"} 1.0' in text
    assert 'devplan_plans_total{outcome="malformed"} 1.0' in text
    assert "devplan_plan_conflicts_total 1.0" in text
    assert "devplan_plan_timeouts_total 0.0" in text
    assert "devplan_solver_seconds_count 1.0" in text


def test_request_id_is_echoed_or_generated(client: Any) -> None:
    assert (
        client.get("/healthz", headers={"X-Request-ID": "ci-job-42"}).headers["x-request-id"] == "ci-job-42"
    )
    generated = client.get("/healthz").headers["x-request-id"]
    assert re.fullmatch(r"[0-9a-f]{32}", generated)
    # A header that is not a sane token is replaced, not echoed into logs and responses.
    assert client.get("/healthz", headers={"X-Request-ID": "a b\tc"}).headers["x-request-id"] != "a b\tc"
    problem = client.post("/plan", json={"module": "def @main("}, headers={"X-Request-ID": "req-7"}).json()
    assert problem["request_id"] == "req-7"


def test_docs_page_is_self_contained(client: Any) -> None:
    r = client.get("/docs")
    assert r.status_code == 200
    sources = re.findall(r'(?:src|href)="([^"]+)"', r.text)
    assert sources and all(s.startswith("/docs/static/") for s in sources), sources
    for s in sources:
        asset = client.get(s)
        assert asset.status_code == 200 and len(asset.content) > 100, s


def test_openapi_json_has_stable_operation_ids(client: Any) -> None:
    schema = client.get("/openapi.json").json()
    ops = {op["operationId"] for path in schema["paths"].values() for op in path.values()}
    assert ops == {
        "plan",
        "plan_picture",
        "plan_diff",
        "compile",
        "get_artifact",
        "submit_compile_job",
        "get_job",
        "list_jobs",
        "cancel_job",
        "healthz",
        "readyz",
        "version",
        "metrics",
    }
    plan = schema["paths"]["/plan"]["post"]
    examples = plan["requestBody"]["content"]["application/json"]["examples"]
    assert set(examples) == {
        "plain",
        "cpu_annotation",
        "conflict",
        "optimize_head_on_cpu",
        "optimize_support_conflict",
        "optimize_budget",
        "why",
    }
    for status in ("400", "413", "422", "504"):
        assert PROBLEM_MEDIA_TYPE in plan["responses"][status]["content"], status
