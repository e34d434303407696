"""`devplan.PlanDevices`: `devplan.plan` as a TVM module pass."""

from __future__ import annotations

from typing import Any

from devplan import _options
from devplan._errors import Error, carry, register_with_tvm
from devplan._plan import _request


def PlanDevices(**options: Any) -> Any:  # TVM's own spelling of pass constructors
    """A `tvm.ir.transform.Pass` that plans a Relax module's devices: a module pass
    named `devplan.PlanDevices` with `opt_level=0` (it runs in any PassContext),
    whose output is `devplan.plan(mod, **options).module`.

    The options are those of `devplan.plan` (the `POST /plan` request's fields),
    checked now: an unknown keyword or a value of the wrong type is a TypeError
    here, not when the pass runs. Errors of planning reach the pass's caller as
    the same `devplan.Error` subclasses, `.problem` included."""
    import tvm

    _options.validate("PlanDevices", "", options)
    register_with_tvm()

    def transform(mod: Any, ctx: Any) -> Any:
        try:
            request = _request("PlanDevices", mod, options)
            return _plan_module(request)
        except Error as err:
            carry(err)
            raise

    return tvm.ir.transform.module_pass(transform, opt_level=0, name="devplan.PlanDevices")


def _plan_module(request: Any) -> Any:
    from devplan._plan import Plan

    return Plan(request, request.run()).module
