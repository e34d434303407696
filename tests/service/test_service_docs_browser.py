"""Swagger UI in headless Chromium: renders offline, and "Execute" runs a worked example.

Drives Debian's `chromium` over the DevTools protocol (websocket-client). Every
request the page makes is recorded, so the test also proves nothing is fetched
from outside the server (build farms are air-gapped).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-dev-shm-usage",
    "--remote-allow-origins=*",
]


def chromium_binary() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    return None


class DevTools:
    """A minimal Chrome DevTools Protocol client over one page's websocket."""

    def __init__(self, ws_url: str) -> None:
        import websocket

        self.ws = websocket.create_connection(ws_url, timeout=30, suppress_origin=True)
        self.next_id = 0
        self.events: list[dict[str, Any]] = []

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        ident = self.next_id
        self.ws.send(json.dumps({"id": ident, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv())
            if message.get("id") == ident:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                result: dict[str, Any] = message.get("result", {})
                return result
            if "method" in message:
                self.events.append(message)

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"page script failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout_s: float = 30.0) -> Any:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            value = self.evaluate(expression)
            if value:
                return value
            time.sleep(0.2)
        raise AssertionError(f"timed out waiting for: {expression}")

    def close(self) -> None:
        self.ws.close()


@pytest.fixture
def browser(tmp_path: Path, free_port: int) -> Iterator[DevTools]:
    binary = chromium_binary()
    if binary is None:
        pytest.skip("chromium is not installed (.ci/run installs Debian's chromium with apt-get)")
    proc = subprocess.Popen(
        [
            binary,
            *FLAGS,
            f"--remote-debugging-port={free_port}",
            f"--user-data-dir={tmp_path / 'profile'}",
            "about:blank",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        page = None
        while page is None:
            if proc.poll() is not None:
                pytest.fail(f"chromium exited with {proc.returncode} before DevTools came up")
            try:
                targets = httpx.get(f"http://127.0.0.1:{free_port}/json/list", timeout=5).json()
                page = next((t for t in targets if t.get("type") == "page"), None)
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail("chromium's DevTools endpoint did not come up within 60 s")
            if page is None:
                time.sleep(0.2)
        tools = DevTools(page["webSocketDebuggerUrl"])
        try:
            yield tools
        finally:
            tools.close()
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def test_swagger_ui_renders_offline_and_executes_an_example(browser: DevTools, server: Any) -> None:
    browser.call("Network.enable")
    browser.call("Page.enable")
    browser.call("Page.navigate", url=server.base_url + "/docs")

    # Every operation renders.
    browser.wait_for("document.querySelectorAll('.opblock').length >= 5")
    paths = browser.evaluate(
        "Array.from(document.querySelectorAll('.opblock-summary-path')).map(e => e.textContent.trim())"
    )
    assert {"/plan", "/healthz", "/readyz", "/version", "/metrics"} <= set(paths), paths

    # Open POST /plan; "Try it out" is on by default, the first worked example is loaded.
    browser.evaluate(
        "(document.querySelector('#operations-plan-plan .opblock-summary-control')"
        " || document.querySelector('#operations-plan-plan .opblock-summary')).click()"
    )
    browser.wait_for("document.querySelector('#operations-plan-plan .btn.execute') !== null")
    example_names = browser.wait_for(
        "Array.from(document.querySelectorAll('#operations-plan-plan .examples-select option')).map(o => o.textContent)"
    )
    from service.examples import PLAN_EXAMPLES

    assert example_names == [e["summary"] for e in PLAN_EXAMPLES.values()], example_names
    body = browser.evaluate("document.querySelector('#operations-plan-plan textarea.body-param__text').value")
    assert '"module"' in body and "def @main" in body

    browser.evaluate("document.querySelector('#operations-plan-plan .btn.execute').click()")
    status = browser.wait_for(
        "(() => { const c = document.querySelector('#operations-plan-plan .live-responses-table tr.response .response-col_status');"
        " return c ? c.textContent.trim() : null; })()",
        timeout_s=60,
    )
    assert status.startswith("200"), status
    response_text = browser.evaluate(
        "document.querySelector('#operations-plan-plan .live-responses-table tr.response .response-col_description').textContent"
    )
    assert "virtual_device" in response_text and "expressions_by_device" in response_text

    # Nothing was loaded from anywhere but this server.
    urls = [
        e["params"]["request"]["url"] for e in browser.events if e["method"] == "Network.requestWillBeSent"
    ]
    assert urls, "no network events recorded"
    foreign = [u for u in urls if not u.startswith(server.base_url) and not u.startswith("data:")]
    assert not foreign, foreign
    assert any(u.endswith("/docs/static/swagger-ui-bundle.js") for u in urls)
