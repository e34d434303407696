"""TVM JSON checked before TVM loads it: the corpus loads as before,
each malformed graph is a ParseError naming the node, and none reaches TVM's loader."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import tvm
from tvm import relax

from relay.span import ParseError
from tvm_bridge.json_guard import MAX_DEPTH, check_json_graph, load_checked_json
from tvm_bridge.relax_plan import read_relax

pytestmark = pytest.mark.tvm

ROOT = Path(__file__).resolve().parents[2]

SMALL = textwrap.dedent(
    """\
    @I.ir_module
    class Module:
        @R.function
        def main(x: R.Tensor((2, 3), dtype="float32")) -> R.Tensor((2, 3), dtype="float32"):
            with R.dataflow():
                y = R.add(x, R.const(1.0, "float32"))
                R.output(y)
            return y
    """
)
SELF_REFERENCE = '{"root_index": 0, "nodes": [{"type": "ffi.Array", "data": [0]}]}'


def _graph() -> dict[str, Any]:
    mod, _ = read_relax(SMALL)
    graph: dict[str, Any] = json.loads(tvm.ir.save_json(mod))
    return graph


def _first(graph: dict[str, Any], key: str) -> int:
    return next(i for i, n in enumerate(graph["nodes"]) if n["type"] == key)


def _refused(graph: dict[str, Any] | str) -> str:
    text = graph if isinstance(graph, str) else json.dumps(graph)
    with pytest.raises(ParseError) as info:
        load_checked_json(text)
    return info.value.message


def test_corpus_json_loads_as_tvm_loads_it(corpus_dir: Path) -> None:
    relax_dir = corpus_dir / "relax"
    paths = sorted([*relax_dir.glob("*.json"), *relax_dir.glob("offload/llama_*[0-9].json")])
    assert len(paths) >= 8
    for path in paths:
        text = path.read_text()
        tvm.ir.assert_structural_equal(load_checked_json(text), tvm.ir.load_json(text))


def test_only_graphs_tvm_would_rewrite_take_its_upgrade_path() -> None:
    # A graph TVM writes today goes straight to TVM's loader (the corpus test above checks it loads
    # the same); one in an older TVM's words (a renamed node type, a Var's `name_hint`) is left to
    # TVM's upgrade (and the guard refuses such fields first).
    from tvm_bridge.json_guard import _current

    graph = _graph()
    assert _current(graph["nodes"])
    var = _first(graph, "ir.Var")
    legacy = json.loads(json.dumps(graph))
    legacy["nodes"][var]["data"]["name_hint"] = legacy["nodes"][var]["data"].pop("name")
    assert not _current(legacy["nodes"])
    assert "no field 'name_hint'" in _refused(legacy)
    renamed = json.loads(json.dumps(graph))
    renamed["nodes"][var]["type"] = "relax.expr.Var"
    assert not _current(renamed["nodes"])


def test_the_issues_self_reference_is_refused() -> None:
    message = _refused(SELF_REFERENCE)
    assert "node 0" in message and "not an earlier node" in message


def test_type_confusion_is_refused_though_tvm_loads_it() -> None:
    graph = _graph()
    tensor = _first(graph, "relax.TensorType")
    graph["nodes"].append({"type": "ffi.String", "data": "not a shape"})
    graph["nodes"].append({"type": "relax.TensorType", "data": {**graph["nodes"][tensor]["data"], "shape": len(graph["nodes"]) - 1}})
    text = json.dumps(graph)
    assert isinstance(tvm.ir.load_json(text), tvm.IRModule)  # TVM's loader takes it as it is
    message = _refused(text)
    assert f"node {len(graph['nodes']) - 1}" in message and "field `shape` of `relax.TensorType`" in message


@pytest.mark.parametrize(
    ("mutate", "says"),
    [
        (lambda g: g.update(root_index=len(g["nodes"])), "is not a node"),
        (lambda g: g.update(root_index=-1), "is not a node"),
        (lambda g: g.update(root_index="0"), "must be an integer"),
        (lambda g: g.update(nodes={}), "must be an array"),
        (lambda g: g.update(extra=1), "unknown top-level keys"),
        (lambda g: g.update(metadata={"deep": [[[]]]}), "plain values"),
        (lambda g: g["nodes"].append({"type": "no.SuchType", "data": {}}), "not a type TVM registers"),
        (lambda g: g["nodes"].append({"type": "ffi.Module", "data": "AAAA"}), "not accepted"),
        (lambda g: g["nodes"].append({"type": "ir.EnvFunc", "data": "runtime.x"}), "not accepted"),
        (lambda g: g["nodes"].append({"type": "ffi.Function", "data": {}}), "not accepted"),
        (lambda g: g["nodes"].append({"type": "testing.TestCxxIntEnum", "data": 0}), "not accepted"),
        (lambda g: g["nodes"].append({"type": "ffi.Array", "data": [len(g["nodes"]) + 5]}), "not an earlier node"),
        (lambda g: g["nodes"].append({"type": "ffi.Array", "data": ["1"]}), "must be an integer"),
        (lambda g: g["nodes"].append({"type": "ffi.Map", "data": [1, 2, 3]}), "even count"),
        (lambda g: g["nodes"].append({"type": "int", "data": 2**70}), "not a int value"),
        (lambda g: g["nodes"].append({"type": "DataType", "data": "float33x"}), "not a DataType value"),
        (lambda g: g["nodes"].append({"type": "ffi.String", "data": 5}), "not a ffi.String value"),
        (lambda g: g["nodes"].append({"type": "ir.PrimType", "data": {"span": 0}}), "needs its field `dtype`"),
        (lambda g: g["nodes"].append({"type": "ir.PrimType", "data": {"span": 0, "dtype": "int8", "x": 1}}), "no field"),
        (lambda g: g["nodes"].append({"type": "ir.PrimType", "data": {"span": 0, "dtype": 8}}), "must be a dtype"),
        (lambda g: g["nodes"].append({"type": "ir.PrimType", "data": [0]}), "object of its fields"),
        (lambda g: g["nodes"].append({"type": "ir.Op", "data": 7}), "must be a string"),
        (lambda g: g["nodes"].append([1]), "an object with a string `type`"),
        (lambda g: g["nodes"].append({"type": "None", "data": None, "more": 1}), "unknown keys"),
    ],
)
def test_malformed_graphs_are_refused(mutate: Any, says: str) -> None:
    graph = _graph()
    mutate(graph)
    assert says in _refused(graph)


def test_null_only_where_tvm_writes_null() -> None:
    graph = _graph()
    call = _first(graph, "ir.Call")
    none = _first(graph, "None")
    graph["nodes"][call]["data"]["op"] = none
    message = _refused(graph)
    assert f"node {call}" in message and "field `op` of `ir.Call` must not be null" in message
    # span and attrs are null in TVM's own saves, and accepted.
    spans = [n for n in _graph()["nodes"] if isinstance(n.get("data"), dict) and n["data"].get("span") == none]
    assert spans


def test_container_elements_are_checked() -> None:
    graph = _graph()
    call = _first(graph, "ir.Call")
    args = graph["nodes"][call]["data"]["args"]
    string = _first(graph, "ffi.String")
    graph["nodes"].append({"type": "ffi.Array", "data": [string]})
    graph["nodes"].append({"type": "ir.Call", "data": {**graph["nodes"][call]["data"], "args": len(graph["nodes"]) - 1}})
    assert args != len(graph["nodes"]) - 2
    message = _refused(graph)
    assert "field `args` of `ir.Call`" in message and "not a ir.Expr" in message


def _tensor_blob(graph: dict[str, Any]) -> tuple[int, bytes]:
    index = _first(graph, "ffi.Tensor")
    return index, base64.b64decode(graph["nodes"][index]["data"])


@pytest.mark.parametrize(
    ("edit", "says"),
    [
        (lambda b: b[:-4], "holds"),
        (lambda b: b + b"\0\0\0\0", "holds"),
        (lambda b: b"\0" * 8 + b[8:], "magic"),
        (lambda b: b[:16] + (2).to_bytes(4, "little") + b[20:], "cpu"),
        (lambda b: b[:10], "too short"),
    ],
    ids=["short-data", "long-data", "magic", "device", "header"],
)
def test_bad_tensor_blobs_are_refused(edit: Any, says: str) -> None:
    graph = _graph()
    index, blob = _tensor_blob(graph)
    graph["nodes"][index]["data"] = base64.b64encode(edit(blob)).decode()
    message = _refused(graph)
    assert f"node {index}" in message and says in message


def test_a_module_failing_the_well_formed_check_is_refused() -> None:
    x = relax.Var("x", relax.TensorType((2,), "float32"))
    stray = relax.Var("stray", relax.TensorType((2,), "float32"))
    func = relax.Function([x], relax.SeqExpr([], stray), relax.TensorType((2,), "float32"))
    text = tvm.ir.save_json(tvm.IRModule({"main": func}))
    check_json_graph(text)  # the graph itself is fine
    assert "well-formed" in _refused(text)


def test_not_json_and_not_a_module() -> None:
    with pytest.raises(ParseError, match="not JSON"):
        read_relax("{not json", "json")
    with pytest.raises(ParseError, match="not an IRModule"):
        read_relax(tvm.ir.save_json(relax.const(1.0)), "json")


def _chain(depth: int) -> str:
    nodes = [{"type": "ffi.Array", "data": []}]
    nodes += [{"type": "ffi.Array", "data": [i]} for i in range(depth - 1)]
    return json.dumps({"root_index": depth - 1, "nodes": nodes})


def test_deep_reference_chains_are_refused() -> None:
    assert f"deeper than {MAX_DEPTH}" in _refused(_chain(MAX_DEPTH + 1))
    assert f"deeper than {MAX_DEPTH}" in _refused(_chain(200_000))


def test_tvm_loads_the_deepest_accepted_chain_without_crashing() -> None:
    """At the limit TVM's recursive loader still has stack to spare: in a fresh
    process (a crash would be its exit status, not this test's)."""
    script = textwrap.dedent(
        """
        import sys
        from tvm_bridge.json_guard import load_checked_json
        sys.setrecursionlimit(10_000)
        obj = load_checked_json(sys.stdin.read())
        depth = 0
        while len(obj):
            obj = obj[0]
            depth += 1
        print(depth)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], input=_chain(MAX_DEPTH), cwd=ROOT, capture_output=True, text=True,
        timeout=300, check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert int(done.stdout.strip().splitlines()[-1]) == MAX_DEPTH - 1


def test_metadata_line_is_checked_as_json() -> None:
    text = f'metadata = tvm.ir.load_json("""{SELF_REFERENCE}""")\n' + SMALL
    with pytest.raises(ParseError) as info:
        read_relax(text)
    assert info.value.line == 1 and info.value.column == 1
    assert "the metadata line" in info.value.message and "node 0" in info.value.message


def test_checked_text_is_what_tvm_parses() -> None:
    """The graph TVM reads is re-serialized from what was checked: a duplicate
    key (JSON parsers may keep either) reads as the checked one."""
    graph = _graph()
    text = json.dumps(graph)
    root = f'"root_index": {graph["root_index"]}'
    doubled = text.replace(root, f'"root_index": 0, {root}', 1)
    assert json.loads(check_json_graph(doubled))["root_index"] == graph["root_index"]
