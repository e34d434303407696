"""The modules of a model, named as accelerate names them: `model.embed_tokens`,
`model.layers.3`, `lm_head`.

A Relax module keeps no module tree: only its weight parameters' names say
which module a weight belongs to. Three sources, in this order of trust
(`ModuleNames.source` says which one named a plan's modules):

- `"request"`: the request's own `accelerate_device_map`. Each weight belongs to
  the most specific entry that covers it (`""` covers every weight), the entry
  read in the weights' spelling (`model.layers.3` covers `model.layers.3.*` and,
  in torch-export spelling, `p_model_layers_3_*`).
- `"parameters"`: dotted parameter names (`relax.frontend.nn`:
  `model.layers.3.mlp.up_proj.weight`). A weight's module is its name cut after
  the first integer component (`model.layers.3`), or without its last
  component when there is none (`model.embed_tokens.weight` ->
  `model.embed_tokens`; `lm_head.weight` -> `lm_head`).
- `"inferred"`: torch-export names, which flatten the state-dict key with `_`
  (`p_model_layers_3_mlp_up_proj_weight`), so the dots are guessed by one rule:

  1. the export's `p_` (parameter) or `b_` (buffer) prefix goes, and the rest
     splits on `_`;
  2. a name with an integer component is a numbered block: the word before the
     integer is the block list, the words before that its parents, one module
     a word (`model_layers_3_...` -> `model.layers.3`, `transformer_h_0_...` ->
     `transformer.h.0`, `layer1_0_conv1_weight` -> `layer1.0`);
  3. any other name loses its leaf (`weight`, `bias`, `running_mean`,
     `running_var`, `num_batches_tracked`, `in_proj_weight`, `in_proj_bias`,
     else its last word); when what remains starts with the parents of a
     numbered block (rule 2's `model`), it is a child of them named by the
     remaining words joined with `_` (`model_embed_tokens_weight` ->
     `model.embed_tokens`, `transformer_ln_f_weight` -> `transformer.ln_f`),
     else a top-level module named by all of them (`lm_head_weight` ->
     `lm_head`).

  A module whose own name has `_` inside a parent path (`blocks_list_0`) or
  whose children are numbered without a list word gets a dotted name that may
  not be the model's; `names: "inferred"` in every answer says the rule was
  used. A map handed in names modules the model's way, and wins.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

SOURCE_REQUEST = "request"
SOURCE_PARAMETERS = "parameters"
SOURCE_INFERRED = "inferred"

# torch.export's prefixes of lifted parameters and buffers.
EXPORT_PREFIXES = ("p_", "b_")
# Leaves of more than one word (PyTorch's BatchNorm buffers, MultiheadAttention's packed projection).
LONG_LEAVES = (
    ("num", "batches", "tracked"),
    ("running", "mean"),
    ("running", "var"),
    ("in", "proj", "weight"),
    ("in", "proj", "bias"),
)
_INTEGER = re.compile(r"\d+")


@dataclass(frozen=True, slots=True)
class ModuleNames:
    """Which module each weight belongs to, and where the names came from."""

    source: str  # SOURCE_REQUEST | SOURCE_PARAMETERS | SOURCE_INFERRED
    modules: Mapping[str, str]  # weight parameter name -> its module

    def of(self, weight: str) -> str:
        return self.modules[weight]

    def order(self) -> list[str]:
        """The modules, in the order of their first weight."""
        return list(dict.fromkeys(self.modules.values()))


def is_dotted(weights: Iterable[str]) -> bool:
    """Whether the weights carry dotted names (`relax.frontend.nn`)."""
    return any("." in w for w in weights)


def dotted_module(name: str) -> str:
    """The module of a dotted weight name: cut after its first integer
    component, else without its last (a one-component name is its own)."""
    parts = name.lstrip("%").split(".")
    for k, part in enumerate(parts):
        if _INTEGER.fullmatch(part):
            return ".".join(parts[: k + 1])
    return ".".join(parts[:-1] if len(parts) > 1 else parts)


def export_words(name: str) -> list[str]:
    """A torch-export name's words: without `%` and the export's prefix, split on `_`."""
    name = name.lstrip("%")
    for prefix in EXPORT_PREFIXES:
        if name.startswith(prefix) and len(name) > len(prefix):
            name = name[len(prefix) :]
            break
    return [w for w in name.split("_") if w]


def _numbered(words: Sequence[str]) -> int | None:
    """The position of the first integer word, if any."""
    return next((k for k, w in enumerate(words) if _INTEGER.fullmatch(w)), None)


def _without_leaf(words: Sequence[str]) -> list[str]:
    for leaf in LONG_LEAVES:
        if len(words) > len(leaf) and tuple(words[-len(leaf) :]) == leaf:
            return list(words[: -len(leaf)])
    return list(words[:-1]) if len(words) > 1 else list(words)


def inferred_modules(weights: Sequence[str]) -> dict[str, str]:
    """Each torch-export weight name's module by the documented rule (module docstring)."""
    words = {w: export_words(w) for w in weights}
    parents: set[tuple[str, ...]] = set()
    out: dict[str, str] = {}
    for w, ws in words.items():
        k = _numbered(ws)
        if k is None:
            continue
        if k == 0:
            out[w] = ws[0]
            continue
        parents.add(tuple(ws[: k - 1]))
        out[w] = ".".join(ws[: k + 1])
    by_length = sorted((p for p in parents if p), key=len, reverse=True)
    for w, ws in words.items():
        if w in out:
            continue
        rest = _without_leaf(ws) if ws else [w]
        parent = next((p for p in by_length if len(rest) > len(p) and tuple(rest[: len(p)]) == p), None)
        if parent is None:
            out[w] = "_".join(rest)
        else:
            out[w] = ".".join(parent) + "." + "_".join(rest[len(parent) :])
    return {w: out[w] for w in weights}


def module_names(weights: Sequence[str]) -> ModuleNames:
    """The modules of weights named by the model: dotted names as they are,
    else the rule over torch-export names."""
    if is_dotted(weights):
        return ModuleNames(SOURCE_PARAMETERS, {w: dotted_module(w) for w in weights})
    return ModuleNames(SOURCE_INFERRED, inferred_modules(weights))


def covers(entry: str, weight: str, dotted: bool) -> bool:
    """Whether the map entry `entry` (a dotted module name, `""` the whole
    model) covers the weight `weight`, read in the weights' spelling."""
    if entry == "":
        return True
    if dotted:
        name = weight.lstrip("%")
        return name == entry or name.startswith(entry + ".")
    flat = "_".join(export_words(entry.replace(".", "_")))
    name = "_".join(export_words(weight))
    return name == flat or name.startswith(flat + "_")


def map_owners(entries: Iterable[str], weights: Sequence[str]) -> dict[str, str | None]:
    """Each weight's entry in a device map: the most specific (longest) entry
    that covers it, None where none does."""
    dotted = is_dotted(weights)
    ranked = sorted(entries, key=len, reverse=True)  # of two entries covering a weight, one is inside the other
    return {w: next((e for e in ranked if covers(e, w, dotted)), None) for w in weights}


def request_names(entries: Iterable[str], weights: Sequence[str]) -> ModuleNames:
    """The modules of weights as a device map names them (every weight covered)."""
    owners = map_owners(entries, weights)
    return ModuleNames(SOURCE_REQUEST, {w: o if o is not None else "" for w, o in owners.items()})
