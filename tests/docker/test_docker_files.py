"""Static checks of docker/ (Dockerfile, compose file, .dockerignore, helpers).

Why: building the image takes minutes and needs podman (docker/smoke.sh proves it end to end); these
checks run in a second and catch the mistakes that break the image quietly: a new package missing from
the .dockerignore allow-list, a pip step without the CA secret, a setting outside DEVPLAN_*, a
healthcheck probe that does not actually fail when the server is down.
"""

from __future__ import annotations

import http.server
import json
import os
import re
import shlex
import subprocess
import sys
import threading
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "docker"
ARTIFACT_DIR = "/var/lib/devplan/artifacts"


@dataclass(frozen=True)
class Instruction:
    """One Dockerfile instruction (continuation lines joined) and the stage it belongs to."""

    keyword: str
    args: str
    stage: str | None


def parse_dockerfile(text: str) -> list[Instruction]:
    """Instructions in order; comments dropped, backslash continuations joined."""
    logical: list[str] = []
    current = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not current and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue  # a comment inside a continued instruction
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        logical.append(current + line)
        current = ""
    assert not current, "Dockerfile ends inside a continued line"
    out: list[Instruction] = []
    stage: str | None = None
    for line in logical:
        keyword, _, args = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            m = re.search(r"\s+AS\s+(\S+)$", args, re.IGNORECASE)
            stage = m.group(1) if m else None
        out.append(Instruction(keyword, args.strip(), stage))
    return out


@pytest.fixture(scope="module")
def dockerfile() -> list[Instruction]:
    return parse_dockerfile((DOCKER / "Dockerfile").read_text(encoding="utf-8"))


def stage_parents(instructions: list[Instruction]) -> dict[str, str]:
    """Stage name -> what it is built FROM (a stage name or the base expression)."""
    return {i.stage: i.args.split()[0] for i in instructions if i.keyword == "FROM" and i.stage}


def inherited(instructions: list[Instruction], stage: str, keyword: str) -> list[Instruction]:
    """The instructions of `keyword` that apply to `stage`, following FROM through parent stages."""
    parents = stage_parents(instructions)
    chain = [stage]
    while parents.get(chain[-1]) in parents:
        chain.append(parents[chain[-1]])
    return [i for i in instructions if i.keyword == keyword and i.stage in chain]


def test_base_is_a_build_arg_defaulting_to_python_slim(dockerfile: list[Instruction]) -> None:
    first = dockerfile[0]
    assert (first.keyword, first.args) == ("ARG", "BASE=python:3.11-slim")
    bases = {i.args.split()[0] for i in dockerfile if i.keyword == "FROM"}
    stages = set(stage_parents(dockerfile))
    assert bases - stages == {"${BASE}"}, "every stage starts from ${BASE} or another stage"


@pytest.mark.parametrize("variant", ["plan", "full"])
def test_variant_runtime_contract(dockerfile: list[Instruction], variant: str) -> None:
    """Each variant: non-root numeric user, port 8000, healthcheck, SIGTERM, `devplan serve`, volume."""
    assert variant in stage_parents(dockerfile)
    users = inherited(dockerfile, variant, "USER")
    assert users, f"{variant} runs as root"
    uid_arg = re.fullmatch(r"\$\{DEVPLAN_UID\}:\$\{DEVPLAN_UID\}", users[-1].args)
    assert uid_arg, f"USER should be the numeric uid (runAsNonRoot can check it): {users[-1].args}"
    uid_defaults = [i.args for i in inherited(dockerfile, variant, "ARG") if i.args.startswith("DEVPLAN_UID=")]
    assert uid_defaults and int(uid_defaults[-1].split("=")[1]) > 0
    assert [i.args for i in inherited(dockerfile, variant, "EXPOSE")] == ["8000"]
    assert [i.args for i in inherited(dockerfile, variant, "STOPSIGNAL")] == ["SIGTERM"]
    assert json.loads(inherited(dockerfile, variant, "ENTRYPOINT")[-1].args) == ["devplan"]
    assert json.loads(inherited(dockerfile, variant, "CMD")[-1].args) == ["serve"]
    volumes = [json.loads(i.args) for i in inherited(dockerfile, variant, "VOLUME")]
    assert volumes == [[ARTIFACT_DIR]]
    env = " ".join(i.args for i in inherited(dockerfile, variant, "ENV"))
    assert f"DEVPLAN_ARTIFACT_DIR={ARTIFACT_DIR}" in env
    assert "DEVPLAN_HOST=0.0.0.0" in env and "DEVPLAN_PORT=8000" in env
    healthchecks = inherited(dockerfile, variant, "HEALTHCHECK")
    assert len(healthchecks) == 1 and "/healthz" in healthchecks[0].args


