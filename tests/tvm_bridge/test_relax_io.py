"""Reading and writing Relax modules: TVMScript and TVM JSON in,
the same encoding out, located parse errors, language detection."""

from __future__ import annotations

import pytest
import tvm
from tvm import relax

import tvm_bridge
from relay.detect import detect_encoding, detect_language
from relay.span import ParseError
from service.relax_planning import plan_relax
from solver import PlanConfig
from tvm_bridge.relax_plan import print_relax, read_relax, strip_devices

from .helpers import corpus_path, load_corpus

pytestmark = pytest.mark.tvm

SOURCE = """# from tvm.script import ir as I
from tvm.script import relax as R

@I.ir_module
class Module:
    I.module_global_infos({"vdevice": [I.vdevice("llvm", 0), I.vdevice("llvm", 1)]})

    @R.function
    def main(x: R.Tensor((3, 4), "float32"), w: R.Tensor((4, 2), "float32")) -> R.Tensor((3, 2), "float32"):
        with R.dataflow():
            y = R.matmul(x, w)
            z = R.hint_on_device(y, R.device(1, 1))
            out = R.nn.relu(z)
            R.output(out)
        return out
"""


def test_save_json_module_plans_and_its_output_loads() -> None:
    mod, _ = read_relax(SOURCE)
    text = tvm.ir.save_json(mod)  # segfaults with apache-tvm-ffi 0.1.15.post2 (the pin is 0.1.14.post0)
    assert detect_language(text) == "relax" and detect_encoding(text) == "json"
    again, source = read_relax(text, "json")
    assert source is None
    planned = plan_relax(again, PlanConfig(default_device="cpu:0", host_device="cpu:0"))
    out = print_relax(planned.module, "json")
    loaded = tvm.ir.load_json(out)
    tvm.ir.assert_structural_equal(loaded, planned.module)
    tvm.ir.assert_structural_equal(strip_devices(loaded), strip_devices(mod))
    # The hint pins the matmul and everything after it on llvm:1; x and w follow.
    ty = loaded["main"].params[0].ty
    assert int(ty.vdevice.vdevice_id) == 1


def test_script_imports_and_output_reparse() -> None:
    mod, source = read_relax(SOURCE)
    planned = plan_relax(mod, PlanConfig(default_device="cpu:0", host_device="cpu:0"), source)
    text = print_relax(planned.module)
    assert "vdevice=" in text and "hint_on_device" not in text
    back, _ = read_relax(text)
    tvm.ir.assert_structural_equal(back, planned.module)


def test_tvmscript_syntax_error_is_located() -> None:
    broken = SOURCE.replace("y = R.matmul(x, w)", "y = R.matmul(x, w")
    with pytest.raises(ParseError) as info:
        read_relax(broken)
    err = info.value
    assert err.line is not None and 10 <= err.line <= 12
    assert err.column is not None and err.column >= 1
    assert "<relax>:" in str(err)


def test_tvmscript_error_from_the_parser_is_located() -> None:
    broken = SOURCE.replace("R.nn.relu(z)", "R.nn.no_such_op(z)")
    with pytest.raises(ParseError) as info:
        read_relax(broken)
    line = next(i for i, text in enumerate(broken.splitlines(), 1) if "no_such_op" in text)
    assert info.value.line == line
    assert info.value.column is not None and info.value.column > 1


def test_json_that_is_not_a_module() -> None:
    with pytest.raises(ParseError):
        read_relax(tvm.ir.save_json(relax.const(1.0)), "json")
    with pytest.raises(ParseError):
        read_relax("{not json", "json")


def test_language_detection_on_real_inputs() -> None:
    relay_text = corpus_path("mlp.relay").read_text()
    relay_json = corpus_path("mlp.json").read_text()
    assert detect_language(relay_text) == "relay"
    assert detect_language(relay_json) == "relay"
    lowered = tvm_bridge.to_relax(load_corpus("mlp.relay"), {"cpu": "llvm", "cuda": "llvm"})
    assert detect_language(print_relax(lowered)) == "relax"
    assert detect_language(print_relax(lowered, "json")) == "relax"
    assert detect_language(SOURCE) == "relax"
    assert detect_language("def @main(%x: Tensor[(2), float32]) { %x }") == "relay"
