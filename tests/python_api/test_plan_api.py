"""`devplan.plan`, `devplan.Plan` and `devplan.PlanDevices`: the service's request path in process.

The default stage plans small modules and tv_mobilenet_v3_small (half a second a plan);
the Llama-shaped decoder runs in the slow stage."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from service.cli import main as cli_main
from service.models import PlanRequest
from tests._service import ROOT
from tests.python_api.common import (
    DECODER,
    RELAX,
    WITH_KERNEL,
    corpus_file,
    load,
    save_json,
    script,
    service_plan,
    without_request,
)

# Two hints that cannot both hold (`c = R.add(a, b)` needs one device for both).
from tests.record.test_relax_cli import CONFLICT

pytestmark = pytest.mark.tvm
tvm = pytest.importorskip("tvm")
from tvm import relax

import devplan

MOBILENET = RELAX / "tv_mobilenet_v3_small.json"
# A cuda budget under which the search proves its plan optimal (`cost.optimal`, asserted): with copies
# priced synchronously (overlap off), as the bound prices them.
MOBILENET_OPTIMIZE = {"mode": "optimize", "device_profiles": {"cuda": {"memory_bytes": "60MB"}}, "overlap": False}


def _same_plan(plan: devplan.Plan, answer: dict[str, Any]) -> None:
    """`plan` is the service's `answer` (a /plan response of the same request)."""
    tvm.ir.assert_structural_equal(plan.module, tvm.ir.load_json(answer["module"]))
    if "cost" in answer:
        assert plan.cost.predicted_ms == answer["cost"]["predicted_ms"]
        assert plan.cost.optimal == answer["cost"]["optimal"]
    else:
        assert plan.cost.predicted_ms == answer["prediction"]["predicted_ms"]
    assert plan.placements == answer["placements"]
    assert plan.copies == answer["copies"]
    assert plan.device_map == answer.get("device_map", [])


def _service_answer(mod: Any, **options: Any) -> dict[str, Any]:
    status, answer = service_plan({"module": save_json(mod), "include": ["placements"], **options})
    assert status == 200, answer
    return answer


# --------------------------------------------------------------------------
# The package


def test_the_keywords_are_the_request_fields() -> None:
    """Every field of the /plan request but the module is a keyword of plan, with its default."""
    params = inspect.signature(devplan.plan).parameters
    assert next(iter(params)) == "module"
    fields = {n: f for n, f in PlanRequest.model_fields.items() if n != "module"}
    assert set(params) - {"module"} == set(fields)
    for name, field in fields.items():
        assert params[name].kind is inspect.Parameter.KEYWORD_ONLY, name
        assert params[name].default == field.get_default(call_default_factory=True), name
        assert name in (devplan.plan.__doc__ or ""), name
    assert list(inspect.signature(devplan.PlanDevices).parameters) == ["options"]


def test_version_typed_marker_and_python_m() -> None:
    from importlib import metadata

    try:
        expected = metadata.version("devplan")
    except metadata.PackageNotFoundError:
        expected = "0.0.0+source"
    assert devplan.__version__ == expected
    assert (ROOT / "devplan" / "py.typed").is_file()
    done = subprocess.run(
        [sys.executable, "-m", "devplan", "--version"], capture_output=True, text=True, cwd=ROOT, check=False
    )
    assert done.returncode == 0 and done.stdout.strip() == f"devplan {expected}", done


# --------------------------------------------------------------------------
# IRModule in, IRModule out


def test_an_ir_module_comes_back_an_ir_module_its_kernel_untouched() -> None:
    mod = script(WITH_KERNEL)
    plan = devplan.plan(mod, default_device="cpu")
    assert isinstance(plan.module, tvm.IRModule)
    assert plan.module["twice"].same_as(mod["twice"])  # the planner does not change kernels
    assert not plan.module["main"].same_as(mod["main"])
    vdevices = plan.module.global_infos["vdevice"]
    assert [str(v.target.kind.name) for v in vdevices] == ["llvm"]
    tvm.ir.assert_structural_equal(relax.transform.RealizeVDevice()(plan.module), plan.module)
    # Text in, text out: the same plan, as the service prints it.
    text = devplan.plan(WITH_KERNEL, default_device="cpu")
    assert isinstance(text.module, str) and text.module.lstrip().startswith("#")
    assert text.cost == plan.cost and text.copies == plan.copies