def test_only_devplan_settings_in_the_runtime_environment(dockerfile: list[Instruction]) -> None:
    """The app is configured by DEVPLAN_* only; the rest are interpreter/pip plumbing."""
    plumbing = re.compile(r"(PATH|HOME|PYTHON[A-Z_]*|PIP_[A-Z_]+|LANG|DEBIAN_FRONTEND)$")
    for inst in (i for i in dockerfile if i.keyword == "ENV"):
        for name in re.findall(r"(?:^|\s)([A-Za-z_][A-Za-z0-9_]*)=", inst.args):
            assert name.startswith("DEVPLAN_") or plumbing.match(name), f"ENV {name} in stage {inst.stage}"


def test_every_network_step_takes_the_optional_ca_secret(dockerfile: list[Instruction]) -> None:
    """pip and apt reach the network only with the hostca secret mounted, and it is optional."""
    runs = [i for i in dockerfile if i.keyword == "RUN"]
    networked = [i for i in runs if re.search(r"pip install|apt-get update", i.args)]
    assert len(networked) >= 3
    for inst in networked:
        assert "--mount=type=secret,id=hostca,required=false" in inst.args, inst.args[:120]
        assert "/run/secrets/hostca" in inst.args
    for inst in runs:
        assert "curl" not in inst.args and "wget" not in inst.args
    # Nothing of the secret may be written into a layer (apt's CA setting is removed in the same RUN).
    for inst in networked:
        if "99devplan-hostca" in inst.args:
            assert re.search(r"rm -rf [^;]*99devplan-hostca", inst.args)


def test_runtime_stages_copy_only_the_venv(dockerfile: list[Instruction]) -> None:
    for variant, venv in (("plan", "venv-plan"), ("full", "venv-full")):
        copies = [i.args for i in inherited(dockerfile, variant, "COPY")]
        assert copies == [f"--from={venv} /opt/devplan /opt/devplan"]


def _healthcheck_code(dockerfile: list[Instruction]) -> str:
    hc = next(i for i in dockerfile if i.keyword == "HEALTHCHECK")
    exec_form = json.loads(hc.args.split(" CMD ", 1)[1])
    assert exec_form[:2] == ["python3", "-c"], "slim images have no curl: probe with python"
    return exec_form[2]


class _Health(http.server.BaseHTTPRequestHandler):
    status = 200

    def do_GET(self) -> None:  # http.server names its handlers so
        code = self.status if self.path == "/healthz" else 404
        self.send_response(code)
        self.end_headers()
        self.wfile.write(b'{"status": "ok"}')

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def health_server() -> Iterator[http.server.HTTPServer]:
    server = http.server.HTTPServer(("127.0.0.1", 0), _Health)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def _probe(code: str, port: int) -> int:
    env = {**os.environ, "DEVPLAN_PORT": str(port)}
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, timeout=30, check=False).returncode


def test_healthcheck_probe_passes_on_200_and_fails_otherwise(
    dockerfile: list[Instruction], health_server: http.server.HTTPServer
) -> None:
    code = _healthcheck_code(dockerfile)
    port = health_server.server_address[1]
    assert _probe(code, port) == 0
    _Health.status = 503
    try:
        assert _probe(code, port) != 0
    finally:
        _Health.status = 200
    health_server.shutdown()
    health_server.server_close()
    assert _probe(code, port) != 0, "the probe must fail when nothing listens"


def test_requirements_helper_matches_pyproject() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    script = DOCKER / "requirements.py"

    def run(*extras: str) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, str(script), str(ROOT / "pyproject.toml"), *extras]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=False)

    assert run().stdout.splitlines() == project["dependencies"]
    assert run("tvm").stdout.splitlines() == project["optional-dependencies"]["tvm"]
    bad = run("no-such-extra")
    assert bad.returncode != 0 and "no-such-extra" in bad.stderr


