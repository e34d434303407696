"""The two consistency readings of a planned module agree with each other and
with what TVM 0.19 wrote.

`tests/solver/consistency_check.py` is the independent test oracle;
`solver/steps/consistency.py` is the planner's own always-on check. Both
must accept every plan TVM 0.19 wrote for the corpus and reject TVM's
broken plans of nested annotations, naming the edge that lacks a copy.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import relay
import solver
from solver.steps.consistency import InternalInconsistency, check_consistent, find_violations

from ._corpus import CORPUS, corpus_cases
from .consistency_check import check_consistent as oracle

T = "Tensor[(4), float32]"
CPU = "meta[VirtualDevice][0]"
CUDA = "meta[VirtualDevice][1]"

# TVM 0.19's own output for `on_device(on_device(negative(%x), cpu), cuda)`
# under exp (checked with TVM): negative reads the cpu parameter %x
# while its lexical device is cuda, and no copy says so.
TVM_NESTED_OUTPUT = f"""#[version = "0.0.5"]
def @main(%x {{virtual_device={CPU}}}: {T}, virtual_device={CUDA}) {{
  %0 = negative(%x);
  exp(%0)
}}
"""

# The same plan with the copy TVM drops: consistent.
REPAIRED_OUTPUT = f"""#[version = "0.0.5"]
def @main(%x {{virtual_device={CPU}}}: {T}, virtual_device={CUDA}) {{
  %0 = negative(%x);
  %1 = on_device(%0, virtual_device={CPU}, constrain_result=True);
  %2 = device_copy(%1, src_virtual_device={CPU}, dst_virtual_device={CUDA});
  exp(%2)
}}
"""

# device_copy(on_device(e, cpu), src=cuda, ...) as TVM 0.19 rewrites it: the
# copy's argument is labelled cuda while negative computes from the cpu %x.
TVM_COPY_OF_ON_DEVICE_OUTPUT = f"""#[version = "0.0.5"]
def @main(%x {{virtual_device={CPU}}}: {T}, virtual_device={CPU}) {{
  %0 = negative(%x);
  %1 = on_device(%0, virtual_device={CUDA}, constrain_result=True);
  %2 = device_copy(%1, src_virtual_device={CUDA}, dst_virtual_device={CPU});
  exp(%2)
}}
"""

# A shared value read on two devices without a copy.
SHARED_TWICE = f"""#[version = "0.0.5"]
def @main(%x {{virtual_device={CUDA}}}: {T}, virtual_device={CUDA}) {{
  %0 = negative(%x);
  %1 = on_device(%0, virtual_device={CPU}, constrain_result=True);
  %2 = device_copy(%1, src_virtual_device={CPU}, dst_virtual_device={CUDA});
  add(%0, %2)
}}
"""

# A function whose parameter is on the cpu, called with a cuda value.
CALL_ACROSS = f"""#[version = "0.0.5"]
def @f(%a {{virtual_device={CPU}}}: {T}, virtual_device={CPU}) -> {T} {{
  negative(%a)
}}

def @main(%x {{virtual_device={CUDA}}}: {T}, virtual_device={CPU}) -> {T} {{
  @f(%x)
}}
"""


DEVICES = [solver.complete_spec("cpu"), solver.complete_spec("cuda")]


def _parse(text: str) -> relay.Module:
    return relay.parse_text(text, virtual_devices=DEVICES)


def test_tvm_nested_output_is_inconsistent_for_both_readings() -> None:
    module = _parse(TVM_NESTED_OUTPUT)
    found = oracle(module)
    assert len(found) == 1
    assert found[0].span is not None
    assert (found[0].span.line, found[0].span.column) == (2, 11)  # %x
    assert found[0].value_device is not None and found[0].value_device.device_type == 1
    assert found[0].used_on is not None and found[0].used_on.device_type == 2
    edges = find_violations(module)
    assert [(e.span.line, e.span.column) for e in edges if e.span] == [(2, 11)]
    with pytest.raises(InternalInconsistency, match="is used on cuda"):
        check_consistent(module)


def test_the_copy_tvm_drops_makes_it_consistent() -> None:
    module = _parse(REPAIRED_OUTPUT)
    assert oracle(module) == []
    check_consistent(module)


@pytest.mark.parametrize("text", [TVM_COPY_OF_ON_DEVICE_OUTPUT, SHARED_TWICE, CALL_ACROSS])
def test_other_missing_copies_are_found_by_both(text: str) -> None:
    module = _parse(text)
    assert oracle(module), "the oracle must see the missing copy"
    assert find_violations(module), "the planner's check must see the missing copy"


@pytest.mark.skipif(not CORPUS.is_dir(), reason=f"corpus not found at {CORPUS}")
@pytest.mark.parametrize(
    "base", [pytest.param(b, id=c) for c, b in corpus_cases("planned") if ".bound" not in c]
)
def test_every_plan_tvm_wrote_for_the_corpus_is_consistent(base: Path) -> None:
    path = base.with_name(base.name + ".planned.relay")
    module = relay.parse_text(path.read_text(), name=str(path))
    assert [str(v) for v in oracle(module)] == []
    check_consistent(module)
