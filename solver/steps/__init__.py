"""The planning steps both modes share (docs/planning.md, sections 1-5):

1. `devices.resolve_devices`: the virtual-device table, default/host devices, request pins;
2. `prepare.front`: meta references, on_device normalisation, the pins applied
   (`pins.apply_pins`), shapes;
3. `presolve.presolve`: steps 1-2, the hard constraints collected into the
   union-find, and (TVM mode) the soft steps;
4. `check.check_with_z3` / `check.presolved_devices`: each class's device;
5. `finish.rewrite_module`, `finish.planned_result`: devices made explicit, the result.
"""

from .check import check_with_z3, presolved_devices
from .devices import Devices, PrimitiveDevices, resolve_devices
from .finish import planned_result, rewrite_module
from .laps import Laps
from .prepare import Front
from .presolve import Defaults, Presolved, presolve

__all__ = [
    "Defaults",
    "Devices",
    "Front",
    "Laps",
    "Presolved",
    "PrimitiveDevices",
    "check_with_z3",
    "planned_result",
    "presolve",
    "presolved_devices",
    "resolve_devices",
    "rewrite_module",
]