def test_mobilenet_equals_the_service_in_tvm_mode() -> None:
    mod = load(MOBILENET)
    plan = devplan.plan(mod)
    _same_plan(plan, _service_answer(mod))
    assert plan.cost.basis == "tvm-plan" and plan.cost.bound_ms is None
    tvm.ir.assert_structural_equal(relax.transform.RealizeVDevice()(plan.module), plan.module)


def test_mobilenet_equals_the_service_in_optimize_mode() -> None:
    mod = load(MOBILENET)
    plan = devplan.plan(mod, **MOBILENET_OPTIMIZE)
    assert plan.cost.optimal is True and plan.cost.gap in (0, 0.0, None)
    _same_plan(plan, _service_answer(mod, **MOBILENET_OPTIMIZE))
    assert plan.cost.bound_ms is not None and plan.cost.bound_ms <= plan.cost.predicted_ms + 1e-9
    assert set(plan.cost.per_device) <= {"cpu", "cuda"}
    assert plan.device_map and all("module" in g and "device" in g for g in plan.device_map)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["tvm", "optimize"])
def test_the_decoder_equals_the_service(mode: str) -> None:
    mod = load(DECODER)
    options: dict[str, Any] = {"mode": mode, "timeout_ms": 60_000}
    if mode == "optimize":
        options["device_profiles"] = {"cuda": {"memory_bytes": "2GB"}}  # the whole model fits: proven
        options["overlap"] = False
    plan = devplan.plan(mod, **options)
    if mode == "optimize":
        assert plan.cost.optimal is True, plan.cost
    _same_plan(plan, _service_answer(mod, **options))
    tvm.ir.assert_structural_equal(relax.transform.RealizeVDevice()(plan.module), plan.module)


def test_one_code_path_for_python_the_command_and_the_service(tmp_path: Path) -> None:
    """devplan.plan, `devplan plan` and POST /plan give structurally equal modules and one cost."""
    path = corpus_file(MOBILENET)
    text = path.read_text()
    in_python = devplan.plan(tvm.ir.load_json(text), **MOBILENET_OPTIMIZE)
    out = tmp_path / "planned.json"
    report = tmp_path / "report.json"
    code = cli_main(
        ["plan", str(path), "--mode", "optimize", "--memory-budget", "cuda=60MB", "--no-overlap", "-o", str(out)]
        + ["--report", str(report)]
    )
    assert code == 0
    answer = _service_answer(tvm.ir.load_json(text), **MOBILENET_OPTIMIZE)
    from_cli = tvm.ir.load_json(out.read_text())
    tvm.ir.assert_structural_equal(in_python.module, from_cli)
    tvm.ir.assert_structural_equal(in_python.module, tvm.ir.load_json(answer["module"]))
    cli_report = json.loads(report.read_text())
    assert in_python.cost.predicted_ms == cli_report["prediction"]["predicted_ms"] == answer["cost"]["predicted_ms"]
    mine = in_python.report()
    assert mine["placements"] == cli_report["placements"] and mine["copies"] == cli_report["copies"]


# --------------------------------------------------------------------------
# The pass


def test_plan_devices_is_a_module_pass_equal_to_plan() -> None:
    pass_ = devplan.PlanDevices(**MOBILENET_OPTIMIZE)
    assert isinstance(pass_, tvm.ir.transform.ModulePass)
    assert pass_.info.name == "devplan.PlanDevices" and pass_.info.opt_level == 0
    mod = load(MOBILENET)
    with tvm.transform.PassContext(opt_level=0):
        out = tvm.transform.Sequential([pass_])(mod)
    tvm.ir.assert_structural_equal(out, devplan.plan(mod, **MOBILENET_OPTIMIZE).module)


