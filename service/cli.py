"""The `devplan` command: `devplan plan ...` (its contract: docs/cli.md), `devplan profile`
(the optimize mode's cost table) and `devplan serve`.

Exit codes of `devplan plan` (and `devplan diff`, which also exits 6 when a --fail-on rule is
hit): 0 planned; 1 usage or I/O error (bad flag or
flag JSON, unreadable input, invalid device spec, a constraint selector that
matches nothing); 2 the module does not parse or verify; 3 planning conflict
(explanation on stderr, one line per constraint); 4 solver time-out.
`devplan compile` exits as `devplan plan` does, and also 4 when compiling
runs out of time, 7 when the module cannot be lowered or compiled, 8 when the
run check fails or cannot run (COMPILE_EPILOG).
Never a traceback: every failure is one clear message on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Annotated, Any, Literal, NoReturn, cast

from service.errors import EXIT_MALFORMED, EXIT_OK, EXIT_USAGE, Terminated, kind_of

if TYPE_CHECKING:
    from pydantic import ValidationError

    import solver
    from service.planning import PlanJob


# `devplan serve` refusing to start an open service (service.auth.serve_refusal).
EXIT_SERVE_REFUSED = 2


class UsageError(Exception):
    """A bad flag value or unreadable file: exit 1."""


class _Parser(argparse.ArgumentParser):
    """argparse exits 2 on usage errors; our contract says 1 (2 means a malformed module)."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def _add_request_flags(add: Callable[..., Any]) -> None:
    """The flags that make a plan request (devplan plan, and both sides of devplan diff)."""
    add("--virtual-devices", metavar="JSON", help="JSON list of device specs: the meta[VirtualDevice] table")
    add(
        "--default-device",
        metavar="SPEC",
        default="cuda",
        help="device for anything left free (default cuda)",
    )
    add("--host-device", metavar="SPEC", default="cpu", help="host device for shape values (default cpu)")
    add(
        "--constraint",
        metavar="JSON",
        action="append",
        default=[],
        help='request-level pin, e.g. \'{"select": {"op": "nn.dense"}, "device": "cpu"}\' (repeatable)',
    )
    add(
        "--timeout-ms",
        metavar="N",
        type=int,
        default=10_000,
        help="time limit for parsing and planning, in ms (default 10000; exit 4 past it)",
    )
    add(
        "--on-timeout",
        choices=("fail", "best"),
        default="fail",
        help="optimize: at the time limit, fail (default, exit 4) or print the best plan found by then, "
        "marked 'stopped at the time limit' (the search itself stops on counted work, not the clock)",
    )
    add(
        "--z3-check",
        action="store_true",
        help="TVM mode: also confirm the plan with Z3 (cannot change it; off by default for speed)",
    )
    add(
        "--no-check-types",
        dest="check_types",
        action="store_false",
        help="skip the type check before planning (operator names are still checked)",
    )
    add(
        "--mode",
        choices=("tvm", "optimize"),
        default="tvm",
        help="tvm (default): TVM PlanDevices' answer; optimize: minimise the predicted run time",
    )
    add(
        "--device-profiles",
        metavar="FILE",
        help='optimize: JSON {"cuda": {"peak_gflops": ..., "mem_gbps": ..., "launch_us": ..., '
        '"memory_bytes": ...}, ...} overriding the built-in profiles',
    )
    add("--op-support", metavar="FILE", help='optimize: JSON {"cuda": {"unsupported": ["nn.lrn", ...]}, ...}')
    add("--cost-table", metavar="FILE", help="optimize: measured kernel times from `devplan profile`")
    add(
        "--links",
        metavar="FILE",
        help='optimize: JSON {"cpu->cuda": {"gbps": 12, "latency_us": 10}, ...}: copy costs per device pair',
    )
    add(
        "--assume-dim",
        metavar="N",
        type=int,
        default=1,
        help="optimize: what a symbolic dimension counts as (default 1)",
    )
    add(
        "--memory-budget",
        metavar="NAME=BYTES",
        action="append",
        default=[],
        help="optimize: a device's memory budget, e.g. cuda=8GiB (B, KB/MB/GB, KiB/MiB/GiB; repeatable)",
    )
    add(
        "--no-overlap",
        dest="overlap",
        action="store_false",
        help="optimize: price every copy synchronously (as accelerate runs a device map); by default copies "
        "of weights overlap compute",
    )
    add(
        "--accelerate-device-map",
        metavar="FILE.json",
        help="Relax: accelerate's device_map (JSON {module: 0 | \"cuda:1\" | \"cpu\" | \"disk\"}, as "
        "model.hf_device_map holds it), priced as dispatch_model runs it",
    )
    add(
        "--accelerate-device-map-as",
        choices=("as-is", "storage"),
        default="as-is",
        help="as-is (default): price the map as accelerate runs it; storage (optimize): plan within its storage",
    )


