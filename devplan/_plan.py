"""`devplan.plan`: the request path of `POST /plan` and `devplan plan`, called in process.

The request is the service's own (`service.models.PlanRequest`, the keywords),
turned into a job by the same conversion (`to_plan_job`) and planned by the
same function (`service.planning.run_plan`). The one difference is reading: a
`tvm.IRModule` has no text, so it is translated as it is
(`service.relax_planning.module_source`) and the plan is written back as an
IRModule rather than printed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import solver
from devplan import _options
from devplan._errors import ConfigError, Error, error_of
from service.planning import Format, PlanFailure, PlanJob, PlanOutcome, run_plan

# The name a module given as a string has in messages (Python's own `<string>`).
STRING_NAME = "<string>"
MODULE_NAME = "<IRModule>"


@dataclass(frozen=True)
class Cost:
    """A plan's predicted run time under the cost model.

    `predicted_ms`: the plan's predicted time (optimize mode: the optimizer's;
    TVM mode: the cost model's price of TVM's plan, None when it cannot price
    it, `reason` then says why). `bound_ms`, `gap`, `optimal`: optimize mode's
    proven lower bound, the relative gap to it and whether the plan is proven
    optimal (None in TVM mode). `per_device`: per device name, its operator
    calls and predicted milliseconds (`kernel_ms`), and in optimize mode the
    optimizer's own per-device figures. `detail`: the service's whole `cost`
    object (optimize mode) or `prediction` (TVM mode)."""

    predicted_ms: float | None
    bound_ms: float | None
    gap: float | None
    optimal: bool | None
    copies: int
    bytes_copied: int
    per_device: Mapping[str, Mapping[str, Any]]
    basis: str
    reason: str | None
    detail: Mapping[str, Any]


def _cost_of(outcome: PlanOutcome) -> Cost:
    pred = outcome.prediction or {}
    per_device: dict[str, dict[str, Any]] = {k: dict(v) for k, v in pred.get("per_device", {}).items()}
    if outcome.cost is not None:
        cost = outcome.cost
        for name, d in cost.get("per_device", {}).items():
            per_device.setdefault(name, {}).update(d)
        return Cost(
            predicted_ms=cost["predicted_ms"],
            bound_ms=cost.get("bound_ms"),
            gap=cost.get("gap"),
            optimal=cost.get("optimal"),
            copies=cost.get("copies", pred.get("copies", 0)),
            bytes_copied=cost.get("bytes_copied", pred.get("bytes_copied", 0)),
            per_device=per_device,
            basis="optimize",
            reason=None,
            detail=cost,
        )
    return Cost(
        predicted_ms=pred.get("predicted_ms"),
        bound_ms=None,
        gap=None,
        optimal=None,
        copies=pred.get("copies", 0),
        bytes_copied=pred.get("bytes_copied", 0),
        per_device=per_device,
        basis=str(pred.get("basis", "tvm-plan")),
        reason=pred.get("reason"),
        detail=pred,
    )


class _ModuleSource:
    """A Relax IRModule read for planning (`service.planning.Source`), written
    back as an IRModule (kept here) rather than printed."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.written: Any = None

    @property
    def module(self) -> Any:
        return self.inner.module

    @property
    def naming(self) -> Any:
        return self.inner.naming

    def configure(self, config: solver.PlanConfig) -> solver.PlanConfig:
        result: solver.PlanConfig = self.inner.configure(config)
        return result

    def expand(self, selector: Mapping[str, Any]) -> list[dict[str, Any]] | None:
        found: list[dict[str, Any]] | None = self.inner.expand(selector)
        return found

    def write(self, result: solver.PlanResult, fmt: Format) -> str:
        from service.relax_planning import write_plan

        self.written = write_plan(self.inner.translation, result).module
        return ""


def _is_ir_module(module: Any) -> bool:
    try:
        import tvm
    except ImportError:
        return False
    return isinstance(module, tvm.IRModule)


