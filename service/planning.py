"""One planning request from text in to text out, shared by `devplan plan` and `POST /plan`.

Both front ends build a `PlanJob`, call `run_plan` (or `run_plan_safely` in a
worker process) and only differ in how they present the outcome, so the CLI and
the HTTP service give byte-identical planned modules for the same input.
Everything crossing a process boundary here is plain data (str, int, dict, list).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import relay
import solver
from relay.detect import detect_language
from service import errors
from service.accelerate import Handing, MapError, PlanMap, disk_read_gbps, hand_in, record_accelerate_map
from service.compile_targets import compile_targets
from service.device_map import device_map_table, record_device_map
from service.module_names import ModuleNames
from service.picture import build_picture
from service.record import (
    KIND_OPERATOR,
    RELAY,
    Naming,
    PlacementGraph,
    PlacementRecord,
    Renamer,
    build_record,
    copy_ends,
)
from service.report import prediction, report_from_response
from service.units import bytes_text

log = logging.getLogger("devplan.planning")

Format = Literal["text", "json"]

# A PlanFailure's kind is the slug of an `errors.ErrorKind` (the one table of
# kinds: problem status and title, CLI exit code, metric outcome).
KIND_MALFORMED = errors.MALFORMED_MODULE.slug
KIND_TYPE = errors.TYPE_ERROR.slug  # well formed but ill typed
KIND_CONFIG = errors.INVALID_CONFIG.slug
KIND_CONFLICT = errors.PLANNING_CONFLICT.slug
KIND_TIMEOUT = errors.SOLVER_TIMEOUT.slug
KIND_INTERNAL = errors.INTERNAL_ERROR.slug
KIND_TOO_LARGE = errors.MODULE_TOO_LARGE.slug  # the worker cannot hold it (memory limit)
KIND_TVM_UNAVAILABLE = errors.TVM_UNAVAILABLE.slug  # a Relax module where `tvm` cannot be imported

# A plan gets its time limit plus this much before its worker is killed from
# outside, so the planner's own cooperative deadline wins when it can.
DEADLINE_GRACE_S = 0.2

Clock = Callable[[], float]


# Plans in milliseconds but runs every stage (parser, solver, printer); with
# `z3_check=True` Z3 too: the readiness probe and each worker's warm-up use it so.
TINY_MODULE = """\
#[version = "0.0.5"]
def @main(%x: Tensor[(2), float32]) {
  negative(%x)
}
"""


def deadline_s(timeout_ms: int) -> float:
    """Wall-clock seconds a whole plan (parse, plan, print) may take."""
    return timeout_ms / 1000 + DEADLINE_GRACE_S


def timeout_failure(timeout_ms: int, step: str | None = None) -> PlanFailure:
    """The failure of a plan past its time limit (`step`: where it stopped, when known)."""
    where = f" (stopped during {step})" if step else ""
    message = f"planning did not finish within its time limit of {timeout_ms} ms{where}"
    return PlanFailure.plain(KIND_TIMEOUT, message)


def too_large_failure(limit_bytes: int | None) -> PlanFailure:
    """A module the planning worker cannot hold; says what to change."""
    limit = f" of {limit_bytes // (1024 * 1024)} MiB (DEVPLAN_WORKER_MEMORY_BYTES)" if limit_bytes else ""
    message = (
        f"the module needs more memory than a planning worker may use{limit}; "
        "plan a smaller module (split it into functions planned separately) or raise the limit"
    )
    return PlanFailure.plain(KIND_TOO_LARGE, message)


@dataclass(frozen=True, slots=True, init=False)
class PlanJob:
    """What to plan and how: the module, the solver's options (`solver.PlanOptions`,
    built by the request model or the CLI) and how to present the outcome. Every
    field is plain data so it pickles cheaply.

    Option fields may also be given by name (`PlanJob(module=m, timeout_ms=5)`,
    `dataclasses.replace(job, timeout_ms=5)`): they are folded into `options`."""

    module: str
    options: solver.PlanOptions
    input_format: Format | None  # None: detect (JSON starts with `{`)
    output_format: Format
    language: str | None  # "relay" | "relax"; None: detect (relay.detect)
    explain: bool
    name: str
    request_id: str | None  # for the worker's log lines
    # Selectors to explain (`why`), and the picture's options (None: no picture).
    why: tuple[dict[str, Any], ...]
    picture: dict[str, Any] | None
    # `("placements",)` adds the placement report's fields to the outcome.
    include: tuple[str, ...]
    # accelerate's `device_map` handed in (module -> device as accelerate writes it) and
    # how to take it: "as-is" (price it as dispatch_model runs it) or "storage" (plan given its storage).
    accelerate_device_map: Mapping[str, Any] | None
    accelerate_device_map_as: str

    def __init__(
        self,
        module: str,
        options: solver.PlanOptions | None = None,
        *,
        input_format: Format | None = None,
        output_format: Format = "text",
        explain: bool = False,
        name: str = "<request>",
        request_id: str | None = None,
        why: tuple[dict[str, Any], ...] = (),
        picture: dict[str, Any] | None = None,
        language: str | None = None,
        include: tuple[str, ...] = (),
        accelerate_device_map: Mapping[str, Any] | None = None,
        accelerate_device_map_as: str = "as-is",
        **option_fields: Any,
    ) -> None:
        options = options if options is not None else solver.PlanOptions()
        if option_fields:
            options = dataclasses.replace(options, **option_fields)
        for key, value in (
            ("module", module),
            ("options", options),
            ("input_format", input_format),
            ("output_format", output_format),
            ("explain", explain),
            ("name", name),
            ("request_id", request_id),
            ("why", why),
            ("picture", picture),
            ("language", language),
            ("include", tuple(include)),
            ("accelerate_device_map", dict(accelerate_device_map) if accelerate_device_map is not None else None),
            ("accelerate_device_map_as", accelerate_device_map_as),
        ):
            object.__setattr__(self, key, value)

    @property
    def timeout_ms(self) -> int:
        """The job's time limit (parse, plan)."""
        return self.options.timeout_ms


