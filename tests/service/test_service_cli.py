"""`devplan plan` against its contract: outputs, --explain, every exit code."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

import relay
from service.cli import main, parse_bytes
from service.examples import BIG_HEAD, CONFLICT, CPU_ANNOTATION, HEAD_PINS, PLAIN, SMALL_CNN
from tests._service import run_devplan
from tests.explain_table import device_rows


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


def devplan(*argv: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """The real console entry point in a subprocess."""
    return run_devplan(*argv, stdin=stdin)


@pytest.fixture
def write(tmp_path: Path) -> Any:
    def _write(name: str, text: str) -> str:
        path = tmp_path / name
        path.write_text(text)
        return str(path)

    return _write


# --------------------------------------------------------------------------
# exit 0


def test_plans_corpus_model_like_tvm(capsys: Any, corpus_dir: Path) -> None:
    code, out, err = run_cli(capsys, "plan", str(corpus_dir / "mlp.relay"))
    assert code == 0, err
    expected = relay.parse_text((corpus_dir / "mlp.planned.relay").read_text())
    assert relay.structural_equal(relay.parse_text(out), expected)


def test_annotated_model_with_explain(capsys: Any, corpus_dir: Path) -> None:
    code, out, err = run_cli(capsys, "plan", str(corpus_dir / "mlp.annotated.relay"), "--explain")
    assert code == 0, err
    expected = relay.parse_text((corpus_dir / "mlp.annotated.planned.relay").read_text())
    assert relay.structural_equal(relay.parse_text(out), expected)
    lines = err.splitlines()
    assert any(line.startswith("@main(") for line in lines), err
    copies = [line for line in lines if line.startswith("device_copy at ")]
    assert copies and all(":" in line.split()[2] for line in copies), err


def test_explain_names_param_devices_and_copy_location(capsys: Any, write: Any) -> None:
    path = write("ann.relay", CPU_ANNOTATION)
    code, out, err = run_cli(capsys, "plan", path, "--virtual-devices", '["cpu", "cuda"]', "--explain")
    assert code == 0, err
    assert "device_copy(" in out
    assert "@main(%x on cpu" in err and "%y on cpu" in err, err
    assert any(line.startswith("device_copy at 3:") for line in err.splitlines()), err


def test_z3_check_flag_runs_the_check_and_keeps_the_plan(
    capsys: Any, write: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import solver.steps.check
    from solver.solve import check_plan as real  # what the planner calls

    calls: list[int] = []

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(solver.steps.check, "check_plan", counting)
    path = write("ann.relay", CPU_ANNOTATION)
    code, plain, err = run_cli(capsys, "plan", path, "--virtual-devices", '["cpu", "cuda"]')
    assert code == 0, err
    assert calls == []
    code, checked, err = run_cli(capsys, "plan", path, "--virtual-devices", '["cpu", "cuda"]', "--z3-check")
    assert code == 0, err
    assert calls == [1] and checked == plain


def test_optimize_mode_keeps_backbone_on_cuda_and_explains_cost(capsys: Any, write: Any) -> None:
    path = write("cnn.relay", SMALL_CNN)
    pins = [arg for pin in HEAD_PINS for arg in ("--constraint", json.dumps(pin))]
    code, out, err = run_cli(capsys, "plan", path, *pins, "--mode", "optimize", "--explain")
    assert code == 0, err
    assert out.count("device_copy(") == 1
    lines = err.splitlines()
    summary = next(line for line in lines if line.startswith("predicted "))
    assert "optimal" in summary and "; 1 copy (" in lines[0]
    table = device_rows(err)
    assert int(table["cuda"]["operators"]) > int(table["cpu"]["operators"]) >= 2
    # The TVM mode (default) with the same pins moves the backbone to the cpu and prints no cost.
    code, tvm_out, err = run_cli(capsys, "plan", path, *pins, "--explain")
    assert code == 0 and not any(line.startswith("predicted ") for line in err.splitlines())
    assert tvm_out != out


def test_memory_budget_and_files(capsys: Any, write: Any) -> None:
    path = write("head.relay", BIG_HEAD)
    code, _, err = run_cli(capsys, "plan", path, "--mode", "optimize", "--explain")
    assert code == 0, err
    assert int(device_rows(err)["cuda"]["weight bytes"]) > 8 * 2**20  # the big weight lives on cuda without a budget
    code, out, err = run_cli(
        capsys, "plan", path, "--mode", "optimize", "--memory-budget", "cuda=8MiB", "--explain"
    )
    assert code == 0, err
    cuda = device_rows(err).get("cuda")
    assert cuda is None or int(cuda["weight bytes"]) <= 8 * 2**20
    # The same budget from a --device-profiles file gives the same plan.
    profiles = write("profiles.json", json.dumps({"cuda": {"memory_bytes": 8 * 2**20}}))
    code, same, err = run_cli(capsys, "plan", path, "--mode", "optimize", "--device-profiles", profiles)
    assert code == 0 and same == out
    # Operator support from a file: nothing may stay on cuda when cuda runs none of the operators.
    ops = ["nn.relu", "nn.dense", "nn.softmax"]
    support = write("support.json", json.dumps({"cuda": {"unsupported": ops}}))
    code, out, err = run_cli(capsys, "plan", path, "--mode", "optimize", "--op-support", support, "--explain")
    assert code == 0, err
    assert "cuda" not in device_rows(err)


def test_cost_table_file_moves_an_operator(capsys: Any, write: Any) -> None:
    import solver

    text = '#[version = "0.0.5"]\ndef @main(%x: Tensor[(64, 64), float32]) {\n  nn.relu(%x)\n}\n'
    path = write("relu.relay", text)
    key = solver.cost_key("nn.relu", [relay.TensorType((64, 64), "float32")], None)
    table = write(
        "table.json", json.dumps({"version": 1, "entries": [{"key": key, "device": "cpu", "ns": 1e9}]})
    )
    code, _, err = run_cli(capsys, "plan", path, "--mode", "optimize", "--explain")
    assert code == 0 and "cpu" in device_rows(err), err
    code, _, err = run_cli(capsys, "plan", path, "--mode", "optimize", "--cost-table", table, "--explain")
    assert code == 0 and "cpu" not in device_rows(err), err


def test_optimize_conflict_exits_3(capsys: Any, write: Any) -> None:
    path = write("cnn.relay", SMALL_CNN)
    support = write("support.json", json.dumps({"cuda": {"unsupported": ["nn.softmax"]}}))
    pin = json.dumps({"select": {"op": "nn.softmax"}, "device": "cuda"})
    code, out, err = run_cli(
        capsys, "plan", path, "--mode", "optimize", "--op-support", support, "--constraint", pin
    )
    assert code == 3 and out == ""
    assert "operator support" in err and ":13:3" in err


@pytest.mark.parametrize(
    ("text", "expected"),
    [("8GiB", 8 * 2**30), ("512MiB", 512 * 2**20), ("2GB", 2 * 10**9), ("1.5KiB", 1536), ("1000", 1000)],
)
def test_parse_bytes(text: str, expected: int) -> None:
    assert parse_bytes(text) == expected


@pytest.mark.parametrize("text", ["", "GiB", "8 parsecs", "-1MiB", "0", "8XB"])
def test_parse_bytes_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        parse_bytes(text)


def test_stdin_output_file_and_json_format(tmp_path: Path) -> None:
    out_file = tmp_path / "planned.json"
    r = devplan("plan", "-", "--output", str(out_file), "--output-format", "json", stdin=PLAIN)
    assert r.returncode == 0, r.stderr
    assert r.stdout == ""
    text = devplan("plan", "-", stdin=PLAIN)
    assert text.returncode == 0, text.stderr
    assert relay.structural_equal(relay.load_json(out_file.read_text()), relay.parse_text(text.stdout))


def test_json_input_detected(capsys: Any, corpus_dir: Path) -> None:
    code, out, err = run_cli(capsys, "plan", str(corpus_dir / "mlp.json"))
    assert code == 0, err
    expected = relay.parse_text((corpus_dir / "mlp.planned.relay").read_text())
    assert relay.structural_equal(relay.parse_text(out), expected)


def test_device_flags_accept_shorthand_and_objects(capsys: Any, write: Any) -> None:
    path = write("plain.relay", PLAIN)
    code, out, err = run_cli(
        capsys, "plan", path, "--default-device", '{"device_type": "cpu"}', "--host-device", "cpu"
    )
    assert code == 0, err
    code2, out2, _ = run_cli(capsys, "plan", path, "--default-device", "cpu")
    assert code2 == 0
    assert out == out2
    assert "cuda" not in out


def test_constraint_flag_pins_an_op(capsys: Any, write: Any) -> None:
    path = write("plain.relay", PLAIN)
    pin = json.dumps({"select": {"op": "nn.relu"}, "device": "cpu"})
    code, out, err = run_cli(capsys, "plan", path, "--constraint", pin, "--explain")
    assert code == 0, err
    assert "device_copy(" in out


# --------------------------------------------------------------------------
# exit 1


@pytest.mark.parametrize(
    "argv",
    [
        ["plan"],
        ["plan", "x.relay", "--bogus"],
        ["plan", "x.relay", "--timeout-ms", "soon"],
        ["plan", "x.relay", "--output-format", "yaml"],
        ["frobnicate"],
        [],
    ],
    ids=["no-input", "unknown-flag", "bad-int", "bad-choice", "unknown-command", "no-command"],
)
def test_argparse_errors_exit_1(capsys: Any, argv: list[str]) -> None:
    code, _, err = run_cli(capsys, *argv)
    assert code == 1
    assert "error" in err


@pytest.mark.parametrize(
    "flags",
    [
        ["--virtual-devices", "[1"],
        ["--virtual-devices", '{"device_type": "cpu"}'],
        ["--virtual-devices", '[{"device_type": "cpu", "color": "red"}]'],
        ["--default-device", '{"device_type": '],
        ["--constraint", '{"select": {"op": "add"}}'],
        ["--constraint", "nope"],
        ["--timeout-ms", "0"],
        ["--default-device", "tpu"],
        ["--constraint", '{"select": {"function": "@missing"}, "device": "cpu"}'],
        ["--constraint", '{"select": {"op": "nn.conv2d"}, "device": "cpu"}'],
        ["--memory-budget", "cuda"],
        ["--memory-budget", "cuda=lots"],
        ["--mode", "optimize", "--device-profiles", "/nonexistent/profiles.json"],
        ["--mode", "optimize", "--cost-table", "/dev/null"],
    ],
    ids=[
        "bad-json",
        "not-a-list",
        "unknown-field",
        "truncated-spec",
        "constraint-without-device",
        "constraint-not-json",
        "zero-timeout",
        "unknown-device-type",
        "selector-matches-no-function",
        "selector-matches-no-op",
        "budget-without-size",
        "budget-not-a-size",
        "profiles-unreadable",
        "cost-table-empty",
    ],
)
def test_bad_flag_values_exit_1(capsys: Any, write: Any, flags: list[str]) -> None:
    path = write("plain.relay", PLAIN)
    code, out, err = run_cli(capsys, "plan", path, *flags)
    assert code == 1, (out, err)
    assert out == ""
    assert err.strip()


def test_unreadable_input_exits_1(capsys: Any, tmp_path: Path) -> None:
    code, _, err = run_cli(capsys, "plan", str(tmp_path / "missing.relay"))
    assert code == 1
    assert "missing.relay" in err
    code, _, err = run_cli(capsys, "plan", str(tmp_path))  # a directory
    assert code == 1


def test_unwritable_output_exits_1(capsys: Any, write: Any, tmp_path: Path) -> None:
    path = write("plain.relay", PLAIN)
    code, _, err = run_cli(
        capsys, "plan", path, "--output", str(tmp_path / "no" / "such" / "dir" / "out.relay")
    )
    assert code == 1
    assert "cannot write" in err


# --------------------------------------------------------------------------
# exit 2, 3, 4


def test_parse_error_exits_2_with_location(capsys: Any, write: Any) -> None:
    path = write(
        "bad.relay", '#[version = "0.0.5"]\ndef @main(%x: Tensor[(4), float32]) {\n  negative(%x\n}\n'
    )
    code, out, err = run_cli(capsys, "plan", path)
    assert code == 2
    assert out == ""
    assert err.startswith("error: ")
    assert f"{path}:4:1" in err


def test_verify_error_exits_2(capsys: Any, write: Any) -> None:
    path = write(
        "unbound.relay", '#[version = "0.0.5"]\ndef @main(%x: Tensor[(4), float32]) {\n  negative(%y)\n}\n'
    )
    code, _, err = run_cli(capsys, "plan", path)
    assert code == 2
    assert ":3:" in err


def test_random_bytes_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "noise.bin"
    path.write_bytes(bytes(range(256)) * 4)
    r = devplan("plan", str(path))
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr


def test_conflict_exits_3_with_one_line_per_constraint(capsys: Any, write: Any) -> None:
    path = write("conflict.relay", CONFLICT)
    code, out, err = run_cli(capsys, "plan", path, "--virtual-devices", '["cpu", "cuda"]')
    assert code == 3
    assert out == ""
    lines = err.splitlines()
    assert lines[0].startswith("error: ")
    located = [line for line in lines[1:] if f"{path}:" in line]
    assert len(located) >= 2, err
    assert any(f"{path}:2:" in line for line in located) and any(f"{path}:3:" in line for line in located), (
        err
    )


def test_conflict_explanation_printed_with_or_without_explain(capsys: Any, write: Any) -> None:
    path = write("conflict.relay", CONFLICT)
    _, _, plain_err = run_cli(capsys, "plan", path, "--virtual-devices", '["cpu", "cuda"]')
    code, _, explain_err = run_cli(capsys, "plan", path, "--virtual-devices", '["cpu", "cuda"]', "--explain")
    assert code == 3
    assert plain_err == explain_err


class StepClock:
    """A clock reading 0.0 for its first `free` readings, then 1e9 seconds:
    the time limit expires at a chosen point, without a real clock."""

    def __init__(self, free: int) -> None:
        self.free = free
        self.reads = 0

    def __call__(self) -> float:
        self.reads += 1
        return 0.0 if self.reads <= self.free else 1e9


# Readings: 1 at the start of run_plan, 1 after parsing, then the planner's.
@pytest.mark.parametrize("free, step", [(1, "parse"), (3, "plan")])
def test_timeout_exits_4(capsys: Any, write: Any, free: int, step: str) -> None:
    path = write("plain.relay", PLAIN)
    clock = StepClock(free)
    code = main(["plan", path, "--timeout-ms", "1000"], clock=clock)
    out, err = capsys.readouterr()
    assert code == 4, err
    assert out == ""
    assert err.startswith("error: planning did not finish within its time limit of 1000 ms"), err
    assert "Traceback" not in err
    assert clock.reads > free  # the expired reading was the one that stopped it
    if step == "parse":
        assert clock.reads == 2  # stopped before the planner ran


def test_timeout_not_reached_plans(capsys: Any, write: Any) -> None:
    path = write("plain.relay", PLAIN)
    code = main(["plan", path, "--timeout-ms", "1000"], clock=StepClock(10**9))
    out, err = capsys.readouterr()
    assert code == 0, err
    assert relay.parse_text(out)


def test_never_a_traceback_from_the_console_script(tmp_path: Path) -> None:
    for argv in (["plan", "--virtual-devices", "{"], ["plan", str(tmp_path)], ["--help"], ["plan", "--help"]):
        r = devplan(*argv)
        assert "Traceback" not in r.stderr, argv
        assert r.returncode in (0, 1), (argv, r.returncode)


def test_serve_flags_reach_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    import signal

    import uvicorn

    from service.config import Settings, get_settings

    seen: dict[str, Any] = {}
    monkeypatch.setattr(uvicorn, "run", lambda *args, **kwargs: seen.update(kwargs))
    monkeypatch.setattr(signal, "signal", lambda *args: None)  # keep pytest's handlers
    for name in ("ARTIFACT_MAX_BYTES", "ARTIFACT_MAX_AGE_S", "PORT"):
        monkeypatch.setenv(f"DEVPLAN_{name}", "1")  # restored afterwards; serve overrides them
    argv = ["serve", "--artifact-max-bytes", "1048576", "--artifact-max-age-s", "60", "--port", "0"]
    assert main(argv) == 0
    settings = Settings()
    assert (settings.artifact_max_bytes, settings.artifact_max_age_s) == (1048576, 60.0)
    assert seen["port"] == 0
    get_settings.cache_clear()