@dataclass(frozen=True)
class _Request:
    """One planning request as the service would run it: its job and, for an
    IRModule, the module already read."""

    job: PlanJob
    source: _ModuleSource | None

    def run(self, **changes: Any) -> PlanOutcome:
        """Plan (the job with `changes`); a failure raises its devplan.Error."""
        job = dataclasses.replace(self.job, **changes) if changes else self.job
        try:
            return run_plan(job, source=self.source)
        except PlanFailure as failure:
            raise error_of(failure) from None
        except RecursionError:
            raise error_of(PlanFailure.plain("malformed-module", "module nests too deeply to plan")) from None
        except MemoryError:
            raise error_of(PlanFailure.plain("module-too-large", "the module needs more memory than there is")) from None
        except Exception as err:  # a bug, or TVM's own error: a devplan.Error still, its cause kept
            raise _internal(err) from err


def _internal(err: Exception) -> Error:
    """An unexpected failure as devplan.InternalError (the service's 500 problem has no
    detail; the message here does, and the cause stays chained for its traceback)."""
    message = f"internal error while planning: {type(err).__name__}: {err}"
    return error_of(PlanFailure.plain("internal-error", message))


def _request(caller: str, module: Any, options: Mapping[str, Any]) -> _Request:
    """Validate `options` as the request's fields and build the job as /plan does."""
    from service.config import get_settings
    from service.models import to_plan_job

    is_ir = _is_ir_module(module)
    if not is_ir and not isinstance(module, str):
        raise TypeError(
            f"{caller}(): module must be a tvm.IRModule (Relax) or a str (TVMScript, Relay text, "
            f"or TVM JSON), not {type(module).__name__}"
        )
    request = _options.validate(caller, "" if is_ir else module, options)
    settings = get_settings()
    # The server's ceiling on time limits protects a shared service; in process the
    # caller's own limit holds (the default is the service's).
    limit = max(settings.max_timeout_ms, request.timeout_ms or 0)
    try:
        job = to_plan_job(request, settings.model_copy(update={"max_timeout_ms": limit}))
    except Exception as err:  # a ProblemError of the request's conversion
        from service.problems import ProblemError, problem_body

        if isinstance(err, ProblemError):
            detail = err.detail or err.kind.title
            raise ConfigError(f"error: {detail}", problem_body(err.kind, detail, None, **err.extra)) from None
        raise
    if not is_ir:
        return _Request(dataclasses.replace(job, name=STRING_NAME, include=_include(request.mode)), None)
    if request.language == "relay":
        raise TypeError(f"{caller}(): a tvm.IRModule is a Relax module; language='relay' contradicts it")
    from relay import RelayError
    from service.relax_planning import module_source

    try:
        inner = module_source(module, request.mode)
    except RelayError as err:
        raise error_of(PlanFailure.from_relay_error("malformed-module", err)) from None
    except Exception as err:  # TVM's own error reading the module: a devplan.Error still
        raise _internal(err) from err
    # JSON, for the input's encoding: an IRModule has no text positions (`at` selectors are refused).
    job = dataclasses.replace(
        job, name=MODULE_NAME, language="relax", input_format="json", output_format="json", include=_include(request.mode)
    )
    return _Request(job, _ModuleSource(inner))


def _include(mode: str) -> tuple[str, ...]:
    """What the first run adds to the plan: in optimize mode the placement record's views
    (cheap there, and a search bounded by time could answer otherwise on a second run);
    in TVM mode nothing (each placement's reason is a why-answer: as long as the plan
    itself), so that a caller who wants the module alone pays for the module alone."""
    return ("placements",) if mode == "optimize" else ()