class PlanFailure(Exception):
    """A request that could not be planned, as plain data (picklable, JSON-able).

    `report` is the compiler-style text (`error: ... --> name:line:col`) the CLI
    prints; `locations` and `constraints` feed the problem+json body.

    A plain exception class, not a frozen dataclass: Python sets
    `__traceback__` (and `__context__`) on every exception it raises, which a
    frozen instance refuses (a `with` block's exit then raised TypeError in its
    place). The fields are set once here and are not meant to change; equality
    compares them, and pickling passes them back to `__init__` (`args`).
    """

    kind: str
    message: str
    report: str
    locations: tuple[dict[str, Any], ...]
    constraints: tuple[dict[str, Any], ...]

    def __init__(
        self,
        kind: str,
        message: str,
        report: str,
        locations: Sequence[dict[str, Any]] = (),
        constraints: Sequence[dict[str, Any]] = (),
    ) -> None:
        locations, constraints = tuple(locations), tuple(constraints)
        super().__init__(kind, message, report, locations, constraints)
        self.kind = kind
        self.message = message
        self.report = report
        self.locations = locations
        self.constraints = constraints

    def __str__(self) -> str:
        return self.report

    def __repr__(self) -> str:
        return f"PlanFailure(kind={self.kind!r}, message={self.message!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PlanFailure):
            return NotImplemented
        return self.as_dict() == other.as_dict()

    def __hash__(self) -> int:
        return hash((self.kind, self.message, self.report))

    @classmethod
    def from_relay_error(cls, kind: str, err: relay.RelayError) -> PlanFailure:
        """The failure of a located error (the planner's, the reader's or the
        bridge's): its span is a location, and its notes (an unclosed bracket's
        opening) follow as more locations, `note: ...`."""
        span = err.span
        message = err.message or str(err)
        locations = (
            [{"line": span.line, "column": span.column, "message": message}] if span is not None else []
        )
        for note, note_span in getattr(err, "notes", ()):
            if note_span is not None:
                locations.append(
                    {"line": note_span.line, "column": note_span.column, "message": f"note: {note}"}
                )
        return cls(kind, message, str(err), tuple(locations))

    @classmethod
    def plain(cls, kind: str, message: str) -> PlanFailure:
        """A failure without locations, reported as `error: <message>`."""
        return cls(kind, message, f"error: {message}")

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "message": self.message,
            "report": self.report,
            "locations": list(self.locations),
            "constraints": list(self.constraints),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PlanFailure:
        return cls(
            data["kind"],
            data["message"],
            data["report"],
            tuple(data.get("locations", ())),
            tuple(data.get("constraints", ())),
        )


@dataclass(slots=True)
class PlanOutcome:
    """A successful plan: the planned module and what the planner did."""

    module: str
    format: Format
    virtual_devices: list[dict[str, Any]]
    summary: dict[str, Any]
    solver: dict[str, Any]
    explanation: list[str] | None = None
    timings_ms: dict[str, float] = field(default_factory=dict)
    cost: dict[str, Any] | None = None  # optimize mode: CostReport.to_json()
    why: list[dict[str, Any]] | None = None  # one WhyResult.to_json() per selector
    picture: dict[str, Any] | None = None  # service.picture.Picture.to_json() (DOT, not SVG)
    # `include: ["placements"]`: service.report.Placements' three parts.
    placements: list[dict[str, Any]] | None = None
    copies: list[dict[str, Any]] | None = None
    prediction: dict[str, Any] | None = None
    # A Relax plan's device map (service.device_map), with `include: ["placements"]`.
    device_map: list[dict[str, Any]] | None = None
    # The plan as accelerate's device map (service.accelerate.PlanMap.to_json(): accelerate_device_map,
    # accelerate_expressible, ...), with `include: ["placements"]`; and a handed-in map's price.
    accelerate: dict[str, Any] | None = None
    accelerate_input: dict[str, Any] | None = None
    # The copies TVM 0.19 omits that the plan has, the operators the
    # type check could not check, and what the client should know.
    divergences: list[dict[str, Any]] = field(default_factory=list)
    unchecked_ops: list[str] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """The response body: optional fields only where set (timings are sent apart)."""
        extra = {
            "explanation": self.explanation,
            "cost": self.cost,
            "why": self.why,
            "picture": self.picture,
            "placements": self.placements,
            "copies": self.copies,
            "prediction": self.prediction,
            "device_map": self.device_map,
            "accelerate_input": self.accelerate_input,
        }
        return {
            "module": self.module,
            "format": self.format,
            "virtual_devices": self.virtual_devices,
            "summary": self.summary,
            "solver": self.solver,
            "divergences": self.divergences,
            "unchecked_ops": self.unchecked_ops,
            "notices": self.notices,
        } | {name: value for name, value in extra.items() if value is not None} | (self.accelerate or {})


