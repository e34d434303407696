"""Relay type inference: `infer_types(module)` gives the type of every
expression, parameter and function.

Operator types come from the relation table in `relay.infer.relations`;
an operator without one, and everything depending on it, gets `UNKNOWN`.
"""

from ..ast import UNKNOWN, UnknownType
from .engine import Types, infer_types
from .relations import RELATIONS, RelationError
from .types import TypeInferenceError, type_text

__all__ = [
    "RELATIONS",
    "UNKNOWN",
    "RelationError",
    "TypeInferenceError",
    "Types",
    "UnknownType",
    "infer_types",
    "type_text",
]
