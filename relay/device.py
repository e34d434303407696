"""Virtual devices and compilation targets as plain values.

This is the only device knowledge in `relay/`: what a virtual device is and
how two of them combine. Where things go is the planner's business.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

# DLPack device type codes that Relay users name.
DEVICE_TYPE_CODES: dict[str, int] = {
    "cpu": 1,
    "llvm": 1,
    "cuda": 2,
    "gpu": 2,
    "cuda_host": 3,
    "opencl": 4,
    "vulkan": 7,
    "metal": 8,
    "vpi": 9,
    "rocm": 10,
    "ext_dev": 12,
    "hexagon": 14,
    "webgpu": 15,
}
DEVICE_TYPE_NAMES: dict[int, str] = {
    1: "cpu",
    2: "cuda",
    3: "cuda_host",
    4: "opencl",
    7: "vulkan",
    8: "metal",
    9: "vpi",
    10: "rocm",
    12: "ext_dev",
    14: "hexagon",
    15: "webgpu",
}
# The device type a target kind implies (a target names where its code runs).
TARGET_KIND_DEVICE: dict[str, int] = {
    "llvm": 1,
    "c": 1,
    "cuda": 2,
    "nvptx": 2,
    "opencl": 4,
    "vulkan": 7,
    "metal": 8,
    "rocm": 10,
    "hexagon": 14,
    "webgpu": 15,
}


def device_type_name(code: int) -> str:
    return DEVICE_TYPE_NAMES.get(code, str(code))


@dataclass(frozen=True, slots=True)
class Target:
    """A TVM compilation target: kind, keys, attributes and optional host.

    `attrs` keeps TVM's attribute order as pairs; equality ignores that order.
    `raw` is the TVM JSON object the target was read from, if any, so a
    target we did not change is written back exactly as it came.
    """

    kind: str
    keys: tuple[str, ...] = ()
    attrs: tuple[tuple[str, Any], ...] = ()
    host: Target | None = None
    tag: str = ""
    raw: Any = field(default=None, compare=False, repr=False, hash=False)

    def _key(self) -> tuple[Any, ...]:
        attrs = tuple(sorted((k, _freeze(v)) for k, v in self.attrs))
        return (self.kind, self.keys, attrs, self.host, self.tag)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Target) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    @property
    def attr_dict(self) -> dict[str, Any]:
        return dict(self.attrs)

    @property
    def device_type(self) -> int | None:
        return TARGET_KIND_DEVICE.get(self.kind)

    def __str__(self) -> str:
        """TVM's string form (`cuda -keys=cuda,gpu -arch=sm_50 ...`) without the host."""
        parts = [self.kind]
        if self.keys:
            parts.append("-keys=" + ",".join(self.keys))
        for key, value in self.attrs:
            if isinstance(value, bool):
                value = int(value)
            if isinstance(value, (list, tuple)):
                value = ",".join(str(v) for v in value)
            parts.append(f"-{key}={value}")
        return " ".join(parts)

    def agrees_with(self, other: Target) -> bool:
        """True when `other` says nothing this target contradicts: same kind,
        and every attribute `other` sets has the same value here."""
        if self.kind != other.kind:
            return False
        mine = self.attr_dict
        return all(k in mine and _freeze(mine[k]) == _freeze(v) for k, v in other.attrs)


def _freeze(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_freeze(v) for v in value)
    return value


# Attributes TVM 0.19 fills in for a target of each kind (Target::Target from a
# string); a target we create is written in this complete form so TVM loads it.
_KIND_DEFAULTS: dict[str, tuple[tuple[str, ...], tuple[tuple[str, Any], ...]]] = {
    "llvm": (("cpu",), (("mtriple", ""),)),
    "c": (("cpu",), ()),
    "cuda": (("cuda", "gpu"), (("thread_warp_size", 32), ("max_num_threads", 1024), ("arch", "sm_50"))),
    "rocm": (("rocm", "gpu"), (("thread_warp_size", 64), ("max_num_threads", 256))),
    "opencl": (("opencl", "gpu"), (("thread_warp_size", 1), ("max_num_threads", 256))),
    "vulkan": (("vulkan", "gpu"), (("thread_warp_size", 1), ("max_num_threads", 256))),
    "metal": (("metal", "gpu"), (("thread_warp_size", 32), ("max_num_threads", 256))),
}


def target_options(text: str) -> tuple[str, tuple[tuple[str, str | None], ...]]:
    """Split a target string (`cuda -arch=sm_90 -keys=cuda,gpu`) into its kind
    and its `-name=value` options as written (value None for a bare `-flag`).

    The one tokenizer of target strings: `parse_target` types the values as
    TVM 0.19 did, the TVM bridge as TVM 0.27's target kinds declare them.
    Raises ValueError on an empty string or a word that is not an option.
    """
    words = text.split()
    if not words:
        raise ValueError("empty target string")
    options: list[tuple[str, str | None]] = []
    for word in words[1:]:
        name, sep, value = word.lstrip("-").partition("=")
        if not word.startswith("-") or not name:
            raise ValueError(f"malformed target option {word!r} in {text!r}")
        options.append((name, value if sep else None))
    return words[0], tuple(options)


