"""TVM check inside the `full` image, used by docker/smoke.sh (runs with the image's python via exec).

Why: /compile needs more than an importable TVM: tvm.compile for llvm, and export_library, which links
with the image's C compiler and writes into the artifact volume as the non-root user on a read-only
root file system. This compiles a one-operator Relax module, exports it into $DEVPLAN_ARTIFACT_DIR,
loads it back and runs it on the Relax VM. Prints one line; raises on any failure.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np


def main() -> None:
    t0 = time.perf_counter()
    import tvm
    from tvm import relax

    t_import = time.perf_counter() - t0
    # BlockBuilder, not TVMScript: the script arrives on stdin, and TVMScript needs a source file.
    bb = relax.BlockBuilder()
    x_var = relax.Var("x", relax.TensorType((4,), "float32"))
    with bb.function("main", [x_var]):
        with bb.dataflow():
            out = bb.emit_output(bb.emit(relax.op.exp(x_var)))
        bb.emit_func_output(out)
    module = bb.get()

    executable = tvm.compile(module, target="llvm")
    path = Path(os.environ["DEVPLAN_ARTIFACT_DIR"]) / "smoke-exp.so"
    executable.export_library(str(path))
    size = path.stat().st_size
    vm = relax.VirtualMachine(tvm.runtime.load_module(str(path)), tvm.cpu())
    x = np.arange(4, dtype="float32")
    got = vm["main"](tvm.runtime.tensor(x)).numpy()
    np.testing.assert_allclose(got, np.exp(x), rtol=1e-5)
    path.unlink()
    print(
        f"tvm {tvm.__version__}: import {t_import:.1f}s, compile+export+run {time.perf_counter() - t0 - t_import:.1f}s,"
        f" library {size} bytes, uid {os.getuid()}"
    )


if __name__ == "__main__":
    main()