def _dockerignore_rules() -> list[str]:
    lines = (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
    return [ln.strip() for ln in lines if ln.strip() and not ln.lstrip().startswith("#")]


def test_dockerignore_allow_list_covers_every_package() -> None:
    """Everything is excluded first; each package pip installs (and the readme) is let back in."""
    rules = _dockerignore_rules()
    assert rules[0] == "*"
    allowed = {r[1:].rstrip("/") for r in rules if r.startswith("!")}
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    includes = pyproject["tool"]["setuptools"]["packages"]["find"]["include"]
    top_level = sorted({pattern.rstrip("*").rstrip(".") for pattern in includes})
    for package in top_level:
        if (ROOT / package / "__init__.py").exists():
            assert package in allowed, f"package {package}/ is not in the .dockerignore allow-list"
    assert "pyproject.toml" in allowed and pyproject["project"]["readme"] in allowed
    assert "docker/requirements.py" in allowed
    for heavy in (".git", ".venv", "tests", "benchmarks"):
        assert heavy not in allowed
    assert "**/__pycache__" in rules


def test_compose_service() -> None:
    compose = yaml.safe_load((DOCKER / "compose.yaml").read_text(encoding="utf-8"))
    svc = compose["services"]["devplan"]
    build = svc["build"]
    assert (DOCKER / build["context"] / build["dockerfile"]).resolve() == (DOCKER / "Dockerfile").resolve()
    assert "plan" in build["target"]
    assert all(key.startswith("DEVPLAN_") for key in svc["environment"])
    assert svc["volumes"] == [f"artifacts:{ARTIFACT_DIR}"] and "artifacts" in compose["volumes"]
    assert all(port.startswith("127.0.0.1:") for port in svc["ports"])
    kind, command = svc["healthcheck"]["test"]
    assert kind == "CMD-SHELL" and "/healthz" in command
    argv = shlex.split(command)
    assert argv[:2] == ["python3", "-c"] and len(argv) == 3
    compile(argv[2], "<healthcheck>", "exec")
    limits = svc["deploy"]["resources"]["limits"]
    assert {"cpus", "memory"} <= set(limits)
    grace = int(svc["stop_grace_period"].rstrip("s"))
    assert grace > int(svc["environment"]["DEVPLAN_GRACEFUL_TIMEOUT_S"]), "SIGKILL before the server's drain ends"
    assert svc["stop_signal"] == "SIGTERM"


def test_compose_farm_worker_outlasts_its_compile_limit() -> None:
    """SIGTERM lets a worker finish its job: the runtime must wait longer than the compile
    limit the farm runs with, which must let the corpus's largest run checks finish."""
    from service.config import Settings

    compose = yaml.safe_load((DOCKER / "compose.yaml").read_text(encoding="utf-8"))
    worker = compose["services"]["farm-worker"]
    limit = int(worker["environment"]["DEVPLAN_COMPILE_TIMEOUT_S"])
    assert limit >= Settings().compile_timeout_s, "the farm cuts compiles shorter than the default"
    assert int(worker["stop_grace_period"].rstrip("s")) > limit
    assert worker["stop_signal"] == "SIGTERM"


def test_compose_reverse_proxy_example_is_complete() -> None:
    """The commented two-replica example and the nginx file it mounts agree."""
    text = (DOCKER / "compose.yaml").read_text(encoding="utf-8")
    assert re.search(r"^#\s+replicas: 2$", text, re.MULTILINE)
    assert "./nginx.conf:/etc/nginx/conf.d/default.conf:ro" in text
    nginx = (DOCKER / "nginx.conf").read_text(encoding="utf-8")
    assert "server devplan:8000" in nginx and "listen 8080;" in nginx


def test_smoke_script_is_valid_bash() -> None:
    script = DOCKER / "smoke.sh"
    assert os.access(script, os.X_OK)
    subprocess.run(["bash", "-n", str(script)], check=True, timeout=30)
    text = script.read_text(encoding="utf-8")
    # Podman is configured only through the files the script writes (nothing system-wide).
    assert "CONTAINERS_CONF=" in text and "CONTAINERS_STORAGE_CONF=" in text
    for setting in ('runtime = "runc"', 'cgroup_manager = "cgroupfs"', 'events_logger = "file"', "default_ulimits"):
        assert setting in text
    assert "--format docker" in text and "id=hostca" in text
    assert "podman healthcheck run" in text