# --------------------------------------------------------------------------
# Rendering devices and spans


def device_to_dict(device: relay.VirtualDevice) -> dict[str, Any]:
    """A virtual device as a device-spec object (the one spec format)."""
    return {
        "device_type": relay.device_type_name(device.device_type) if device.device_type is not None else None,
        "virtual_device_id": device.virtual_device_id,
        "target": str(device.target) if device.target is not None else None,
        "memory_scope": device.memory_scope,
    }


def _span_lc(span: relay.Span | None) -> tuple[int | None, int | None]:
    if span is None:
        return None, None
    return span.line, span.column


# --------------------------------------------------------------------------
# The pipeline


def detect_format(text: str) -> Format:
    """TVM JSON starts with `{` after optional whitespace; anything else is text."""
    return "json" if text.lstrip()[:1] == "{" else "text"


def parse_module(job: PlanJob) -> relay.Module:
    """Text or TVM JSON -> verified Module; raises PlanFailure(malformed-module)."""
    fmt = job.input_format or detect_format(job.module)
    if not job.module.strip():
        raise PlanFailure.plain(KIND_MALFORMED, "the module is empty: send Relay text or TVM JSON")
    try:
        if fmt == "json":
            module = relay.load_json(job.module)
        else:
            module = relay.parse_text(job.module, name=job.name)
        relay.verify(module)
    except relay.RelayError as err:
        raise PlanFailure.from_relay_error(KIND_MALFORMED, err) from None
    except RecursionError:
        raise PlanFailure.plain(KIND_MALFORMED, "module nests too deeply to read") from None
    except Exception as err:  # a reader bug must not become a 500 for the client
        log.exception("reader failed on client input")
        message = f"could not read the module ({type(err).__name__}: {err})"
        raise PlanFailure.plain(KIND_MALFORMED, message) from None
    return module


# What planning raises that `_solve_failure` turns into a problem (anything else is a 500).
PLANNING_ERRORS = (
    solver.PlanningConflict,
    solver.SolverTimeout,
    solver.PlanConfigError,
    relay.RelayError,
    RecursionError,
)


def build_config(
    job: PlanJob, timeout_ms: int | None = None, clock: Clock = time.monotonic
) -> solver.PlanConfig:
    """The solver's PlanConfig for a job (its time limit `timeout_ms`, default the
    job's, measured on `clock`); raises PlanFailure(invalid-config)."""
    try:
        return job.options.to_config(timeout_ms=timeout_ms, clock=clock)
    except (solver.PlanConfigError, ValueError, TypeError) as err:
        raise PlanFailure.plain(KIND_CONFIG, str(err)) from None


class Source(Protocol):
    """A module read for planning, in the language it was written in: the one
    fork of the request path. Everything between reading and
    writing (planning, why-answers, the placement record and every view of
    it) is the same code for both languages."""

    @property
    def module(self) -> relay.Module:
        """What the planner plans: the Relay module, or a Relax module's translation."""
        ...

    @property
    def naming(self) -> Naming:
        """How the language names the planner's nodes (service.record)."""
        ...

    def configure(self, config: solver.PlanConfig) -> solver.PlanConfig:
        """The request's config for this module (Relax: its pins on `R.` operators as node pins)."""
        ...

    def expand(self, selector: Mapping[str, Any]) -> list[dict[str, Any]] | None:
        """A selector in the language's own terms as planner selectors (None: it is one)."""
        ...

    def write(self, result: solver.PlanResult, fmt: Format) -> str:
        """The planned module in the language it was read in."""
        ...


@dataclass(frozen=True)
class RelaySource:
    """A Relay module: planned as it is, printed back as text or TVM JSON."""

    module: relay.Module
    naming: Naming = RELAY

    def configure(self, config: solver.PlanConfig) -> solver.PlanConfig:
        return config

    def expand(self, selector: Mapping[str, Any]) -> list[dict[str, Any]] | None:
        return None

    def write(self, result: solver.PlanResult, fmt: Format) -> str:
        return relay.dump_json(result.module) if fmt == "json" else relay.print_text(result.module)


def read_source(job: PlanJob) -> Source:
    """Read the job's module in its language (the request path's first fork)."""
    if job_language(job) != "relax":
        return RelaySource(parse_module(job))
    try:
        from service import relax_planning
    except ImportError:
        message = f"planning a Relax module needs TVM, which is not installed here ({RELAX_INSTALL}); Relay modules plan without it"
        raise PlanFailure.plain(KIND_TVM_UNAVAILABLE, message) from None
    fmt = job.input_format or detect_format(job.module)
    try:
        return relax_planning.read_source(job.module, fmt, job.name, job.options.mode)
    except relay.RelayError as err:
        raise PlanFailure.from_relay_error(KIND_MALFORMED, err) from None