def parse_target(text: str, host: Target | None = None, *, complete: bool = True) -> Target:
    """Parse a target string such as `cuda -arch=sm_90` into its complete form.

    Keys and the per-kind default attributes are filled in as TVM 0.19 does;
    attributes given in the string override the defaults. With
    `complete=False` the target holds only what the string says (no keys,
    defaults or host), which is what a partial device spec matches against.
    Raises ValueError on an empty string or a malformed `-key=value` option.
    """
    kind, options = target_options(text)
    keys, defaults = _KIND_DEFAULTS.get(kind, ((), ())) if complete else ((), ())
    attrs: dict[str, Any] = dict(defaults)
    for name, value in options:
        if value is None:
            raise ValueError(f"malformed target option {'-' + name!r} in {text!r}")
        if name == "keys":
            keys = tuple(v for v in value.split(",") if v)
            continue
        attrs[name] = int(value) if value.lstrip("-").isdigit() else value
    if kind in ("llvm", "c"):
        host = None
    elif host is None and complete:
        host = Target("llvm", ("cpu",), _KIND_DEFAULTS["llvm"][1])
    return Target(kind, tuple(keys), tuple(attrs.items()), host)


@dataclass(frozen=True, slots=True)
class VirtualDevice:
    """Where a value is stored. Every field may be unconstrained (None).

    `device_type` is the DLPack code (1 cpu, 2 cuda); `memory_scope` None
    plays the role of TVM's empty string.
    """

    device_type: int | None = None
    virtual_device_id: int | None = None
    target: Target | None = None
    memory_scope: str | None = None

    @staticmethod
    def unconstrained() -> VirtualDevice:
        return _FULLY_UNCONSTRAINED

    @property
    def is_fully_unconstrained(self) -> bool:
        return self == _FULLY_UNCONSTRAINED

    @property
    def is_fully_constrained(self) -> bool:
        return None not in (self.device_type, self.virtual_device_id, self.target, self.memory_scope)

    def compatible(self, other: VirtualDevice) -> bool:
        """Every field is equal or unconstrained on one side."""
        return all(a is None or b is None or a == b for a, b in zip(self._fields(), other._fields()))

    def join(self, other: VirtualDevice) -> VirtualDevice | None:
        """Field by field, the constrained value; None when incompatible."""
        fields = []
        for a, b in zip(self._fields(), other._fields()):
            if a is not None and b is not None and a != b:
                return None
            fields.append(a if a is not None else b)
        joined = VirtualDevice(*fields)
        if joined == self:
            return self
        return other if joined == other else joined

    def default_from(self, other: VirtualDevice) -> VirtualDevice:
        """Fill this device's unconstrained fields from `other` (TVM's Default)."""
        return VirtualDevice(*(a if a is not None else b for a, b in zip(self._fields(), other._fields())))

    def _fields(self) -> tuple[Any, Any, Any, Any]:
        return (self.device_type, self.virtual_device_id, self.target, self.memory_scope)

    def __str__(self) -> str:
        if self.is_fully_unconstrained:
            return "?"
        parts = []
        if self.device_type is not None:
            name = device_type_name(self.device_type)
            parts.append(name if self.virtual_device_id is None else f"{name}:{self.virtual_device_id}")
        elif self.virtual_device_id is not None:
            parts.append(f"?:{self.virtual_device_id}")
        if self.target is not None:
            parts.append(f"target={str(self.target).split(' -keys')[0]}")
        if self.memory_scope is not None:
            parts.append(f"scope={self.memory_scope}")
        return " ".join(parts)


_FULLY_UNCONSTRAINED = VirtualDevice()


# The target kind a device type normally runs (used to decide whether a
# device's target is worth naming).
_USUAL_KIND: dict[int, str] = {1: "llvm", 2: "cuda"}


@functools.lru_cache(maxsize=64)  # bounded: the kind comes from user input
def _standard_attrs(kind: str) -> dict[str, Any] | None:
    """The attributes `parse_target(kind)` fills in, without the empty mtriple."""
    try:
        return _named_attrs(parse_target(kind))
    except ValueError:
        return None


def _named_attrs(target: Target) -> dict[str, Any]:
    return {k: _freeze(v) for k, v in target.attrs if (k, v) != ("mtriple", "")}


def device_name(vd: VirtualDevice) -> str:
    """The short name of a virtual device used in reports and messages:
    `cpu`, `cuda:1`, `cuda (scope global.texture)`, and
    `cuda (target cuda -arch=sm_90)` when the target is not the kind's standard one."""
    code = vd.device_type
    if code is None and vd.target is not None:
        code = vd.target.device_type
    name = device_type_name(code) if code is not None else "?"
    if vd.virtual_device_id not in (None, 0):
        name += f":{vd.virtual_device_id}"
    extras = []
    target = vd.target
    if target is not None:
        expected_kind = _USUAL_KIND.get(vd.device_type or 0, target.kind)
        if target.kind != expected_kind or _named_attrs(target) != _standard_attrs(target.kind):
            words = (w for w in str(target).split() if not w.startswith("-keys=") and w != "-mtriple=")
            extras.append("target " + " ".join(words))
    if vd.memory_scope:  # "" is the default scope: nothing to name (never an empty word)
        extras.append(f"scope {vd.memory_scope}")
    return name + (f" ({', '.join(extras)})" if extras else "")


def canonical_device_name(name: str) -> str:
    """The report name a user-written device name stands for: `cuda:0` is the
    device `device_name` calls `cuda` (id 0 is the default id), `cpu:0` is `cpu`;
    any other name (`cuda:1`, `cuda (scope global.texture)`) is returned as it is."""
    head, sep, rest = name.partition(" ")
    kind, colon, index = head.partition(":")
    if colon and index.strip() in ("0", "00") and kind:
        return kind + sep + rest
    return name
