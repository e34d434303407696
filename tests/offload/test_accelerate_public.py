"""accelerate's maps of the public decoder (`../shared/corpus/relax/offload`),
in and out: a map handed in is priced as the same placement written as
per-weight pins with every operator on the map's main device; bad maps are
422s naming the entry; every plan comes back as a map of the model's modules
that, handed back in, is priced as the plan was (where accelerate can express
it)."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from service.accelerate import accelerate_value, device_of, main_device
from service.module_names import map_owners, module_names
from service.planning import PlanJob, PlanOutcome, plan_report, run_plan
from service.report import load_schema
from tests._service import thread_client
from tests.offload.corpus import OFFLOAD, needs_corpus
from tests.offload.corpus import accelerate_maps as _maps
from tests.offload.corpus import decoder_text as _text

pytestmark = pytest.mark.tvm

FRACTIONS = (0.25, 0.5, 0.75)
SYNCHRONOUS: dict[str, Any] = {"overlap": False}  # copies as accelerate runs them (see _job)


def _job(fraction: float | None, **fields: Any) -> PlanJob:
    """A request of the decoder under a fraction's GPU budget (None: no budget)."""
    profiles = {"cuda": {"memory_bytes": int(_maps()[fraction]["gpu_budget_bytes"])}} if fraction else {}
    return PlanJob(_text(), input_format="json", language="relax", mode="optimize", include=("placements",),
                   device_profiles=profiles, **SYNCHRONOUS, **fields)


@lru_cache(maxsize=8)
def _handed(fraction: float) -> PlanOutcome:
    return run_plan(_job(fraction, accelerate_device_map=_maps()[fraction]["device_map"]))


def _pinned_like_accelerate(fraction: float, placements: list[dict[str, Any]]) -> PlanOutcome:
    """The map's placement written by hand: each weight pinned by name where
    its module is stored, every operator on the map's main device."""
    amap = _maps()[fraction]["device_map"]
    params = [p for p in placements if p["kind"] == "parameter" and p["name"] != "input_ids"]
    owners = map_owners(amap, [p["name"] for p in params])
    main = main_device(device_of(v) for v in amap.values())
    pins = [{"select": {"param": f"@main:{p['name']}"}, "device": device_of(amap[owners[p["name"]]])} for p in params]
    pins += [{"select": {"node": p["node"]}, "device": main} for p in placements if p["kind"] == "operator"]
    job = _job(fraction, constraints=tuple(pins))
    return run_plan(PlanJob(job.module, job.options, input_format="json", language="relax", include=("placements",),
                            device_profiles={}))


def _check_priced_as_pins(fraction: float) -> None:
    handed = _handed(fraction)
    assert handed.accelerate_input is not None and handed.placements is not None
    pinned = _pinned_like_accelerate(fraction, handed.placements)
    assert pinned.cost is not None
    ours = handed.accelerate_input["predicted_ms"]
    assert abs(ours - pinned.cost["predicted_ms"]) <= 0.01 * pinned.cost["predicted_ms"]
    # the same placement: every placement on the same device
    assert {p["node"]: p["device"] for p in handed.placements} == {p["node"]: p["device"] for p in pinned.placements}


@needs_corpus
def test_the_half_budget_map_is_priced_as_its_placement_written_as_pins() -> None:
    _check_priced_as_pins(0.5)
    handed = _handed(0.5)
    assert handed.accelerate_input is not None
    assert handed.accelerate_input["main_device"] == 0 and handed.accelerate_input["fits"] in (True, False)
    assert any("model.rotary_emb" in n and "owns no weight" in n for n in handed.notices)
    # handed in, read back: the same map (less the weightless module)
    expected = {k: v for k, v in _maps()[0.5]["device_map"].items() if k != "model.rotary_emb"}
    assert handed.as_dict()["accelerate_device_map"] == expected
    assert handed.as_dict()["accelerate_names"] == "request"


