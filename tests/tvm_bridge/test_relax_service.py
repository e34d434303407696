"""Relax modules through `POST /plan`: detected from the content,
planned, answered in the input's encoding; located parse errors; why-queries
in Relax terms; 503 where `tvm` cannot be imported while Relay still plans."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import tvm
from fastapi.testclient import TestClient

from service.config import Settings
from service.main import create_app
from tvm_bridge.relax_plan import read_relax

pytestmark = pytest.mark.tvm

ROOT = Path(__file__).resolve().parents[2]

MODULE = """@I.ir_module
class Module:
    I.module_global_infos({"vdevice": [I.vdevice("llvm", 0), I.vdevice("llvm", 1)]})

    @R.function
    def main(x: R.Tensor((4,), "float32"), y: R.Tensor((4,), "float32")) -> R.Tensor((4,), "float32"):
        a = R.add(x, y)
        b = R.hint_on_device(a, R.device(1, 1))
        c = R.exp(b)
        return c
"""
RELAY = 'def @main(%x: Tensor[(4), float32]) {\n  negative(%x)\n}\n'


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    settings = Settings(pool_kind="thread", pool_size=1)
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        yield c


def _plan(client: TestClient, **body: Any) -> Any:
    return client.post("/plan", json={"default_device": "cpu:0", "host_device": "cpu:0", **body})


def test_relax_text_plans_and_answers_tvmscript(client: TestClient) -> None:
    r = _plan(client, module=MODULE)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["format"] == "text"
    out, _ = read_relax(body["module"])
    assert int(out["main"].params[0].ty.vdevice.vdevice_id) == 1
    assert "hint_on_device" not in body["module"]


def test_relax_json_answers_json_unless_asked(client: TestClient) -> None:
    mod, _ = read_relax(MODULE)
    text = tvm.ir.save_json(mod)
    r = _plan(client, module=text)
    assert r.status_code == 200, r.text
    assert r.json()["format"] == "json"
    assert isinstance(tvm.ir.load_json(r.json()["module"]), tvm.IRModule)
    r = _plan(client, module=text, output_format="text")
    assert r.status_code == 200 and r.json()["format"] == "text"


def test_relax_optimize_mode_with_a_relax_operator_pin(client: TestClient) -> None:
    pin = {"select": {"op": "relax.exp"}, "device": "cpu:0"}
    r = _plan(client, module=MODULE, mode="optimize", constraints=[pin])
    assert r.status_code == 200, r.text
    assert r.json()["cost"]["copies"] == len(r.json()["summary"]["device_copies"]) >= 1


def test_relax_syntax_error_is_a_located_400(client: TestClient) -> None:
    r = _plan(client, module=MODULE.replace("R.exp(b)", "R.exp(b"))
    assert r.status_code == 400, r.text
    body = r.json()
    assert body["type"].endswith("/malformed-module")
    line = next(i for i, t in enumerate(MODULE.splitlines(), 1) if "R.exp(b)" in t)
    assert body["locations"][0]["line"] in (line, line + 1)


def test_relax_why_query_answers_in_relax_terms(client: TestClient) -> None:
    """A why-query on a Relax operator (either spelling) answers with
    its binding as TVMScript writes it; one answer per selector sent."""
    for op in ("relax.add", "R.add"):
        r = _plan(client, module=MODULE, why=[{"op": op}])
        assert r.status_code == 200, r.text
        (result,) = r.json()["why"]
        assert result["selector"] == {"op": op} and result["matches"] == 1
        (answer,) = result["answers"]
        line = next(i for i, t in enumerate(MODULE.splitlines(), 1) if "R.add(x, y)" in t)
        assert answer["expression"] == "a = R.add(x, y)" and answer["line"] == line
        assert answer["reason"] == "annotation" and answer["device"].startswith("cpu:1")
        assert any("R.hint_on_device" in s["message"] for s in answer["chain"]), answer["chain"]
    missing = _plan(client, module=MODULE, why=[{"op": "R.matmul"}])
    assert missing.status_code == 422 and "matches no operator call" in missing.json()["detail"]


# The start of a subprocess script: importing tvm (or tvm_ffi) fails in it.
_BLOCK_TVM = textwrap.dedent(
    """
    import importlib.abc, sys

    class NoTVM(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "tvm" or name.startswith("tvm.") or name.startswith("tvm_ffi"):
                raise ImportError("tvm is blocked in this process")
            return None

    sys.meta_path.insert(0, NoTVM())
    """
)
_WITHOUT_TVM = _BLOCK_TVM + textwrap.dedent(
    """
    import json

    from fastapi.testclient import TestClient
    from service.config import Settings
    from service.main import create_app

    body = json.loads(sys.argv[1])
    with TestClient(create_app(Settings(pool_kind="thread", pool_size=1)), raise_server_exceptions=False) as c:
        relax = c.post("/plan", json={"module": body["relax"]})
        relay = c.post("/plan", json={"module": body["relay"]})
    print(json.dumps({"relax": [relax.status_code, relax.json()], "relay": [relay.status_code, relay.json()],
                      "tvm_loaded": "tvm" in sys.modules}))
    """
)


def test_relax_without_tvm_is_503_and_relay_still_plans() -> None:
    payload = json.dumps({"relax": MODULE, "relay": RELAY})
    done = subprocess.run(
        [sys.executable, "-c", _WITHOUT_TVM, payload],
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    status, body = result["relax"]
    assert status == 503 and body["type"].endswith("/tvm-unavailable"), body
    assert "pip install" in body["detail"]
    assert result["relay"][0] == 200
    assert result["tvm_loaded"] is False


_CLI_WITHOUT_TVM = _BLOCK_TVM + textwrap.dedent(
    """
    from service.cli import main

    sys.exit(main(["plan", sys.argv[1]]))
    """
)


def test_cli_plans_relax_json_to_json_and_without_tvm_exits_1(tmp_path: Path) -> None:
    from service.cli import main

    mod, _ = read_relax(MODULE)
    source = tmp_path / "module.json"
    source.write_text(tvm.ir.save_json(mod))
    out = tmp_path / "planned.json"
    code = main(["plan", str(source), "--default-device", "cpu:0", "--host-device", "cpu:0", "-o", str(out)])
    assert code == 0
    assert isinstance(tvm.ir.load_json(out.read_text()), tvm.IRModule)
    script = tmp_path / "module.py"
    script.write_text(MODULE)
    done = subprocess.run(
        [sys.executable, "-c", _CLI_WITHOUT_TVM, str(script)],
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stderr
    assert "pip install 'devplan[tvm]'" in done.stderr


def test_compile_plans_and_builds_a_relax_module(tmp_path: Path) -> None:
    settings = Settings(pool_kind="thread", pool_size=1, artifact_dir=tmp_path)
    body = {"module": MODULE, "default_device": "cpu:0", "host_device": "cpu:0", "run_check": True}
    two_devices = MODULE.replace("R.exp(b)", "R.exp(R.hint_on_device(a, R.device(1, 0)))")
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        r = c.post("/compile", json=body)
        assert r.status_code == 200, r.text
        report = r.json()["report"]
        assert report["devices"] == ["llvm:0", "llvm:1"]
        assert report["check"]["max_abs_error"] <= 1e-6
        assert c.post("/compile", json=body).json()["cache_hit"] is True
        r = c.post("/compile", json={**body, "module": two_devices})
        assert r.status_code == 200, r.text
        assert r.json()["report"]["device_copies"] >= 1
        assert r.json()["report"]["check"]["max_abs_error"] <= 1e-6


def test_relax_placements_name_bindings(client: TestClient) -> None:
    """`include: ["placements"]` of a Relax module: TVMScript names,
    bindings and lines; the copy of the hint at the copied value's line."""
    r = _plan(client, module=MODULE, include=["placements"])
    assert r.status_code == 200, r.text
    body = r.json()
    ops = {p["binding"]: p for p in body["placements"] if p["kind"] == "operator"}
    lines = MODULE.splitlines()
    assert {b: p["name"] for b, p in ops.items()} == {"a": "R.add", "c": "R.exp"}
    for b, p in ops.items():
        assert lines[p["line"] - 1].strip().startswith(f"{b} = "), p
    params = [p["name"] for p in body["placements"] if p["kind"] == "parameter"]
    assert params == ["x", "y"]


def test_language_field_overrides_detection(client: TestClient) -> None:
    # The request's `language` wins over what the content looks like.
    as_relax = _plan(client, module=MODULE, language="relax")
    assert as_relax.status_code == 200, as_relax.text
    assert as_relax.json()["module"] == _plan(client, module=MODULE).json()["module"]
    forced = _plan(client, module=MODULE, language="relay")
    assert forced.status_code == 400, forced.text
    assert forced.json()["type"].endswith("/malformed-module")
    relay_as_relax = _plan(client, module=RELAY, language="relax")
    assert relay_as_relax.status_code == 400, relay_as_relax.text
    assert "TVMScript" in relay_as_relax.json()["detail"]
    assert _plan(client, module=RELAY, language="relay").status_code == 200
    bad = _plan(client, module=RELAY, language="tir")
    assert bad.status_code == 422 and bad.json()["type"].endswith("/validation-error")
