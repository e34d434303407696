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

# A small mobilenet-like network: a convolutional backbone and a dense head.
SMALL_CNN = """\
#[version = "0.0.5"]
def @main(%data: Tensor[(1, 3, 64, 64), float32], %w1: Tensor[(32, 3, 3, 3), float32], \
%w2: Tensor[(32, 1, 3, 3), float32], %w3: Tensor[(64, 32, 1, 1), float32], \
%fc_w: Tensor[(10, 64), float32], %fc_b: Tensor[(10), float32]) {
  %0 = nn.conv2d(%data, %w1, padding=[1, 1, 1, 1], channels=32, kernel_size=[3, 3]);
  %1 = nn.relu(%0);
  %2 = nn.conv2d(%1, %w2, padding=[1, 1, 1, 1], groups=32, channels=32, kernel_size=[3, 3]);
  %3 = nn.relu(%2);
  %4 = nn.conv2d(%3, %w3, padding=[0, 0, 0, 0], channels=64, kernel_size=[1, 1]);
  %5 = nn.relu(%4);
  %6 = nn.global_avg_pool2d(%5);
  %7 = nn.batch_flatten(%6);
  %8 = nn.dense(%7, %fc_w, units=10);
  %9 = nn.bias_add(%8, %fc_b);
  nn.softmax(%9)
}
"""

# A classifier whose dense weight (4096 x 1024 float32, 16 MiB) is the bulk of the model.
BIG_HEAD = """\
#[version = "0.0.5"]
def @main(%data: Tensor[(1, 1024), float32], %w: Tensor[(4096, 1024), float32], \
%w2: Tensor[(10, 4096), float32]) {
  %0 = nn.relu(%data);
  %1 = nn.dense(%0, %w, units=4096);
  %2 = nn.relu(%1);
  %3 = nn.dense(%2, %w2, units=10);
  nn.softmax(%3)
}
"""

HEAD_PINS = [
    {"select": {"op": "nn.dense"}, "device": "cpu"},
    {"select": {"op": "nn.softmax"}, "device": "cpu"},
]

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
    "optimize_head_on_cpu": {
        "summary": "Optimize: head pinned to cpu, backbone stays on cuda",
        "description": "The classifier head (`nn.dense`, `nn.softmax`) is pinned to the cpu. In the TVM "
        "mode a pin propagates to every producer, so the whole network would run on the cpu; "
        '`mode: "optimize"` pins only the head\'s own computation, keeps the backbone on cuda and '
        "copies once before the head. `cost` gives the predicted time against the TVM mode's.",
        "value": {
            "module": SMALL_CNN,
            "default_device": "cuda",
            "constraints": HEAD_PINS,
            "mode": "optimize",
            "explain": True,
        },
    },
    "optimize_support_conflict": {
        "summary": "Optimize: a pin against operator support (422)",
        "description": "`nn.softmax` is pinned to cuda but `op_support` says cuda cannot run it: the answer "
        "is a planning-conflict problem naming the pin and the support rule.",
        "value": {
            "module": SMALL_CNN,
            "default_device": "cuda",
            "constraints": [{"select": {"op": "nn.softmax"}, "device": "cuda"}],
            "op_support": {"cuda": {"unsupported": ["nn.softmax"]}},
            "mode": "optimize",
        },
    },
    "optimize_budget": {
        "summary": "Optimize: a memory budget moves the big layer to cpu",
        "description": "cuda gets an 8 MiB budget (`device_profiles.cuda.memory_bytes`); the 16 MiB dense "
        "weight cannot live there, so that layer runs on the cpu. `tvm_mode_predicted_ms` is null and "
        "`tvm_mode_reason` says why: the TVM mode's all-cuda plan breaks the budget.",
        "value": {
            "module": BIG_HEAD,
            "default_device": "cuda",
            "device_profiles": {"cuda": {"memory_bytes": "8MiB"}},  # a size as --memory-budget takes it
            "mode": "optimize",
        },
    },
}

# Why-queries and the picture.
PLAN_EXAMPLES["why"] = {
    "summary": "Why is the multiply on the cpu? (why-queries)",
    "description": '`why` takes selectors (`op`, `param`, `function`, `{"at": "LINE:COL"}`, '
    '`{"node": ID}`). Each answer gives the device and the shortest chain of constraints that decided '
    "it: the multiply (line 3) is on the cpu because of the annotation on line 4; exp is on cuda "
    "because nothing pins it and the default device is cuda.",
    "value": {
        "module": CPU_ANNOTATION,
        "virtual_devices": ["cpu", "cuda"],
        "why": [{"at": "3:8"}, {"op": "exp"}],
    },
}

PICTURE_EXAMPLES: dict[str, dict[str, Any]] = {
    "cpu_annotation": {
        "summary": "The annotated module: a cpu multiply, a copy, exp on cuda",
        "description": "An SVG with the multiply filled in the cpu color and outlined (it is pinned), "
        "one red copy edge labelled with its bytes (16 B) and exp in the cuda color.",
        "value": {"module": CPU_ANNOTATION, "virtual_devices": ["cpu", "cuda"]},
    },
    "pin_a_node": {
        "summary": "Pin a node by id",
        "description": "The same request as /plan: here node 4 (the add) is pinned to the cpu with a "
        '`{"node": ID}` selector; the picture shows the copy to the relu on cuda.',
        "value": {
            "module": PLAIN,
            "default_device": "cuda",
            "constraints": [{"select": {"node": 4}, "device": "cpu"}],
        },
    },
}