def run_plan(job: PlanJob, clock: Clock = time.monotonic, *, source: Source | None = None) -> PlanOutcome:
    """Read, plan and write one module; raises PlanFailure for every expected failure.

    One route for both languages: the language decides how the
    module is read (`read_source`) and how the plan is written back
    (`Source.write`); planning, why-answers, the placement record
    (`service.record`) and every view of it (summary, explanation, report,
    picture) are the same code.

    The time limit (`job.timeout_ms`, on `clock`) covers reading and planning:
    reading spends part of it, the planner's cooperative deadline (its walks
    and Z3's own timeout) the rest. Nothing here is interrupted from outside
    (no signal), so no handler can swallow the limit; writing is linear and
    not timed. Tests inject `clock` to expire the limit deterministically.

    `source`: the module already read (the Python API's `tvm.IRModule`, which has
    no text to read); everything after reading is the same code.
    """
    start = clock()
    t0 = time.perf_counter()
    if source is None:
        source = read_source(job)
    t1 = time.perf_counter()
    left_ms = job.timeout_ms - int((clock() - start) * 1000)
    if left_ms <= 0:
        raise timeout_failure(job.timeout_ms, "parse")
    _check_at_selectors(job)
    handing = None
    try:
        config = source.configure(build_config(job, left_ms, clock))
        if job.accelerate_device_map is not None:
            handing = _hand_in(job, source, config)
            config = handing.config
        # Times are priced once, into the record, when a view shows them.
        priced = bool(job.include) or job.picture is not None or job.explain
        record = plan_record(source, config, job.why, reasons="placements" in job.include, priced=priced)
    except PLANNING_ERRORS as err:
        raise _solve_failure(err, job) from None
    result = record.result
    t2 = time.perf_counter()
    text = source.write(result, job.output_format)
    t3 = time.perf_counter()
    outcome = _outcome(job, record, text, (t0, t1, t2, t3))
    if job.why:
        outcome.why = [w.to_json() for w in result.why]
    names = handing.handed.names if handing is not None else None
    as_map = None
    if record.language == "relax" and ("placements" in job.include or job.explain):
        disk = handing.placement.disk_weights if handing is not None else ()
        as_map = record_accelerate_map(record, names, disk)
    if "placements" in job.include:
        outcome.placements = record.placements_json()
        outcome.copies = record.copies_json()
        outcome.prediction = prediction(record, config)
        if as_map is not None:
            outcome.device_map = [g.to_json() for g in record_device_map(record, names)]
            outcome.accelerate = as_map.to_json()
    if handing is not None:
        left_ms = job.timeout_ms - int((clock() - start) * 1000)
        cost = _map_cost(source, handing, result, left_ms)
        outcome.accelerate_input = handing.answer(cost, disk_read_gbps(config))
        outcome.notices.extend(handing.handed.notices)
    if job.picture is not None:
        outcome.picture = build_picture(record, **job.picture).to_json()
    if job.explain:
        outcome.explanation = explain_success(outcome, record, as_map, names)
    return outcome


def _hand_in(job: PlanJob, source: Source, config: solver.PlanConfig) -> Handing:
    """The request's accelerate map read against the module (service.accelerate);
    a map that does not fit the module is a 422 naming the entry."""
    if source.naming.language != "relax":
        raise PlanFailure.plain(KIND_CONFIG, "accelerate_device_map: only Relax modules carry accelerate's module names")
    assert job.accelerate_device_map is not None
    try:
        return hand_in(source.module, source.naming, config, job.accelerate_device_map, job.accelerate_device_map_as)
    except MapError as err:
        raise PlanFailure.plain(KIND_CONFIG, err.message) from None


def _map_cost(source: Source, handing: Handing, result: solver.PlanResult, left_ms: int) -> dict[str, Any] | None:
    """The cost of a handed-in map as `dispatch_model` runs it: the plan's own
    when the map was taken as-is, else a plan of the map as-is within the
    `left_ms` the request has left (`storage` planned within the map's
    storage; its answer still prices the map). None when it cannot be priced."""
    if handing.taken_as == "as-is":
        return result.cost.to_json() if result.cost is not None else None
    if left_ms <= 0:
        return None
    try:
        priced = solver.plan(source.module, dataclasses.replace(handing.as_is, timeout_ms=left_ms))
    except PLANNING_ERRORS as err:
        log.info("the handed-in map could not be priced as-is: %s", err)
        return None
    return priced.cost.to_json() if priced.cost is not None else None


