"""GET /explore in headless Chromium: paste the mlp, plan, count the colored
nodes, pin a node to the cpu and see the copy appear, ask why. Screenshots go
to $DEVPLAN_TEST_ARTIFACTS (or the test's tmp folder) for a person to look at."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import Any

import pytest

from service import picture
from tests.service.test_service_docs_browser import DevTools, browser  # noqa: F401 (the fixture)

CORPUS = Path(__file__).resolve().parents[2].parent / "shared" / "corpus"

pytestmark = [
    pytest.mark.skipif(picture.dot_path() is None, reason="Graphviz dot is not installed"),
    pytest.mark.skipif(not CORPUS.is_dir(), reason="corpus not found"),
]


LEGEND = (
    "Object.fromEntries(Array.from(document.querySelectorAll('#picture svg g.legend-entry'))"
    ".filter(g => g.querySelector('path, polygon'))"
    ".map(g => [g.querySelector('text').textContent, g.querySelector('path, polygon').getAttribute('fill')]))"
)


def _artifacts(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("DEVPLAN_TEST_ARTIFACTS") or tmp_path) / "explore"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _screenshot(tools: DevTools, path: Path) -> None:
    shot = tools.call("Page.captureScreenshot", format="png")
    path.write_bytes(base64.b64decode(shot["data"]))


def _click_node(tools: DevTools, selector: str) -> None:
    tools.evaluate(
        f"(() => {{ const g = document.querySelector({json.dumps(selector)});"
        " const r = g.getBoundingClientRect();"
        " g.dispatchEvent(new MouseEvent('click', {bubbles: true, clientX: r.x + r.width / 2,"
        " clientY: r.y + r.height / 2})); })()"
    )


def test_explore_page_plans_pins_and_explains(
    browser: DevTools,  # noqa: F811
    server: Any,
    tmp_path: Path,
) -> None:
    out = _artifacts(tmp_path)
    browser.call("Network.enable")
    browser.call("Page.enable")
    browser.call(
        "Emulation.setDeviceMetricsOverride", width=1400, height=1000, deviceScaleFactor=1, mobile=False
    )
    browser.call("Page.navigate", url=server.base_url + "/explore")
    browser.wait_for("window.explorerReady === true")

    # Paste the mlp and plan.
    mlp = (CORPUS / "mlp.relay").read_text()
    browser.evaluate(f"document.getElementById('module').value = {json.dumps(mlp)}")
    browser.evaluate("document.getElementById('plan').click()")
    browser.wait_for("document.querySelectorAll('#picture svg g.node.op').length > 0")
    fills = browser.evaluate(
        "Array.from(document.querySelectorAll('#picture svg g.node.op'))"
        ".map(g => g.querySelector('path, polygon').getAttribute('fill'))"
    )
    legend = browser.evaluate(LEGEND)
    assert len(fills) == 10  # the mlp's ten operator calls, all on the default device
    assert set(fills) == {legend["cuda"]}
    assert browser.evaluate("document.querySelectorAll('#picture svg g.edge.copy').length") == 0
    _screenshot(browser, out / "1-planned.png")

    # Click the first dense and pin it to the cpu: a copy appears.
    dense = browser.evaluate(
        "Array.from(document.querySelectorAll('#picture svg g.node.op'))"
        ".find(g => g.textContent.includes('nn.dense')).id"
    )
    _click_node(browser, f"#{dense}")
    browser.wait_for("!document.getElementById('menu').hidden")
    _screenshot(browser, out / "2-menu.png")
    browser.evaluate("document.querySelector('#menu button.pin[data-device=\"cpu\"]').click()")
    browser.wait_for("document.querySelectorAll('#picture svg g.edge.copy').length === 1")
    legend = browser.evaluate(LEGEND)
    cpu_nodes = browser.wait_for(
        f"Array.from(document.querySelectorAll('#picture svg g.node.op'))"
        f".filter(g => g.querySelector('path, polygon').getAttribute('fill') === {json.dumps(legend['cpu'])})"
        ".map(g => g.id)"
    )
    assert dense in cpu_nodes
    assert browser.evaluate(f"document.querySelector('#{dense}').classList.contains('pinned')")
    copies = browser.evaluate("document.getElementById('copies').textContent")
    assert "cpu" in copies and "cuda" in copies
    _screenshot(browser, out / "3-pinned.png")

    # Ask why the dense is on the cpu.
    _click_node(browser, f"#{dense}")
    browser.wait_for("!document.getElementById('menu').hidden")
    browser.evaluate("document.querySelector('#menu button.why').click()")
    answer = browser.wait_for(
        "(() => { const a = document.querySelector('#answers .answer'); return a ? a.textContent : null; })()"
    )
    assert "nn.dense" in answer and "cpu" in answer and "request pin" in answer
    _screenshot(browser, out / "4-why.png")

    # Everything came from this server.
    urls = [
        e["params"]["request"]["url"] for e in browser.events if e["method"] == "Network.requestWillBeSent"
    ]
    foreign = [u for u in urls if not u.startswith(server.base_url) and not u.startswith("data:")]
    assert not foreign, foreign
