"""Service hardening: API keys, admission control, worker memory limit, a pool that heals,
readiness that does not queue behind plans. (500s without detail: test_service_api.py.)

Concurrency is made deterministic by waiting for states (the pool's busy count,
requests held on an event), never by sleeping.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
from collections.abc import Callable
from typing import Any

import httpx

from service.config import Settings
from service.examples import PLAIN
from service.main import create_app
from service.planning import PlanJob, run_plan_safely
from service.pool import PoolStatus
from service.problems import PROBLEM_MEDIA_TYPE, TYPE_BASE

KEY = "k-3f9a1c"
COMPILE_KEY = "c-77e0b2"


def assert_problem(response: Any, status: int, slug: str) -> dict[str, Any]:
    assert response.status_code == status, response.text[:2000]
    assert response.headers["content-type"].startswith(PROBLEM_MEDIA_TYPE)
    body: dict[str, Any] = response.json()
    assert body["type"] == TYPE_BASE + slug and body["status"] == status
    return body


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


# --------------------------------------------------------------------------
# API keys


def test_api_keys_401_without_a_key_200_with_one(make_client: Callable[..., Any]) -> None:
    with make_client(pool_kind="thread", pool_size=1, api_keys=f"other, {KEY}") as c:
        r = c.post("/plan", json={"module": PLAIN})
        body = assert_problem(r, 401, "unauthorized")
        assert r.headers["www-authenticate"].startswith("Bearer")
        assert "request_id" in body
        wrong = c.post("/plan", json={"module": PLAIN}, headers=bearer("not-a-key"))
        assert_problem(wrong, 401, "unauthorized")
        assert 'error="invalid_token"' in wrong.headers["www-authenticate"]
        assert_problem(
            c.post("/plan", json={"module": PLAIN}, headers={"Authorization": KEY}), 401, "unauthorized"
        )
        ok = c.post("/plan", json={"module": PLAIN}, headers=bearer(KEY))
        assert ok.status_code == 200, ok.text
        assert c.post("/plan", json={"module": PLAIN}, headers=bearer("other")).status_code == 200
        # Unknown paths need a key too (nothing to probe without one); with one they are 404.
        assert_problem(c.get("/nope"), 401, "unauthorized")
        assert_problem(c.get("/nope", headers=bearer(KEY)), 404, "not-found")
        assert_problem(c.get("/version"), 401, "unauthorized")
        # Public: probes, docs, schema, static assets, metrics (by default).
        for path in ("/healthz", "/readyz", "/docs", "/openapi.json", "/metrics"):
            assert c.get(path).status_code == 200, path
        assert c.get("/docs/static/swagger-ui.css").status_code == 200


def test_compile_keys_and_metrics_key(make_client: Callable[..., Any]) -> None:
    settings = {"api_keys": KEY, "compile_api_keys": COMPILE_KEY, "metrics_require_key": True}
    with make_client(pool_kind="thread", pool_size=1, **settings) as c:
        # /compile and /artifacts take only the compile keys; the compile key opens nothing else.
        assert_problem(c.get("/artifacts/0123", headers=bearer(KEY)), 401, "unauthorized")
        assert c.get("/artifacts/0123", headers=bearer(COMPILE_KEY)).status_code != 401
        assert_problem(c.post("/compile", json={"module": PLAIN}, headers=bearer(KEY)), 401, "unauthorized")
        assert_problem(
            c.post("/plan", json={"module": PLAIN}, headers=bearer(COMPILE_KEY)), 401, "unauthorized"
        )
        assert_problem(c.get("/metrics"), 401, "unauthorized")
        assert c.get("/metrics", headers=bearer(KEY)).status_code == 200


def test_keys_are_off_by_default_and_the_schema_declares_bearer(make_client: Callable[..., Any]) -> None:
    with make_client(pool_kind="thread", pool_size=1) as c:
        assert c.post("/plan", json={"module": PLAIN}).status_code == 200
        schema = c.get("/openapi.json").json()
    assert schema["components"]["securitySchemes"]["bearerAuth"] == {
        "type": "http",
        "scheme": "bearer",
        "description": schema["components"]["securitySchemes"]["bearerAuth"]["description"],
    }
    assert schema["paths"]["/plan"]["post"]["security"] == [{"bearerAuth": []}, {}]
    assert "401" in schema["paths"]["/plan"]["post"]["responses"]
    assert schema["paths"]["/healthz"]["get"]["security"] == []


# --------------------------------------------------------------------------
# Admission control (a fake pool holds requests on an event; plans then run for real)


class HeldPool:
    """Stands in for PlanPool: each submit waits for `release`, then really plans."""

    size = 1

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.waiting = 0
        self.changed = asyncio.Event()

    async def submit(self, job: PlanJob, deadline_s: float) -> dict[str, Any]:
        self.waiting += 1
        self.changed.set()
        await self.release.wait()
        return await asyncio.to_thread(run_plan_safely, job)

    async def wait_for_waiting(self, n: int) -> None:
        while self.waiting < n:
            self.changed.clear()
            await self.changed.wait()

    def describe(self) -> str:
        return "held x 1"

    def check_idle(self) -> int:
        return 0

    def status(self) -> PoolStatus:
        return PoolStatus("held", 1, 1, self.waiting, 1)


def _held_app(**settings: Any) -> tuple[Any, HeldPool]:
    base: dict[str, Any] = {"pool_kind": "thread", "pool_size": 1, "compile_workers": 1}
    base.update(settings)
    app = create_app(Settings(**base))
    pool = HeldPool()
    app.state.pool = pool  # the lifespan (and the real pool) never starts under ASGITransport
    return app, pool


def _plan_body(size: int) -> bytes:
    """A valid /plan body of exactly `size` bytes (JSON allows trailing whitespace)."""
    body = json.dumps({"module": PLAIN}).encode()
    assert len(body) <= size
    return body + b" " * (size - len(body))


def test_admission_bounds_queued_requests_with_503_and_retry_after() -> None:
    # 1 planning slot + 1 compile slot + 1 queued = 3 requests with a body admitted at once.
    app, pool = _held_app(max_queued_requests=1)

    async def scenario() -> None:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            held = [asyncio.create_task(client.post("/plan", json={"module": PLAIN})) for _ in range(3)]
            await pool.wait_for_waiting(3)
            extra = await client.post("/plan", json={"module": PLAIN})
            body = assert_problem(extra, 503, "overloaded")
            assert extra.headers["retry-after"] == "1"
            assert "3 requests" in body["detail"]
            # Requests without a body are not bounded by admission.
            assert (await client.get("/healthz")).status_code == 200
            pool.release.set()
            assert [r.status_code for r in await asyncio.gather(*held)] == [200, 200, 200]
            # The bound is released with the responses.
            assert (await client.post("/plan", json={"module": PLAIN})).status_code == 200
            metrics = (await client.get("/metrics")).text
            assert 'devplan_admission_rejections_total{reason="requests"} 1.0' in metrics

    asyncio.run(scenario())


def test_admission_bounds_in_flight_bytes() -> None:
    app, pool = _held_app(max_body_bytes=4096, max_inflight_bytes=4096, max_queued_requests=10)

    async def scenario() -> None:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            headers = {"content-type": "application/json"}
            first = asyncio.create_task(client.post("/plan", content=_plan_body(3000), headers=headers))
            await pool.wait_for_waiting(1)
            refused = await client.post("/plan", content=_plan_body(2000), headers=headers)
            body = assert_problem(refused, 503, "overloaded")
            assert refused.headers["retry-after"] == "1"
            assert "3000 of 4096" in body["detail"]
            small = asyncio.create_task(client.post("/plan", content=_plan_body(1000), headers=headers))
            await pool.wait_for_waiting(2)  # 3000 + 1000 fit
            # Over the per-request limit stays 413, whatever is in flight.
            assert_problem(
                await client.post("/plan", content=_plan_body(5000), headers=headers),
                413,
                "request-too-large",
            )
            pool.release.set()
            assert (await first).status_code == 200 and (await small).status_code == 200
            assert (await client.post("/plan", content=_plan_body(4000), headers=headers)).status_code == 200

    asyncio.run(scenario())


def test_connection_bound_sits_above_the_admission_bound() -> None:
    s = Settings(pool_size=2, compile_workers=1, max_queued_requests=5)
    assert s.admission_requests == 8
    assert s.open_connections > s.admission_requests
    assert (
        Settings(pool_size=2, max_connections=3).open_connections
        > Settings(pool_size=2).admission_requests
    )
    assert Settings(max_body_bytes=64 << 20, max_inflight_bytes=1 << 20).admission_bytes == 64 << 20


# --------------------------------------------------------------------------
# The pool


def _only_worker(c: Any) -> Any:
    (worker,) = c.app.state.pool._all
    return worker


def test_idle_worker_killed_with_sigkill_does_not_fail_the_next_request(
    make_client: Callable[..., Any],
) -> None:
    with make_client(pool_size=1) as c:
        worker = _only_worker(c)
        os.kill(worker.proc.pid, signal.SIGKILL)
        worker.proc.join(30)
        assert not worker.proc.is_alive()
        r = c.post("/plan", json={"module": PLAIN})
        assert r.status_code == 200, r.text
        fresh = _only_worker(c)
        assert fresh is not worker and fresh.proc.is_alive()
        assert c.get("/readyz").json()["workers"] == {"configured": 1, "effective": 1, "busy": 0, "alive": 1}


def test_readyz_answers_200_while_every_slot_is_busy(
    make_client: Callable[..., Any], slow_module: str
) -> None:
    with make_client(pool_size=2, queue_timeout_ms=120_000) as c:
        pool = c.app.state.pool
        results: list[int] = []
        threads = [
            threading.Thread(
                target=lambda: results.append(
                    c.post("/plan", json={"module": slow_module, "timeout_ms": 120_000}).status_code
                )
            )
            for _ in range(2)
        ]
        for t in threads:
            t.start()
        assert pool.wait_until(lambda s: s.busy == 2, 60), pool.status()
        r = c.get("/readyz")
        assert r.status_code == 200, r.text
        assert r.json()["workers"]["busy"] == 2  # answered while both plans were running
        for t in threads:
            t.join()
        assert results == [200, 200]


def test_a_slot_that_cannot_restart_makes_readyz_503_until_it_heals(make_client: Callable[..., Any]) -> None:
    with make_client(pool_size=2) as c:
        pool = c.app.state.pool
        pool.respawn_backoff_max_s = 0.05
        real_factory = pool.worker_factory

        def broken() -> Any:
            raise RuntimeError("no worker for you")

        pool.worker_factory = broken
        victim = next(iter(pool._all))
        os.kill(victim.proc.pid, signal.SIGKILL)
        victim.proc.join(30)
        c.get("/readyz")  # finds the dead idle worker and starts replacing it (which fails)
        assert pool.wait_until(lambda s: s.effective == 1, 60), pool.status()
        body = assert_problem(c.get("/readyz"), 503, "not-ready")
        assert (body["configured"], body["effective"]) == (2, 1)
        assert 'devplan_pool_slots{state="effective"} 1.0' in c.get("/metrics").text
        # Planning goes on with the slot that is left.
        assert c.post("/plan", json={"module": PLAIN}).status_code == 200
        pool.worker_factory = real_factory
        assert pool.wait_until(lambda s: s.effective == 2 and s.alive == 2, 120), pool.status()
        assert c.get("/readyz").status_code == 200


# --------------------------------------------------------------------------
# Worker memory limit


def test_module_too_large_for_the_worker_limit_is_422_and_the_next_request_succeeds(
    make_client: Callable[..., Any],
) -> None:
    # 30 MiB of text: the estimate (measured bytes per input byte) rejects it before any worker
    # tries, without taking a slot.
    n = 1_030_000
    lines = "".join(f"  %{i} = negative(%{i - 1});\n" for i in range(1, n))
    big = f'#[version = "0.0.5"]\ndef @main(%x: Tensor[(4), float32]) {{\n  %0 = negative(%x);\n{lines}  %{n - 1}\n}}\n'
    assert 30 << 20 <= len(big) < 32 << 20
    with make_client(pool_size=1, worker_memory_bytes=512 << 20) as c:
        worker = _only_worker(c)
        body = assert_problem(c.post("/plan", json={"module": big}), 422, "module-too-large")
        assert "512 MiB" in body["detail"] and "DEVPLAN_WORKER_MEMORY_BYTES" in body["detail"]
        assert c.post("/plan", json={"module": PLAIN}).status_code == 200
        assert _only_worker(c) is worker


def test_module_over_the_rss_limit_kills_only_its_worker(make_client: Callable[..., Any]) -> None:
    # Without the estimate, the watchdog stops the worker once its resident set passes the limit:
    # a 1.2-million-field tuple (4.6 MiB of text) needs about 50 B of worker memory per input byte.
    fields = ", ".join(["%x"] * 1_200_000)
    big = f'#[version = "0.0.5"]\ndef @main(%x: Tensor[(4), float32]) {{\n  ({fields})\n}}\n'
    with make_client(pool_size=1, worker_memory_bytes=160 << 20, memory_per_input_byte=0) as c:
        worker = _only_worker(c)
        r = c.post("/plan", json={"module": big, "timeout_ms": 120_000})
        body = assert_problem(r, 422, "module-too-large")
        assert "160 MiB" in body["detail"]
        assert c.post("/plan", json={"module": PLAIN}).status_code == 200
        assert _only_worker(c) is not worker and not worker.proc.is_alive()
