"""Relax modules with their own kernels build: a `T.prim_func` called through
`R.call_tir` compiles for the cpu (it failed with "duplicate global symbol"), on two
devices (one copy per target, each exporting its own symbol), on a GPU with dlight's
default schedule, and a kernel dlight cannot schedule is a located 422."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from service import sandbox
from service.config import Settings
from tests._service import TestClient, thread_client

from .kernels import def_line, one_device, two_devices


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    with thread_client() as c:
        yield c


def _compile(client: TestClient, module: str, **fields: Any) -> Any:
    return client.post("/compile", json={"module": module, **fields})


def test_own_kernel_builds_for_the_cpu_and_its_run_check_passes(client: TestClient) -> None:
    response = _compile(client, one_device(), default_device="cpu", run_check=True)
    assert response.status_code == 200, response.text
    report = response.json()["report"]
    assert report["devices"] == ["llvm:0"]
    assert report["functions_per_device"] == {"llvm:0": 1}
    assert report["check"]["max_abs_error"] == 0.0
    assert report["check"]["sandbox"] == list(sandbox.config_from(Settings()).layers)


def test_kernel_used_on_two_cpus_builds_and_its_run_check_passes(client: TestClient) -> None:
    response = _compile(client, two_devices("llvm:1"), default_device="cpu:0", host_device="cpu:0", run_check=True)
    assert response.status_code == 200, response.text
    report = response.json()["report"]
    assert report["devices"] == ["llvm:0", "llvm:1"]
    assert report["functions_per_device"] == {"llvm:0": 1, "llvm:1": 1}
    assert report["device_copies"] == 1
    assert report["check"]["max_abs_error"] == 0.0


def test_kernel_used_on_cpu_and_cuda_compiles_with_a_gpu_schedule(client: TestClient) -> None:
    # dlight schedules the T.sblock kernel for cuda; the cpu copy stays as it is.
    response = _compile(
        client,
        two_devices("cuda:0", sblock=True),
        virtual_devices=["cpu", "cuda"],
        default_device="cpu",
        host_device="cpu",
        cuda_arch="sm_80",
    )
    assert response.status_code == 200, response.text
    report = response.json()["report"]
    assert report["devices"] == ["llvm:0", "cuda:0"]
    assert report["functions_per_device"] == {"llvm:0": 1, "cuda:0": 1}


def test_own_kernel_on_cuda_alone_compiles(client: TestClient) -> None:
    response = _compile(
        client, one_device(sblock=True), virtual_devices=["cpu", "cuda"], default_device="cuda",
        host_device="cpu", cuda_arch="sm_80",
    )
    assert response.status_code == 200, response.text
    assert response.json()["report"]["functions_per_device"] == {"cuda:0": 1}


@pytest.mark.parametrize("two", [False, True], ids=["cuda", "cpu+cuda"])
def test_kernel_without_a_gpu_schedule_is_a_located_422(client: TestClient, two: bool) -> None:
    # Plain loops are not dlight's input (no T.sblock) and bind nothing to GPU threads.
    module = two_devices("cuda:0") if two else one_device()
    response = _compile(
        client, module, virtual_devices=["cpu", "cuda"], default_device="cpu" if two else "cuda",
        host_device="cpu", cuda_arch="sm_80",
    )
    assert response.status_code == 422, response.text
    body = response.json()
    assert body["type"].endswith("/compile-failed")
    assert "kernel 'k' needs a GPU schedule for cuda" in body["detail"]
    assert "not bound to GPU threads" in body["detail"]
    assert body["locations"][0]["line"] == def_line(module)
    assert body["locations"][0]["column"] == 5


def test_bound_copies_export_their_own_symbols() -> None:
    # The bridge level: one copy per target, named and exported apart, the caller's name kept.
    import tvm

    import tvm_bridge
    from tvm_bridge.build import SOURCE_NAME_ATTR, bind_kernel_targets
    from tvm_bridge.relax_plan import read_relax

    text = two_devices("cuda:0", sblock=True).replace(
        'R.Tensor((4,), "float32"))\n        b', 'R.Tensor((4,), "float32", vdevice="llvm:0"))\n        b'
    ).replace('c = R.call_tir(cls.k, (b,), out_ty=R.Tensor((4,), "float32"))',
              'c = R.call_tir(cls.k, (b,), out_ty=R.Tensor((4,), "float32", vdevice="cuda:0"))')
    mod, _ = read_relax(text)
    mod = tvm.relax.transform.RealizeVDevice()(mod)
    bound = bind_kernel_targets(mod)
    kernels = {gv.name_hint: f for gv, f in bound.functions_items() if isinstance(f, tvm.tirx.PrimFunc)}
    assert set(kernels) == {"k_llvm", "k_cuda"}
    for name, func in kernels.items():
        assert str(func.attrs["global_symbol"]) == name
        assert str(func.attrs[SOURCE_NAME_ATTR]) == "k"
        assert str(func.attrs["target"].kind.name) == name.rsplit("_", 1)[1]
    assert isinstance(tvm_bridge.compile(mod), tvm_bridge.Compiled)