def plan_record(
    source: Source,
    config: solver.PlanConfig,
    why: Sequence[Mapping[str, Any]] = (),
    *,
    reasons: bool = False,
    priced: bool = True,
) -> PlacementRecord:
    """Plan `source.module` under `config` (already `source.configure`d) and
    build the plan's placement record; the result's `why` answers `why` (in
    the language's terms: one WhyResult per selector). `reasons`: each
    placement's `decided_by` (a why-answer per placement: a search each);
    `priced`: each operator's and copy's predicted time (service.record.price).
    Raises what `solver.plan` raises."""
    groups = [source.expand(s) or [dict(s)] for s in why]
    asked = [s for group in groups for s in group]
    graph = PlacementGraph(source.module, source.naming)
    renamer = Renamer(source.naming, graph.ids)
    extra = graph.selectors() if reasons else []
    try:
        result = solver.plan(source.module, config, why=(*asked, *extra), record_constraints=True)
    except solver.PlanningConflict as err:
        raise renamer.conflict(err) from None
    answers = result.why[len(asked) :]
    decided = {a.node: a.reason for w in answers for a in w.answers if a.node is not None} if reasons else None
    asked_answers = renamer.why(_regroup(why, groups, result.why[: len(asked)]))
    return build_record(graph, dataclasses.replace(result, why=asked_answers), config, decided, priced=priced)


def _regroup(
    selectors: Sequence[Mapping[str, Any]],
    groups: Sequence[Sequence[Mapping[str, Any]]],
    results: Sequence[solver.WhyResult],
) -> tuple[solver.WhyResult, ...]:
    """One WhyResult per selector the client sent: a selector the language
    expanded into several planner selectors gets their answers together."""
    out: list[solver.WhyResult] = []
    k = 0
    for selector, group in zip(selectors, groups):
        part = results[k : k + len(group)]
        k += len(group)
        if len(part) == 1 and part[0].selector == selector:
            out.append(part[0])
            continue
        answers = [a for r in part for a in r.answers]
        matches = sum(r.matches for r in part)
        out.append(
            solver.WhyResult(dict(selector), tuple(answers[: solver.MAX_ANSWERS]), matches, matches > solver.MAX_ANSWERS)
        )
    return tuple(out)


def plan_report(job: PlanJob, clock: Clock = time.monotonic) -> tuple[PlanOutcome, dict[str, Any]]:
    """Plan `job` as `devplan plan` does, with `include: ["placements"]`, and
    build its placement report (service/report.py): (outcome, report). Raises
    the same PlanFailure as run_plan."""
    outcome = run_plan(dataclasses.replace(job, include=(*job.include, "placements")), clock)
    return outcome, report_from_response(outcome.as_dict(), job.options.mode)


def _solve_failure(err: Exception, job: PlanJob) -> PlanFailure:
    """The failure a planner exception means for the client."""
    if isinstance(err, solver.PlanningConflict):
        return _conflict_failure(err)
    if isinstance(err, solver.SolverTimeout):
        if err.reason == "deadline":
            return timeout_failure(job.timeout_ms)
        message = str(err) or f"solver time limit of {job.timeout_ms} ms exceeded"
        return PlanFailure.plain(KIND_TIMEOUT, message)
    if isinstance(err, solver.PlanConfigError):
        return PlanFailure.plain(KIND_CONFIG, str(err))
    if isinstance(err, relay.TypeInferenceError):
        # TVM type-checks before planning; so do we.
        return PlanFailure.from_relay_error(KIND_TYPE, err)
    if isinstance(err, relay.RelayError):
        # The planner rejecting the module for a reason other than a conflict
        # (e.g. a malformed annotation): the module is at fault, not the server.
        return PlanFailure.from_relay_error(KIND_MALFORMED, err)
    return PlanFailure.plain(KIND_MALFORMED, "module nests too deeply to plan")


def _outcome(
    job: PlanJob, record: PlacementRecord, text: str, times: tuple[float, float, float, float]
) -> PlanOutcome:
    """The response of a plan (either language) from its placement record and
    the written module; `times` are perf_counter readings around read, plan, write."""
    t0, t1, t2, t3 = times
    result = record.result
    stats = result.stats
    time_ms = {k: round(v, 3) for k, v in stats.time_ms.items()}
    time_ms["parse"] = round((t1 - t0) * 1000, 3)
    time_ms["print"] = round((t3 - t2) * 1000, 3)
    virtual_devices = [device_to_dict(d) for d in result.virtual_devices]
    return PlanOutcome(
        module=text,
        format=job.output_format,
        virtual_devices=virtual_devices,
        summary={
            "device_copies": record.copy_summary(),
            "expressions_by_device": dict(result.expressions_by_device),
            "functions": _functions_summary(record),
            "compile_targets": compile_targets(virtual_devices, result.expressions_by_device),
        },
        solver={
            "classes": stats.classes,
            "z3_checked": stats.z3_checked,
            "variables": stats.variables if stats.z3_checked else None,  # absent unless Z3 checked
            "hard_constraints": stats.hard_constraints,
            "soft_constraints": stats.soft_constraints,
            "time_ms": time_ms,
        },
        timings_ms={"parse": (t1 - t0) * 1000, "plan": (t2 - t1) * 1000, "print": (t3 - t2) * 1000},
        cost=result.cost.to_json() if result.cost is not None else None,
        divergences=[
            {"line": d.line, "column": d.column, "src": d.src, "dst": d.dst, "reason": DIVERGENCE_REASON}
            for d in record.divergences
        ],
        unchecked_ops=list(result.unchecked_ops),
        notices=list(result.notices),
    )