def test_plan_devices_checks_its_options_when_made() -> None:
    with pytest.raises(TypeError, match="unexpected keyword argument 'budget'"):
        devplan.PlanDevices(budget=3)
    with pytest.raises(TypeError, match="timeout_ms"):
        devplan.PlanDevices(timeout_ms="soon")


def test_an_error_inside_the_pass_reaches_the_caller_as_itself() -> None:
    mod = script(CONFLICT)
    with pytest.raises(devplan.ConflictError) as raised:
        tvm.transform.Sequential([devplan.PlanDevices()])(mod)
    with pytest.raises(devplan.ConflictError) as direct:
        devplan.plan(mod)
    assert raised.value.problem == direct.value.problem
    assert raised.value.problem["type"].endswith("/planning-conflict")


# --------------------------------------------------------------------------
# Views


def test_report_why_and_picture(tmp_path: Path) -> None:
    from service.report import SCHEMA_PATH

    jsonschema = pytest.importorskip("jsonschema")
    plan = devplan.plan(WITH_KERNEL, default_device="cpu")
    report = plan.report()
    jsonschema.validate(report, json.loads(SCHEMA_PATH.read_text()))
    assert report["placements"] == plan.placements
    answer = plan.why({"op": "R.exp"})
    assert answer["matches"] == 1 and answer["answers"][0]["device"].startswith("cpu"), answer
    dot = plan.picture(tmp_path / "plan.dot")
    assert dot.read_text().startswith("digraph") and "R.exp" in dot.read_text()
    with pytest.raises(TypeError):
        plan.why({"colour": "red"})


# --------------------------------------------------------------------------
# Errors


def test_a_conflict_is_the_services_problem_in_relax_terms() -> None:
    with pytest.raises(devplan.ConflictError) as raised:
        devplan.plan(CONFLICT)
    status, answer = service_plan({"module": CONFLICT})
    assert status == 422
    assert raised.value.problem == without_request(answer)
    lines = [loc["line"] for loc in raised.value.problem["locations"]]
    assert lines == [8, 10, 9], raised.value.problem
    text = str(raised.value)
    assert "<string>:8:17" in text and "R.hint_on_device" in text and "%x" not in text


def test_a_conflict_of_an_ir_module_names_bindings() -> None:
    with pytest.raises(devplan.ConflictError) as raised:
        devplan.plan(script(CONFLICT))
    problem = raised.value.problem
    expressions = [c["expression"] for c in problem["constraints"]]
    assert "a = R.hint_on_device(x)" in expressions and "c = R.add(a, b)" in expressions, problem
    assert "%" not in json.dumps(problem)
    assert "<IRModule>:8:17" in str(raised.value)  # where TVM's spans put the hint in the parsed text


def test_a_module_that_does_not_parse_is_a_located_parse_error() -> None:
    bad = "@I.ir_module\nclass Module:\n    x = (\n"
    with pytest.raises(devplan.ParseError) as raised:
        devplan.plan(bad)
    status, answer = service_plan({"module": bad})
    assert status == 400 and raised.value.problem == without_request(answer)
    assert raised.value.problem["locations"][0]["line"] == 3
    with pytest.raises(devplan.ParseError):
        devplan.plan('def @main(%x: Tensor[(4), float32]) { negative(%x) ')


def test_options_the_schema_refuses_are_config_errors_as_the_service_says() -> None:
    for options in ({"timeout_ms": 0}, {"mode": "fastest"}):
        with pytest.raises(devplan.ConfigError) as raised:
            devplan.plan(WITH_KERNEL, **options)
        status, answer = service_plan({"module": WITH_KERNEL, **options})
        assert status == 422 and raised.value.problem == without_request(answer), options
        assert isinstance(raised.value, ValueError)
    pin = {"select": {"op": "R.matmul"}, "device": "cpu"}  # the module has no matmul
    with pytest.raises(devplan.ConfigError) as raised:
        devplan.plan(WITH_KERNEL, constraints=[pin])
    status, answer = service_plan({"module": WITH_KERNEL, "constraints": [pin]})
    assert status == 422 and raised.value.problem == without_request(answer)


