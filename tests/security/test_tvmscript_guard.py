"""The TVMScript reader: every attack refused at its location with
nothing run, everything TVM prints read back, the same plans as TVM's own
parser gives, and TVMScript as TVM prints it read back (float words, long metadata lines)."""

from __future__ import annotations

import inspect
import json
import math
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tvm
from tvm import relax
from tvm.script.parser import ir as script_ir
from tvm.script.parser import relax as script_relax
from tvm.script.parser import tirx as script_tir

import relay
import tvm_bridge
from relay.span import ParseError, SourceText
from service.relax_planning import plan_relax
from solver import PlanConfig
from tests.tvm_bridge.test_relax_service import _BLOCK_TVM
from tvm_bridge import tvmscript_guard_table as table
from tvm_bridge.relax_plan import print_relax, read_relax
from tvm_bridge.tvmscript_guard import MAX_DEPTH, check_tvmscript

from .attacks import ATTACKS, Attack

pytestmark = pytest.mark.tvm

LLVM_ONLY = {"cpu": "llvm", "cuda": "llvm"}
ROOT = Path(__file__).resolve().parents[2]


def _corpus_scripts(corpus_dir: Path) -> list[Path]:
    relax_dir = corpus_dir / "relax"
    return sorted([*relax_dir.glob("*.py"), *relax_dir.glob("offload/*.py")])


def _unguarded(text: str) -> Any:
    """What TVM's own parser makes of `text` (trusted test data only)."""
    return tvm.script.from_source(text)


def _unguarded_or_none(text: str) -> Any:
    """`_unguarded`, or None where TVM's parser refuses the text."""
    try:
        return _unguarded(text)
    except Exception:  # noqa: BLE001 - TVM's parser errors
        return None


# ----------------------------------------------------------------- attacks


