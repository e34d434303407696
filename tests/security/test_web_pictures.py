"""Pictures are bounded: a graph too dense to lay out is refused before Graphviz starts (422 with
its counts and the bound), and Graphviz runs under a CPU and a memory limit (504 naming it)."""

from __future__ import annotations

import shutil

import httpx
import pytest

from service.picture import DensityBounds, too_dense
from tests.conftest import RunningServer

from .conftest import API_KEY
from .web_client import HANG_GUARD_S, fan_module

needs_dot = pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz `dot` is not installed")


def test_density_names_each_count_past_its_bound() -> None:
    bounds = DensityBounds(nodes=10, edges=20, edges_per_node=3)
    assert too_dense({"nodes": 10, "edges": 20, "max_edges_per_node": 3}, bounds) is None
    text = too_dense({"nodes": 11, "edges": 21, "max_edges_per_node": 4, "densest_node": "n7"}, bounds)
    assert text is not None
    assert (
        "11 nodes (bound 10" in text and "21 edges (bound 20" in text and "4 edges at node 7 (bound 3" in text
    )
    only_degree = too_dense({"nodes": 5, "edges": 5, "max_edges_per_node": 9, "densest_node": "g12"}, bounds)
    assert only_degree is not None and "nodes" not in only_degree.split(":", 1)[1].split("(")[0]


@needs_dot
def test_the_issues_dense_chain_is_refused_before_graphviz(server: RunningServer) -> None:
    # 3,000 operators that each also read the first value: Graphviz ran 60 s at 4.7 GiB on it.
    response = httpx.post(
        server.base_url + "/plan/picture", json={"module": fan_module(3000)}, timeout=HANG_GUARD_S
    )
    assert response.status_code == 422, response.text
    problem = response.json()
    assert problem["type"].endswith("/picture-too-dense")
    assert problem["nodes"] > 2000 and problem["edges"] > 4000 and problem["max_edges_per_node"] >= 3000
    assert "DEVPLAN_PICTURE_MAX_EDGES_PER_NODE" in problem["detail"]
    # A graph within the bounds is drawn.
    small = httpx.post(
        server.base_url + "/plan/picture", json={"module": fan_module(20)}, timeout=HANG_GUARD_S
    )
    assert small.status_code == 200 and small.text.lstrip().startswith("<?xml")


@needs_dot
@pytest.mark.slow
def test_graphviz_past_its_cpu_limit_is_a_504_and_nothing_is_left_running(
    keyed_server: RunningServer,
) -> None:
    headers = {"authorization": f"Bearer {API_KEY}"}
    with httpx.Client(base_url=keyed_server.base_url, headers=headers, timeout=HANG_GUARD_S) as client:
        # Within this server's density bounds, but past Graphviz's one CPU second (over 30 s here).
        slow = client.post("/plan/picture", json={"module": fan_module(150)})
        assert slow.status_code == 504, slow.text
        problem = slow.json()
        assert problem["type"].endswith("/picture-limit") and "DEVPLAN_PICTURE_CPU_S" in problem["detail"]
        assert client.post("/plan/picture", json={"module": fan_module(10)}).status_code == 200