DIVERGENCE_REASON = (
    "TVM 0.19 omits this copy: its rewrite reads the device of an annotated value through one "
    "on_device only, so under nested annotations the value would be used on another device without one"
)


def job_language(job: PlanJob) -> str:
    """The job's language: as the request says, else detected from the content."""
    return job.language or detect_language(job.module, job.input_format)


RELAX_INSTALL = "pip install 'devplan[tvm]'"


def _check_at_selectors(job: PlanJob) -> None:
    """`{"at": "LINE:COL"}` names a position of the input text: JSON input has none."""
    fmt = job.input_format or detect_format(job.module)
    selectors = [*job.why, *(c.get("select", {}) for c in job.options.constraints)]
    if fmt == "json" and any(isinstance(s, dict) and "at" in s for s in selectors):
        message = "'at' selectors need text input; select JSON nodes with {\"node\": ID}"
        raise PlanFailure.plain(KIND_CONFIG, message)


def run_plan_safely(job: PlanJob) -> dict[str, Any]:
    """run_plan for a worker: never raises, returns {"ok": outcome} or {"error": failure}."""
    try:
        outcome = run_plan(job)
        return {"ok": outcome.as_dict(), "timings_ms": outcome.timings_ms}
    except PlanFailure as failure:
        return {"error": failure.as_dict()}
    except MemoryError:
        return {"error": too_large_failure(None).as_dict()}
    except Exception as err:
        log.exception("planning failed unexpectedly")
        message = f"internal error while planning: {type(err).__name__}"
        return {"error": PlanFailure.plain(KIND_INTERNAL, message).as_dict()}


# --------------------------------------------------------------------------
# Explanations


def _functions_summary(record: PlacementRecord) -> dict[str, Any]:
    """{"@f": {params: [{name: "%x", device}], result}} from the solver's summary.

    The solver gives device names per global (keyed by name, params in order);
    the parameter names are the module's, as its language writes them.
    """
    param_names = {
        gv.name: [record.naming.of(p, f"%{p.name}")[0] for p in func.params] for gv, func in record.module.functions
    }
    out: dict[str, Any] = {}
    for name, info in record.result.functions.items():
        bare = name.lstrip("@")
        names = param_names.get(bare, [])
        params = [
            {"name": names[i] if i < len(names) else f"#{i}", "device": str(d)} for i, d in enumerate(info["params"])
        ]
        out[f"@{bare}"] = {"params": params, "result": str(info["result"])}
    return out


PARAMETERS_LISTED = 20
"""`--explain` lists each parameter's device for functions with at most this many parameters."""


def explain_success(
    outcome: PlanOutcome,
    record: PlacementRecord,
    as_map: PlanMap | None = None,
    names: ModuleNames | None = None,
) -> list[str]:
    """Lines for `--explain`, most general first: a one-line summary, each
    global's parameter and result devices (counted per device for a function
    with many parameters), the per-device table (the cost model's figures:
    kernels and copies in their own columns, adding up to the predicted time),
    the optimize mode's proof, each copy (where, between which placements: the
    record's), divergences, notices, estimates and a Relax plan's device map
    and accelerate map (`as_map`, its modules named by `names`)."""
    table = device_table(outcome.cost, record)
    lines = [summary_line(outcome, record, table)]
    for name, info in outcome.summary["functions"].items():
        lines.append(function_line(name, info))
    if table is not None:
        lines.extend(table.lines)
    if outcome.cost is not None:
        lines.extend(cost_lines(outcome.cost))
    by_node = {p.node: p.to_json() for p in record.placements}
    word = record.naming.copy
    for copy in record.copies:
        c = copy.to_json()
        lines.append(f"{word}{at_text(c)}: {c['src']} -> {c['dst']} ({copy_ends(c, by_node)}): {copy_cost_text(c)}")
    for d in outcome.divergences:
        lines.append(f"divergence{at_text(d)}: {d['src']} -> {d['dst']}: TVM 0.19 omits this copy")
    if outcome.unchecked_ops:
        lines.append("not type-checked (no type relation): " + ", ".join(outcome.unchecked_ops))
    lines.extend(f"notice: {n}" for n in outcome.notices)
    if as_map is not None:
        lines.extend(accelerate_lines(outcome, record, as_map, names))
    return lines


