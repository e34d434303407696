"""Planning a Relax module (issues 21 and 29): the bridge translates it for
the planner, the solver plans the translation unchanged in either mode, and
the bridge writes the placements back onto the same IRModule. It lives here
because it joins solver/ and tvm_bridge/, which never import each other
(architecture.md). Importing it imports TVM: callers import it only for
Relax input.

`read_source` is the Relax side of the request path's one fork
(`service.planning.Source`): how a Relax module is read, how its nodes are
named in every view (`R.matmul` bound to `lv41`), and how the plan is written
back. Everything in between is the Relay path's code."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tvm import relax

import relay
import solver
from relay import ast
from relay.span import RelayError, SourceText
from service.record import Naming, NodeName
from tvm_bridge.relax_plan import print_relax, read_relax, relax_op_calls
from tvm_bridge.relax_translate import Translation, binding_names, real_node, relay_type, translate
from tvm_bridge.relax_write import Placement, read_placement, write_back
from tvm_bridge.targets import native_output_to_log


@dataclass(frozen=True)
class RelaxPlan:
    """The planned Relax module and what the planner said about it."""

    module: Any  # tvm.IRModule
    result: solver.PlanResult  # the plan of the translated Relay module
    translation: Translation
    placement: Placement
    copies: int  # R.to_vdevice bindings added


def plan_relax(
    mod: Any, config: solver.PlanConfig | None = None, source: SourceText | None = None
) -> RelaxPlan:
    """Plan `mod` (a Relax IRModule) with the planner in `config.mode`.

    Raises what `solver.plan` raises (PlanningConflict with TVMScript
    line:column, SolverTimeout, PlanConfigError) and RelaxTranslationError."""
    config = config or solver.PlanConfig()
    translation = translate(mod, source, config.mode)
    result = solver.plan(translation.module, configure(translation, config))
    return write_plan(translation, result)


def configure(translation: Translation, config: solver.PlanConfig) -> solver.PlanConfig:
    """The request's config for a translated module: its language, and pins
    on Relax operators as pins of the translated nodes."""
    # The translation checked the operator names against TVM's Relax registry
    # and states every node's type from the module's struct info: the solver
    # skips its Relay checks and reads those types (solver.PlanConfig.language).
    config = dataclasses.replace(config, language="relax")
    if any(_relax_op_selector(c) for c in config.constraints):
        config = dataclasses.replace(config, constraints=_node_constraints(translation, config.constraints))
    return config


def write_plan(translation: Translation, result: solver.PlanResult) -> RelaxPlan:
    """The plan of a translation written back onto its Relax module."""
    placement = read_placement(translation, result.module)
    out, copies = write_back(translation, placement, result.virtual_devices)
    return RelaxPlan(out, result, translation, placement, copies)


# ---------------------------------------------------------------------------
# The Relax side of the request path


ANNOTATION = "R.hint_on_device"
COPY = "R.to_vdevice"


def script_name(op_name: str) -> str:
    """An operator as TVMScript writes it: `relax.nn.conv2d` -> `R.nn.conv2d`."""
    return "R." + op_name[len("relax.") :] if op_name.startswith("relax.") else op_name


def naming(translation: Translation) -> Naming:
    """How views name the translated nodes: each operator call as TVMScript
    writes it (`R.matmul`) at its binding's line with the variable it is bound
    to (`lv41`), each call of a function as `cls.f`, each hint as
    `R.hint_on_device`, each parameter by its Relax name (without a location:
    TVMScript gives parameters no reliable span)."""
    names: dict[int, NodeName] = {}
    nodes = {id(n): n for n in solver.node_ids(translation.module)}
    args: dict[int, str] = {}  # the operands as TVMScript names them, for messages
    variables: dict[int, Any] = {}  # the Relax variable of each node, for its type
    for b in translation.bindings.values():
        if b.node is None:
            continue
        variables.setdefault(id(real_node(b.node)), b.var)
        if isinstance(b.value, relax.Call):
            args.setdefault(id(real_node(b.node)), _operands(b.value))
    for key, found in binding_names(translation).items():
        node = nodes.get(key)
        name = found.op
        if name is None and isinstance(node, ast.Call) and isinstance(node.op, ast.GlobalVar):
            name = f"cls.{node.op.name}"
        if name is not None:
            text = f"{found.var} = {name}({args.get(key, '...')})"
            names[key] = NodeName(name, found.var, text, found.span)
    for hint in translation.bindings.values():
        if hint.kind == "hint" and hint.node is not None:
            var = str(hint.var.name)
            text = f"{var} = {ANNOTATION}({_operands(hint.value)})"
            names.setdefault(id(hint.node), NodeName(ANNOTATION, var, text, hint.span))
    for params in translation.params.values():
        for var, node in params:
            names[id(node)] = NodeName(str(var.name), str(var.name), str(var.name))
            variables[id(node)] = var

    def type_of(expr: ast.Expr) -> ast.Type | None:
        """The struct info of the binding (or parameter) a node is, as a Relay type."""
        var = variables.get(id(real_node(expr)))
        return relay_type(var.ty) if var is not None else None

    return Naming(
        "relax", names, ANNOTATION, COPY, one_copy_per_value=True, type_of=type_of, devices=vdevice_names(translation)
    )


def vdevice_names(translation: Translation) -> dict[str, str]:
    """Each device the module lists (`I.vdevice`) as conflicts name it: its
    device name with its place in the list and the string TVMScript writes
    for it (`cuda (vdevice 1 "cuda:0")`: the first cuda vdevice, the list's
    second); a name two vdevices share is left as it is."""
    out: dict[str, str] = {}
    shared: set[str] = set()
    per_kind: dict[str, int] = {}
    for k, (vdev, vd) in enumerate(zip(translation.vdevices, translation.table)):
        kind = str(vdev.target.kind.name)
        j = per_kind[kind] = per_kind.get(kind, -1) + 1
        scope = str(vdev.memory_scope)
        written = f"{kind}:{j}" + (f":{scope}" if scope not in ("", "global") else "")
        name = relay.device_name(vd)
        if name in out:
            shared.add(name)
        out[name] = f'{name} (vdevice {k} "{written}")'
    return {name: text for name, text in out.items() if name not in shared}


def _operands(call: Any) -> str:
    """A call's operands as TVMScript names them (`x, ...`: variables by name)."""
    return ", ".join(str(a.name) if isinstance(a, relax.Var) else "..." for a in call.args)


