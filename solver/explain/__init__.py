"""Explanations: why a plan is impossible (`conflicts`: a minimal set of
tracked constraints from Z3's unsat core) and why an expression got its
device (`why`: the shortest chain of collected constraints). `text` renders
expressions for both."""

from .conflicts import constraint_of, explain_conflict, shortest_path
from .text import short_text

__all__ = ["constraint_of", "explain_conflict", "short_text", "shortest_path"]