def accelerate_lines(
    outcome: PlanOutcome, record: PlacementRecord, as_map: PlanMap, names: ModuleNames | None
) -> list[str]:
    """`--explain`'s module table of a Relax plan and the plan as accelerate's
    map (with a map handed in, its price and fit)."""
    lines: list[str] = []
    handed = outcome.accelerate_input
    if handed is not None:
        peaks = ", ".join(f"{d} {bytes_text(b)}" for d, b in (handed.get("peak_memory_bytes") or {}).items())
        price = f"{handed['predicted_ms']:.3f} ms" if "predicted_ms" in handed else "planned within its storage"
        fit = handed.get("fits")
        fits = "not priced" if fit is None else ("fits its budgets" if fit else "over budget")
        lines.append(f"accelerate map handed in ({handed['as']}): {price}, peak {peaks or '-'}; {fits}")
    groups = record_device_map(record, names)
    if groups:
        lines.append(f"device map (module names: {as_map.names}):")
        lines.extend(device_map_table(groups).splitlines())
    expressible = "expressible" if as_map.expressible else "not expressible"
    inline = f"as accelerate's device_map ({expressible}): {json.dumps(dict(as_map.device_map))}"
    if len(inline) <= SUMMARY_WIDTH:
        lines.append(inline)
    else:  # a model's worth of modules: the JSON is in the report, ready to load
        lines.append(
            f"as accelerate's device_map ({expressible}): {len(as_map.device_map)} modules, "
            "in --report's accelerate_device_map (HTTP: include [\"placements\"])"
        )
    for fault in as_map.faults:
        lines.append(f"  at fault: {fault.module}: {fault.reason}")
    for fault in as_map.outside:
        lines.append(f"  outside modules: {fault.operators} operators: {fault.reason}")
    return lines


