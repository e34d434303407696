"""The attack corpus against the real service (uvicorn on 127.0.0.1 with its
planning pool) and the CLI: a located 400 / exit 2, and nothing ran."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from .attacks import ATTACKS, Attack

pytestmark = pytest.mark.tvm

ROOT = Path(__file__).resolve().parents[2]
SELF_REFERENCE = '{"root_index": 0, "nodes": [{"type": "ffi.Array", "data": [0]}]}'
GOOD = """@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor((4,), dtype="float32")) -> R.Tensor((4,), dtype="float32"):
        y = R.exp(x)
        return y
"""


def _plan(server: Any, module: str) -> httpx.Response:
    return httpx.post(server.base_url + "/plan", json={"module": module, "default_device": "cpu"}, timeout=120)


def test_every_attack_over_http_is_a_located_400(server: Any, tmp_path: Path) -> None:
    for attack in ATTACKS:
        marker = tmp_path / f"{attack.name}.pwned"
        r = _plan(server, attack.module(marker))
        assert r.status_code == 400, (attack.name, r.text)
        assert r.headers["content-type"].startswith("application/problem+json")
        body = r.json()
        assert body["type"].endswith("/malformed-module"), (attack.name, body)
        line, column = attack.location(marker)
        assert body["locations"][0]["line"] == line and body["locations"][0]["column"] == column, (attack.name, body)
        assert attack.says in body["detail"], (attack.name, body["detail"])
        assert not marker.exists(), attack.name
    assert _plan(server, GOOD).status_code == 200  # the service still plans


def test_self_referencing_json_is_a_400_and_the_worker_lives(server: Any) -> None:
    r = _plan(server, SELF_REFERENCE)
    assert r.status_code == 400, r.text
    assert r.json()["type"].endswith("/malformed-module") and "node 0" in r.json()["detail"]
    for _ in range(2):  # both workers of the pool still answer
        assert _plan(server, GOOD).status_code == 200
    assert "died" not in server.log_text()


def _cli(module_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "service.cli", "plan", str(module_path), "--default-device", "cpu"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _cli_refuses(attack: Attack, tmp_path: Path) -> None:
    marker = tmp_path / f"{attack.name}.pwned"
    source = tmp_path / f"{attack.name}.py"
    source.write_text(attack.module(marker))
    done = _cli(source)
    assert done.returncode == 2, (attack.name, done.stderr)
    line, column = attack.location(marker)
    # Located in the file the CLI was given (the file's name, not `<relax>`).
    assert f"{source}:{line}:{column}" in done.stderr, (attack.name, done.stderr)
    assert not marker.exists(), attack.name


def test_the_issues_example_on_the_cli(tmp_path: Path) -> None:
    _cli_refuses(next(a for a in ATTACKS if a.name == "issue-annotation"), tmp_path)
    source = tmp_path / "self.json"
    source.write_text(SELF_REFERENCE)
    done = _cli(source)
    assert done.returncode == 2 and "node 0" in done.stderr, done.stderr


@pytest.mark.slow
@pytest.mark.parametrize("attack", ATTACKS, ids=[a.name for a in ATTACKS])
def test_every_attack_on_the_cli(attack: Attack, tmp_path: Path) -> None:
    _cli_refuses(attack, tmp_path)
