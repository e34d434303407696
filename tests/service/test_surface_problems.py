"""Problem bodies stay small whatever the input (tokens cut to 80 characters,
lists capped with a count of what they left out, every body under 8 KiB)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from service.errors import MALFORMED_MODULE
from service.planning import PlanFailure
from service.problems import (
    MAX_LIST_ITEMS,
    MAX_PROBLEM_BYTES,
    MAX_TOKEN_CHARS,
    bounded_text,
    failure_to_problem,
    problem_body,
)

HEX_GARBAGE = "0x" + "deadbeef" * 1_250_000  # 10 MB of hex: `0`, then one 10 MB identifier


@pytest.fixture(scope="module")
def small_client(make_client: Callable[..., Any]) -> Iterator[Any]:
    with make_client(pool_kind="thread", pool_size=1, worker_memory_bytes=0) as c:
        yield c


def _longest_token(body: dict[str, Any]) -> int:
    return max(len(token) for token in json.dumps(body, ensure_ascii=False).split())


def test_ten_megabytes_of_garbage_module_text_get_a_small_400(small_client: Any) -> None:
    r = small_client.post("/plan", json={"module": HEX_GARBAGE})
    assert r.status_code == 400
    assert len(r.content) < MAX_PROBLEM_BYTES
    body = r.json()
    assert body["type"].endswith("/malformed-module")
    assert "\u2026" in body["detail"] and "\u2026" in body["locations"][0]["message"]
    assert (body["locations"][0]["line"], body["locations"][0]["column"]) == (1, 2)
    assert _longest_token(body) <= MAX_TOKEN_CHARS + 20  # a token plus its JSON quoting


def test_ten_megabytes_of_garbage_body_get_a_small_422(small_client: Any) -> None:
    r = small_client.post("/plan", content=HEX_GARBAGE.encode(), headers={"content-type": "application/json"})
    assert r.status_code == 422
    assert len(r.content) < MAX_PROBLEM_BYTES
    assert r.json()["type"].endswith("/validation-error")


def test_tens_of_thousands_of_schema_errors_get_a_small_422_that_counts_the_rest(small_client: Any) -> None:
    # 4,096 constraints (the schema's most), each wrong in every alternative of its union.
    request = {"module": "def @main() { 1 }", "constraints": [{"select": 7, "device": ["x" * 200]}] * 4096}
    r = small_client.post("/plan", json=request)
    assert r.status_code == 422
    assert len(r.content) < MAX_PROBLEM_BYTES
    body = r.json()
    assert len(body["errors"]) == MAX_LIST_ITEMS
    assert body["errors_omitted"] > 4 * 4096
    assert [e["loc"][2] for e in body["errors"]] == sorted(e["loc"][2] for e in body["errors"])  # the first ones


def test_a_failure_with_a_hundred_thousand_locations_is_a_small_problem() -> None:
    locations = tuple(
        {"line": i, "column": 1, "message": f"bad token `{'z' * 500}` number {i}"} for i in range(1, 100_001)
    )
    failure = PlanFailure(MALFORMED_MODULE.slug, "100000 errors; first: " + "q" * 10_000, "report", locations)
    problem = failure_to_problem(failure)
    body = problem_body(problem.kind, problem.detail, "/plan", **problem.extra)
    encoded = json.dumps(body, ensure_ascii=False).encode()
    assert len(encoded) < MAX_PROBLEM_BYTES
    assert [loc["line"] for loc in body["locations"]] == list(range(1, len(body["locations"]) + 1))
    assert len(body["locations"]) + body["locations_omitted"] == 100_000
    assert _longest_token(body) <= MAX_TOKEN_CHARS + 20


def test_a_long_conflict_chain_is_capped(small_client: Any) -> None:
    n = 150
    lines = [
        '#[version = "0.0.5"]',
        "def @main(%x: Tensor[(4), float32]) {",
        "  %0 = on_device(%x, virtual_device=meta[VirtualDevice][0], constrain_result=True);",
        *(f"  %{i} = negative(%{i - 1});" for i in range(1, n)),
        f"  on_device(%{n - 1}, virtual_device=meta[VirtualDevice][1], constrain_result=True)",
        "}",
    ]
    r = small_client.post("/plan", json={"module": "\n".join(lines), "virtual_devices": ["cpu", "cuda"]})
    assert r.status_code == 422, r.text
    assert len(r.content) < MAX_PROBLEM_BYTES
    body = r.json()
    assert body["type"].endswith("/planning-conflict")
    for key in ("locations", "constraints"):
        assert len(body[key]) + body.get(f"{key}_omitted", 0) > MAX_LIST_ITEMS
        assert body[f"{key}_omitted"] > 0


def test_bounded_text_cuts_tokens_and_length() -> None:
    assert bounded_text("short words stay") == "short words stay"
    cut = bounded_text("found `" + "a" * 500 + "` here")
    token = cut.split()[1]
    assert len(token) == MAX_TOKEN_CHARS and token.endswith("\u2026")
    assert cut.endswith(" here")
    assert len(bounded_text("word " * 100_000)) == 1000


def test_every_503_problem_but_tvm_unavailable_says_when_to_retry(make_client: Callable[..., Any]) -> None:
    from fastapi import FastAPI

    from service.errors import ALL_KINDS, TVM_UNAVAILABLE
    from service.problems import ProblemError

    kinds = [k for k in ALL_KINDS if k.status == 503]
    assert TVM_UNAVAILABLE in kinds and len(kinds) > 1
    with make_client(pool_kind="thread", pool_size=1) as c:
        app: FastAPI = c.app
        for kind in kinds:

            async def raise_it(kind: Any = kind) -> None:
                raise ProblemError(kind, "test")

            app.add_api_route(f"/test-503/{kind.slug}", raise_it)
        for kind in kinds:
            r = c.get(f"/test-503/{kind.slug}")
            assert r.status_code == 503 and r.json()["type"] == kind.type
            assert ("retry-after" in r.headers) is (kind != TVM_UNAVAILABLE), kind.slug


def test_a_long_non_ascii_path_gets_a_small_404(small_client: Any) -> None:
    r = small_client.get("/" + "\u00e9" * 3_000)  # httpx refuses paths past 65,535 bytes
    assert r.status_code == 404
    assert len(r.content) < MAX_PROBLEM_BYTES


def test_an_oversized_body_is_refused_with_a_small_413(make_client: Callable[..., Any]) -> None:
    with make_client(pool_kind="thread", pool_size=1, max_body_bytes=4096) as c:
        r = c.post("/" + "\u00e9" * 3_000, content=b"x" * 10_000, headers={"content-type": "application/json"})
    assert r.status_code == 413
    assert len(r.content) < MAX_PROBLEM_BYTES
    assert r.json()["type"].endswith("/request-too-large")
