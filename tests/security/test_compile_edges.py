"""Odd modules a caller may send to /compile are a 4xx naming the problem, not a 500:
a kernel whose symbol is the entry function's (the run check's reference, built without
devices, cannot be linked) and a parameter too large for the run check's inputs."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests._service import TestClient, thread_client
from tests.sandbox.kernels import one_device

pytestmark = pytest.mark.tvm


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    with thread_client() as c:
        yield c


# The kernel's symbol is the entry function's: the planned module copies the kernel per
# target under new names, the reference (built without devices) cannot be linked.
_KERNEL_NAMED_MAIN = one_device('        T.func_attr({"global_symbol": "main"})\n')


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
