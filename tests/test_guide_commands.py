"""Every `devplan` and `curl` example of the guide runs as written, so the guide
cannot rot.

The examples are the code blocks of README.md and docs/ whose lines are
`devplan ...`, `curl ...` or variable assignments they use (tests/guide_text.py
says how they are found). Each block runs as one bash script with the project's
`devplan` first on PATH, in a fresh directory that holds the repository's files
(as a fresh clone does: `examples/`, `scripts/`, ...), so outputs such as
`-o planned.relay` land there. A real server (`devplan serve`, uvicorn) answers on
127.0.0.1: the guide's port 8000 is rewritten to that server's port, and any
other port an example serves on (`devplan serve --port 8001 &`) to a free one;
a server an example starts in the background is stopped when its block ends.

Not run here: the setup commands of the quick start (`scripts/serve.sh`,
`scripts/test.sh`: this test runs inside what they set up), container steps
(`docker`, `podman`, compose: `docker/smoke.sh` checks the images) and the
browser steps (`/docs`, `/explore`: tests/service/test_service_docs_browser.py
and tests/service/test_explore_browser.py). A block passes when bash exits 0
and no output is a problem document (an error answer of the service).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import RunningServer, find_free_port
from tests.guide_text import ROOT, Example, examples, pages

pytestmark = pytest.mark.slow

PROBLEM = "https://devplan.dev/problems/"
NEEDS_TVM = re.compile(r"relax|llama_nn|\.py\b|devplan (compile|profile)|/compile")

EXAMPLES = [e for page in pages() for e in examples(page)]


def _param(example: Example) -> Any:
    text = "\n".join(example.commands)
    marks = [pytest.mark.tvm] if NEEDS_TVM.search(text) else []
    return pytest.param(example, id=example.where, marks=marks)


def _script(example: Example, port: int) -> str:
    """The block as a bash script on this machine's ports."""
    others: dict[str, str] = {}

    def port_of(match: re.Match[str]) -> str:
        number = match.group(2)
        if number == "8000":
            return f"{match.group(1)}{port}"
        return f"{match.group(1)}{others.setdefault(number, str(find_free_port()))}"

    lines = [re.sub(r"(127\.0\.0\.1:|--port )(\d{4,5})\b", port_of, c) for c in example.commands]
    # A server started in the background stops with the block (SIGTERM: it drains and exits).
    return "set -euo pipefail\ntrap 'for job in $(jobs -p); do kill \"$job\"; done; wait' EXIT\n" + "\n".join(lines) + "\n"


def _clone(tmp_path: Path) -> Path:
    """A directory that looks like a fresh clone to the examples: the tracked
    top-level entries of the repository, linked, and room for outputs."""
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    where = tmp_path / "clone"
    where.mkdir()
    for top in sorted({name.split("/", 1)[0] for name in tracked}):
        (where / top).symlink_to(ROOT / top)
    return where


def test_the_guide_has_examples() -> None:
    """The reader finds the guide's examples (the test below would pass on none)."""
    where = {e.where.split(":")[0] for e in EXAMPLES}
    assert "README.md" in where and "docs/cli.md" in where and "docs/http-api.md" in where, where
    commands = [c for e in EXAMPLES for c in e.commands]
    assert any(c.startswith("curl ") for c in commands) and any(c.startswith("devplan plan ") for c in commands)


@pytest.mark.parametrize("example", [_param(e) for e in EXAMPLES])
def test_example_runs_as_written(example: Example, server: RunningServer, tmp_path: Path) -> None:
    port = int(server.base_url.rsplit(":", 1)[1])
    script = _script(example, port)
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    for name in [k for k in env if k.startswith("DEVPLAN_")]:  # the embedded defaults, as a new user has them
        del env[name]
    done = subprocess.run(
        ["bash", "-c", script],
        cwd=_clone(tmp_path),
        env=env,
        capture_output=True,
        text=True,
        timeout=900,  # stops a hang only; the assertions are on the outcome
        check=False,
    )
    report = f"{example.where}:\n{script}\n--- stdout\n{done.stdout[-3000:]}\n--- stderr\n{done.stderr[-3000:]}"
    assert done.returncode == 0, report
    assert PROBLEM not in done.stdout and PROBLEM not in done.stderr, report
