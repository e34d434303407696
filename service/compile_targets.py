"""What `POST /compile` would build for each device of a plan, known without TVM.

A planned module keeps TVM's target text (a plain `cuda` device prints as TVM 0.19's
`cuda -keys=cuda,gpu -arch=sm_50 ...`), while the TVM bridge compiles for
`DEVPLAN_CUDA_ARCH` (sm_75) when a target names no arch or one the installed nvcc
cannot build. `compile_targets` applies the bridge's rules (tvm_bridge/targets.py:
dropped attributes, the default per device type, the CUDA arch) to the plan's
devices and says the result as target strings that `/compile`'s `targets` accepts.
Planning workers never import TVM, so the rules are restated here; a test checks
them against the bridge where TVM is installed.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from relay.device import target_options

DEFAULT_CUDA_ARCH = os.environ.get("DEVPLAN_CUDA_ARCH", "sm_75")
# The bridge's default target per device type, and the attributes it drops.
_DEFAULTS = {"cpu": "llvm", "cuda": "cuda"}
_DROPPED = {"keys", "tag"}


@functools.lru_cache(maxsize=1)
def _nvcc_archs() -> tuple[int, ...]:
    """The sm_NN numbers the installed nvcc builds for; () without nvcc (as the bridge).

    Asking nvcc takes about 0.35 s, which every `devplan plan` would pay; the answer is
    kept in the user's cache directory, keyed by nvcc's path, size and modification time.
    """
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        return ()
    real = os.path.realpath(nvcc)
    try:
        info = os.stat(real)
    except OSError:
        return ()
    key = f"{real}:{info.st_size}:{info.st_mtime_ns}"
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "devplan" / "nvcc-archs.json"
    try:
        stored = json.loads(cache.read_text())
        if stored.get("key") == key:
            return tuple(int(n) for n in stored["archs"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    try:
        out = subprocess.run(
            [real, "--list-gpu-arch"], check=False, capture_output=True, text=True, timeout=30
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return ()
    archs = tuple(sorted({int(m) for m in re.findall(r"compute_(\d+)", out)}))
    try:  # best effort: a read-only home only costs the next process the same 0.35 s
        cache.parent.mkdir(parents=True, exist_ok=True)
        partial = cache.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(json.dumps({"key": key, "archs": archs}))
        partial.replace(cache)
    except OSError:
        pass
    return archs


def compile_target(target: str | None, device_type: str) -> str | None:
    """The target string /compile builds for a device with TVM target text `target`
    (None: the device names only its type); None for a device type without a default."""
    text = target or _DEFAULTS.get(device_type)
    if text is None:
        return None
    try:
        kind, options = target_options(text)
    except ValueError:
        return None
    kept = [(name, value) for name, value in options if name not in _DROPPED]
    if kind == "cuda":
        arch = next((value for name, value in kept if name == "arch"), None)
        match = re.fullmatch(r"sm_(\d+)[a-z]?", arch or "")
        supported = _nvcc_archs()
        if arch is None or (supported and (match is None or int(match.group(1)) not in supported)):
            kept = [(name, value) for name, value in kept if name != "arch"]
            kept.insert(0, ("arch", DEFAULT_CUDA_ARCH))
    words = [kind] + [f"-{name}" if value is None else f"-{name}={value}" for name, value in kept]
    return " ".join(words)


def compile_targets(virtual_devices: Iterable[Mapping[str, Any]], used: Iterable[str]) -> dict[str, str]:
    """Device name (as the summary names devices: `cpu`, `cuda`, `cuda:1`) -> the target
    /compile would build for it, for the devices `used` by the plan.

    `virtual_devices` are the response's entries (`device_type`, `virtual_device_id`,
    `target`); a used device without an entry gets its type's default.
    """
    by_name: dict[str, Mapping[str, Any]] = {}
    for entry in virtual_devices:
        device_type = entry.get("device_type")
        if not isinstance(device_type, str):
            continue
        index = entry.get("virtual_device_id") or 0
        by_name.setdefault(device_type if not index else f"{device_type}:{index}", entry)
    out: dict[str, str] = {}
    for name in used:
        found = by_name.get(name)
        device_type = name.split(":", 1)[0]
        target = found.get("target") if found is not None else None
        built = compile_target(target if isinstance(target, str) else None, device_type)
        if built is not None:
            out[name] = built
    return out
