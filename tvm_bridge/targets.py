"""Compilation targets: Relay-era strings and JSON dicts to TVM 0.27 targets.

TVM 0.27 only accepts the JSON-dict form (`{"kind": "cuda", "arch":
"sm_90"}`) and rejects `"cuda -arch=sm_90"` or `"llvm -mcpu=skylake"`,
which is what Relay users and our planned modules carry. Everything that
names a target goes through `target_dict`, which accepts both forms (and
`relay.device.Target` values) and returns a dict TVM accepts.

Without a GPU, TVM picks `sm_50` for a bare `cuda` target and nvcc 13 no
longer compiles for it; `DEFAULT_CUDA_ARCH` (environment variable
`DEVPLAN_CUDA_ARCH`, default `sm_75`) fills in the arch when none is given
and replaces archs the installed toolkit cannot build for.

Quiet output: a user who only plans hears neither of these. The
replacement is logged at warning level only for a compile (`for_compile`),
else at debug; TVM's own "Unable to detect CUDA version" warning, which its
C++ side writes straight to the process's stderr when it makes a `cuda`
target while reading a module, is caught by `native_output_to_log` and
logged at debug level.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator, Mapping
from typing import Any

from relay.device import DEVICE_TYPE_CODES, DEVICE_TYPE_NAMES, target_options
from relay.device import Target as RelayTarget

from .errors import TargetError

log = logging.getLogger(__name__)

TargetSpec = str | Mapping[str, Any] | RelayTarget

DEFAULT_CUDA_ARCH: str = os.environ.get("DEVPLAN_CUDA_ARCH", "sm_75")
"""The CUDA arch used when a target names none (nvcc 13 supports sm_75 and newer)."""

# Default target per device type name, before the default CUDA arch is applied.
DEFAULT_TARGETS: dict[str, dict[str, Any]] = {
    "cpu": {"kind": "llvm"},
    "cuda": {"kind": "cuda"},
}

# Attributes TVM 0.19 filled in that carry no information for TVM 0.27.
_DROPPED_ATTRS = {"keys", "tag"}

# Target options a caller may set: those that change the generated code, by allowlist. A
# target is built in the compile process, outside the run check's sandbox, so an option
# that sets a process-wide LLVM or TVM setting (`cl-opt`: any LLVM command-line flag, such
# as `-print-after-all` or `-ir-dump-directory=/any/path`; `jit`; `libs`, which hands
# kernels to external libraries; `from_device`, `target_device_type`) is refused, naming it.
# Options of every kind: the words TVM fills in itself.
_COMMON_OPTIONS = frozenset({"kind", "host", "keys", "tag", "device", "model"})
# String options per kind that choose the code (a CPU, an instruction set, an ABI, a GPU arch).
_STRING_OPTIONS = frozenset({"mtriple", "mcpu", "mattr", "mabi", "mfloat-abi", "march", "arch"})
# Integer and boolean options that are not code choices.
_NOT_CODE_OPTIONS = frozenset({"from_device", "target_device_type", "driver_version"})
# A target option's word (or list entry): an LLVM triple, CPU or feature (`+avx2`), an arch.
_OPTION_WORD = re.compile(r"[A-Za-z0-9_.+\-]{1,64}")
# Integer options (thread counts, vector widths, memory sizes) lie in [0, 2**31).
_OPTION_INT_MAX = 2**31 - 1
# At most this many entries in a list option (`mattr`, `keys`) and levels of `host`.
_OPTION_LIST_MAX = 64
_HOST_DEPTH_MAX = 2


@functools.lru_cache(maxsize=1)
def supported_cuda_archs() -> tuple[int, ...]:
    """The `sm_NN` numbers the installed nvcc can compile for; () without nvcc."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        return ()
    try:
        out = subprocess.run(
            [nvcc, "--list-gpu-arch"], check=False, capture_output=True, text=True, timeout=30
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return ()
    return tuple(sorted({int(m) for m in re.findall(r"compute_(\d+)", out)}))


def _arch_number(arch: str) -> int | None:
    match = re.fullmatch(r"sm_(\d+)[a-z]?", arch)
    return int(match.group(1)) if match else None


@functools.cache
def _kind_options(kind: str) -> dict[str, str]:
    import tvm

    try:
        return dict(tvm.target.TargetKind.options_from_name(kind))
    except Exception as exc:  # TVM raises its own error types for unknown kinds
        raise TargetError(f"unknown target kind {kind!r}") from exc


def _convert_option(kind: str, name: str, text: str) -> Any:
    """A `-name=text` option value typed as TVM's target kind declares it."""
    declared = _kind_options(kind).get(name)
    if declared is None:
        raise TargetError(f"target kind {kind!r} has no option {name!r}")
    if declared.startswith("Array"):
        return [v for v in text.split(",") if v]
    if declared == "int":
        try:
            return int(text)
        except ValueError as exc:
            raise TargetError(f"target option -{name} expects an integer, got {text!r}") from exc
    if declared == "bool":
        if text.lower() in ("1", "true"):
            return True
        if text.lower() in ("0", "false"):
            return False
        raise TargetError(f"target option -{name} expects a boolean, got {text!r}")
    return text


def _parse_string(text: str) -> dict[str, Any]:
    words = text.split()
    if not words:
        raise TargetError("empty target string")
    if words[0].startswith("{"):
        import json

        try:
            value = json.loads(text)
        except ValueError as exc:
            raise TargetError(f"malformed JSON target {text!r}") from exc
        if not isinstance(value, dict):
            raise TargetError(f"a JSON target must be an object, got {text!r}")
        return value
    try:
        kind, options = target_options(text)
    except ValueError as exc:
        raise TargetError(str(exc)) from None
    out: dict[str, Any] = {"kind": kind}
    for name, value in options:
        if name in _DROPPED_ATTRS:
            continue
        # A bare flag such as `-fast-math` switches a boolean option on.
        out[name] = _convert_option(kind, name, "true" if value is None else value)
    return out


def _from_relay_target(target: RelayTarget) -> dict[str, Any]:
    out: dict[str, Any] = {"kind": target.kind}
    for name, value in target.attrs:
        if value is None or value == "" or value == [] or value == ():
            continue
        out[name] = list(value) if isinstance(value, tuple) else value
    if target.host is not None and target.host.kind != target.kind:
        out["host"] = _from_relay_target(target.host)
    return out


def target_dict(
    spec: TargetSpec, *, cuda_arch: str | None = None, for_compile: bool = False
) -> dict[str, Any]:
    """The TVM 0.27 JSON-dict form of a target given as a Relay-era string
    (`"cuda -arch=sm_90"`), a dict, or a `relay.device.Target`.

    CUDA targets get `cuda_arch` (default `DEFAULT_CUDA_ARCH`) when they name
    no arch or one the installed nvcc cannot compile for, and an `llvm` host;
    the replacement is a warning when `for_compile` (the code will be built
    for that arch), else a debug line (a plan only names the device).
    Raises TargetError for anything TVM would reject.
    """
    if isinstance(spec, RelayTarget):
        out = _from_relay_target(spec)
    elif isinstance(spec, str):
        out = _parse_string(spec)
    elif isinstance(spec, Mapping):
        out = {k: v for k, v in spec.items() if k not in _DROPPED_ATTRS}
        if not isinstance(out.get("kind"), str):
            raise TargetError(f"a target dict needs a string 'kind', got {dict(spec)!r}")
    else:
        raise TargetError(f"not a target: {spec!r}")
    kind = out["kind"]
    if "host" in out and not isinstance(out["host"], dict):
        out["host"] = target_dict(out["host"])
    if kind == "cuda":
        wanted = cuda_arch or DEFAULT_CUDA_ARCH
        arch = out.get("arch")
        supported = supported_cuda_archs()
        number = _arch_number(arch) if isinstance(arch, str) else None
        if arch is None:
            out["arch"] = wanted
        elif supported and (number is None or number not in supported):
            level = logging.WARNING if for_compile else logging.DEBUG
            log.log(level, "CUDA arch %s is not supported by the installed nvcc; using %s", arch, wanted)
            out["arch"] = wanted
        out.setdefault("host", {"kind": "llvm"})
    check_target_options(out)
    validate_target(out)
    return out


def check_target_options(spec: Mapping[str, Any], *, where: str = "target", depth: int = 0) -> None:
    """Raise TargetError naming the first option of `spec` (a target dict, `host` included)
    that is not a code choice (see `_COMMON_OPTIONS`): TVM's `cl-opt` and the like set
    process-wide state of the compiling process. Values are words, bounded integers,
    booleans or short lists of words."""
    kind = spec.get("kind")
    if not isinstance(kind, str) or not _OPTION_WORD.fullmatch(kind):
        raise TargetError(f"{where}: a target needs a `kind` word")
    declared = _kind_options(kind)
    for name, value in spec.items():
        if name == "kind":
            continue
        label = f"{where} option `{name}` (kind {kind})"
        if name == "host":
            if depth >= _HOST_DEPTH_MAX:
                raise TargetError(f"{label}: hosts nest at most {_HOST_DEPTH_MAX} levels")
            if isinstance(value, Mapping):
                check_target_options(value, where=f"{where} host", depth=depth + 1)
            elif not isinstance(value, str):
                raise TargetError(f"{label}: a host is a target")
            continue
        kind_of = declared.get(name)
        allowed = name in _COMMON_OPTIONS or name in _STRING_OPTIONS or (
            kind_of in ("int", "bool") and name not in _NOT_CODE_OPTIONS
        )
        if kind_of is None or not allowed:
            raise TargetError(
                f"{label} is not accepted: a target may set only options that choose the generated "
                "code (such as mcpu, mattr, mtriple, arch, opt-level, fast-math); options that set "
                "process-wide LLVM or TVM state (cl-opt, jit, libs) are refused"
            )
        _check_option_value(label, value)


def _check_option_value(label: str, value: Any) -> None:
    """A target option's value: a word, a bounded integer, a boolean, or a short list of words."""
    if isinstance(value, bool):
        return
    if isinstance(value, int):
        if not 0 <= value <= _OPTION_INT_MAX:
            raise TargetError(f"{label}: {value} is out of range [0, {_OPTION_INT_MAX}]")
        return
    if isinstance(value, str):
        if value and not _OPTION_WORD.fullmatch(value):
            raise TargetError(f"{label}: {value[:80]!r} is not a plain word (letters, digits, _ . + -)")
        return
    if not isinstance(value, (list, tuple, Mapping, bytes)) and hasattr(value, "__iter__"):
        value = list(value)  # TVM's own arrays (an exported target's `keys`)
    if isinstance(value, (list, tuple)) and len(value) <= _OPTION_LIST_MAX:
        for item in value:
            if not isinstance(item, str) or not _OPTION_WORD.fullmatch(item):
                raise TargetError(f"{label}: list entries are plain words, not {str(item)[:80]!r}")
        return
    raise TargetError(f"{label}: not a word, an integer, a boolean or a short list of words")


def check_tvm_target(target: Any, *, where: str = "target") -> None:
    """`check_target_options` for a `tvm.target.Target` (a vdevice's, a kernel's)."""
    check_target_options(_exported(target), where=where)


def _exported(target: Any) -> dict[str, Any]:
    out = dict(target.export())
    host = out.get("host")
    if host is not None and not isinstance(host, Mapping):
        out["host"] = _exported(host)
    return out


def validate_target(spec: Mapping[str, Any]) -> None:
    """Raise TargetError unless TVM accepts the dict as a target."""
    import tvm

    try:
        tvm.target.Target(dict(spec))
    except Exception as exc:  # TVM reports bad options as ValueError/TVMError
        raise TargetError(f"TVM rejects target {dict(spec)!r}: {str(exc).splitlines()[0]}") from exc


def tvm_target(spec: TargetSpec, *, cuda_arch: str | None = None) -> Any:
    """A `tvm.target.Target` for any accepted target form."""
    import tvm

    return tvm.target.Target(target_dict(spec, cuda_arch=cuda_arch, for_compile=True))


def device_type_name(name_or_code: str | int) -> str:
    """Normalise a device name or DLPack code to `cpu` / `cuda` / ..."""
    if isinstance(name_or_code, int):
        return DEVICE_TYPE_NAMES.get(name_or_code, str(name_or_code))
    code = DEVICE_TYPE_CODES.get(name_or_code.lower())
    if code is None:
        raise TargetError(f"unknown device type {name_or_code!r}")
    return DEVICE_TYPE_NAMES[code]


def target_map(
    targets: Mapping[str | int, TargetSpec] | None = None, *, cuda_arch: str | None = None
) -> dict[str, dict[str, Any]]:
    """Targets per device type name (`cpu`, `cuda`, ...): the defaults
    (`cpu` -> llvm, `cuda` -> cuda with the default arch) overridden by
    `targets`, whose keys may be device names (`gpu` = `cuda`) or codes.
    A compile's table: arch replacements are warnings."""
    out = {
        name: target_dict(spec, cuda_arch=cuda_arch, for_compile=True) for name, spec in DEFAULT_TARGETS.items()
    }
    for key, spec in (targets or {}).items():
        out[device_type_name(key)] = target_dict(spec, cuda_arch=cuda_arch, for_compile=True)
    return out


_NATIVE_OUTPUT = threading.Lock()


@contextlib.contextmanager
def native_output_to_log(logger: logging.Logger = log) -> Iterator[None]:
    """Run the block with the process's stderr (file descriptor 2) going to a
    temporary file, then log each line written there at debug level.

    TVM's C++ code writes its warnings to file descriptor 2 directly, out of
    reach of Python's logging (reading TVMScript with a `cuda` vdevice prints
    "Unable to detect CUDA version" on a machine without a GPU). Output of
    other threads during the block lands in the log too, which is why a lock
    keeps two blocks from nesting; without a usable descriptor 2 the block
    runs as it is."""
    with _NATIVE_OUTPUT:
        try:
            sys.stderr.flush()
            saved: int | None = os.dup(2)
        except (OSError, ValueError):
            saved = None
        if saved is None:
            yield
            return
        with tempfile.TemporaryFile() as sink:
            os.dup2(sink.fileno(), 2)
            try:
                yield
            finally:
                with contextlib.suppress(OSError, ValueError):
                    sys.stderr.flush()
                os.dup2(saved, 2)
                os.close(saved)
                sink.seek(0)
                for line in sink.read().decode("utf-8", errors="replace").splitlines():
                    if line.strip():
                        logger.debug("native output: %s", line.rstrip())