def _plural(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def summary_line(outcome: PlanOutcome, record: PlacementRecord, table: DeviceTable | None) -> str:
    """`--explain`'s first line: functions, operator calls per device, copies and
    the predicted time, e.g. `1 function; 297 operator calls: cpu 186, cuda 111;
    12 copies (135.2 KiB); predicted 13.416 ms`."""
    ops: dict[str, int] = {}
    for p in record.placements:
        if p.kind == KIND_OPERATOR:
            ops[p.device] = ops.get(p.device, 0) + 1
    counts = ", ".join(f"{d} {n}" for d, n in sorted(ops.items(), key=_device_order))
    total = sum(ops.values())
    parts = [
        _plural(len(outcome.summary["functions"]), "function", "functions"),
        f"{_plural(total, 'operator call', 'operator calls')}" + (f": {counts}" if counts else ""),
    ]
    copied = sum(c.bytes or 0 for c in record.copies)
    word = _plural(len(record.copies), "copy", "copies")
    parts.append(f"{word} ({bytes_text(copied)})" if record.copies else "no copies")
    if table is not None:
        parts.append(f"predicted {table.total_ms:.3f} ms")
    line = "; ".join(parts)
    if len(line) > SUMMARY_WIDTH:  # many devices: their counts go to the table
        parts[1] = f"{_plural(total, 'operator call', 'operator calls')} on {_plural(len(ops), 'device', 'devices')}"
        line = "; ".join(parts)
    return line


SUMMARY_WIDTH = 160
"""The summary line's width; past it the per-device counts are left to the table."""


def _device_order(item: tuple[str, Any]) -> tuple[bool, str]:
    return (item[0] != "cpu", item[0])


def function_line(name: str, info: Mapping[str, Any]) -> str:
    """A global's parameter and result devices: each parameter by name for a
    function with at most PARAMETERS_LISTED parameters, else a count per device
    (each one's device is in `--report`'s placements)."""
    params = info["params"]
    if len(params) <= PARAMETERS_LISTED:
        listed = ", ".join(f"{p['name']} on {p['device']}" for p in params)
        return f"{name}({listed}) -> result on {info['result']}"
    per: dict[str, int] = {}
    for p in params:
        per[p["device"]] = per.get(p["device"], 0) + 1
    counts = ", ".join(f"{n} on {d}" for d, n in sorted(per.items(), key=_device_order))
    return (
        f"{name}: {len(params)} parameters ({counts}) -> result on {info['result']}; "
        "each parameter's device: --report (HTTP: include [\"placements\"])"
    )


@dataclass(frozen=True)
class DeviceTable:
    """`--explain`'s per-device table and the total its rows add up to."""

    lines: list[str]
    total_ms: float


def device_table(cost: Mapping[str, Any] | None, record: PlacementRecord) -> DeviceTable | None:
    """One row per device: operator calls, (optimize mode) resident weight bytes
    and peak memory, kernel time, the time of the copies into the device, the
    part of it hidden behind compute (with overlap), and the device's share:
    kernels + copies - hidden. A last row of totals, whose share is the plan's
    predicted time. In optimize mode the figures are `cost.per_device`
    (`kernel_ms`, `copy_ms`, `overlap_hidden_ms`; the shares add up to
    `cost.predicted_ms`); in the TVM mode they are the placement record's
    prices (each copy counted on the device it copies into), the report's
    `prediction`. None when the record is not priced (a plan without a view
    that shows times)."""
    # device, ops, weights, peak, kernels, copies, hidden
    rows: list[tuple[str, int, int, int, float, float, float]] = []
    if cost is not None:
        for name, d in sorted(cost["per_device"].items(), key=_device_order):
            copies = float(d.get("copy_ms", 0.0))
            kernels = float(d.get("kernel_ms", d["predicted_ms"] - copies))
            hidden = float(d.get("overlap_hidden_ms", 0.0))
            peak = int(d.get("peak_memory_bytes", 0))
            rows.append((name, d["operator_calls"], d["weight_bytes"], peak, kernels, copies, hidden))
        total_ms = float(cost["predicted_ms"])
    else:
        times = record.device_times()
        if not times:
            return None
        into: dict[str, float] = {}
        for c in record.copies:
            into[c.dst] = into.get(c.dst, 0.0) + (c.predicted_ms or 0.0)
        for name in sorted(set(times) | set(into), key=lambda n: _device_order((n, None))):
            ops, ms = times.get(name, (0, 0.0))
            rows.append((name, ops, 0, 0, ms, into.get(name, 0.0), 0.0))
        total_ms = round(sum(r[4] + r[5] for r in rows), 6)
    width = max([24, *(len(r[0]) for r in rows)])
    # Columns: the optimize mode's memory (its budgets count it) and, with overlap, the hidden time.
    memory = cost is not None
    overlap = cost is not None and (bool(cost.get("overlap")) or any(r[6] for r in rows))

    def row(cells: Sequence[object]) -> str:
        name, ops, weights, peak, kernels, copies, hidden, total = cells
        text = f"{name!s:<{width}} {ops!s:>9}"
        if memory:
            text += f" {weights!s:>13} {peak!s:>13}"
        text += f" {kernels!s:>11} {copies!s:>10}"
        if overlap:
            text += f" {hidden!s:>10}"
        return text + f" {total!s:>10}"

    formula = "kernels ms + copies ms - hidden ms = total ms" if overlap else "kernels ms + copies ms = total ms"
    lines = [
        f"per device (cost model; {formula}; the last row is the predicted time):",
        row(("device", "operators", "weight bytes", "peak bytes", "kernels ms", "copies ms", "hidden ms", "total ms")),
    ]
    for name, ops, weights, peak, kernels, copies, hidden in rows:
        share = kernels + copies - hidden
        lines.append(row((name, ops, weights, peak, f"{kernels:.3f}", f"{copies:.3f}", f"{hidden:.3f}", f"{share:.3f}")))
    lines.append(
        row(
            (
                "total",
                sum(r[1] for r in rows),
                sum(r[2] for r in rows),
                "-",  # peaks do not add up across devices
                f"{sum(r[4] for r in rows):.3f}",
                f"{sum(r[5] for r in rows):.3f}",
                f"{sum(r[6] for r in rows):.3f}",
                f"{total_ms:.3f}",
            )
        )
    )
    return DeviceTable(lines, total_ms)


def at_text(item: Mapping[str, Any]) -> str:
    """` at LINE:COLUMN`, or nothing for an item without a location (TVM JSON
    input has none; a copy's line then names its value by binding)."""
    line = item.get("line")
    return f" at {line}:{item.get('column')}" if line is not None else ""


def copy_cost_text(c: Mapping[str, Any]) -> str:
    """A copy's bytes and predicted time (the record's): `4.0 KiB, 0.010 ms`."""
    ms = c.get("predicted_ms")
    return bytes_text(c.get("bytes")) + (f", {ms:.3f} ms" if ms is not None else "")


def cost_lines(cost: Mapping[str, Any]) -> list[str]:
    """An optimize-mode plan's proof (predicted time, bound, method, the TVM
    mode's time) and the cost model's estimates, for `--explain`."""
    tvm_ms = cost.get("tvm_mode_predicted_ms")
    tvm = f"{tvm_ms:.3f} ms" if tvm_ms is not None else f"n/a ({cost.get('tvm_mode_reason') or 'infeasible'})"
    gap = cost.get("gap")
    gap_text = f"gap {gap:.2%}" if gap is not None else "no gap (bound 0)"
    proof = "optimal" if cost["optimal"] else f"best found, bound {cost['bound_ms']:.3f} ms, {gap_text}"
    summary = f"predicted {cost['predicted_ms']:.3f} ms ({proof}; method {cost['method']}; solver {cost['solver_ms']:.1f} ms)"
    lines = [summary, f"TVM mode for the same request: {tvm}"]
    for e in cost.get("estimates", ()):
        lines.append(f"estimate{at_text(e)}: {e['kind']}: {e['message']}")
    return lines


def _conflict_failure(err: solver.PlanningConflict) -> PlanFailure:
    message = err.message or str(err)
    locations = []
    constraints = []
    lines = [f"error: planning conflict: {message}"]
    for c in err.constraints:
        span = c.span
        line, column = _span_lc(span)
        kind = c.kind
        description = c.description
        expr_text = c.expr_text
        devices = list(c.devices)
        constraints.append(
            {
                "kind": kind,
                "description": description,
                "expression": expr_text,
                "line": line,
                "column": column,
                "devices": devices,
            }
        )
        if line is not None:
            locations.append({"line": line, "column": column, "message": f"{kind}: {description}"})
        source = span.source_name if span is not None else "<input>"
        where = f"{source}:{line}:{column}" if line is not None else f"{source}:?:?"
        detail = f" [{expr_text}]" if expr_text else ""
        lines.append(f"  {where}: {kind}: {description}{detail}")
    if not constraints:
        line, column = _span_lc(err.span)
        if line is not None:
            locations.append({"line": line, "column": column, "message": message})
    return PlanFailure(KIND_CONFLICT, message, "\n".join(lines), tuple(locations), tuple(constraints))