@needs_corpus
@pytest.mark.slow
@pytest.mark.parametrize("fraction", [0.25, 0.75])
def test_every_corpus_map_is_priced_as_its_placement_written_as_pins(fraction: float) -> None:
    _check_priced_as_pins(fraction)


@needs_corpus
def test_a_map_without_a_gpu_runs_everything_on_the_cpu() -> None:
    handed = _handed(0.25)  # {"": "cpu"}
    assert handed.placements is not None and handed.accelerate_input is not None
    assert {p["device"] for p in handed.placements if p["kind"] != "parameter" or p["name"] != "input_ids"} == {"cpu"}
    assert handed.accelerate_input["main_device"] == "cpu" and handed.accelerate_input["fits"] is True


BAD_MAPS = [
    ({"": "cpu", "model.layers.8": 0}, "model.layers.8"),  # an 8-layer model has layers 0 to 7
    ({"": "cpu", "decoder.block.0": 0}, "decoder.block.0"),
    ({**{f"model.layers.{i}": 0 for i in range(8)}, "model.embed_tokens": 0, "model.norm": "cpu"}, "lm_head"),
    ({"": "cpu", "lm_head": 1}, "lm_head"),  # cuda:1 is no device of the request
]


@needs_corpus
def test_bad_maps_are_422s_naming_the_entry() -> None:
    with thread_client() as client:
        for amap, entry in BAD_MAPS:
            body = {"module": _text(), "language": "relax", "mode": "optimize", "accelerate_device_map": amap}
            res = client.post("/plan", json=body)
            assert res.status_code == 422, res.text
            problem = res.json()
            assert res.headers["content-type"].startswith("application/problem+json")
            assert entry in problem["detail"], problem["detail"]
        # a device accelerate does not write is refused by the request's schema, at the entry
        res = client.post("/plan", json={"module": _text(), "accelerate_device_map": {"lm_head": "mps"}})
        assert res.status_code == 422 and "lm_head" in json.dumps(res.json()["errors"])


@needs_corpus
@pytest.mark.slow
def test_cli_takes_a_map_file_and_refuses_a_bad_one(tmp_path: Path) -> None:
    from tests._service import run_devplan

    good, bad = tmp_path / "map.json", tmp_path / "bad.json"
    good.write_text(json.dumps(_maps()[0.5]["device_map"]))
    bad.write_text(json.dumps({"": "cpu", "model.layers.8": 0}))
    module = OFFLOAD / "llama_h1024_l8.json"
    report = tmp_path / "report.json"
    generous = ("--timeout-ms", "120000")  # a loaded machine reads the module slowly; the limit is not under test
    done = run_devplan("plan", str(module), *generous, "--mode", "optimize", "--accelerate-device-map", str(good),
                       "--memory-budget", f"cuda={_maps()[0.5]['gpu_budget_bytes']}", "--report", str(report),
                       "-o", str(tmp_path / "planned.json"))
    assert done.returncode == 0, done.stderr
    written = json.loads(report.read_text())
    jsonschema.Draft202012Validator(load_schema()).validate(written)
    assert written["accelerate_input"]["as"] == "as-is" and written["accelerate_names"] == "request"
    refused = run_devplan("plan", str(module), *generous, "--accelerate-device-map", str(bad), "-o", str(tmp_path / "x"))
    assert refused.returncode != 0 and "model.layers.8" in refused.stderr


# ---------------------------------------------------------------------------
# Every plan as a map, handed back in


@lru_cache(maxsize=4)
def _planned(fraction: float | None) -> tuple[PlanOutcome, dict[str, Any]]:
    return plan_report(_job(fraction, timeout_ms=60_000))