@pytest.mark.parametrize("attack", ATTACKS, ids=[a.name for a in ATTACKS])
def test_attack_is_refused_where_it_is_and_nothing_runs(attack: Attack, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    with pytest.raises(ParseError) as info:
        read_relax(attack.module(marker))
    err = info.value
    assert (err.line, err.column) == attack.location(marker), str(err)
    assert attack.says in err.message
    assert not marker.exists()


def test_refusal_report_shows_the_line_and_a_caret() -> None:
    attack = next(a for a in ATTACKS if a.name == "issue-annotation")
    with pytest.raises(ParseError) as info:
        read_relax(attack.module(Path("/nonexistent/pwned")))
    report = str(info.value)
    line, column = attack.location(Path("/nonexistent/pwned"))
    assert f"<relax>:{line}:{column}" in report and "^" in report


# ------------------------------------------------------ what TVM prints passes


@pytest.mark.slow
def test_corpus_scripts_pass_and_read_as_tvm_reads_them(corpus_dir: Path) -> None:
    """Every corpus `.py` passes the reader; where TVM's own parser reads the
    text, the guarded read is the same module."""
    read_by_tvm = 0
    for path in _corpus_scripts(corpus_dir):
        text = path.read_text()
        mod, _ = read_relax(text)
        assert isinstance(mod, tvm.IRModule)
        want = _unguarded_or_none(text)
        if want is None:  # TVM refuses its own float words (checked below)
            assert 'R.const("-inf"' in text, path.name
            continue
        tvm.ir.assert_structural_equal(mod, want)
        read_by_tvm += 1
    assert read_by_tvm >= 4


@pytest.mark.slow
def test_bridge_and_legalized_prints_pass(corpus_dir: Path) -> None:
    """What our bridge prints, planned modules with vdevices, and TIR kernels
    as TVM prints them after LegalizeOps all pass the reader and read back."""
    config = PlanConfig(mode="optimize", default_device="cuda", host_device="cpu", timeout_ms=60_000)
    texts: list[str] = []
    for name in ("mlp.relay", "resnet18.relay", "lstm.relay"):
        lowered = tvm_bridge.to_relax(relay.parse_text((corpus_dir / name).read_text(), name=name), LLVM_ONLY)
        texts.append(print_relax(lowered))
        texts.append(print_relax(relax.transform.LegalizeOps()(lowered)))
        if name != "lstm.relay":
            texts.append(print_relax(plan_relax(lowered, config).module))
    for text in texts:
        mod, _ = read_relax(text)
        tvm.ir.assert_structural_equal(mod, _unguarded(text))
    assert any("I.vdevice" in t for t in texts) and any("T.prim_func" in t for t in texts)


@pytest.mark.slow
def test_legalized_corpus_models_pass(corpus_dir: Path) -> None:
    relax_dir = corpus_dir / "relax"
    paths = sorted([*relax_dir.glob("*.json"), *relax_dir.glob("offload/llama_*[0-9].json")])
    assert len(paths) >= 8
    for path in paths:
        legal = relax.transform.LegalizeOps()(tvm.ir.load_json(path.read_text()))
        text = legal.script(show_meta=True)
        check_tvmscript(text, SourceText(path.name, text))  # raises on a refusal


@pytest.mark.slow
def test_legalized_corpus_models_read_back(corpus_dir: Path) -> None:
    """The reader hands TVM's parser the legalized text unchanged but for the
    float words: it reads back as TVM's own parser reads that text (which is
    not always the module printed: TVM 0.27 reads hf_bert's `take` kernel's
    int32 index region back as int64, guarded or not)."""
    for name in ("tv_resnet18.json", "hf_bert.json"):
        legal = relax.transform.LegalizeOps()(tvm.ir.load_json((corpus_dir / "relax" / name).read_text()))
        text = legal.script(show_meta=True)
        back, _ = read_relax(text)
        tvm.ir.assert_structural_equal(back, _unguarded(text.replace('R.const("-inf"', "R.const(-1e999")))


@pytest.mark.slow
def test_corpus_plans_as_before(corpus_dir: Path) -> None:
    """Each corpus text TVM's parser reads plans through the guarded reader
    exactly as through TVM's parser (same output text, same copies)."""
    config = PlanConfig(default_device="cuda", host_device="cpu", timeout_ms=120_000)
    compared = 0
    for path in _corpus_scripts(corpus_dir):
        text = path.read_text()
        raw = _unguarded_or_none(text)
        if raw is None:  # not readable by TVM itself
            continue
        guarded, source = read_relax(text)
        outcomes = []
        for mod, src in ((guarded, source), (raw, source)):
            try:
                planned = plan_relax(mod, config, src)
                outcomes.append((print_relax(planned.module), planned.copies))
            except relay.RelayError as err:
                outcomes.append((err.message, -1))
        assert outcomes[0] == outcomes[1], path.name
        compared += 1
    assert compared >= 4


# ----------------------------------------------------------- the allowlist table


def _resolve(chain: str) -> Any:
    value: Any = {"I": script_ir, "R": script_relax, "T": script_tir}[chain.split(".")[0]]
    for part in chain.split(".")[1:]:
        value = getattr(value, part)
    return value


def test_table_holds_only_values_of_this_tvm() -> None:
    assert len(table.CHAINS) > 100
    for chain in table.CHAINS:
        assert not any(p.startswith("_") for p in chain.split(".")), chain
        value = _resolve(chain)
        assert not inspect.ismodule(value), chain
        assert callable(value) or inspect.isclass(value), chain
    for refused in ("I.ir_module", "R.function", "T.prim_func", "I.pyfunc", "R.call_py_func", "R.emit_te", "T.macro"):
        assert refused not in table.CHAINS
    assert table.FRAMES <= table.CHAINS
    assert table.LOOPS - {"range"} <= table.CHAINS
    assert {"R.nn.conv2d", "R.Tensor", "T.Buffer", "T.float32", "R.call_tir", "T.axis.remap"} <= table.CHAINS


# -------------------------------------------------- text TVM prints

FLOATS = textwrap.dedent(
    """\
    # from tvm.script import ir as I
    # from tvm.script import relax as R

    @I.ir_module
    class Module:
        @R.function
        def main(x: R.Tensor((4,), dtype="float32")) -> R.Tensor((4,), dtype="float32"):
            with R.dataflow():
                a: R.Tensor((), dtype="float32") = R.const("-inf", "float32")
                b: R.Tensor((), dtype="float32") = R.const("inf", "float32")
                c: R.Tensor((), dtype="float16") = R.const("nan", "float16")
                d: R.Tensor((4,), dtype="float32") = R.maximum(x, a)
                e: R.Tensor((4,), dtype="float32") = R.minimum(d, b)
                R.output(e)
            return e
    """
)


def _array(expr: Any) -> np.ndarray[Any, Any] | None:
    """The value of a constant expression (TVM 0.27: `GenericConst` over a tensor)."""
    if isinstance(expr, tvm.ir.expr.GenericConst):
        return np.asarray(expr.value.numpy())
    return None


def _constants(mod: Any) -> dict[str, np.ndarray[Any, Any]]:
    out = {}
    for binding in mod["main"].body.blocks[0].bindings:
        value = _array(binding.value)
        if value is not None:
            out[binding.var.name] = value
    return out


def test_float_words_read_as_their_floats() -> None:
    with pytest.raises(Exception, match="scalar or Tensor"):
        _unguarded(FLOATS)  # TVM's parser refuses what its printer wrote
    mod, _ = read_relax(FLOATS)
    values = _constants(mod)
    assert float(values["a"]) == -math.inf and float(values["b"]) == math.inf and math.isnan(float(values["c"]))
    assert values["a"].dtype == np.float32 and values["c"].dtype == np.float16
    # Printed again, it reads back the same (TVM prints the words again).
    again, _ = read_relax(print_relax(mod))
    tvm.ir.assert_structural_equal(again, mod)


def test_errors_after_a_rewritten_float_keep_their_columns() -> None:
    line = next(ln for ln in FLOATS.splitlines() if 'R.const("nan"' in ln)
    broken_line = line.replace('R.const("nan", "float16")', 'R.add(R.const("nan", "float16"), R.nope(x))')
    broken = FLOATS.replace(line, broken_line)
    with pytest.raises(ParseError) as info:
        read_relax(broken)
    assert info.value.line == FLOATS.splitlines().index(line) + 1
    assert info.value.column == broken_line.index("R.nope") + 1
    # A TVM parser error after the rewrite maps back too: a wrong arity.
    arity_line = line.replace('R.const("nan", "float16")', 'R.add(R.const("nan", "float16"), x, x, x)')
    with pytest.raises(ParseError) as tvm_info:
        read_relax(FLOATS.replace(line, arity_line))
    assert tvm_info.value.line == FLOATS.splitlines().index(line) + 1
    assert tvm_info.value.column is not None and tvm_info.value.column <= arity_line.index("x, x, x") + 1


def test_corpus_float_words_are_minus_infinity(corpus_dir: Path) -> None:
    text = (corpus_dir / "relax" / "hf_bert.py").read_text()
    mod, _ = read_relax(text)
    found = [float(v) for v in _constants(mod).values() if v.ndim == 0 and not np.isfinite(v)]
    assert len(found) == 2 and all(v == -math.inf for v in found)  # the two bound `R.const("-inf", ...)`


def test_long_metadata_line_is_tvmscript(corpus_dir: Path) -> None:
    from relay.detect import detect_language

    for name in ("tv_resnet18.py", "tv_mobilenet_v3_small.py", "tv_swin_t.py"):
        text = (corpus_dir / "relax" / name).read_text()
        assert text.index("@I.ir_module") > 65_536
        assert detect_language(text) == "relax"


def test_other_tvmscript_errors_stay_located() -> None:
    text = FLOATS.replace('R.maximum(x, a)', 'R.maximum(x, a')
    with pytest.raises(ParseError) as info:
        read_relax(text)
    assert info.value.line is not None and info.value.column is not None
    assert "syntax" in info.value.message


# ------------------------------------------------------------ deep and odd input


@pytest.mark.parametrize(
    "expression",
    ["-" * 200_000 + "1", "+".join(["1"] * 200_000), "R.add(x, x)" + ".a" * 200_000, "x" + "[0]" * 200_000],
    ids=["unary", "binary", "attributes", "subscripts"],
)
def test_nests_python_cannot_parse_are_located(expression: str) -> None:
    text = FLOATS.replace("R.maximum(x, a)", expression)
    with pytest.raises(ParseError) as info:
        read_relax(text)
    assert info.value.line == FLOATS.splitlines().index(
        next(ln for ln in FLOATS.splitlines() if "R.maximum(x, a)" in ln)
    ) + 1
    assert info.value.column is not None


def test_nests_deeper_than_the_limit_are_refused_before_tvm() -> None:
    deep = "R.negative(" * MAX_DEPTH + "x" + ")" * MAX_DEPTH  # a level per call
    ok = "R.negative(" * 20 + "x" + ")" * 20
    with pytest.raises(ParseError) as info:
        read_relax(FLOATS.replace("R.maximum(x, a)", f"R.maximum({deep}, a)"))
    assert "nests deeper" in info.value.message
    mod, _ = read_relax(FLOATS.replace("R.maximum(x, a)", f"R.maximum({ok}, a)"))
    assert isinstance(mod, tvm.IRModule)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "no `@I.ir_module` class"),
        ("x = 1\n", "not allowed at the top"),
        ("@I.ir_module\nclass A:\n    pass\n@I.ir_module\nclass B:\n    pass\n", "a second class"),
        ("@R.function\ndef main(x: R.Tensor((4,), \"float32\")):\n    return x\n", "not allowed at the top"),
        ("\x00", "null bytes"),
    ],
)
def test_malformed_tops_are_refused(text: str, says: str) -> None:
    with pytest.raises(ParseError) as info:
        read_relax(text)
    assert says in info.value.message