def build_parser() -> argparse.ArgumentParser:
    from service import __version__

    parser = _Parser(prog="devplan", description="Device planning for TVM Relay and Relax modules.")
    parser.add_argument("--version", action="version", version=f"devplan {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    p = sub.add_parser("plan", help="plan a module's devices and print the planned module")
    add = p.add_argument
    add(
        "input",
        metavar="INPUT",
        help="path of a Relay module (text or TVM JSON) or a Relax IRModule (TVMScript or TVM JSON), or - for stdin",
    )
    _add_request_flags(add)
    add(
        "--language",
        choices=("relay", "relax"),
        default=None,
        help="the module's language (default: detected from the content; Relax needs the tvm extra)",
    )
    add(
        "-o",
        "--output",
        metavar="FILE",
        help="write the planned module here instead of stdout (- for stdout)",
    )
    add(
        "--output-format",
        choices=("text", "json"),
        default=None,
        help="text or TVM JSON (default text; for a Relax module, the input's own encoding)",
    )
    add(
        "--report",
        metavar="FILE",
        help="also write the placement report (JSON: every placement, copy and the predicted time; - for stdout)",
    )
    add("--explain", action="store_true", help="print a summary of the plan, the devices of globals, a per-device cost table and every copy on stderr")
    add(
        "--why",
        metavar="SELECTOR",
        action="append",
        default=[],
        help='why is it on that device? e.g. \'{"node": 12}\', \'{"at": "3:8"}\', \'{"op": "nn.dense"}\' '
        "(repeatable; answers on stderr)",
    )
    add("--why-format", choices=("text", "json"), default="text", help="format of the --why answers")
    add(
        "--picture",
        metavar="FILE.svg",
        help="also write a picture of the placement (needs Graphviz dot; - for stdout)",
    )

    c = sub.add_parser(
        "compile",
        help="plan a module and compile it with TVM into a library, as POST /compile does",
        description="Plan INPUT (the flags of `devplan plan`), lower it and compile it with TVM 0.27 for "
        "each device's target through the same compile process, guards and run-check sandbox as the "
        "service's POST /compile, and write the library to OUT.so (load it with tvm.runtime.load_module "
        "and run it with relax.VirtualMachine on the planned devices).",
        epilog=COMPILE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    c.add_argument(
        "input",
        metavar="INPUT",
        help="path of a Relay module (text or TVM JSON) or a Relax IRModule (TVMScript or TVM JSON), or - for stdin",
    )
    c.add_argument("-o", "--output", metavar="OUT.so", required=True, help="where to write the compiled library")
    _add_request_flags(c.add_argument)
    c.add_argument(
        "--language",
        choices=("relay", "relax"),
        default=None,
        help="the module's language (default: detected from the content)",
    )
    c.add_argument(
        "--target",
        metavar="NAME=TARGET",
        action="append",
        default=[],
        help="target of a device type for devices without one, e.g. cpu=llvm, 'cuda=cuda -arch=sm_90', or "
        'cuda=\'{"kind": "cuda", "arch": "sm_90"}\' (repeatable)',
    )
    c.add_argument("--cuda-arch", metavar="sm_NN", help="CUDA arch for cuda targets that name none")
    c.add_argument(
        "--run-check",
        action="store_true",
        help="run the library on random inputs in the sandbox and compare with a single-CPU build of the "
        "module without devices (where every device of the plan exists here)",
    )
    c.add_argument(
        "--report", metavar="FILE", help="also write /compile's report (JSON; - for stdout)"
    )
    c.set_defaults(explain=False, why=[], picture=None, output_format=None)

    d = sub.add_parser(
        "diff",
        help="compare two plans (modules planned with the same flags, or reports); exit 6 when a --fail-on rule is hit",
    )
    d.add_argument(
        "before", metavar="BEFORE", help="a Relay or Relax module, or a report (devplan plan --report)"
    )
    d.add_argument("after", metavar="AFTER", help="a Relay or Relax module, or a report")
    _add_request_flags(d.add_argument)
    d.add_argument(
        "--format",
        choices=("text", "json", "markdown", "junit"),
        default="text",
        help="output format (default text)",
    )
    d.add_argument(
        "--fail-on",
        metavar="RULES",
        action="append",
        default=[],
        help="comma-separated rules: copies-added, moved-to:DEVICE, predicted-regression:PERCENT%%, any-change "
        "(repeatable; exit 6 when one is hit)",
    )
    d.add_argument(
        "-o", "--output", metavar="FILE", help="write the diff here instead of stdout (- for stdout)"
    )

    r = sub.add_parser(
        "profile", help="time every distinct operator of a module on the devices here (a cost table)"
    )
    r.add_argument("input", metavar="MODULE", help="path of a Relay module (text or TVM JSON), or -")
    r.add_argument(
        "--devices",
        default="cpu",
        metavar="NAMES",
        help="comma-separated device names (default cpu; cuda is measured only where a GPU exists)",
    )
    r.add_argument("--output", metavar="TABLE.json", help="write the table here instead of stdout")
    r.add_argument("--repeat", type=int, default=10, help="timed runs per kernel, median kept (default 10)")

    s = sub.add_parser("serve", help="start the HTTP service (uvicorn)")
    s.add_argument(
        "--host",
        help="bind address (DEVPLAN_HOST, default 127.0.0.1); any but loopback needs DEVPLAN_API_KEYS "
        "(or DEVPLAN_ALLOW_ANONYMOUS=1)",
    )
    # Flags that override one setting each (service/config.py; the env var and default in the help).
    serve_settings: tuple[tuple[str, Callable[[str], Any], str], ...] = (
        ("--port", int, "port (DEVPLAN_PORT, default 8000)"),
        ("--workers", int, "uvicorn worker processes (DEVPLAN_WORKERS, default 1)"),
        ("--pool-size", int, "concurrent plans per worker (DEVPLAN_POOL_SIZE)"),
        ("--max-body-bytes", size, "largest request body, else 413 (DEVPLAN_MAX_BODY_BYTES, 32 MiB)"),
        (
            "--max-inflight-bytes",
            size,
            "body bytes held by requests in flight, else 503 (DEVPLAN_MAX_INFLIGHT_BYTES, 128 MiB)",
        ),
        (
            "--max-queued-requests",
            int,
            "requests waiting beyond the busy slots, else 503 (DEVPLAN_MAX_QUEUED_REQUESTS, 64)",
        ),
        (
            "--max-connections",
            int,
            (
                "open connections; beyond it the longest-idle one is closed (DEVPLAN_MAX_CONNECTIONS, "
                "default from the bounds)"
            ),
        ),
        (
            "--worker-memory-bytes",
            size,
            (
                "resident memory per planning worker, else 422 module-too-large; 0: none "
                "(DEVPLAN_WORKER_MEMORY_BYTES, 1 GiB)"
            ),
        ),
        (
            "--artifact-max-bytes",
            size,
            (
                "byte quota of stored /compile libraries, least recently used evicted; 0: none "
                "(DEVPLAN_ARTIFACT_MAX_BYTES, 8 GiB)"
            ),
        ),
        (
            "--artifact-max-age-s",
            float,
            "evict stored libraries unused for this long; 0: never (DEVPLAN_ARTIFACT_MAX_AGE_S, 30 days)",
        ),
        (
            "--header-timeout-s",
            float,
            "seconds to send a request's head, else the connection closes (DEVPLAN_HEADER_TIMEOUT_S, 10)",
        ),
        (
            "--body-timeout-s",
            float,
            "seconds to send an admitted request's body, else 408 (DEVPLAN_BODY_TIMEOUT_S, 60)",
        ),
        (
            "--allowed-hosts",
            str,
            "extra host names a keyless loopback server answers to, comma-separated (DEVPLAN_ALLOWED_HOSTS)",
        ),
    )
    for flag, kind, text in serve_settings:
        s.add_argument(flag, type=kind, help=text)
    s.add_argument(
        "--metrics-require-key",
        action="store_true",
        default=None,
        help="/metrics needs an API key too (DEVPLAN_METRICS_REQUIRE_KEY); keys themselves come only "
        "from DEVPLAN_API_KEYS / DEVPLAN_COMPILE_API_KEYS, never flags (they would show in ps)",
    )
    s.add_argument(
        "--log-level",
        choices=("critical", "error", "warning", "info", "debug"),
        help="DEVPLAN_LOG_LEVEL (default info)",
    )

    w = sub.add_parser(
        "worker", help="run a build-farm worker: compile jobs from the Redis queue (needs tvm)"
    )
    w.add_argument("--queue-url", help="redis://host:6379/0 (DEVPLAN_QUEUE_URL)")
    w.add_argument("--queues", default=None, help="comma-separated queue names (DEVPLAN_QUEUE_NAME, compile)")
    w.add_argument("--burst", action="store_true", help="exit once the queue is empty")
    w.add_argument("--name", help="worker name (default: a random id); GET /jobs/{id} shows it")
    return parser


COMPILE_EPILOG = """\
exit codes:
  0  compiled (and checked, with --run-check); the library is at OUT.so
  1  usage or I/O error (a bad flag, an unreadable input, TVM not installed)
  2  the module does not parse or verify
  3  planning conflict
  4  planning or compiling ran out of time (DEVPLAN_COMPILE_TIMEOUT_S bounds the compile)
  7  the planned module cannot be lowered or compiled (unsupported construct, invalid target,
     a kernel TVM cannot build)
  8  the run check failed (a sandbox limit or rule, a crash) or cannot run on this module
  130  interrupted (Ctrl-C): the compile and its sandboxed check are stopped
  143  terminated (SIGTERM, as a CI job's cancel sends it): likewise
On any failure the reason, located in INPUT where it has a place, goes to stderr and no
library (no temporary file either) is left behind.

The compile's limits and the run check's sandbox are the service's settings:
DEVPLAN_COMPILE_TIMEOUT_S, DEVPLAN_COMPILE_MEMORY_BYTES, DEVPLAN_COMPILE_SANDBOX,
DEVPLAN_RUN_CHECK_CPU_S, DEVPLAN_RUN_CHECK_WALL_S, DEVPLAN_RUN_CHECK_MEMORY_BYTES
(docs/security.md).
"""


# --------------------------------------------------------------------------
# devplan plan


def _parse_spec(text: str, flag: str) -> solver.DeviceSpec:
    """SPEC: a shorthand (`cpu`, `cuda:1`) or a JSON device object."""
    from pydantic import TypeAdapter, ValidationError

    from service.models import DeviceSpecField, spec_to_plain

    value: Any = text
    if text.lstrip().startswith(("{", "[", '"')):
        value = _load_json(text, flag)
    try:
        spec = TypeAdapter(DeviceSpecField).validate_python(value)
    except ValidationError as err:
        raise UsageError(f"{flag}: not a device spec: {_first_error(err)}") from None
    return spec_to_plain(spec)


def _load_json(text: str, flag: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise UsageError(f"{flag}: invalid JSON ({err.msg} at column {err.colno})") from None


def _first_error(err: ValidationError) -> str:
    first = err.errors()[0]
    where = ".".join(str(p) for p in first.get("loc", ()))
    return f"{where}: {first['msg']}" if where else str(first["msg"])


def _read_input(path: str) -> tuple[str, str]:
    """The module text and its display name; bytes that are not UTF-8 become U+FFFD (a parse error later)."""
    try:
        if path == "-":
            data = sys.stdin.buffer.read()
            name = "<stdin>"
        else:
            with open(path, "rb") as f:
                data = f.read()
            name = path
    except OSError as err:
        raise UsageError(f"cannot read {path}: {err.strerror or err}") from None
    return data.decode("utf-8", errors="replace"), name


def _make_job(args: argparse.Namespace) -> PlanJob:
    from pydantic import TypeAdapter, ValidationError

    import solver
    from service.models import DeviceConstraint, DeviceSpecField, constraint_to_plain, spec_to_plain
    from service.planning import PlanJob

    virtual_devices: tuple[Any, ...] = ()
    if args.virtual_devices is not None:
        raw = _load_json(args.virtual_devices, "--virtual-devices")
        if not isinstance(raw, list):
            raise UsageError("--virtual-devices: expected a JSON list of device specs")
        try:
            specs = TypeAdapter(list[DeviceSpecField]).validate_python(raw)
        except ValidationError as err:
            raise UsageError(f"--virtual-devices: {_first_error(err)}") from None
        virtual_devices = tuple(spec_to_plain(s) for s in specs)
    constraints = []
    for text in args.constraint:
        raw = _load_json(text, "--constraint")
        try:
            constraints.append(constraint_to_plain(DeviceConstraint.model_validate(raw)))
        except ValidationError as err:
            raise UsageError(f"--constraint: {_first_error(err)}") from None
    if args.timeout_ms <= 0:
        raise UsageError("--timeout-ms: must be a positive number of milliseconds")
    why = tuple(_parse_selector(text) for text in args.why)
    module, name = _read_input(args.input)
    options = solver.PlanOptions(
        virtual_devices=virtual_devices,
        default_device=_parse_spec(args.default_device, "--default-device"),
        host_device=_parse_spec(args.host_device, "--host-device"),
        constraints=tuple(constraints),
        timeout_ms=args.timeout_ms,
        on_timeout=getattr(args, "on_timeout", "fail"),
        z3_check=args.z3_check,
        check_types=args.check_types,
        **_optimize_options(args),
    )
    return PlanJob(
        module=module,
        options=options,
        output_format=_output_format(args, module),
        explain=args.explain,
        language=getattr(args, "language", None),
        name=name,
        why=why,
        picture={} if args.picture else None,
        accelerate_device_map=_accelerate_map(args.accelerate_device_map),
        accelerate_device_map_as=args.accelerate_device_map_as,
    )


def _accelerate_map(path: str | None) -> dict[str, Any] | None:
    """--accelerate-device-map: the file's map, checked by the request model's own rules."""
    if path is None:
        return None
    from pydantic import TypeAdapter, ValidationError

    from service.models import PlanRequest

    raw = _read_json_file(path, "--accelerate-device-map")
    info = PlanRequest.model_fields["accelerate_device_map"]
    annotation: Any = Annotated[info.annotation, *info.metadata] if info.metadata else info.annotation
    try:
        value: dict[str, Any] | None = TypeAdapter(annotation).validate_python(raw, strict=True)
    except ValidationError as err:
        raise UsageError(f"--accelerate-device-map: {_first_error(err)}") from None
    return value


def _output_format(args: argparse.Namespace, module: str) -> Literal["text", "json"]:
    """--output-format, else text, or for a Relax module its own encoding."""
    if args.output_format is not None:
        return cast(Literal["text", "json"], args.output_format)
    from relay.detect import detect_encoding, detect_language

    encoding = detect_encoding(module)
    language = getattr(args, "language", None) or detect_language(module, encoding)
    return encoding if language == "relax" else "text"


def _parse_selector(text: str) -> dict[str, Any]:
    """A --why selector: the JSON of a request's `why` entry."""
    from pydantic import TypeAdapter, ValidationError

    from service.models import Selector

    raw = _load_json(text, "--why")
    try:
        selector: Any = TypeAdapter(Selector).validate_python(raw)
    except ValidationError as err:
        raise UsageError(f"--why: {_first_error(err)}") from None
    out: dict[str, Any] = selector.model_dump(exclude_none=True)
    return out


def parse_bytes(text: str) -> int:
    """A byte size as every surface spells it (`8GiB`, `60MB`, `1000000`; service.units),
    surrounding spaces allowed on the command line."""
    from service.units import parse_bytes as parse

    return parse(text.strip())


# Request fields as the planner's messages name them (they are the HTTP vocabulary) and the
# flags that set them here: the CLI's messages name its flags.
FIELD_FLAGS = {
    "virtual_devices": "--virtual-devices",
    "default_device": "--default-device",
    "host_device": "--host-device",
    "constraints": "--constraint",
    "timeout_ms": "--timeout-ms",
    "on_timeout": "--on-timeout",
    "device_profiles": "--device-profiles",
    "op_support": "--op-support",
    "cost_table": "--cost-table",
    "z3_check": "--z3-check",
    "check_types": "--no-check-types",
    "mode": "--mode",
    "links": "--links",
    "assume_dim": "--assume-dim",
    "accelerate_device_map": "--accelerate-device-map",
    "accelerate_device_map_as": "--accelerate-device-map-as",
    "overlap": "--no-overlap",
}
# The request fields the commands take in other ways than a planning flag: `compile` and
# `plan` both read INPUT; `plan` alone has the output flags (its -o, --report, --why, ...).
FIELD_INPUT = {"module": "INPUT", "format": "detected from INPUT", "language": "--language"}
FIELD_OUTPUT = {
    "explain": "--explain",
    "output_format": "--output-format",
    "why": "--why",
    "include": "--report",
}


def flag_words(text: str) -> str:
    """`text` with each quoted request field (`virtual_devices`) named as its flag."""
    for field_name, flag in FIELD_FLAGS.items():
        text = text.replace(f"`{field_name}`", f"`{flag}`")
    return text


def size(text: str) -> int:
    """argparse type of the byte-size flags: a size (`32MiB`) or an integer (0 allowed)."""
    from service.units import coerce_bytes

    return int(coerce_bytes(text.strip()))


def _read_json_file(path: str, flag: str) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as err:
        raise UsageError(f"{flag}: cannot read {path}: {err.strerror or err}") from None
    return _load_json(text, flag)


def _optimize_options(args: argparse.Namespace) -> dict[str, Any]:
    """The optimize-mode options from the flags (`solver.PlanOptions` fields),
    each file validated by the request model's own rules for its field
    (`service.models.plain_option`), so the CLI and /plan accept the same files."""
    from pydantic import ValidationError

    from service.models import plain_option

    raw: dict[str, Any] = {}
    files = {
        "device_profiles": ("--device-profiles", args.device_profiles),
        "op_support": ("--op-support", args.op_support),
        "cost_table": ("--cost-table", args.cost_table),
        "links": ("--links", args.links),
    }
    for field, (flag, path) in files.items():
        if path is not None:
            raw[field] = _read_json_file(path, flag)
    budgets = raw.setdefault("device_profiles", {})
    if not isinstance(budgets, dict):
        raise UsageError("--device-profiles: expected a JSON object of device name -> profile")
    for item in args.memory_budget:
        name, sep, size = item.partition("=")
        if not sep or not name.strip():
            raise UsageError(f"--memory-budget: expected NAME=BYTES, got {item!r}")
        try:
            nbytes = parse_bytes(size)
        except ValueError as err:
            raise UsageError(f"--memory-budget: {err}") from None
        profile = budgets.setdefault(name.strip(), {})
        if not isinstance(profile, dict):
            raise UsageError(f"--device-profiles: the profile of {name.strip()} must be an object")
        profile["memory_bytes"] = nbytes
    options: dict[str, Any] = {
        "mode": args.mode,
        "assume_dim": _assume_dim(args.assume_dim),
        "overlap": getattr(args, "overlap", True),
    }
    for field, value in raw.items():
        try:
            options[field] = plain_option(field, value)
        except ValidationError as err:
            first = err.errors()[0]
            where = ".".join([field, *(str(p) for p in first.get("loc", ()))])
            raise UsageError(f"{files[field][0]}: {where}: {first['msg']}") from None
    return options


def _assume_dim(value: int) -> int:
    """--assume-dim, checked by the request's rule for `assume_dim`."""
    from pydantic import ValidationError

    from service.models import PlanRequest

    try:
        PlanRequest.model_validate({"module": "", "assume_dim": value})
    except ValidationError as err:
        raise UsageError(f"--assume-dim: {_first_error(err)}") from None
    return value


def _write_output(text: str, path: str | None) -> None:
    """Write `text` to `path`, or to stdout when `path` is None or `-`."""
    if not text.endswith("\n"):
        text += "\n"
    if path is None or path == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as err:
        raise UsageError(f"cannot write {path}: {err.strerror or err}") from None


def cmd_plan(args: argparse.Namespace, clock: Callable[[], float] = time.monotonic) -> int:
    """Plan one module. `--timeout-ms` is enforced cooperatively by `run_plan`
    (parse time counted, then the planner's deadline and Z3's own timeout, on
    `clock`): no signal, so no callback or `finally` can swallow the limit."""
    from service.planning import PlanFailure, plan_report, run_plan

    _check_stdout(
        {
            "the planned module (-o)": args.output in (None, "-"),
            "--report": args.report == "-",
            "--picture": args.picture == "-",
        }
    )
    job = _make_job(args)
    report: dict[str, Any] | None = None
    try:
        if args.report is not None:
            outcome, report = plan_report(job, clock)
        else:
            outcome = run_plan(job, clock)
    except PlanFailure as failure:
        sys.stderr.write(flag_words(failure.report).rstrip("\n") + "\n")
        return kind_of(failure.kind).exit_code
    if args.picture and outcome.picture is not None:
        from service.picture import PictureLimit, PictureUnavailable, render_svg

        try:
            svg = render_svg(outcome.picture["dot"])
        except PictureUnavailable as err:
            raise UsageError(f"--picture: {err} (apt-get install graphviz)") from None
        except PictureLimit as err:
            raise UsageError(f"--picture: {err}") from None
        _write_output(svg, args.picture)
    if report is not None:
        _write_output(json.dumps(report, indent=1), args.report)
    _write_output(outcome.module, args.output)
    for notice in outcome.notices:
        sys.stderr.write(f"devplan: notice: {notice}\n")
    if args.explain and outcome.explanation:
        sys.stderr.write("\n".join(outcome.explanation) + "\n")
    if outcome.why is not None:
        sys.stderr.write(_why_text(outcome.why, args.why_format))
    return EXIT_OK


def _compile_targets(items: Sequence[str]) -> dict[str, Any] | None:
    """--target NAME=TARGET items as /compile's `targets`, checked by its field's rules."""
    from pydantic import TypeAdapter, ValidationError

    from service.models import CompileRequest

    if not items:
        return None
    targets: dict[str, Any] = {}
    for item in items:
        name, sep, target = item.partition("=")
        if not sep or not name.strip() or not target.strip():
            raise UsageError(f"--target: expected NAME=TARGET, got {item!r}")
        value: Any = target.strip()
        if value.startswith("{"):
            value = _load_json(value, "--target")
        targets[name.strip()] = value
    annotation: Any = CompileRequest.model_fields["targets"].annotation
    try:
        checked: dict[str, Any] = TypeAdapter(annotation).validate_python(targets, strict=True)
    except ValidationError as err:
        raise UsageError(f"--target: {_first_error(err)}") from None
    return checked


def _cuda_arch(text: str | None) -> str | None:
    """--cuda-arch, checked by /compile's rule for `cuda_arch`."""
    from pydantic import ValidationError

    from service.models import CompileRequest

    if text is None:
        return None
    try:
        CompileRequest.model_validate({"module": "", "cuda_arch": text})
    except ValidationError as err:
        raise UsageError(f"--cuda-arch: {_first_error(err)}") from None
    return text


def cmd_compile(args: argparse.Namespace) -> int:
    """Plan and compile one module into a library (COMPILE_EPILOG)."""
    import importlib.util
    from pathlib import Path

    from service.config import Settings
    from service.models import CompileReport
    from service.planning import PlanFailure

    output = Path(args.output)
    if args.output == "-" or output.is_dir():
        raise UsageError(f"-o: {args.output} is not a file path (the library is binary)")
    if not output.parent.is_dir():
        raise UsageError(f"-o: no directory {output.parent}")
    if args.report is not None and args.report != "-" and Path(args.report).resolve() == output.resolve():
        raise UsageError("--report and -o name the same file")
    targets = _compile_targets(args.target)
    cuda_arch = _cuda_arch(args.cuda_arch)
    if importlib.util.find_spec("tvm") is None:
        raise UsageError("devplan compile needs TVM: pip install 'devplan[tvm]'")
    try:
        settings = Settings()
    except Exception as err:  # noqa: BLE001 - pydantic ValidationError: a bad DEVPLAN_* value
        raise UsageError(f"invalid settings: {err}") from None
    job = _make_job(args)
    from service.local_compile import compile_to_file

    try:
        answer = compile_to_file(
            job, output, settings, targets=targets, cuda_arch=cuda_arch, run_check=args.run_check
        )
    except PlanFailure as failure:
        sys.stderr.write(flag_words(failure.report).rstrip("\n") + "\n")
        return kind_of(failure.kind).exit_code
    report = CompileReport.model_validate(answer["report"]).model_dump(mode="json", exclude_none=True)
    if args.report is not None:
        _write_output(json.dumps(report, indent=1), args.report)
    check = report.get("check") or {}
    checked = ""
    if "max_abs_error" in check:
        checked = f"; run check: max abs error {check['max_abs_error']:.3g}"
    elif check.get("skipped"):
        checked = f"; run check skipped: {check['skipped']}"
    sys.stderr.write(
        f"devplan: wrote {output} ({answer['size_bytes']} bytes, devices {', '.join(report['devices']) or 'none'}, "
        f"{report['device_copies']} copies){checked}\n"
    )
    return EXIT_OK


def _check_stdout(outputs: dict[str, bool]) -> None:
    """At most one output may go to stdout (`-`, or the planned module's default)."""
    on_stdout = [name for name, yes in outputs.items() if yes]
    if len(on_stdout) > 1:
        raise UsageError(
            f"{' and '.join(on_stdout)} would all go to stdout; send all but one to a file "
            "(e.g. -o planned.relay --report -)"
        )


def _side_report(path: str, args: argparse.Namespace, clock: Callable[[], float]) -> dict[str, Any]:
    """One side of `devplan diff`: a report as it is, or a module planned with the flags."""
    from service.planning import plan_report
    from service.report import is_report

    text, _ = _read_input(path)
    if text.lstrip().startswith("{"):
        try:
            document = json.loads(text)
        except json.JSONDecodeError:
            document = None
        if is_report(document):
            assert isinstance(document, dict)
            return document
    side = argparse.Namespace(**vars(args))
    side.input = path
    side.why, side.output_format, side.explain, side.picture = [], "text", False, None
    _, report = plan_report(_make_job(side), clock)
    return report


def cmd_diff(args: argparse.Namespace, clock: Callable[[], float] = time.monotonic) -> int:
    """Compare two plans; exit 6 when a --fail-on rule is hit (service/diff.py)."""
    from service import diff
    from service.planning import PlanFailure

    if args.before == "-" and args.after == "-":
        raise UsageError("BEFORE and AFTER cannot both be stdin")
    try:
        rules = diff.parse_rules(args.fail_on)
    except diff.RuleError as err:
        raise UsageError(f"--fail-on: {err}") from None
    try:
        before = _side_report(args.before, args, clock)
        after = _side_report(args.after, args, clock)
    except PlanFailure as failure:
        sys.stderr.write(flag_words(failure.report).rstrip("\n") + "\n")
        return kind_of(failure.kind).exit_code
    result = diff.diff_reports(before, after)
    checked = diff.check_rules(result, rules)
    _write_output(diff.render(result, args.format, checked), args.output)
    hit = [r for r in checked if r.hit]
    for r in hit:
        sys.stderr.write(f"devplan: --fail-on {r.rule.text}: {r.message}\n")
    return diff.EXIT_RULE_HIT if hit else EXIT_OK


def _why_text(results: list[dict[str, Any]], fmt: str) -> str:
    """The --why answers: one block per answer, or one JSON document."""
    from solver import answer_lines

    if fmt == "json":
        return json.dumps(results, indent=2) + "\n"
    blocks = []
    for res in results:
        head = f"why {json.dumps(res['selector'])}: {res['matches']} match(es)"
        if res["truncated"]:
            head += f", the first {len(res['answers'])} answered"
        lines = [head]
        for a in res["answers"]:
            lines.extend(answer_lines(a, "  "))
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) + "\n"


# --------------------------------------------------------------------------
# devplan profile


def cmd_profile(args: argparse.Namespace) -> int:
    """Measure the module's distinct kernels; write the cost table (JSON)."""
    from service.planning import PlanFailure, PlanJob, parse_module

    if args.repeat <= 0:
        raise UsageError("--repeat: must be a positive number")
    devices = [d.strip() for d in args.devices.split(",") if d.strip()]
    if not devices:
        raise UsageError("--devices: name at least one device (cpu, cuda, cuda:1)")
    try:
        from tvm_bridge.profile import profile
    except ImportError:
        raise UsageError("devplan profile needs TVM: pip install -e '.[tvm]'") from None
    import relay
    import solver

    text, name = _read_input(args.input)
    try:
        module = parse_module(PlanJob(module=text, name=name))
        type_of, _ = solver.module_types(module)
        result = profile(module, devices, type_of=type_of, key_of=solver.cost_key, repeat=args.repeat)
    except PlanFailure as failure:
        sys.stderr.write(failure.report.rstrip("\n") + "\n")
        return EXIT_MALFORMED
    except relay.RelayError as err:  # type inference rejected the module
        sys.stderr.write(f"error: {err}\n")
        return EXIT_MALFORMED
    for note in result.missing:
        sys.stderr.write(f"devplan: not measured: {note}\n")
    for skip in result.skipped:
        where = f"{skip.span.line}:{skip.span.column}" if skip.span is not None else "?:?"
        on = f" on {skip.device}" if skip.device else ""
        sys.stderr.write(f"devplan: skipped {skip.op} at {name}:{where}{on}: {skip.reason}\n")
    if not result.devices:
        raise UsageError(f"--devices: none of {', '.join(devices)} is present here")
    _write_output(json.dumps(result.table(), indent=1), args.output)
    sys.stderr.write(
        f"devplan: {len(result.entries)} entries ({len(result.keys)} kernels x {', '.join(result.devices)})\n"
    )
    return EXIT_OK


# --------------------------------------------------------------------------
# devplan serve


def cmd_serve(args: argparse.Namespace) -> int:
    import logging

    import uvicorn

    from service.config import Settings, get_settings
    from service.connections import GuardedH11Protocol
    from service.logs import log_config

    overrides = {
        "HOST": args.host,
        "PORT": args.port,
        "WORKERS": args.workers,
        "POOL_SIZE": args.pool_size,
        "LOG_LEVEL": args.log_level,
        "MAX_BODY_BYTES": args.max_body_bytes,
        "MAX_INFLIGHT_BYTES": args.max_inflight_bytes,
        "MAX_QUEUED_REQUESTS": args.max_queued_requests,
        "MAX_CONNECTIONS": args.max_connections,
        "WORKER_MEMORY_BYTES": args.worker_memory_bytes,
        "METRICS_REQUIRE_KEY": args.metrics_require_key,
        "ARTIFACT_MAX_BYTES": args.artifact_max_bytes,
        "ARTIFACT_MAX_AGE_S": args.artifact_max_age_s,
        "HEADER_TIMEOUT_S": args.header_timeout_s,
        "BODY_TIMEOUT_S": args.body_timeout_s,
        "ALLOWED_HOSTS": args.allowed_hosts,
    }
    for key, value in overrides.items():
        if value is not None:
            os.environ[f"DEVPLAN_{key}"] = str(value)  # worker processes read the same settings
    get_settings.cache_clear()
    try:
        settings = Settings()
    except Exception as err:  # noqa: BLE001 - pydantic ValidationError: a bad DEVPLAN_* value
        raise UsageError(f"invalid settings: {err}") from None
    from service.auth import serve_refusal

    refusal = serve_refusal(settings)
    if refusal is not None:
        sys.stderr.write(f"devplan serve: error: {refusal}\n")
        return EXIT_SERVE_REFUSED
    # uvicorn handles SIGTERM/SIGINT itself (graceful shutdown), then re-raises the signal
    # with the handler it found installed. A no-op handler here makes that re-raise
    # harmless, so `devplan serve` returns normally and exits 0 after a clean shutdown
    # (what the container's init expects).
    import signal

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, frame: None)
    logging.captureWarnings(True)  # warnings go through the non-blocking log queue too
    uvicorn.run(
        "service.main:app_factory",
        factory=True,
        host=settings.host,
        port=settings.port,
        workers=settings.workers,
        log_config=log_config(settings.log_level, settings.log_queue_size),
        access_log=False,
        timeout_graceful_shutdown=settings.graceful_timeout_s,
        # No limit_concurrency: its 503 would refuse health checks behind idle connections. Idle and
        # slow connections time out and make room instead (service.connections); requests with a
        # body are bounded by the admission control.
        http=GuardedH11Protocol,
    )
    return EXIT_OK


def cmd_worker(args: argparse.Namespace) -> int:
    """`devplan worker`: run compile jobs from the queue until SIGTERM (service/worker.py)."""
    from service.config import Settings, get_settings
    from service.logs import log_config

    if args.queue_url:
        os.environ["DEVPLAN_QUEUE_URL"] = args.queue_url  # the work horses read the same settings
    get_settings.cache_clear()
    try:
        settings = Settings()
    except Exception as err:  # noqa: BLE001 - pydantic ValidationError: a bad DEVPLAN_* value
        raise UsageError(f"invalid settings: {err}") from None
    import logging.config

    logging.config.dictConfig(log_config(settings.log_level, settings.log_queue_size))
    from service.worker import run_worker

    queues = [q for q in args.queues.split(",") if q] if args.queues else None
    return run_worker(settings, queues, burst=args.burst, name=args.name)


def main(argv: Sequence[str] | None = None, *, clock: Callable[[], float] = time.monotonic) -> int:
    """Console entry point; returns the exit code (also when called from tests,
    which may inject the `clock` that `--timeout-ms` is measured on)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help / --version (0) or a usage error (already 1)
        return int(exc.code or 0) if isinstance(exc.code, int) else EXIT_USAGE
    try:
        if args.command == "plan":
            return cmd_plan(args, clock)
        if args.command == "diff":
            return cmd_diff(args, clock)
        if args.command == "compile":
            return cmd_compile(args)
        if args.command == "profile":
            return cmd_profile(args)
        if args.command == "worker":
            return cmd_worker(args)
        return cmd_serve(args)
    except UsageError as err:
        sys.stderr.write(f"devplan: error: {err}\n")
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    except Terminated:
        return 143
    except BrokenPipeError:
        return EXIT_OK
    except Exception as err:  # noqa: BLE001 - last resort: a bug, reported without a traceback
        sys.stderr.write(f"devplan: internal error: {type(err).__name__}: {err}\n")
        return EXIT_USAGE


def console_main() -> NoReturn:
    sys.exit(main())


if __name__ == "__main__":
    console_main()
