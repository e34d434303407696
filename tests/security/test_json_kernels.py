"""TVM JSON of modules with their own kernels: TIR's layout axes
(`tirx.Axis`) load when TVM registers them, an unknown name is a 400 naming the node
(TVM's loader would register it for the rest of the process), and nothing TVM saves of
the modules the tests build is refused."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import tvm
import tvm_ffi
from tvm import relax

import relay
import tvm_bridge
from relay.span import ParseError
from service.relax_planning import plan_relax
from solver import PlanConfig
from tests._service import TestClient, thread_client
from tests.sandbox.kernels import one_device, two_devices
from tvm_bridge.json_guard import JSON_SOURCE_NAME, check_json_graph, load_checked_json, registered_axes
from tvm_bridge.relax_plan import read_relax

pytestmark = pytest.mark.tvm

LLVM_ONLY: dict[str | int, str] = {"cpu": "llvm", "cuda": "llvm"}


def _kernel_json(**kernel: Any) -> str:
    mod, _ = read_relax(one_device(**kernel))
    return str(tvm.ir.save_json(mod))


def _with_axis(text: str, name: str) -> tuple[str, int]:
    graph = json.loads(text)
    index = next(i for i, n in enumerate(graph["nodes"]) if n["type"] == "tirx.Axis")
    graph["nodes"][index]["data"] = name
    return json.dumps(graph), index


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    with thread_client() as c:
        yield c


# ----------------------------------------------------------------- the axes


def test_a_kernel_module_holds_a_layout_axis_and_loads_checked() -> None:
    text = _kernel_json()
    axes = [n["data"] for n in json.loads(text)["nodes"] if n["type"] == "tirx.Axis"]
    assert axes == ["m"]
    mod, _ = read_relax(one_device())
    tvm.ir.assert_structural_equal(load_checked_json(text), mod)


def test_the_accepted_axes_are_the_ones_tvm_registers_with_their_attributes() -> None:
    from tvm.tirx import layout

    assert registered_axes() == frozenset(layout._AXIS_NAMES)
    assert {"m", "tx", "laneid"} <= registered_axes()
    is_thread = tvm_ffi.get_global_func("tirx.AxisIsThreadAxis")
    assert is_thread(layout.Axis.get("tx")) and not is_thread(layout.Axis.get("m"))


def test_tvm_registers_an_unknown_axis_it_loads() -> None:
    """Why an unknown name is refused: TVM's loader makes a registry entry of it, the
    same object every later lookup returns, without the attributes TVM's passes read."""
    name = "devplan_test_axis_loaded_by_tvm"
    loaded = tvm.ir.load_json(json.dumps({"root_index": 0, "nodes": [{"type": "tirx.Axis", "data": name}]}))
    assert loaded.same_as(tvm_ffi.get_global_func("tirx.AxisGet")(name))
    with pytest.raises(Exception, match="thread has not been registered"):
        tvm_ffi.get_global_func("tirx.AxisIsThreadAxis")(loaded)
    assert name not in registered_axes()


@pytest.mark.parametrize("name", ["devplan_never_an_axis", "", "M", "m "])
def test_an_unknown_axis_is_refused_naming_the_node(name: str) -> None:
    text, index = _with_axis(_kernel_json(), name)
    with pytest.raises(ParseError) as info:
        check_json_graph(text)
    assert f"node {index}: layout axis {name!r} is not one TVM registers" in info.value.message


@pytest.mark.parametrize(
    ("node", "says"),
    [
        ({"type": "ir.Op", "data": "relax.no_such_op"}, "operator 'relax.no_such_op' is not one TVM registers"),
        ({"type": "target.TargetKind", "data": "no_such_kind"}, "target kind 'no_such_kind' is not one TVM registers"),
        ({"type": "tirx.Axis", "data": 7}, "`tirx.Axis` data must be a string"),
    ],
)
def test_other_names_tvm_looks_up_are_checked_the_same_way(node: dict[str, Any], says: str) -> None:
    with pytest.raises(ParseError) as info:
        check_json_graph(json.dumps({"root_index": 0, "nodes": [node]}))
    assert f"node 0: {says}" in info.value.message


