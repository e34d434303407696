"""Static checks of the farm's deployment files (compose profile, Containerfiles, smoke stage)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import yaml

DOCKER = Path(__file__).resolve().parents[2] / "docker"


def compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((DOCKER / "compose.yaml").read_text())
    return data


def test_farm_profile_has_redis_with_aof_an_s3_store_the_api_and_workers() -> None:
    services = compose()["services"]
    farm = {name: s for name, s in services.items() if "farm" in s.get("profiles", [])}
    assert set(farm) == {"farm-redis", "farm-s3", "farm-s3-init", "farm-api", "farm-worker"}
    assert "--appendonly" in farm["farm-redis"]["command"]
    assert farm["farm-worker"]["command"] == ["worker"]
    assert farm["farm-worker"]["deploy"]["replicas"]
    for name in ("farm-api", "farm-worker"):
        env = farm[name]["environment"]
        assert env["DEVPLAN_QUEUE_URL"].startswith("redis://farm-redis:")
        assert env["DEVPLAN_ARTIFACT_URL"].startswith("s3://")
        assert env["AWS_ENDPOINT_URL_S3"].startswith("http://farm-s3:")
    # The worker finishes its job on SIGTERM: its grace period exceeds the compile limit.
    grace = int(farm["farm-worker"]["stop_grace_period"].rstrip("s"))
    assert grace > int(farm["farm-worker"]["environment"]["DEVPLAN_COMPILE_TIMEOUT_S"])
    assert "ilm rule add" in farm["farm-s3-init"]["command"][0]  # eviction is the lifecycle rule
    # The default service is unaffected: no profile, so `compose up` still starts only it.
    assert "profiles" not in services["devplan"]


def test_farm_containerfiles_take_the_optional_ca_secret() -> None:
    for path in sorted((DOCKER / "farm").glob("*.Containerfile")):
        text = path.read_text()
        runs = re.findall(r"^RUN (.*?)(?<!\\)$", text, flags=re.MULTILINE | re.DOTALL)
        assert runs, path
        for run in runs:
            assert "--mount=type=secret,id=hostca,required=false" in run, (path, run[:80])


def test_smoke_script_has_the_farm_stage() -> None:
    text = (DOCKER / "smoke.sh").read_text()
    assert "farm_stage" in text and "smoke_farm.py" in text
    subprocess.run(["bash", "-n", str(DOCKER / "smoke.sh")], check=True)
