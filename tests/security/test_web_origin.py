"""A keyless server on loopback is not a drive-by target: it answers only to its own host names
and takes costly or state-changing requests only from its own pages (or allowed names). Keyed
servers keep working behind proxies that rewrite Host."""

from __future__ import annotations

import httpx
import pytest

from service.auth import HostGuard
from service.config import Settings
from tests.conftest import RunningServer

from .conftest import API_KEY
from .web_client import HANG_GUARD_S, TINY, address


def _post(server: RunningServer, headers: dict[str, str]) -> httpx.Response:
    return httpx.post(server.base_url + "/plan", json={"module": TINY}, headers=headers, timeout=HANG_GUARD_S)


def test_a_foreign_host_is_refused_but_health_probes_answer(server: RunningServer) -> None:
    for path in ("/openapi.json", "/explore", "/metrics"):
        response = httpx.get(
            server.base_url + path, headers={"host": "rebound.example:8000"}, timeout=HANG_GUARD_S
        )
        assert response.status_code == 421, (path, response.text)
        problem = response.json()
        assert problem["type"].endswith("/misdirected-host") and "DEVPLAN_ALLOWED_HOSTS" in problem["detail"]
    refused = _post(server, {"host": "rebound.example"})
    assert refused.status_code == 421
    for path in ("/healthz", "/readyz"):
        assert httpx.get(server.base_url + path, headers={"host": "rebound.example"}).status_code == 200


def test_only_the_servers_own_pages_may_post(server: RunningServer) -> None:
    _, port = address(server)
    for origin in (f"http://127.0.0.1:{port}", f"http://localhost:{port}", f"http://[::1]:{port}"):
        assert _post(server, {"origin": origin}).status_code == 200, origin
    for origin in (
        "http://evil.example",
        f"http://evil.example:{port}",
        f"http://127.0.0.1:{port + 1}",
        "null",
    ):
        response = _post(server, {"origin": origin})
        assert response.status_code == 403, origin
        assert response.json()["type"].endswith("/foreign-origin")
    # Reading the docs and pages stays open to any page.
    page = httpx.get(server.base_url + "/openapi.json", headers={"origin": "http://evil.example"})
    assert page.status_code == 200
    # No Origin: not a web page (curl, the CLI, scripts).
    assert _post(server, {}).status_code == 200


def test_the_host_rules() -> None:
    guard = HostGuard.from_settings(
        Settings(host="127.0.0.1", allowed_hosts="devplan.internal, Other.Example.")
    )
    for host in (
        "127.0.0.1:8000",
        "localhost",
        "LOCALHOST:1",
        "[::1]:8000",
        "127.0.0.2",
        "devplan.internal:443",
        "other.example",
    ):
        assert guard.host_refusal(host) is None, host
    for host in (
        "evil.example",
        "127.0.0.1.evil.example",
        "localhost.evil",
        "devplan.internal.evil",
        "0.0.0.0",
    ):
        assert guard.host_refusal(host) is not None, host
    assert guard.origin_refusal("https://devplan.internal", 8000) is None
    assert guard.origin_refusal("http://127.0.0.1:8000", 8000) is None
    assert guard.origin_refusal("http://127.0.0.1:9000", 8000) is not None
    assert guard.origin_refusal("http://[bad", 8000) is not None
    assert HostGuard.applies(("127.0.0.1", 8000)) and not HostGuard.applies(("10.0.0.2", 8000))
    assert not HostGuard.applies(None)


@pytest.mark.slow
def test_an_allowed_name_is_served(tight_server: RunningServer) -> None:
    headers = {"host": "devplan.internal", "origin": "https://devplan.internal"}
    response = httpx.get(tight_server.base_url + "/openapi.json", headers=headers, timeout=HANG_GUARD_S)
    assert response.status_code == 200
    assert (
        httpx.get(tight_server.base_url + "/openapi.json", headers={"host": "evil.example"}).status_code
        == 421
    )


@pytest.mark.slow
def test_a_keyed_server_works_behind_a_host_rewriting_proxy(keyed_server: RunningServer) -> None:
    headers = {"host": "devplan.example.com", "origin": "https://devplan.example.com"}
    keyed = _post(keyed_server, {**headers, "authorization": f"Bearer {API_KEY}"})
    assert keyed.status_code == 200, keyed.text
    assert _post(keyed_server, headers).status_code == 401
