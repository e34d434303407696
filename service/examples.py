"""The worked examples of POST /plan shown in Swagger UI ("Try it out").

Tests post each of them and check what its summary promises, so the docs
cannot drift from the behaviour.
"""

from __future__ import annotations

from typing import Any

PLAIN = """\
#[version = "0.0.5"]
def @main(%x: Tensor[(2, 2), float32], %y: Tensor[(2, 2), float32]) {
  %0 = add(%x, %y);
  nn.relu(%0)
}
"""

CPU_ANNOTATION = """\
#[version = "0.0.5"]
def @main(%x: Tensor[(4), float32], %y: Tensor[(4), float32]) {
  %0 = multiply(%x, %y);
  %1 = on_device(%0, virtual_device=meta[VirtualDevice][0]);
  exp(%1)
}
"""

CONFLICT = """\
#[version = "0.0.5"]
def @main(%x {virtual_device=meta[VirtualDevice][0]}: Tensor[(4), float32]) {
  %0 = on_device(%x, virtual_device=meta[VirtualDevice][1], constrain_result=True);
  negative(%0)
}
"""

PLAN_EXAMPLES: dict[str, dict[str, Any]] = {
    "plain": {
        "summary": "Plain module: everything defaults to cuda",
        "description": "No annotations: every expression lands on the default device (cuda), no copies.",
        "value": {"module": PLAIN, "default_device": "cuda", "host_device": "cpu"},
    },
    "cpu_annotation": {
        "summary": "A cpu annotation yields a device_copy",
        "description": "The multiply is pinned to the cpu (`meta[VirtualDevice][0]`); exp runs on the "
        "default device, so the planner inserts a cpu -> cuda copy. The text has no metadata "
        "section, so `virtual_devices` supplies the table.",
        "value": {"module": CPU_ANNOTATION, "virtual_devices": ["cpu", "cuda"], "explain": True},
    },
    "conflict": {
        "summary": "A conflict returns the explanation (422)",
        "description": "%x is declared on the cpu but annotated onto cuda: the answer is a "
        "planning-conflict problem listing both constraints with line and column.",
        "value": {"module": CONFLICT, "virtual_devices": ["cpu", "cuda"]},
    },
}