def test_source_names_tvm_would_intern_for_good_are_not_the_callers() -> None:
    """TVM keeps every source name it loads in a table it never frees: the check keeps
    TVMScript's own `<str>` and writes any other name as one fixed name."""
    text = _kernel_json()
    assert check_json_graph(text) == json.dumps(json.loads(text))  # TVM's own save: unchanged
    graph = json.loads(text)
    index = next(i for i, n in enumerate(graph["nodes"]) if n["type"] == "ir.SourceName")
    graph["nodes"][index]["data"] = "caller-chosen " + "x" * 10_000
    checked = json.loads(check_json_graph(json.dumps(graph)))
    assert checked["nodes"][index]["data"] == JSON_SOURCE_NAME
    assert [n for i, n in enumerate(checked["nodes"]) if i != index] == [
        n for i, n in enumerate(graph["nodes"]) if i != index
    ]
    mod, _ = read_relax(one_device())
    tvm.ir.assert_structural_equal(load_checked_json(json.dumps(graph)), mod)


# --------------------------------------------------------------- over HTTP


def test_kernel_json_plans_and_compiles_with_its_run_check(client: TestClient) -> None:
    text = _kernel_json(add=3)
    planned = client.post("/plan", json={"module": text, "default_device": "cpu"})
    assert planned.status_code == 200, planned.text
    response = client.post("/compile", json={"module": text, "default_device": "cpu", "run_check": True})
    assert response.status_code == 200, response.text
    report = response.json()["report"]
    assert report["functions_per_device"] == {"llvm:0": 1}
    assert report["check"]["max_abs_error"] == 0.0


def test_kernel_json_on_two_devices_compiles(client: TestClient) -> None:
    mod, _ = read_relax(two_devices("llvm:1"))
    response = client.post(
        "/compile", json={"module": tvm.ir.save_json(mod), "default_device": "cpu:0", "host_device": "cpu:0"}
    )
    assert response.status_code == 200, response.text
    assert response.json()["report"]["functions_per_device"] == {"llvm:0": 1, "llvm:1": 1}


@pytest.mark.parametrize("route", ["/plan", "/compile"])
def test_an_unknown_axis_over_http_is_a_400_naming_the_node(client: TestClient, route: str) -> None:
    text, index = _with_axis(_kernel_json(), "devplan_http_axis")
    response = client.post(route, json={"module": text, "default_device": "cpu"})
    assert response.status_code == 400, response.text
    body = response.json()
    assert body["type"].endswith("/malformed-module")
    assert f"node {index}: layout axis 'devplan_http_axis' is not one TVM registers" in body["detail"]


# -------------------------------------------- nothing TVM saves is refused


def _round_trips(mod: Any) -> None:
    """TVM's save of `mod` passes the check and loads back as `mod`."""
    tvm.ir.assert_structural_equal(load_checked_json(tvm.ir.save_json(mod)), mod)


def _kernel_modules() -> list[Any]:
    texts = [one_device(), one_device(sblock=True), one_device(parallel=True), two_devices(),
             two_devices("cuda:0", sblock=True)]
    return [read_relax(text)[0] for text in texts]


def test_saves_of_kernel_modules_and_their_plans_are_accepted() -> None:
    config = PlanConfig(default_device="cpu", host_device="cpu", timeout_ms=60_000)
    for mod in _kernel_modules():
        _round_trips(mod)
        _round_trips(relax.transform.LegalizeOps()(mod))
        _round_trips(plan_relax(mod, config).module)


def test_saves_of_a_lowered_relay_model_and_its_kernels_are_accepted(corpus_dir: Path) -> None:
    lowered = tvm_bridge.to_relax(relay.parse_text((corpus_dir / "mlp.relay").read_text(), name="mlp"), LLVM_ONLY)
    legal = relax.transform.LegalizeOps()(lowered)
    _round_trips(lowered)
    _round_trips(legal)
    assert any(isinstance(f, tvm.tirx.PrimFunc) for f in legal.functions.values())


@pytest.mark.slow
def test_saves_of_every_corpus_model_lowered_and_legalized_are_accepted(corpus_dir: Path) -> None:
    """The Relax corpus as TVM parses it and after LegalizeOps, and every Relay corpus
    model as the bridge lowers it and after LegalizeOps: no type key TVM writes is
    refused (about a minute)."""
    relax_dir = corpus_dir / "relax"
    scripts = sorted([*relax_dir.glob("*.py"), *relax_dir.glob("offload/*.py")])
    relays = sorted(corpus_dir.glob("*.relay"))
    assert len(scripts) >= 8 and len(relays) >= 20
    for path in scripts:
        mod, _ = read_relax(path.read_text())
        _round_trips(mod)
    for path in sorted(relax_dir.glob("*.json")):
        _round_trips(relax.transform.LegalizeOps()(tvm.ir.load_json(path.read_text())))
    for path in relays:
        lowered = tvm_bridge.to_relax(relay.parse_text(path.read_text(), name=path.name), LLVM_ONLY)
        _round_trips(lowered)
        _round_trips(relax.transform.LegalizeOps()(lowered))
