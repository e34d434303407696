"""Why-queries: chains are collected constraints, reproduce the
device, are shortest, and end in what really decided it (flipping it moves
the expression or makes the plan conflict)."""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

import relay
import solver
from relay.ast import Attrs, Call, Expr, Function, MetaRef, Module, Op
from relay.device import VirtualDevice
from relay.traverse import rewrite
from solver.result import Answer, ConstraintLog
from solver.selectors import node_ids

from ._corpus import CORPUS, corpus_cases

CONFIG = solver.PlanConfig(default_device="cuda", host_device="cpu")
CPU = solver.complete_spec("cpu")
CUDA = solver.complete_spec("cuda")
PER_PROGRAM = 20

pytestmark = pytest.mark.skipif(not CORPUS.is_dir(), reason=f"corpus not found at {CORPUS}")


def _read(path: Path) -> Module:
    return relay.parse_text(path.read_text(), name=str(path))


def _cases() -> list[Any]:
    out = [
        pytest.param(Path(str(base) + ".relay"), id=case_id)
        for case_id, base in corpus_cases("planned")
        if case_id.startswith("random/")
    ]
    for name in ("mlp", "resnet18", "lstm"):
        out.append(pytest.param(CORPUS / f"{name}.annotated.relay", id=f"{name}.annotated"))
    return out


