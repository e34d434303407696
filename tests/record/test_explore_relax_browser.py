"""GET /explore plans a Relax model in headless Chromium:
torchvision resnet18 as TVMScript, its first convolution pinned to the cpu
from the picture's menu; the picture labels TVMScript names, the copies panel
shows the copy where `/plan` says it is, and why answers in Relax terms.
Screenshots go to $DEVPLAN_TEST_ARTIFACTS (or the test's tmp folder). Slow
stage; tests/service/test_explore_browser.py covers the page on Relay."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path
from typing import Any

import pytest

from service import picture
from service.planning import PlanJob, plan_report, run_plan
from tests.record.views import RELAX, panel_rows
from tests.service.test_explore_browser import _click_node, _screenshot
from tests.service.test_service_docs_browser import DevTools, browser  # noqa: F401 (the fixture)

MODEL = RELAX / "tv_resnet18.py"

pytestmark = [
    pytest.mark.tvm,
    pytest.mark.slow,  # about 30 s: TVM reads a 115 KB TVMScript for each of the page's requests
    pytest.mark.skipif(importlib.util.find_spec("tvm") is None, reason="Relax needs apache-tvm"),
    pytest.mark.skipif(picture.dot_path() is None, reason="Graphviz dot is not installed"),
    pytest.mark.skipif(not MODEL.exists(), reason="Relax corpus not found"),
]


def test_explore_plans_tv_resnet18_from_tvmscript(
    browser: DevTools,  # noqa: F811
    server: Any,
    tmp_path: Path,
) -> None:
    out = Path(os.environ.get("DEVPLAN_TEST_ARTIFACTS") or tmp_path) / "explore-relax"
    out.mkdir(parents=True, exist_ok=True)
    text = MODEL.read_text()
    browser.call("Page.enable")
    browser.call(
        "Emulation.setDeviceMetricsOverride", width=1400, height=1000, deviceScaleFactor=1, mobile=False
    )
    browser.call("Page.navigate", url=server.base_url + "/explore")
    browser.wait_for("window.explorerReady === true")
    assert "Relax" in browser.evaluate("document.querySelector('label[for=module]').textContent")
    browser.evaluate(f"document.getElementById('module').value = {json.dumps(text)}")
    browser.evaluate("document.getElementById('plan').click()")
    browser.wait_for("document.querySelectorAll('#picture svg g.node').length > 0", timeout_s=180)
    assert "error" not in browser.evaluate("document.getElementById('status').className")
    _screenshot(browser, out / "1-planned.png")

    # The first convolution is drawn under its TVMScript name (a parameter, `x`, feeds it).
    plan = run_plan(PlanJob(module=text, virtual_devices=("cpu", "cuda"), include=("placements",)))
    assert plan.placements is not None
    conv = next(p for p in plan.placements if p["name"] == "R.nn.conv2d")
    browser.evaluate(f"state.expand = [{conv['node']}]; plan()")
    browser.wait_for(f"!!document.querySelector('#picture svg g#n{conv['node']}')", timeout_s=180)
    label = browser.evaluate(f"document.querySelector('#picture svg g#n{conv['node']}').textContent")
    assert f"{conv['binding']} = R.nn.conv2d" in label, label

    # Pin it to the cpu from its menu: the copy appears, where /plan puts it.
    _click_node(browser, f"#picture svg g#n{conv['node']}")
    browser.wait_for("!document.getElementById('menu').hidden")
    browser.evaluate("document.querySelector('#menu button.pin[data-device=\"cpu\"]').click()")
    browser.wait_for("document.querySelectorAll('#picture svg g.edge.copy').length > 0", timeout_s=180)
    # The panel names each copy's consumers as the report does (its `to`, named and located).
    _, pinned = plan_report(
        PlanJob(
            module=text,
            virtual_devices=("cpu", "cuda"),
            constraints=({"select": {"node": conv["node"]}, "device": "cpu"},),
        )
    )
    expected = panel_rows(pinned)
    assert all(" = R." in row[2] and ":" in row[2] for row in expected), expected
    rows = browser.evaluate(
        "Array.from(document.querySelectorAll('#copies tr')).slice(1)"
        ".map(tr => Array.from(tr.querySelectorAll('td')).map(td => td.textContent))"
    )
    assert rows == expected and rows
    copies = browser.evaluate("document.querySelectorAll('#picture svg g.edge.copy').length")
    assert copies == len(expected)
    _screenshot(browser, out / "2-pinned.png")

    # Why is it on the cpu? In Relax terms.
    _click_node(browser, f"#picture svg g#n{conv['node']}")
    browser.wait_for("!document.getElementById('menu').hidden")
    browser.evaluate("document.querySelector('#menu button.why').click()")
    answer = browser.wait_for(
        "(() => { const a = document.querySelector('#answers .answer'); return a ? a.textContent : null; })()",
        timeout_s=180,
    )
    assert f"{conv['binding']} = R.nn.conv2d(" in answer and "request pin" in answer, answer
    _screenshot(browser, out / "3-why.png")
