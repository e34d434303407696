"""No open service by accident: `devplan serve` on an address other
than loopback needs DEVPLAN_API_KEYS, or the explicit DEVPLAN_ALLOW_ANONYMOUS=1."""

from __future__ import annotations

import os
import socket
import subprocess
from typing import Any

import httpx
import pytest

from service.auth import is_loopback, serve_refusal
from service.config import Settings
from tests._service import run_devplan


@pytest.mark.parametrize(
    "host",
    ["127.0.0.1", "127.1.2.3", "127.255.255.254", "::1", "[::1]", "localhost", "LOCALHOST", "localhost.",
     "::ffff:127.0.0.1"],
)
def test_loopback_addresses(host: str) -> None:
    assert is_loopback(host)


@pytest.mark.parametrize(
    "host", ["0.0.0.0", "::", "", "10.0.0.5", "192.168.1.2", "128.0.0.1", "::2", "example.com", "vm", "localhost.evil"]
)
def test_other_addresses(host: str) -> None:
    assert not is_loopback(host)


def _settings(**values: Any) -> Settings:
    return Settings(_env_file=None, **values)  # type: ignore[call-arg]


def test_refusal_rules() -> None:
    assert serve_refusal(_settings(host="127.0.0.1")) is None
    assert serve_refusal(_settings(host="0.0.0.0", api_keys="k1,k2")) is None
    assert serve_refusal(_settings(host="0.0.0.0", allow_anonymous=True)) is None
    refused = serve_refusal(_settings(host="0.0.0.0"))
    assert refused is not None and "DEVPLAN_API_KEYS" in refused and "DEVPLAN_ALLOW_ANONYMOUS=1" in refused
    assert "'0.0.0.0'" in refused
    # Compile keys alone leave /plan open; an empty key list is no key.
    compile_only = serve_refusal(_settings(host="0.0.0.0", compile_api_keys="c1"))
    assert compile_only is not None and "DEVPLAN_COMPILE_API_KEYS alone" in compile_only
    assert serve_refusal(_settings(host="0.0.0.0", api_keys=" , ")) is not None


def _clean_env(**values: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DEVPLAN_")}
    env.update(values)
    return env


def _serve(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    # The timeout only stops a server that wrongly started; the assertions are on the exit.
    return run_devplan("serve", *argv, env=env, timeout=120)


def _free_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


@pytest.mark.parametrize(
    ("argv", "env"),
    [
        (["--host", "0.0.0.0"], {}),
        ([], {"DEVPLAN_HOST": "0.0.0.0"}),
        (["--host", "::"], {}),
        (["--host", "0.0.0.0"], {"DEVPLAN_COMPILE_API_KEYS": "compile-only"}),
    ],
    ids=["flag", "env", "ipv6-any", "compile-keys-only"],
)
def test_serve_refuses_an_open_address(argv: list[str], env: dict[str, str]) -> None:
    done = _serve([*argv, "--port", _free_port()], _clean_env(**env))
    assert done.returncode == 2, done.stderr
    assert "DEVPLAN_API_KEYS" in done.stderr and "DEVPLAN_ALLOW_ANONYMOUS=1" in done.stderr
    assert "Traceback" not in done.stderr


def _loopback_alias() -> str:
    """A name of this machine, other than `localhost`, that resolves to 127.0.0.1:
    serving there is non-loopback by the rule (names are not resolved) yet binds only loopback."""
    for name in (socket.gethostname(), "localhost.localdomain"):
        try:
            if name and name != "localhost" and socket.gethostbyname(name) == "127.0.0.1":
                return name
        except OSError:
            continue
    pytest.skip("no name of this machine but `localhost` resolves to 127.0.0.1")


def test_serve_refuses_a_name_it_cannot_know_is_loopback() -> None:
    name = _loopback_alias()
    done = _serve(["--host", name, "--port", _free_port()], _clean_env())
    assert done.returncode == 2 and repr(name) in done.stderr, done.stderr


def test_serve_starts_with_the_opt_out_or_a_key(server_factory: Any) -> None:
    name = _loopback_alias()
    for extra in ({"DEVPLAN_ALLOW_ANONYMOUS": "1"}, {"DEVPLAN_API_KEYS": "test-key"}):
        server = server_factory({"DEVPLAN_HOST": name, **extra})
        assert httpx.get(server.base_url + "/readyz", timeout=30).status_code == 200
        keyed = "DEVPLAN_API_KEYS" in extra
        plan = httpx.post(server.base_url + "/plan", json={"module": "def @main(%x: Tensor[(4), float32]) { %x }"},
                          timeout=60)
        assert plan.status_code == (401 if keyed else 200), plan.text