@dataclass(frozen=True)
class RelaxSource:
    """A Relax module read for planning (`service.planning.Source`)."""

    translation: Translation
    naming: Naming

    @property
    def module(self) -> ast.Module:
        return self.translation.module

    def configure(self, config: solver.PlanConfig) -> solver.PlanConfig:
        return configure(self.translation, config)

    def expand(self, selector: Mapping[str, Any]) -> list[dict[str, Any]] | None:
        """A selector of Relax operator calls (`{"op": "R.matmul"}`) as node selectors."""
        if relax_op_name(selector.get("op")) is None:
            return None
        found = _op_nodes(self.translation, selector)
        if not found:
            raise solver.PlanConfigError(f"why: selector {dict(selector)!r} matches no operator call")
        return [{"node": n} for n in found]

    def write(self, result: solver.PlanResult, fmt: str) -> str:
        return print_relax(write_plan(self.translation, result).module, fmt)


def read_source(text: str, fmt: str, name: str, mode: str) -> RelaxSource:
    """Read a Relax module (TVMScript or TVM JSON) and translate it for the
    planner; spans name the file as `name`. TVM's own console output while
    reading (its CUDA-version warning for a `cuda` vdevice) goes to the log."""
    try:
        with native_output_to_log():
            mod, source = read_relax(text, fmt)
    except RelayError as err:  # located in the file the user named, as conflicts are
        if err.span is not None and err.span.source is not None:
            err.span = dataclasses.replace(err.span, source=SourceText(name, err.span.source.text))
        raise
    if source is not None:
        source = SourceText(name, source.text)
    translation = translate(mod, source, mode)
    return RelaxSource(translation, naming(translation))


def module_source(mod: Any, mode: str, name: str = "<IRModule>") -> RelaxSource:
    """A Relax IRModule already in memory (the Python API's input) read for
    planning: translated as it is, without a text round trip, so the functions
    the plan leaves alone keep their objects. Its nodes are named by function
    and binding; where TVM kept the spans of the text it was parsed from (not
    in TVM JSON), locations are `name:line:column` of that text."""
    translation = translate(mod, SourceText(name, ""), mode)
    return RelaxSource(translation, naming(translation))


def _relax_op_selector(constraint: Any) -> bool:
    select = constraint.get("select") if isinstance(constraint, Mapping) else None
    return isinstance(select, Mapping) and relax_op_name(select.get("op")) is not None


def relax_op_name(op: Any) -> str | None:
    """TVM's name of a Relax operator a selector names, in either spelling:
    `relax.nn.softmax` or TVMScript's `R.nn.softmax`; None for other names."""
    if not isinstance(op, str):
        return None
    if op.startswith("relax."):
        return op
    if op.startswith("R."):
        return "relax." + op[len("R.") :]
    return None


def _op_nodes(translation: Translation, select: Mapping[str, Any]) -> list[int]:
    """Node ids of the translated calls a Relax operator selector names
    (`{"op": "R.nn.softmax", "index"?: i}`, counted in binding order)."""
    ids = solver.node_id_of(translation.module)
    calls = relax_op_calls(translation).get(relax_op_name(select.get("op")) or "", [])
    found = [ids[id(node)] for node in calls if id(node) in ids]
    if "index" in select:
        index = select["index"]
        found = found[index : index + 1] if isinstance(index, int) and index >= 0 else []
    return found


def _node_constraints(translation: Translation, constraints: Sequence[Mapping[str, Any]]) -> tuple[Any, ...]:
    """Request pins that select Relax operators (`{"op": "relax.nn.softmax"}`
    or `R.nn.softmax`, `"index"?: i`, counted in binding order) as pins of the
    translated nodes."""
    out: list[Any] = []
    for k, c in enumerate(constraints):
        if not _relax_op_selector(c):
            out.append(c)
            continue
        select = c["select"]
        found = _op_nodes(translation, select)
        if not found:
            raise solver.PlanConfigError(f"constraint #{k}: selector {dict(select)!r} matches no operator call")
        out.extend({**c, "select": {"node": node}} for node in found)
    return tuple(out)