class Plan:
    """A planned module and what the planner said about it.

    `module`: the planned module, the same kind as the input (a `tvm.IRModule`
    for an IRModule, else the text the service answers); `cost`: the predicted
    run time (`devplan.Cost`); `placements`, `copies`: the placement report's
    entries (every operator call and parameter with its device, every copy);
    `device_map`: for a Relax module, its weights' devices grouped by module
    path (`model.layers.3`); `summary`, `notices`, `divergences`: as /plan
    answers them."""

    def __init__(self, request: _Request, outcome: PlanOutcome) -> None:
        self._request = request
        self._outcome = outcome
        self._detailed: PlanOutcome | None = outcome if outcome.placements is not None else None
        source = request.source
        self.module: Any = source.written if source is not None else outcome.module
        self.summary: dict[str, Any] = outcome.summary
        self.notices: list[str] = list(outcome.notices)
        self.divergences: list[dict[str, Any]] = list(outcome.divergences)
        self.explanation: list[str] | None = outcome.explanation

    def _details(self) -> PlanOutcome:
        """The outcome with the placement record's views: a TVM-mode plan computes them on
        first use (TVM's rules give the same plan again), an optimize-mode one has them."""
        if self._detailed is None:
            self._detailed = self._request.run(include=("placements",))
        return self._detailed

    @property
    def cost(self) -> Cost:
        return _cost_of(self._details())

    @property
    def placements(self) -> list[dict[str, Any]]:
        return list(self._details().placements or [])

    @property
    def copies(self) -> list[dict[str, Any]]:
        return list(self._details().copies or [])

    @property
    def device_map(self) -> list[dict[str, Any]]:
        return list(self._details().device_map or [])

    def __repr__(self) -> str:
        copies = self._outcome.summary.get("device_copies")
        count = len(copies) if isinstance(copies, list) else copies
        return f"<devplan.Plan {self.mode}: {count} copies>"

    @property
    def mode(self) -> str:
        return self._request.job.options.mode

    def report(self) -> dict[str, Any]:
        """The placement report (`devplan plan --report`; schemas/report.schema.json)."""
        from service.report import report_from_response

        return report_from_response(self._details().as_dict(), self.mode)

    def why(self, selector: Mapping[str, Any]) -> dict[str, Any]:
        """Why each expression `selector` matches is on its device (a `why` entry
        of the request: `{"op": "R.matmul"}`, `{"node": 12}`, `{"param": ...}`,
        `{"at": "LINE:COL"}`): its matches and, per answer, the chain of
        constraints that decided it. Plans again with the same options."""
        from pydantic import TypeAdapter, ValidationError

        from service.models import Selector

        if not isinstance(selector, Mapping):
            raise TypeError(f"why(): selector must be a dict, not {type(selector).__name__}")
        try:
            checked: Any = TypeAdapter(Selector).validate_python(dict(selector))
        except ValidationError as err:
            first = err.errors()[0]
            raise TypeError(f"why(): not a selector: {first['msg']}") from None
        outcome = self._request.run(why=(checked.model_dump(exclude_none=True),))
        assert outcome.why is not None
        answer: dict[str, Any] = outcome.why[0]
        return answer

    def picture(self, path: str | Path, *, max_nodes: int | None = None) -> Path:
        """Draw the placement: SVG (needs Graphviz `dot`), or the DOT text itself
        when `path` ends in `.dot`. Plans again with the same options; returns `path`."""
        from service.picture import PictureUnavailable, render_svg

        out = Path(path)
        options: dict[str, Any] = {} if max_nodes is None else {"max_nodes": max_nodes}
        outcome = self._request.run(picture=options)
        assert outcome.picture is not None
        dot = str(outcome.picture["dot"])
        if out.suffix == ".dot":
            out.write_text(dot, encoding="utf-8")
            return out
        try:
            svg = render_svg(dot)
        except PictureUnavailable as err:
            raise Error(f"error: {err} (install Graphviz, or ask for a .dot file)") from None
        out.write_text(svg, encoding="utf-8")
        return out


def plan(module: Any, **options: Any) -> Plan:
    """Plan the devices of `module`, as `POST /plan` does with the same fields."""
    request = _request("plan", module, options)
    return Plan(request, request.run())


plan.__signature__ = _options.signature(plan, module=True)  # type: ignore[attr-defined]
plan.__doc__ = f"""Plan the devices of `module` and return a `devplan.Plan`.

`module`: a Relax `tvm.IRModule` (planned without a text round trip; the result's
`.module` is an IRModule), or a str: TVMScript, Relay text, or TVM JSON of either
(the result's `.module` is the text `POST /plan` answers). Every keyword is a field
of the `POST /plan` request, with the same name, default and units (`"60MB"`):

{_options.options_doc()}

Raises `devplan.Error` subclasses (`ParseError`, `ConflictError`, `ConfigError`,
`PlanTimeoutError`, ...) whose `.problem` is the service's problem+json body, and
TypeError for an unknown keyword or a value of the wrong type."""


__all__ = ["Cost", "Plan", "plan"]
