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

import relay
import solver
from relay.ast import Call, Op
from service import picture
from service.planning import PlanJob, plan_report
from tests.record.views import panel_rows
from tests.service.test_service_docs_browser import DevTools, browser  # noqa: F401 (the fixture)

CORPUS = Path(__file__).resolve().parents[2].parent / "shared" / "corpus"

pytestmark = [
    pytest.mark.skipif(picture.dot_path() is None, reason="Graphviz dot is not installed"),
    pytest.mark.skipif(not CORPUS.is_dir(), reason="corpus not found"),
]


LEGEND = (
    "Object.fromEntries(Array.from(document.querySelectorAll('#picture svg g.legend-device'))"
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
    # Each copy's row: where, devices and its consumers, as the report names them.
    pin = ({"select": {"node": int(dense[1:])}, "device": "cpu"},)
    _, report = plan_report(PlanJob(module=mlp, virtual_devices=("cpu", "cuda"), constraints=pin))
    rows = browser.evaluate(
        "Array.from(document.querySelectorAll('#copies tr')).slice(1)"
        ".map(tr => Array.from(tr.querySelectorAll('td')).map(td => td.textContent))"
    )
    assert rows == panel_rows(report) and rows
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

    # The dense's weight is folded into it; its menu still pins the weight.
    bias_add = browser.evaluate(
        "Array.from(document.querySelectorAll('#picture svg g.node.op.folded'))"
        ".find(g => g.textContent.includes('nn.bias_add')).id"
    )
    _click_node(browser, f"#{bias_add}")
    browser.wait_for("!document.getElementById('menu').hidden")
    folded = browser.evaluate(
        "Array.from(document.querySelectorAll('#menu .folded')).map(r => [r.dataset.node, r.textContent])"
    )
    assert len(folded) == 1 and "%fc1_bias" in folded[0][1], folded
    weight = folded[0][0]
    assert browser.evaluate(f"document.querySelector('#{bias_add}').classList.contains('fold-{weight}')")
    browser.evaluate(
        f'document.querySelector(\'#menu button.pin-folded[data-node="{weight}"][data-device="cpu"]\').click()'
    )
    # Pinned, the weight is drawn on its own (pins never fold), outlined.
    browser.wait_for(f"!!document.querySelector('#picture svg g#n{weight}.pinned')")
    _screenshot(browser, out / "5-folded-weight-pinned.png")

    # Everything came from this server.
    urls = [
        e["params"]["request"]["url"] for e in browser.events if e["method"] == "Network.requestWillBeSent"
    ]
    foreign = [u for u in urls if not u.startswith(server.base_url) and not u.startswith("data:")]
    assert not foreign, foreign


# Every text box of the picture in page pixels, and the pairs that overlap (more than a pixel each way).
TEXT_BOXES = """(() => {
  const boxes = Array.from(document.querySelectorAll('#picture svg text')).map((t) => {
    const r = t.getBoundingClientRect();
    const g = t.closest('g.node, g.edge, g.cluster');
    return {x: r.left, y: r.top, w: r.width, h: r.height, text: t.textContent,
            kind: g ? (g.classList.contains('copy') ? 'copy' : g.classList.contains('node') ? 'node' : 'other') : 'other'};
  });
  const overlaps = [];
  for (let i = 0; i < boxes.length; i++) {
    for (let j = i + 1; j < boxes.length; j++) {
      const a = boxes[i], b = boxes[j];
      const dx = Math.min(a.x + a.w, b.x + b.w) - Math.max(a.x, b.x);
      const dy = Math.min(a.y + a.h, b.y + b.h) - Math.max(a.y, b.y);
      if (dx > 1 && dy > 1) overlaps.push([a.text, b.text]);
    }
  }
  return {boxes, overlaps};
})()"""


def _full_screenshot(tools: DevTools, path: Path) -> None:
    """The whole picture, beyond the viewport."""
    rect = tools.evaluate(
        "(() => { const p = document.getElementById('picture'); p.style.overflow = 'visible';"
        " p.style.height = 'auto'; document.querySelector('main').style.height = 'auto';"
        " const r = document.querySelector('#picture svg').getBoundingClientRect();"
        " return {x: r.left + window.scrollX, y: r.top + window.scrollY, width: r.width, height: r.height}; })()"
    )
    shot = tools.call(
        "Page.captureScreenshot", format="png", captureBeyondViewport=True, clip={**rect, "scale": 1}
    )
    path.write_bytes(base64.b64decode(shot["data"]))


def test_pictures_of_real_models_are_readable_at_1400_px(
    browser: DevTools,  # noqa: F811
    server: Any,
    tmp_path: Path,
) -> None:
    """resnet18, mobilenet and inception_v3 with their classifier pinned to the
    cpu (optimize mode: copies in and out): every copy label and box label at
    least 10 px high, no two text boxes overlapping."""
    out = _artifacts(tmp_path)
    browser.call("Page.enable")
    browser.call(
        "Emulation.setDeviceMetricsOverride", width=1400, height=1000, deviceScaleFactor=1, mobile=False
    )
    for name in ("resnet18", "mobilenet", "inception_v3"):
        text = (CORPUS / f"{name}.relay").read_text()
        module = relay.parse_text(text)
        dense = next(
            i
            for i, n in enumerate(solver.node_ids(module))
            if isinstance(n, Call) and isinstance(n.op, Op) and n.op.name == "nn.dense"
        )
        browser.call("Page.navigate", url=server.base_url + "/explore")
        browser.wait_for("window.explorerReady === true")
        browser.evaluate(f"document.getElementById('module').value = {json.dumps(text)}")
        browser.evaluate("document.getElementById('mode').value = 'optimize'")
        browser.evaluate(f"state.pins = [{{node: {dense}, device: 'cpu'}}]; plan()")
        browser.wait_for("document.querySelectorAll('#picture svg g.edge.copy').length > 0", timeout_s=60)
        found = browser.evaluate(TEXT_BOXES)
        boxes = found["boxes"]
        copies = [b for b in boxes if b["kind"] == "copy"]
        labels = [b for b in boxes if b["kind"] == "node"]
        assert copies and labels
        small = [(b["text"], round(b["h"], 1)) for b in copies + labels if b["h"] < 10]
        assert not small, (name, small[:5])
        assert all("copy" in b["text"] and "B" in b["text"] for b in copies)
        assert not found["overlaps"], (name, found["overlaps"][:5])
        _screenshot(browser, out / f"picture-{name}.png")
        _full_screenshot(browser, out / f"picture-{name}-full.png")