def _sample(module: Module) -> list[int]:
    """Up to PER_PROGRAM node ids spread over the module (operators excluded)."""
    ids = [i for i, n in enumerate(node_ids(module)) if not isinstance(n, Op)]
    step = max(1, len(ids) // PER_PROGRAM)
    return ids[::step][:PER_PROGRAM]


def _bfs(start: int, adj: dict[int, list[int]], goals: set[int]) -> int | None:
    dist = {start: 0}
    queue = deque([start])
    while queue:
        x = queue.popleft()
        if x in goals:
            return dist[x]
        for y in adj.get(x, ()):
            if y not in dist:
                dist[y] = dist[x] + 1
                queue.append(y)
    return None


def _adjacency(log: ConstraintLog, hard_only: bool) -> dict[int, list[int]]:
    adj: dict[int, list[int]] = {}
    for a, b, c in log.edges:
        if a != b and (log.hard[c] or not hard_only):
            adj.setdefault(a, []).append(b)
            adj.setdefault(b, []).append(a)
    return adj


def _check_chain(answer: Answer, log: ConstraintLog) -> VirtualDevice | None:
    """Every step is a collected constraint, the steps connect the expression
    to the pin that ends the chain, each segment is a shortest path; returns
    that pin's device (None when nothing pinned the class)."""
    edges = {(a, b, c) for a, b, c in log.edges} | {(b, a, c) for a, b, c in log.edges}
    pins = {(e, c): vd for e, vd, c in log.pins}
    assert answer.element is not None
    if not answer.chain:
        assert answer.reason == "default"
        return None
    at = answer.element
    segment: list[Any] = []
    end_device: VirtualDevice | None = None
    for step in answer.chain:
        assert step.a == at, (answer.text(), step)
        segment.append(step)
        if step.b is None:  # the pin that ends the chain
            assert (step.a, step.cid) in pins, step
            end_device = pins[(step.a, step.cid)]
            edges_only = segment[:-1]
            hard = log.hard[step.cid]
            start = edges_only[0].a if edges_only else step.a
            if hard and all(log.hard[s.cid] for s in edges_only):
                goals = {e for (e, c), vd in pins.items() if log.hard[c] and vd.device_type is not None}
                assert _bfs(start, _adjacency(log, True), goals) == len(edges_only)
            else:
                assert _bfs(start, _adjacency(log, False), {step.a}) == len(edges_only)
            break
        if (step.a, step.b, step.cid) in edges:
            at = step.b
            continue
        # A default that copies another element's device: a logged pin here.
        assert log.follows.get(step.cid, {}).get(step.a) == step.b, step
        assert (step.a, step.cid) in pins
        at = step.b
        segment = []
    assert step is answer.chain[-1]
    return end_device


def _swap(vd: Any, module: Module) -> Any:
    """cpu <-> cuda for a device (or a meta reference to one)."""
    if isinstance(vd, MetaRef):
        vd = module.meta["VirtualDevice"][vd.index]
    if not isinstance(vd, VirtualDevice) or vd.device_type is None:
        return vd
    return CUDA if vd.device_type == 1 else CPU


def _flip_annotation(module: Module, targets: list[Expr]) -> Module:
    """The module with the devices in some annotations' attributes swapped."""
    ids = {id(t) for t in targets}

    def visit(original: Expr, rebuilt: Expr) -> Expr:
        if id(original) in ids and isinstance(rebuilt, Call) and rebuilt.attrs is not None:
            fields = tuple((k, _swap(v, module)) for k, v in rebuilt.attrs.fields)
            return dataclasses.replace(rebuilt, attrs=Attrs(fields, rebuilt.attrs.type_key))
        return rebuilt

    functions = []
    for gv, func in module.functions:
        new = rewrite(func, visit)
        assert isinstance(new, Function)
        functions.append((gv, new))
    return dataclasses.replace(module, functions=tuple(functions))


def _device_after(module: Module, config: solver.PlanConfig, node: int) -> str | None:
    """The node's device after a re-plan, or None for a conflict."""
    try:
        result = solver.plan(module, config, why=[{"node": node}])
    except solver.PlanningConflict:
        return None
    return result.why[0].answers[0].device


def _flip(module: Module, answer: Answer, log: ConstraintLog) -> str | None | bool:
    """Re-plan with the pin or default the chain ends in flipped: the new
    device (None: conflict), or False when this kind cannot be flipped."""
    assert answer.node is not None
    last = answer.chain[-1] if answer.chain else None
    kind = log.kinds[last.cid] if last is not None else "default"
    if kind in ("default", "let default"):
        other = "cpu" if answer.device.startswith("cuda") else "cuda"
        return _device_after(module, dataclasses.replace(CONFIG, default_device=other), answer.node)
    if kind in ("annotation", "copy") and last is not None and last.node is not None:
        ids = node_ids(module)
        targets = [ids[i] for i in (last.node, *answer.also)]
        if not all(isinstance(t, Call) for t in targets):
            return False  # agreeing pins of other kinds (attributes, host rules)
        return _device_after(_flip_annotation(module, targets), CONFIG, answer.node)
    return False


@pytest.mark.parametrize("path", _cases())
def test_why_chains_on_corpus(path: Path) -> None:
    module = _read(path)
    selectors = [{"node": i} for i in _sample(module)]
    result = solver.plan(module, CONFIG, why=selectors, record_constraints=True)
    log = result.constraints
    assert log is not None
    flipped = 0
    for res in result.why:
        assert res.matches == 1 and not res.truncated
        answer = res.answers[0]
        if answer.element is None:
            continue  # an operator or inside a primitive function
        end = _check_chain(answer, log)
        if end is not None:
            assert end.device_type == (2 if answer.device.startswith("cuda") else 1), answer.text()
        after = _flip(module, answer, log)
        if after is not False:
            flipped += 1
            assert after != answer.device, answer.text()
    assert flipped, "at least one answer per program ends in a flippable pin or default"


def _calls(module: Module, name: str) -> list[int]:
    """Node ids of the calls of operator `name`."""
    return [
        i
        for i, n in enumerate(node_ids(module))
        if isinstance(n, Call) and isinstance(n.op, Op) and n.op.name == name
    ]


def _mlp() -> Module:
    return _read(CORPUS / "mlp.relay")


def _answer(module: Module, selector: dict[str, Any], **kw: Any) -> Answer:
    result = solver.plan(module, CONFIG, why=[selector], **kw)
    (res,) = result.why
    return res.answers[0]


def test_at_selector_is_outermost_expression_at_position() -> None:
    module = _read(CORPUS / "mlp.annotated.relay")
    # line 5 is `%2 = on_device(%1, ...)`; line 4 the dense it annotates.
    dense = _answer(module, {"at": "4:8"})
    assert dense.expression.startswith("nn.dense") and dense.device == "cpu"
    assert dense.reason == "annotation"
    assert _answer(module, {"node": dense.node}) == dense
    with pytest.raises(solver.PlanConfigError, match="no expression starts at 4:9"):
        solver.plan(module, CONFIG, why=[{"at": "4:9"}])


def test_at_selector_needs_text_input() -> None:
    module = relay.load_json((CORPUS / "mlp.json").read_text())  # TVM's JSON: no positions
    with pytest.raises(solver.PlanConfigError, match="text input"):
        solver.plan(module, CONFIG, why=[{"at": "3:8"}])


def test_node_ids_and_answers_match_between_text_and_json() -> None:
    text = _read(CORPUS / "resnet18.annotated.relay")
    json_module = relay.load_json((CORPUS / "resnet18.annotated.json").read_text())
    selectors = [{"node": i} for i in _sample(text)] + [{"op": "nn.conv2d"}]
    a = solver.plan(text, CONFIG, why=selectors).why
    b = solver.plan(json_module, CONFIG, why=selectors).why

    def strip(results: Iterable[Any]) -> list[Any]:
        out = []
        for res in results:
            for ans in res.answers:
                chain = [(s.kind, s.node) for s in ans.chain]
                out.append((ans.node, ans.device, ans.reason, chain))
        return out

    assert strip(a) == strip(b)


def test_op_selector_answers_every_call_and_truncates() -> None:
    module = _read(CORPUS / "resnet50.relay")
    (res,) = solver.plan(module, CONFIG, why=[{"op": "nn.conv2d"}]).why
    assert res.matches == 53 and res.truncated and len(res.answers) == 50
    (one,) = solver.plan(module, CONFIG, why=[{"op": "nn.conv2d", "index": 3}]).why
    assert one.matches == 1 and one.answers[0].node == res.answers[3].node


def test_node_pin_moves_the_node_and_adds_copies() -> None:
    module = _mlp()
    dense = _calls(module, "nn.dense")[0]
    before = solver.plan(module, CONFIG)
    assert not before.copies
    pinned = dataclasses.replace(CONFIG, constraints=({"select": {"node": dense}, "device": "cpu"},))
    after = solver.plan(module, pinned, why=[{"node": dense}])
    assert len(after.copies) == 1
    answer = after.why[0].answers[0]
    assert answer.device == "cpu" and answer.reason == "request pin"
    at = node_ids(module)[dense].span
    assert at is not None
    by_at = dataclasses.replace(
        CONFIG, constraints=({"select": {"at": f"{at.line}:{at.column}"}, "device": "cpu"},)
    )
    assert relay.structural_equal(solver.plan(module, by_at).module, after.module)


def test_node_pin_on_a_parameter_and_a_function() -> None:
    module = _mlp()
    ids = node_ids(module)
    main = len(ids) - 1
    param = ids.index(module.functions[0][1].params[0])
    config = dataclasses.replace(
        CONFIG,
        constraints=(
            {"select": {"node": param}, "device": "cpu"},
            {"select": {"node": main}, "device": "cpu"},
        ),
    )
    result = solver.plan(module, config, why=[{"node": param}, {"node": main}])
    assert result.functions["main"]["result"] == "cpu"
    assert result.functions["main"]["params"][0] == "cpu"
    assert [r.answers[0].reason for r in result.why] == ["request pin", "request pin"]


def test_bad_selectors() -> None:
    module = _mlp()
    for bad in ({"node": -1}, {"node": "3"}, {"at": "x"}, {"node": 1, "op": "add"}):
        with pytest.raises(solver.PlanConfigError):
            solver.plan(module, CONFIG, why=[bad])
    with pytest.raises(solver.PlanConfigError, match="does not exist"):
        solver.plan(module, CONFIG, why=[{"node": 10_000}])
    op_node = next(i for i, n in enumerate(node_ids(module)) if isinstance(n, Op))
    config = dataclasses.replace(CONFIG, constraints=({"select": {"node": op_node}, "device": "cpu"},))
    with pytest.raises(solver.PlanConfigError, match="not a computation"):
        solver.plan(module, config)


def test_host_rule_answer() -> None:
    path = CORPUS / "constructs"
    candidates = sorted(
        p for p in path.glob("*.relay") if "shape_of" in p.read_text() and ".planned" not in p.name
    )
    assert candidates
    module = _read(candidates[0])
    shape_calls = _calls(module, "vm.shape_of")
    assert shape_calls
    answer = _answer(module, {"node": shape_calls[0]})
    assert answer.reason == "host rule" and answer.device == "cpu"


def test_optimize_mode_answers_with_the_cost_reason() -> None:
    from service.examples import HEAD_PINS, SMALL_CNN

    module = relay.parse_text(SMALL_CNN)
    config = solver.PlanConfig(
        default_device="cuda",
        host_device="cpu",
        mode="optimize",
        constraints=tuple(HEAD_PINS),
        op_support={"cpu": ["nn.conv2d"]},
    )
    result = solver.plan(module, config, why=[{"op": "nn.conv2d", "index": 0}, {"op": "nn.dense"}])
    conv = result.why[0].answers[0]
    assert conv.device == "cuda" and conv.reason == "cost" and conv.cost is not None
    assert conv.cost["chosen"] == "cuda"
    assert conv.cost["forbidden"] == {"cpu": "operator support"}
    assert conv.cost["predicted_ms"]["cuda"] > 0 and "cpu" not in conv.cost["predicted_ms"]
    assert "optimize mode chose cuda" in conv.message
    # Without the support rule the other device is priced, and is slower.
    free = dataclasses.replace(config, op_support={})
    conv = solver.plan(module, free, why=[{"op": "nn.conv2d", "index": 0}]).why[0].answers[0]
    assert conv.cost is not None
    times = conv.cost["predicted_ms"]
    assert set(times) == {"cpu", "cuda"} and times["cuda"] < times["cpu"]
    # A pinned operator is decided by its pin, as in the TVM mode.
    dense = result.why[1].answers[0]
    assert (dense.device, dense.reason) == ("cpu", "request pin")