def test_wrong_types_and_unknown_keywords_are_type_errors() -> None:
    with pytest.raises(TypeError, match="unexpected keyword argument 'budget'"):
        devplan.plan(WITH_KERNEL, budget=1)
    with pytest.raises(TypeError, match="timeout_ms"):
        devplan.plan(WITH_KERNEL, timeout_ms="5")
    with pytest.raises(TypeError, match="module must be"):
        devplan.plan(42)
    with pytest.raises(TypeError):
        devplan.plan(WITH_KERNEL, default_device=3)


def test_a_plan_past_its_limit_is_a_timeout_error() -> None:
    text = corpus_file(MOBILENET).read_text()  # reading alone takes longer than 1 ms
    with pytest.raises(devplan.PlanTimeoutError) as raised:
        devplan.plan(text, timeout_ms=1)
    assert isinstance(raised.value, TimeoutError)
    assert raised.value.problem["type"].endswith("/solver-timeout") and raised.value.problem["status"] == 504


def test_links_and_assume_dim_reach_the_plan_as_on_the_command_line(tmp_path: Path) -> None:
    links = {"cpu->cuda": {"gbps": 0.001, "latency_us": 5000}}
    pins = [{"select": {"op": "R.add"}, "device": "cpu"}, {"select": {"op": "R.exp"}, "device": "cuda"}]
    options = {"mode": "optimize", "links": links, "assume_dim": 2, "constraints": pins}
    source = tmp_path / "kernel.py"
    source.write_text(WITH_KERNEL)
    (tmp_path / "links.json").write_text(json.dumps(links))
    report = tmp_path / "report.json"
    argv = ["plan", str(source), "--mode", "optimize", "--links", str(tmp_path / "links.json"), "--assume-dim", "2"]
    extra = ["--constraint", json.dumps(pins[0]), "--constraint", json.dumps(pins[1]), "-o", str(tmp_path / "out.py")]
    code = cli_main([*argv, *extra, "--report", str(report)])
    assert code == 0
    in_python = devplan.plan(WITH_KERNEL, **options)
    assert in_python.cost.predicted_ms == json.loads(report.read_text())["prediction"]["predicted_ms"]
    plain = devplan.plan(WITH_KERNEL, mode="optimize", constraints=pins)
    assert in_python.copies and in_python.cost.predicted_ms > plain.cost.predicted_ms + 5  # the link's 5 ms
    assert cli_main([*argv[:2], "--assume-dim", "0"]) == 1


def test_relay_text_plans_to_the_services_text() -> None:
    relay_text = '#[version = "0.0.5"]\ndef @main(%x: Tensor[(4), float32]) {\n  negative(%x)\n}\n'
    plan = devplan.plan(relay_text, virtual_devices=["cpu", "cuda"], default_device="cpu")
    status, answer = service_plan({"module": relay_text, "virtual_devices": ["cpu", "cuda"], "default_device": "cpu"})
    assert status == 200 and plan.module == answer["module"]
    assert plan.summary == answer["summary"] and plan.device_map == []
    assert [p["device"] for p in plan.placements if p["kind"] == "operator"] == ["cpu"]


def test_an_unexpected_failure_is_an_internal_error_with_its_cause(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever TVM or a bug raises reaches the caller as devplan.InternalError (the service's
    500 problem, no detail), the original exception chained as its cause."""
    import service.relax_planning

    def broken(mod: Any, mode: str) -> Any:
        raise RuntimeError("TVM said no")

    monkeypatch.setattr(service.relax_planning, "module_source", broken)
    with pytest.raises(devplan.InternalError) as raised:
        devplan.plan(script(WITH_KERNEL))
    assert isinstance(raised.value.__cause__, RuntimeError) and "TVM said no" in str(raised.value)
    assert raised.value.problem["status"] == 500 and "detail" not in raised.value.problem
