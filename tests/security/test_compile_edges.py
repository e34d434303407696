"""Odd modules a caller may send to /compile are a 4xx naming the problem, not a 500:
a kernel whose symbol is the entry function's (the run check's reference, built without
devices, cannot be linked) and a parameter too large for the run check's inputs."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests._service import TestClient, thread_client

pytestmark = pytest.mark.tvm


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    with thread_client() as c:
        yield c


_KERNEL_NAMED_MAIN = '''@I.ir_module
class Module:
    @T.prim_func
    def k(x: T.Buffer((4,), "float32"), y: T.Buffer((4,), "float32")):
        T.func_attr({"global_symbol": "main"})
        for i in range(4):
            y[i] = x[i] + T.float32(1)

    @R.function
    def main(x: R.Tensor((4,), "float32")) -> R.Tensor((4,), "float32"):
        cls = Module
        y = R.call_tir(cls.k, (x,), out_ty=R.Tensor((4,), "float32"))
        return y
'''


def test_a_reference_that_cannot_be_built_is_a_422(client: TestClient) -> None:
    response = client.post("/compile", json={"module": _KERNEL_NAMED_MAIN, "default_device": "cpu", "run_check": True})
    assert response.status_code == 422, response.text
    body = response.json()
    assert body["type"].endswith("/compile-failed")
    assert "duplicate global symbol: main" in body["detail"]
    # Without the check the planned module (its kernel copied per target) builds.
    plain = client.post("/compile", json={"module": _KERNEL_NAMED_MAIN, "default_device": "cpu"})
    assert plain.status_code == 200, plain.text


def test_a_parameter_too_large_for_random_inputs_is_a_422(client: TestClient) -> None:
    module = (
        "@I.ir_module\nclass Module:\n    @R.function\n"
        '    def main(x: R.Tensor((2 ** 62,), "float32")) -> R.Tensor((2 ** 62,), "float32"):\n'
        "        with R.dataflow():\n            y = R.add(x, x)\n            R.output(y)\n        return y\n"
    )
    response = client.post("/compile", json={"module": module, "default_device": "cpu", "run_check": True})
    assert response.status_code == 422, response.text
    body = response.json()
    assert body["type"].endswith("/invalid-check")
    assert f"({2**64} bytes)" in body["detail"] and "turn the run check off" in body["detail"]