def _check_round_trip(fraction: float | None) -> None:
    outcome, report = _planned(fraction)
    jsonschema.Draft202012Validator(load_schema()).validate(report)
    amap = report["accelerate_device_map"]
    assert outcome.placements is not None and outcome.cost is not None
    weights = [p["name"] for p in outcome.placements if p["kind"] == "parameter" and p["name"] != "input_ids"]
    modules = set(module_names(weights).order())
    assert set(amap) <= modules  # names only modules of the model
    owners = map_owners(amap, weights)
    assert all(owners[w] is not None for w in weights)  # assigns every weight
    if not report["accelerate_expressible"]:
        faults = report["accelerate_at_fault"]
        assert faults and all(f["reason"] and f["plan_device"] != f["accelerate_device"] for f in faults)
        return
    stored = {p["name"]: p["device"] for p in outcome.placements if p["name"] in owners}
    assert all(accelerate_value(stored[w]) == amap[owners[w]] for w in weights if owners[w] is not None)
    back = run_plan(_job(fraction, accelerate_device_map=amap))
    assert back.accelerate_input is not None
    assert back.as_dict()["accelerate_device_map"] == amap  # handed in, read back
    assert abs(back.accelerate_input["predicted_ms"] - outcome.cost["predicted_ms"]) <= 0.01 * outcome.cost[
        "predicted_ms"
    ]


@needs_corpus
@pytest.mark.slow
@pytest.mark.parametrize("fraction", FRACTIONS)
def test_every_plan_comes_back_as_a_map_priced_as_the_plan(fraction: float) -> None:
    _check_round_trip(fraction)


@needs_corpus
@pytest.mark.slow
def test_a_plan_without_a_budget_is_expressible_and_priced_as_the_plan() -> None:
    """Everything fits the GPU: the map stores every module there; the rotary tables and
    the mask the plan computes on the host are outside every module (accelerate runs them
    on the GPU), listed apart, and the map handed back is priced within 1% of the plan."""
    _, report = _planned(None)
    assert report["accelerate_expressible"] and set(report["accelerate_device_map"].values()) == {0}
    assert all(f["module"] == "" for f in report["accelerate_outside_modules"])
    _check_round_trip(None)


@needs_corpus
@pytest.mark.slow
def test_disk_weights_are_read_at_the_hosts_disk_bandwidth_each_pass() -> None:
    amap = {"": 0, "lm_head": "disk"}
    slow = {"cuda": {"memory_bytes": int(_maps()[0.75]["gpu_budget_bytes"])}, "cpu": {"disk_read_gbps": 0.5}}
    job = PlanJob(_text(), input_format="json", language="relax", mode="optimize", include=("placements",),
                  device_profiles=slow, accelerate_device_map=amap)
    outcome = run_plan(job)
    answer = outcome.as_dict()
    handed = answer["accelerate_input"]
    head = 32000 * 1024 * 4  # lm_head's float32 weight
    assert handed["disk_bytes"] == head
    assert handed["disk_read_ms"] == pytest.approx(head / 0.5e6)  # bytes / (GB/s) in ms
    assert outcome.cost is not None
    assert handed["predicted_ms"] == pytest.approx(outcome.cost["predicted_ms"] + handed["disk_read_ms"])
    assert answer["accelerate_device_map"]["lm_head"] == "disk"  # read back where the map keeps it
    assert handed["fits"] is (handed["peak_memory_bytes"]["cuda"] <= slow["cuda"]["memory_bytes"])


@needs_corpus
@pytest.mark.slow
def test_storage_keeps_the_maps_weights_and_still_prices_the_map() -> None:
    amap = _maps()[0.75]["device_map"]
    planned = run_plan(_job(0.75, accelerate_device_map=amap, accelerate_device_map_as="storage", timeout_ms=60_000))
    as_is = _handed(0.75)
    assert planned.placements is not None and planned.accelerate_input is not None and planned.cost is not None
    weights = [p for p in planned.placements if p["kind"] == "parameter" and p["name"] != "input_ids"]
    owners = map_owners(amap, [p["name"] for p in weights])
    assert all(p["device"] == device_of(amap[owners[p["name"]]]) for p in weights)  # stored where the map says
    handed = planned.accelerate_input
    assert handed["as"] == "storage"
    assert as_is.accelerate_input is not None
    assert handed["predicted_ms"] == pytest.approx(as_is.accelerate_input["predicted_ms"])  # the map's own price
