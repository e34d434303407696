"""The keyword arguments of `devplan.plan` and `devplan.PlanDevices`: the fields of
the `POST /plan` request (`service.models.PlanRequest`), read from the model itself
so the two never drift, validated by the same model, the same way."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import PydanticUndefined

from devplan._errors import validation_error
from service.models import PlanRequest

# `module` is the positional argument; every other field of the request is a keyword.
OPTION_NAMES: tuple[str, ...] = tuple(name for name in PlanRequest.model_fields if name != "module")


def _default(name: str, model: type[BaseModel] = PlanRequest) -> Any:
    info = model.model_fields[name]
    if info.default_factory is not None:
        return info.default_factory()  # type: ignore[call-arg]
    return None if info.default is PydanticUndefined else info.default


def signature(
    func: Callable[..., Any], *, module: bool, model: type[BaseModel] = PlanRequest, extra: tuple[str, ...] = ()
) -> inspect.Signature:
    """`func`'s signature with one keyword-only parameter per field of the request
    `model` (its default the request's), after `module` (when `module`) and the
    positional parameters `extra`."""
    params = []
    if module:
        params.append(inspect.Parameter("module", inspect.Parameter.POSITIONAL_OR_KEYWORD))
    params.extend(inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD) for name in extra)
    for name in model.model_fields:
        if name != "module":
            params.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=_default(name, model)))
    return inspect.Signature(params, return_annotation=inspect.signature(func).return_annotation)


def options_doc(model: type[BaseModel] = PlanRequest, only: tuple[str, ...] | None = None) -> str:
    """One line per keyword: its name and the request field's description."""
    lines = []
    for name in only if only is not None else tuple(n for n in model.model_fields if n != "module"):
        text = " ".join((model.model_fields[name].description or "").split())
        lines.append(f"    {name}: {text}")
    return "\n".join(lines)


def _plain(value: Any) -> Any:
    """Tuples as lists (the request is JSON-shaped; Python callers write tuples too)."""
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    return value


def validate(
    caller: str, module_text: str, options: Mapping[str, Any], model: type[PlanRequest] = PlanRequest
) -> PlanRequest:
    """The request of `module_text` with `options`, validated by the request model.

    An unknown keyword or a value of the wrong Python type is a TypeError (as for
    any Python function); a value of the right type that the schema refuses (a
    negative time limit, an unknown mode) is a `devplan.ConfigError` whose
    problem is the service's 422 validation-error."""
    unknown = [name for name in options if name == "module" or name not in model.model_fields]
    if unknown:
        raise TypeError(f"{caller}() got an unexpected keyword argument {unknown[0]!r}")
    try:
        return model.model_validate({"module": module_text, **_plain(dict(options))})
    except ValidationError as err:
        found = err.errors()
        if all(str(e["type"]).endswith("_type") for e in found):
            first = found[0]
            where = ".".join(str(p) for p in first["loc"])
            raise TypeError(f"{caller}(): {where}: {first['msg']}") from None
        items = [
            {"loc": ["body", *(p if isinstance(p, int) else str(p) for p in e["loc"])], "msg": str(e["msg"]),
             "type": str(e["type"])}
            for e in found
        ]
        raise validation_error(items) from None
