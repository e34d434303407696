"""Hostile callers of /compile against a real server (uvicorn on 127.0.0.1): what they send
never crashes, floods or writes through TVM and the compile process.

One class of input per section: target options that would set LLVM or TVM globals,
artifact names taken by a directory, memory (a run check's answer flooding its pipe, a
module declaring huge tensors, string formatting in a kernel), malformed TVM JSON that
crashed TVM's readers, shared sub-expressions and time limits, forged run-check answers,
and a client that leaves while its compile runs."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import RunningServer, start_server, stop_server
from tests.sandbox.kernels import attack_lines, one_device

pytestmark = pytest.mark.tvm

RELAY = (
    '#[version = "0.0.5"]\n'
    "def @main(%x: Tensor[(4), float32]) {\n"
    "  negative(%x)\n"
    "}\n"
)
GOOD_RELAX = """@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor((4, 4), dtype="float32")) -> R.Tensor((4, 4), dtype="float32"):
        y = R.matmul(x, x)
        z = R.nn.softmax(y)
        return z
"""
CL_OPT = ["-print-after-all"]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    log_path = tmp_path_factory.mktemp("hostile") / "devplan.log"
    srv = start_server(log_path, {"DEVPLAN_POOL_SIZE": "1", "DEVPLAN_RUN_CHECK_MAX_BYTES": "1GiB"})
    try:
        yield srv
    finally:
        stop_server(srv)


def _artifacts(server: RunningServer) -> Path:
    return server.log_path.parent / "artifacts"


def _post(server: RunningServer, path: str, body: dict[str, Any], timeout: float = 600) -> httpx.Response:
    return httpx.post(server.base_url + path, json=body, timeout=timeout)


def _compile(server: RunningServer, module: str, **fields: Any) -> httpx.Response:
    return _post(server, "/compile", {"module": module, "default_device": "cpu", **fields})


def _problem(response: httpx.Response, status: int, kind: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body: dict[str, Any] = response.json()
    assert body["type"].endswith(f"/{kind}"), body
    return body


# ------------------------------------------------------------------ 1. targets


@pytest.mark.parametrize(
    "targets",
    [
        {"cpu": {"kind": "llvm", "cl-opt": CL_OPT}},
        {"cpu": "llvm -cl-opt=-print-after-all"},
        {"cpu": {"kind": "llvm", "jit": "orcjit"}},
        {"cuda": {"kind": "cuda", "host": {"kind": "llvm", "cl-opt": CL_OPT}}},
    ],
    ids=["dict", "string", "jit", "nested-host"],
)
def test_a_request_target_that_sets_llvm_globals_is_a_422_naming_it(
    server: RunningServer, targets: dict[str, Any]
) -> None:
    body = _problem(_compile(server, RELAY, targets=targets), 422, "invalid-target")
    (option,) = [name for name in ("cl-opt", "jit") if f"`{name}`" in body["detail"]]
    assert option in json.dumps(targets)


def test_a_relax_vdevice_target_that_sets_llvm_globals_is_a_422(server: RunningServer) -> None:
    module = GOOD_RELAX.replace(
        "class Module:\n",
        'class Module:\n    I.module_global_infos({"vdevice": [I.vdevice({"kind": "llvm", "cl-opt": ["-print-after-all"]}, 0)]})\n',
    ).replace('dtype="float32")) ->', 'dtype="float32", vdevice="llvm:0")) ->', 1)
    body = _problem(_compile(server, module), 422, "invalid-target")
    assert "`cl-opt`" in body["detail"] and "vdevice" in body["detail"]


def test_a_relay_device_target_that_sets_llvm_globals_is_a_422(server: RunningServer) -> None:
    devices = [{"device_type": "cpu", "target": "llvm -cl-opt=-print-after-all"}]
    response = _post(server, "/compile", {"module": RELAY, "virtual_devices": devices, "default_device": "cpu"})
    body = _problem(response, 422, "invalid-target")
    assert "`cl-opt`" in body["detail"]


def test_the_queue_workers_compile_refuses_the_same_target(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """/jobs/compile and `devplan worker` run `service.jobs.task.build`: the same guard."""
    from service.config import get_settings
    from service.jobs.task import build

    monkeypatch.setenv("DEVPLAN_ARTIFACT_DIR", str(tmp_path))
    get_settings.cache_clear()
    try:
        payload = {
            "key": "0" * 64,
            "module": RELAY,
            "options": {"default_device": "cpu"},
            "targets": {"cpu": {"kind": "llvm", "cl-opt": CL_OPT}},
            "compile_timeout_s": 300,
        }
        outcome = build(payload, "job-target")
    finally:
        get_settings.cache_clear()
    assert outcome["error"]["kind"] == "invalid-target" and "`cl-opt`" in outcome["error"]["message"]
    assert not list(tmp_path.glob("tmp-*"))


@pytest.mark.slow
def test_a_directory_or_link_at_an_artifacts_name_is_replaced_not_followed(server: RunningServer) -> None:
    module = RELAY.replace("negative", "exp")
    first = _compile(server, module)
    assert first.status_code == 200, first.text
    artifact_id = first.json()["artifact_id"]
    store = _artifacts(server)
    library = store / f"{artifact_id}.so"
    entries = list((store / "requests").glob("*.json"))
    # Another caller's work left a directory at the library's name and a link at the entry's.
    library.unlink()
    (library / "planted").mkdir(parents=True)
    outside = store.parent / "outside.json"
    outside.write_text("{}")
    for entry in entries:
        entry.unlink()
        entry.symlink_to(outside)
    again = _compile(server, module)
    assert again.status_code == 200, again.text
    assert again.json()["artifact_id"] == artifact_id and not again.json()["cache_hit"]
    assert library.is_file() and not library.is_symlink()
    assert outside.read_text() == "{}"  # the link was replaced, not written through
    download = httpx.get(server.base_url + f"/artifacts/{artifact_id}", timeout=60)
    assert download.status_code == 200 and len(download.content) == again.json()["size_bytes"]


# ------------------------------------------------------------------ 2. memory


@pytest.mark.slow
def test_a_module_declaring_huge_tensors_is_module_too_large_before_its_check(server: RunningServer) -> None:
    module = RELAY.replace("(4)", "(1000000000)")  # 4 GB declared in 60 bytes
    body = _problem(_compile(server, module, run_check=True), 422, "module-too-large")
    assert "DEVPLAN_RUN_CHECK_MAX_BYTES" in body["detail"]
    assert not [p for p in _artifacts(server).iterdir() if p.name.startswith("tmp-")]
    # Without the check nothing that size is ever made: the module compiles.
    assert _compile(server, module).status_code == 200


@pytest.mark.slow
def test_string_formatting_in_a_kernel_is_a_located_400(server: RunningServer) -> None:
    module = one_device(attack_lines("system", path="x").replace('"touch x"', '"%300000000s" % "0"'))
    for route in ("/plan", "/compile"):
        body = _problem(_post(server, route, {"module": module, "default_device": "cpu"}), 400, "malformed-module")
        assert "`%`" in body["detail"] and body["locations"][0]["line"] > 0


# ------------------------------------------------------------------ 3. malformed TVM JSON


def _relax_json() -> dict[str, Any]:
    import tvm
    from tvm.script import from_source

    return dict(json.loads(tvm.ir.save_json(from_source(GOOD_RELAX))))


def _call_of(doc: dict[str, Any], op: str) -> int:
    nodes = doc["nodes"]
    return next(i for i, n in enumerate(nodes) if n["type"] == "ir.Call" and nodes[n["data"]["op"]]["data"] == op)


def _malformed() -> dict[str, str]:
    cases: dict[str, str] = {}
    doc = _relax_json()
    matmul = _call_of(doc, "relax.matmul")
    doc["nodes"][matmul]["data"]["attrs"] = 0  # the null node
    cases["attrs-null"] = json.dumps(doc)
    doc = _relax_json()
    nodes = doc["nodes"]
    dict_attrs = next(i for i, n in enumerate(nodes) if n["type"] == "ir.DictAttrs")
    nodes[_call_of(doc, "relax.nn.softmax")]["data"]["attrs"] = dict_attrs
    cases["attrs-dict"] = json.dumps(doc)
    doc = _relax_json()
    nodes = doc["nodes"]
    param = next(i for i, n in enumerate(nodes) if n["type"] == "ir.Var")
    nodes[_call_of(doc, "relax.nn.softmax")]["data"]["op"] = param
    cases["op-var"] = json.dumps(doc)
    return cases


def test_malformed_tvm_json_is_a_400_naming_the_node_and_the_planner_lives(server: RunningServer) -> None:
    for name, text in _malformed().items():
        body = _problem(_post(server, "/plan", {"module": text, "default_device": "cpu"}), 400, "malformed-module")
        assert "node " in body["detail"], (name, body)
        # The same graph through TVMScript's metadata line.
        script = f"metadata = tvm.ir.load_json({json.dumps(text)})\n" + GOOD_RELAX
        body = _problem(_post(server, "/plan", {"module": script, "default_device": "cpu"}), 400, "malformed-module")
        assert "node " in body["detail"], (name, body)
    assert _post(server, "/plan", {"module": GOOD_RELAX, "default_device": "cpu"}).status_code == 200
    assert "died" not in server.log_text()


@pytest.mark.slow
def test_malformed_tvm_json_is_a_400_from_compile_and_the_compile_process_lives(server: RunningServer) -> None:
    for name, text in _malformed().items():
        body = _problem(_compile(server, text), 400, "malformed-module")
        assert "node " in body["detail"], (name, body)
    assert "the compiler process died" not in server.log_text()
    assert _compile(server, GOOD_RELAX).status_code == 200


# ------------------------------------------------------------------ 4. shared sub-DAGs, time limits


def _tuple_dag(levels: int) -> str:
    """TVM JSON of a module whose one binding is a tuple listing the level below twice,
    `levels` deep (saved with each level once: the graph shares it)."""
    import tvm
    from tvm import relax

    x = relax.Var("x", relax.TensorType((4,), "float32"))
    value: Any = x
    for _ in range(levels):
        value = relax.Tuple([value, value])
    if levels <= 4:  # small enough for TVM's normaliser, which fills in the types
        builder = relax.BlockBuilder()
        with builder.function("main", [x]):
            builder.emit(value)
            builder.emit_func_output(x)
        return str(tvm.ir.save_json(builder.get()))
    y = relax.Var("y", relax.TensorType((4,), "float32"))
    body = relax.SeqExpr([relax.BindingBlock([relax.VarBinding(y, value)])], x)
    func = relax.Function([x], body, relax.TensorType((4,), "float32"))
    return str(tvm.ir.save_json(tvm.IRModule({"main": func})))


def test_a_tuple_dag_forty_levels_deep_is_refused_within_the_time_limit(server: RunningServer) -> None:
    text = _tuple_dag(40)
    for route in ("/plan", "/compile"):
        response = _post(server, route, {"module": text, "default_device": "cpu", "timeout_ms": 10_000})
        body = _problem(response, 400, "malformed-module")
        assert "bind a value used twice to a variable" in body["detail"]
    # Shallow sharing, as TVM's own modules never have it but within the bound, still plans.
    assert _post(server, "/plan", {"module": _tuple_dag(3), "default_device": "cpu"}).status_code == 200


def test_a_tvmscript_tuple_dag_forty_levels_deep_is_a_located_400(server: RunningServer) -> None:
    lines = [*GOOD_RELAX.splitlines()[:4], "        t0 = (x, x)"]
    lines += [f"        t{i} = (t{i - 1}, t{i - 1})" for i in range(1, 40)]
    module = "\n".join([*lines, "        return x"]) + "\n"
    body = _problem(_post(server, "/plan", {"module": module, "default_device": "cpu"}), 400, "malformed-module")
    assert "16384 values" in body["detail"] and body["locations"][0]["line"] == 5 + 13


def test_a_relay_tuple_dag_forty_levels_deep_is_module_too_large_for_compile(server: RunningServer) -> None:
    lines = ['#[version = "0.0.5"]', "def @main(%x: Tensor[(4), float32]) {", "  %0 = (%x, %x);"]
    lines += [f"  %{i} = (%{i - 1}, %{i - 1});" for i in range(1, 40)]
    module = "\n".join([*lines, "  %39.0", "}"]) + "\n"
    assert _post(server, "/plan", {"module": module, "default_device": "cpu"}).status_code == 200  # each node once
    body = _problem(_compile(server, module, timeout_ms=10_000), 422, "module-too-large")
    assert f"a tuple of {2**40} tensors" in body["detail"]


@pytest.mark.slow
def test_compile_holds_reading_and_planning_to_timeout_ms(server: RunningServer, slow_module: str) -> None:
    body = _problem(_compile(server, slow_module, timeout_ms=200), 504, "solver-timeout")
    assert "200 ms" in body["detail"]
    assert _compile(server, RELAY.replace("negative", "tanh")).status_code == 200  # the slot is free


# ------------------------------------------------------------------ 5. forged run-check answers


def _forging(code: str) -> str:
    """A module whose kernel runs `code` in the sandboxed child's own Python (taking the
    interpreter's lock first; the answer pipe's descriptor is the child's second
    argument), then ends the child: the answer is whatever `code` wrote."""
    program = f"import os, sys, json; fd = int(sys.argv[2]); {code}; os._exit(0)"
    assert '"' not in program and "\\" not in program
    return one_device(
        '        T.evaluate(T.call_extern("int32", "PyGILState_Ensure"))\n'
        f'        T.evaluate(T.call_extern("int32", "PyRun_SimpleString", "{program}"))\n'
    )


def _header(dtype: str, shape: str) -> str:
    """Python that writes an answer of two outputs of `dtype` and `shape` (64 zero bytes)."""
    output = f"{{'dtype': '{dtype}', 'shape': {shape}, 'offset': 0}}"
    return f"o={output}; os.write(fd, json.dumps({{'outputs': [o, o]}}).encode() + bytes([10]) + bytes(64))"


# The kernel's `k` returns float32 (4,); each forged answer and what the 422 must say.
FORGED = {
    "dimensions": (_header("float32", "[1] * 70"), "at most 32 dimensions"),
    "deep": ("os.write(fd, b'[' * 200000 + bytes([10]))", "nests deeper than 32 levels"),
    "shape": (_header("float32", "[3]"), "shape (3,) where the module returns (4)"),
    "dtype": (_header("int8", "[4]"), "dtype int8 where the module returns float32"),
    "flood": ("[os.write(fd, bytes(1048576)) for _ in range(4096)]", "larger than its outputs can be"),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(FORGED))
def test_a_forged_run_check_answer_is_a_422_naming_what_was_wrong(server: RunningServer, name: str) -> None:
    code, says = FORGED[name]
    body = _problem(_compile(server, _forging(code), run_check=True), 422, "run-check-failed")
    assert says in body["detail"], body["detail"]


# ------------------------------------------------------------------ 6. a client that leaves


def _parents() -> dict[int, int]:
    """Every process's parent, from /proc."""
    out: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        out[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    return out


def _children() -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for pid, ppid in _parents().items():
        out.setdefault(ppid, []).append(pid)
    return out


def _descendants(pid: int) -> list[int]:
    children, found, work = _children(), [], [pid]
    while work:
        for child in children.get(work.pop(), []):
            found.append(child)
            work.append(child)
    return found


def _cmdline(pid: int) -> str:
    try:
        return (Path(f"/proc/{pid}/cmdline").read_bytes()).replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _wait_for(predicate: Any, what: str, guard_s: float = 300) -> None:
    """Wait for an event; the guard only ends a hang (the assertion is on the event)."""
    end = time.monotonic() + guard_s
    while not predicate():
        if time.monotonic() > end:
            pytest.fail(f"never happened: {what}")
        time.sleep(0.05)


@pytest.mark.slow
def test_a_client_that_leaves_stops_its_compile_and_its_check(server: RunningServer) -> None:
    module = one_device(attack_lines("sleep"), add=7)
    body = json.dumps({"module": module, "default_device": "cpu", "run_check": True}).encode()
    port = int(server.base_url.rsplit(":", 1)[1])
    client = socket.create_connection(("127.0.0.1", port))
    client.sendall(
        b"POST /compile HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    sandboxed: list[int] = []

    def check_running() -> bool:
        sandboxed[:] = [p for p in _descendants(server.process.pid) if "service.sandbox" in _cmdline(p)]
        return bool(sandboxed)

    _wait_for(check_running, "the run check's child started")
    parents = _parents()
    chain = [sandboxed[0]]
    while parents.get(chain[-1]) not in (None, server.process.pid):
        chain.append(parents[chain[-1]])  # up to the compile process, the web process's child
    client.close()  # the client leaves
    for pid in chain:
        _wait_for(lambda pid=pid: not _alive(pid), f"process {pid} ({_cmdline(pid)[:60]}) stopped")
    store = _artifacts(server)
    _wait_for(lambda: not [p for p in store.iterdir() if p.name.startswith("tmp-")], "temporaries removed")
    assert _compile(server, RELAY.replace("negative", "sigmoid")).status_code == 200  # admitted
    assert server.process.poll() is None
