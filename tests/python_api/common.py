"""What the Python API's tests share: the corpus, small Relax modules, the service's answers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests._service import ROOT, thread_client

RELAX = (ROOT / "../shared/corpus/relax").resolve()
DECODER = RELAX / "offload" / "llama_h1024_l8.json"


def corpus_file(path: Path) -> Path:
    """`path` of the corpus, or the test skips saying where it looked."""
    if not path.exists():
        pytest.skip(f"the Relax corpus is not at {path} (../shared/corpus beside the repository)")
    return path


def load(path: Path) -> Any:
    """A corpus module as a user has it: `tvm.ir.load_json` of its JSON."""
    import tvm

    return tvm.ir.load_json(corpus_file(path).read_text())


# A Relax module with its own TIR kernel beside the Relax function that calls it.
WITH_KERNEL = '''@I.ir_module
class Module:
    @T.prim_func(s_tir=True)
    def twice(a: T.Buffer((8,), "float32"), b: T.Buffer((8,), "float32")):
        for i in range(8):
            with T.sblock("b"):
                vi = T.axis.spatial(8, i)
                T.reads(a[vi])
                T.writes(b[vi])
                b[vi] = a[vi] * T.float32(2)

    @R.function
    def main(x: R.Tensor((8,), "float32"), y: R.Tensor((8,), "float32")) -> R.Tensor((8,), "float32"):
        cls = Module
        with R.dataflow():
            lv = R.call_tir(cls.twice, (x,), out_ty=R.Tensor((8,), "float32"))
            lv1 = R.add(lv, y)
            lv2 = R.exp(lv1)
            R.output(lv2)
        return lv2
'''

def script(text: str) -> Any:
    """A TVMScript text as the IRModule a user holds."""
    import tvm
    from tvm.script.parser import ir as script_ir
    from tvm.script.parser import relax as script_relax
    from tvm.script.parser import tirx as script_tir

    return tvm.script.from_source(text, extra_vars={"I": script_ir, "R": script_relax, "T": script_tir})


def service_plan(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """The app's answer to POST /plan with `body`: (status, JSON)."""
    with thread_client() as client:
        response = client.post("/plan", json=body)
        return response.status_code, response.json()


def without_request(problem: dict[str, Any]) -> dict[str, Any]:
    """A problem body less what only an HTTP request has."""
    return {k: v for k, v in problem.items() if k not in ("instance", "request_id")}


def save_json(mod: Any) -> str:
    import tvm

    return str(tvm.ir.save_json(mod))


def dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True)
