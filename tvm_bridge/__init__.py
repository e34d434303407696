"""TVM for Relay and Relax modules: reading and writing Relax, lowering a
planned Relay module to Relax, compiling for each device's target.

The only package that imports `tvm` (apache-tvm 0.27, Relax only). Relax
modules are read after the TVMScript and JSON guards (`relax_plan`,
`tvmscript_guard`, `json_guard`), translated for the planner and written back
with their placements (`relax_translate`, `relax_write`). `to_relax` lowers a
planned `relay.Module` to Relax with virtual devices; `compile` builds a
planned module for each virtual device's target, `export_library` writes it,
`run` executes it on the Relax VM with the plan's devices.
"""

from .build import (
    Compiled,
    bind_kernel_targets,
    compile,
    devices_for,
    export_library,
    load_library,
    nvcc_check,
    run,
    timed_run,
)
from .errors import BridgeError, TargetError, UnscheduledKernel, UnsupportedConstruct, UnsupportedOperator
from .lower import to_relax, vdevices_of
from .ops import convert_map
from .targets import DEFAULT_CUDA_ARCH, target_dict, target_map, tvm_target

__all__ = [
    "DEFAULT_CUDA_ARCH",
    "BridgeError",
    "Compiled",
    "TargetError",
    "UnscheduledKernel",
    "UnsupportedConstruct",
    "UnsupportedOperator",
    "bind_kernel_targets",
    "compile",
    "convert_map",
    "devices_for",
    "export_library",
    "load_library",
    "nvcc_check",
    "run",
    "target_dict",
    "target_map",
    "timed_run",
    "to_relax",
    "tvm_target",
    "vdevices_of",
]