def test_non_ascii_columns_are_characters() -> None:
    text = FLOATS.replace("R.maximum(x, a)", 'R.maximum(x, R.const("é"), open)')
    with pytest.raises(ParseError) as info:
        read_relax(text)
    line = next(ln for ln in text.splitlines() if "open)" in ln)
    assert info.value.column == line.index("open") + 1


_LONG_METADATA_WITHOUT_TVM = textwrap.dedent(
    """
    import json
    from pathlib import Path

    from fastapi.testclient import TestClient
    from service.config import Settings
    from service.main import create_app

    module = Path(sys.argv[1]).read_text()
    with TestClient(create_app(Settings(pool_kind="thread", pool_size=1)), raise_server_exceptions=False) as c:
        r = c.post("/plan", json={"module": module})
    print(json.dumps([r.status_code, r.json(), "tvm" in sys.modules]))
    """
)


def test_long_metadata_text_without_tvm_is_503(corpus_dir: Path) -> None:
    """TVMScript whose metadata line runs past detection's head is still Relax:
    without TVM the documented 503 `tvm-unavailable`, not Relay's 400."""
    path = corpus_dir / "relax" / "tv_resnet18.py"
    done = subprocess.run(
        [sys.executable, "-c", _BLOCK_TVM + _LONG_METADATA_WITHOUT_TVM, str(path)],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    status, body, tvm_loaded = json.loads(done.stdout.strip().splitlines()[-1])
    assert status == 503 and body["type"].endswith("/tvm-unavailable"), body
    assert tvm_loaded is False


@pytest.mark.parametrize("odd", ["\u2028", "\x0c", "\x1c", "\x85", "\r"])
def test_edits_land_where_the_checked_nodes_are(odd: str) -> None:
    """Line breaks Python does not count (inside literals) or counts unlike
    `str.splitlines` cannot shift the blanked header or a rewritten float onto
    text that was never checked: the text handed to TVM parses to the checked module."""
    header = f'metadata = tvm.ir.load_json("""{{"root_index": 0, "nodes": [{{"type": "None"}}]}}{odd}""")\n'
    text = header.replace("\n", "\r\n") if odd == "\r" else header
    text += FLOATS if odd == "\r" else FLOATS.replace("# from", f"# {odd} from", 1)
    checked = check_tvmscript(text, SourceText("<relax>", text))
    # Python reads a bare \r in a literal as \n (and counts it as a line).
    assert checked.metadata is not None and checked.metadata.endswith("\n" if odd == "\r" else odd)
    assert "metadata" not in checked.script.split("@I.ir_module")[0]
    for rewritten in ("R.const(-1e999, ", "R.const(1e999, ", "R.const(1e999-1e999, "):
        assert checked.script.count(rewritten) == 1
    assert 'R.const("' not in checked.script
    assert checked.script.count("\n") == text.count("\n")


def test_single_underscore_names_are_the_modules_own() -> None:
    text = FLOATS.replace("d: R.Tensor((4,), dtype=\"float32\") = R.maximum(x, a)", "_d = R.maximum(x, a)")
    text = text.replace("R.minimum(d, b)", "R.minimum(_d, b)")
    mod, _ = read_relax(text)
    assert any(b.var.name == "_d" for b in mod["main"].body.blocks[0].bindings)
    with pytest.raises(ParseError, match="`_unbound`"):
        read_relax(text.replace("R.minimum(_d, b)", "R.minimum(_unbound, b)"))
