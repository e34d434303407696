"""Nothing heavy runs in the web process's event loop: /healthz answers while a costly
/plan/diff is in flight, and the matching runs in a planning worker under the plan time limit."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

import httpx
import pytest

from service import diff
from service.api import offloop
from service.api.offloop import OFF_LOOP_BYTES
from tests.conftest import RunningServer

from .web_client import HANG_GUARD_S, hostile_reports


def test_healthz_answers_while_a_costly_diff_is_in_flight(server: RunningServer) -> None:
    before, after = hostile_reports(6_000)  # about a second of matching here
    events: list[tuple[str, int]] = []
    answer: dict[str, Any] = {}

    def post_diff() -> None:
        with httpx.Client(base_url=server.base_url, timeout=300) as client:
            response = client.post("/plan/diff", json={"before": before, "after": after})
        answer.update(response.json())
        events.append(("diff", response.status_code))

    poster = threading.Thread(target=post_diff)
    poster.start()
    try:
        with httpx.Client(base_url=server.base_url, timeout=HANG_GUARD_S) as client:
            # The event: the matching holds a planning worker (so the body was read and checked).
            while client.get("/readyz").json()["workers"]["busy"] == 0:
                assert poster.is_alive(), f"the diff answered before it was seen in flight: {events}"
                time.sleep(0.02)  # polling pace only
            health = client.get("/healthz")
            events.append(("healthz", health.status_code))
    finally:
        poster.join()
    assert events == [("healthz", 200), ("diff", 200)]
    # Only the two parameters (and the first operator, by its consumers) match.
    assert answer["matched"] == 3
    assert len(answer["added"]) == len(answer["removed"]) == 6_000 - 3


def test_hostile_reports_match_like_the_library(server: RunningServer) -> None:
    before, after = hostile_reports(400)  # 35 s with the cubic matcher; the issue's 27 s freeze
    response = httpx.post(
        server.base_url + "/plan/diff",
        json={"before": before, "after": after, "fail_on": ["any-change"]},
        timeout=HANG_GUARD_S,
    )
    assert response.status_code == 200, response.text
    body = response.json()
    expected = diff.diff_reports(before, after)
    assert body["matched"] == expected["matched"] and body["added"] == expected["added"]
    assert body["failed"] is True and body["rules"][0]["rule"] == "any-change"


def test_a_report_past_the_bound_is_a_located_422(server: RunningServer) -> None:
    nested: Any = "deep"
    for _ in range(40):
        nested = {"inner": nested}
    before, after = hostile_reports(10)
    response = httpx.post(
        server.base_url + "/plan/diff",
        json={"before": {**before, "extra": nested}, "after": after},
        timeout=HANG_GUARD_S,
    )
    assert response.status_code == 422, response.text
    problem = response.json()
    assert problem["type"].endswith("/invalid-config")
    assert problem["detail"].startswith("body.before") and "16 levels" in problem["detail"]


@pytest.mark.slow
def test_matching_past_the_plan_time_limit_is_a_504_and_the_worker_is_replaced(
    tight_server: RunningServer,
) -> None:
    before, after = hostile_reports(4_000)
    with httpx.Client(base_url=tight_server.base_url, timeout=HANG_GUARD_S) as client:
        # 1 MiB bodies on this server: the reports fit, and the 1 ms limit stops the matching.
        slow = client.post("/plan/diff", json={"before": before, "after": after})
        assert slow.status_code == 504, slow.text
        problem = slow.json()
        assert problem["type"].endswith("/solver-timeout")
        assert "1 ms" in problem["detail"] and "DEVPLAN_DEFAULT_TIMEOUT_MS" in problem["detail"]
        small_before, small_after = hostile_reports(3)
        again = client.post("/plan/diff", json={"before": small_before, "after": small_after})
        assert again.status_code == 200, again.text


@pytest.mark.parametrize(("size", "off_loop"), [(100, False), (OFF_LOOP_BYTES + 1, True)])
def test_big_json_bodies_decode_off_the_event_loop(
    monkeypatch: pytest.MonkeyPatch, size: int, off_loop: bool
) -> None:
    body = json.dumps({"module": "x" * size}).encode()
    threads: list[int] = []
    real_loads = json.loads

    def loads(text: bytes) -> Any:
        threads.append(threading.get_ident())
        return real_loads(text)

    monkeypatch.setattr(offloop.json, "loads", loads)

    async def decode() -> tuple[Any, int]:
        sent = False

        async def receive() -> dict[str, Any]:
            nonlocal sent
            if sent:
                return {"type": "http.disconnect"}
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        request = offloop.OffLoopJSONRequest({"type": "http", "method": "POST", "headers": []}, receive)
        return await request.json(), threading.get_ident()

    decoded, loop_thread = asyncio.run(decode())
    assert decoded == {"module": "x" * size}
    assert len(threads) == 1 and (threads[0] != loop_thread) is off_loop
