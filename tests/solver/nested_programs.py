"""Random well-typed Relay programs whose device annotations nest.

`nested_program(seed)` gives the text of a module and a list of request pins.
Annotations are stacked one to three deep over a value: `on_device` of
`on_device`, `on_device` of `device_copy`, `device_copy` of `device_copy`,
`device_copy` of `on_device`, with every `constrain_body` / `constrain_result`
combination; graph bindings keep the nesting visible (the argument of an
annotation is the inner annotation itself, as TVM's parser builds it). Values
go through lets, local functions, tuples and calls, and the pins select
operator calls, some of them inside annotations. Seeded, so a failing seed
reproduces.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

T = "Tensor[(4), float32]"
UNARY = ("negative", "exp", "tanh", "sigmoid")
BINARY = ("add", "multiply", "subtract")
ON_DEVICE_FLAGS = (
    "",  # body constrained (the default)
    ", constrain_result=True",  # body and result
    ", constrain_body=False, constrain_result=True",  # result only
    ", constrain_body=False",  # free
)


@dataclass(frozen=True)
class NestedProgram:
    """One generated module, the pins to plan it with, and what it contains."""

    seed: int
    text: str
    constraints: tuple[dict[str, Any], ...]
    nestings: tuple[str, ...] = field(default=())  # e.g. "on_device(device_copy)"


class _Builder:
    def __init__(self, rng: random.Random, devices: int) -> None:
        self.rng = rng
        self.devices = devices
        self.lines: list[str] = []
        self.values: list[str] = ["%x0", "%x1", "%x2"]
        self.counter = 0
        self.op_calls: dict[str, int] = {}
        self.annotated_ops: list[tuple[str, int]] = []
        self.nestings: list[str] = []
        self.used: set[str] = set()
        self.last_device: str | None = None
        self.last_copy = False

    def device(self) -> str:
        return f"meta[VirtualDevice][{self.rng.randrange(self.devices)}]"

    def other(self, device: str) -> str:
        """Another device than `device` (meta[VirtualDevice][i] text)."""
        i = int(device.rsplit("[", 1)[1].rstrip("]"))
        return f"meta[VirtualDevice][{(i + 1 + self.rng.randrange(self.devices - 1)) % self.devices}]"

    def bind(self, expr: str) -> str:
        name = f"%{self.counter}"
        self.counter += 1
        self.lines.append(f"  {name} = {expr};")
        self.values.append(name)
        return name

    def pick(self) -> str:
        # Prefer recent values so annotations stack on each other.
        recent = self.values[-4:]
        name = self.rng.choice(recent if self.rng.random() < 0.7 else self.values)
        self.used.add(name)
        return name

    def op_call(self, name: str, *args: str) -> str:
        index = self.op_calls.get(name, 0)
        self.op_calls[name] = index + 1
        self.last_op = (name, index)
        return f"{name}({', '.join(args)})"

    def operand(self) -> str:
        value = self.pick()
        if self.rng.random() < 0.3:
            return f"on_device({value}, virtual_device={self.device()}, constrain_body=False)"
        return value

    def compute(self) -> str:
        if self.rng.random() < 0.5:
            return self.op_call(self.rng.choice(UNARY), self.operand())
        return self.op_call(self.rng.choice(BINARY), self.operand(), self.operand())

    def layer(self, inner: str) -> tuple[str, str]:
        """One annotation around `inner` (a bound name): (text, kind)."""
        self.used.add(inner)
        if self.rng.random() < 0.55:
            flags = self.rng.choice(ON_DEVICE_FLAGS)
            # Mostly agree with an inner copy's destination (TVM fails a check otherwise).
            if not (self.last_copy and self.last_device and self.rng.random() < 0.8):
                self.last_device = self.device()
            self.last_copy = False
            return f"on_device({inner}, virtual_device={self.last_device}{flags})", "on_device"
        # Mostly copy from where the inner annotation put the value (else a conflict).
        src = self.last_device if self.last_device and self.rng.random() < 0.85 else self.device()
        dst = self.other(src) if self.rng.random() < 0.85 else src
        self.last_device = dst
        self.last_copy = True
        return f"device_copy({inner}, src_virtual_device={src}, dst_virtual_device={dst})", "device_copy"

    def annotated(self) -> str:
        """A computed value under one to three stacked annotations."""
        value = self.bind(self.compute())
        op = self.last_op
        self.last_device = None
        self.last_copy = False
        kinds: list[str] = []
        for _ in range(self.rng.randint(1, 3)):
            text, kind = self.layer(value)
            kinds.append(kind)
            value = self.bind(text)
        if len(kinds) > 1:
            self.annotated_ops.append(op)
            for outer, inner in zip(kinds[1:], kinds):
                self.nestings.append(f"{outer}({inner})")
        return value

    def step(self) -> None:
        kind = self.rng.choice(
            ["compute", "annotate", "annotate", "annotate", "let", "tuple", "fn", "inline"]
        )
        if kind == "compute":
            self.bind(self.compute())
        elif kind == "annotate":
            self.annotated()
        elif kind == "let":
            value = self.annotated() if self.rng.random() < 0.5 else self.pick()
            name = f"%v{self.counter}"
            self.counter += 1
            self.lines.append(f"  let {name}: {T} = {self.op_call(self.rng.choice(UNARY), value)};")
            self.values.append(name)
        elif kind == "tuple":
            a, b = self.pick(), self.annotated()
            self.used.add(b)
            t = self.bind(f"({a}, {b})")
            self.values.remove(t)  # a tuple is no tensor operand
            self.used.add(t)
            self.bind(f"{t}.{self.rng.randrange(2)}")
        elif kind == "fn":
            # A local function whose body nests annotations over its parameter
            # and a captured value, called once or twice.
            captured = self.pick()
            flags_a = self.rng.choice(ON_DEVICE_FLAGS)
            inner = f"on_device(%p, virtual_device={self.device()}{flags_a})"
            if self.rng.random() < 0.5:
                inner = (
                    f"device_copy({inner}, src_virtual_device={self.device()}, "
                    f"dst_virtual_device={self.device()})"
                )
                self.nestings.append("device_copy(on_device)")
            else:
                inner = f"on_device({inner}, virtual_device={self.device()})"
                self.nestings.append("on_device(on_device)")
            body = self.op_call("add", inner, captured)
            name = f"%f{self.counter}"
            self.counter += 1
            self.lines.append(f"  let {name} = fn (%p: {T}) -> {T} {{ {body} }};")
            self.bind(f"{name}({self.pick()})")
            if self.rng.random() < 0.5:
                self.bind(f"{name}({self.pick()})")
        else:
            # Nesting written inline, with a shared inner copy used twice.
            base = self.pick()
            self.used.add(base)
            a = self.device()
            b = self.other(a)
            copy = self.bind(f"device_copy({base}, src_virtual_device={a}, dst_virtual_device={b})")
            c = b if self.rng.random() < 0.8 else self.device()
            outer = self.bind(
                f"device_copy({copy}, src_virtual_device={c}, dst_virtual_device={self.other(c)})"
            )
            self.used.add(copy)
            self.nestings.append("device_copy(device_copy)")
            if self.rng.random() < 0.5:
                self.bind(self.op_call(self.rng.choice(UNARY), copy))
            self.values.append(outer)

    def result(self) -> str:
        """Combine every value nothing uses yet (graph bindings nothing uses are
        not part of the program, and pins must select live calls); the name of
        the value the function returns."""
        live = [v for v in self.values if v[1:].isdigit() and v not in self.used]
        result = self.bind(self.op_call(self.rng.choice(BINARY), self.values[-1], self.pick()))
        for v in live:
            if v not in self.used:
                self.used.add(v)
                if self.rng.random() < 0.8:
                    # A free annotation: a copy may go here, so the values that
                    # annotations put on different devices can meet.
                    v = self.bind(f"on_device({v}, virtual_device={self.device()}, constrain_body=False)")
                    self.used.add(v)
                result = self.bind(self.op_call(self.rng.choice(BINARY), result, v))
        return result


def nested_program(seed: int, devices: int = 2) -> NestedProgram:
    """The module and pins of `seed` (devices: meta[VirtualDevice][0..devices-1])."""
    rng = random.Random(seed)
    b = _Builder(rng, devices)
    for _ in range(rng.randint(2, 6)):
        b.step()
    result = b.result()
    params = ", ".join(f"%x{i}: {T}" for i in range(3))
    text = "\n".join(
        ['#[version = "0.0.5"]', f"def @main({params}) -> {T} {{", *b.lines, f"  {result}", "}", ""]
    )
    pins: list[dict[str, Any]] = []
    device_names = ("cpu", "cuda", "cpu")[:devices]
    candidates = list(b.annotated_ops)
    if candidates and rng.random() < 0.5:
        name, index = rng.choice(candidates)
        pins.append({"select": {"op": name, "index": index}, "device": rng.choice(device_names)})
    if rng.random() < 0.2:
        name = rng.choice(sorted(b.op_calls))
        index = rng.randrange(b.op_calls[name])
        if any(p["select"] == {"op": name, "index": index} for p in pins):
            return NestedProgram(seed, text, tuple(pins), tuple(b.nestings))
        pins.append(
            {
                "select": {"op": name, "index": index},
                "device": rng.choice(device_names),
            }
        )
    return NestedProgram(seed, text, tuple(pins), tuple(b.nestings))
