"""HTTP checks of a running devplan container, used by docker/smoke.sh (standard library only).

Why a separate file: the host running the smoke test has python3 but not necessarily the project's
venv, and the checks read JSON, which is clumsy in shell. Each check prints one line; the first
failure raises SystemExit with a message, so the caller sees a non-zero exit status.

Usage: python3 smoke_http.py BASE_URL VARIANT           (VARIANT: plan or full)
       python3 smoke_http.py --inflight BASE_URL OUT     (a slow /plan kept in flight across a stop)

The container runs with an API key (it listens on 0.0.0.0, where `devplan serve` refuses to start
without one): DEVPLAN_SMOKE_KEY in this process's environment is sent as `Authorization: Bearer`.
"""

from __future__ import annotations

import http.client
import json
import os
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

EXAMPLE_MODULE = '#[version = "0.0.5"]\ndef @main(%x: Tensor[(4), float32]) { exp(%x) }\n'


@dataclass(frozen=True)
class Reply:
    """One HTTP answer: status, content type and body."""

    status: int
    content_type: str
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def auth_headers() -> dict[str, str]:
    """The bearer header of DEVPLAN_SMOKE_KEY, when set."""
    key = os.environ.get("DEVPLAN_SMOKE_KEY", "")
    return {"Authorization": f"Bearer {key}"} if key else {}


def request(
    base: str, method: str, path: str, payload: Any = None, timeout: float = 60.0, *, keyed: bool = True
) -> Reply:
    """Send one request (with the key unless `keyed` is False); HTTP error statuses are answers too."""
    data = None if payload is None else json.dumps(payload).encode()
    req = urllib.request.Request(base + path, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    for name, value in (auth_headers() if keyed else {}).items():
        req.add_header(name, value)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return Reply(resp.status, resp.headers.get("Content-Type", ""), resp.read())
    except urllib.error.HTTPError as err:
        return Reply(err.code, err.headers.get("Content-Type", ""), err.read())


def expect(condition: bool, message: str) -> None:
    if not condition:
        raise SystemExit(f"check failed: {message}")


def check(name: str, fn: Any, *args: Any) -> Any:
    """Run one check and print its line with the time it took."""
    t0 = time.perf_counter()
    result = fn(*args)
    print(f"{name:<14} ok  {1000 * (time.perf_counter() - t0):8.1f} ms  {result if isinstance(result, str) else ''}")
    return result


def check_health(base: str) -> str:
    reply = request(base, "GET", "/healthz")
    expect(reply.status == 200, f"/healthz answered {reply.status}: {reply.body[:200]!r}")
    reply = request(base, "GET", "/readyz")
    expect(reply.status == 200, f"/readyz answered {reply.status}: {reply.body[:300]!r}")
    return f"readyz: {reply.json()}"


def check_plan(base: str) -> str:
    """The example planned with the default device (cuda): everything on cuda, no copies."""
    reply = request(base, "POST", "/plan", {"module": EXAMPLE_MODULE, "explain": True})
    expect(reply.status == 200, f"/plan answered {reply.status}: {reply.body[:500]!r}")
    body = reply.json()
    expect(body.get("format") == "text", f"format is {body.get('format')!r}")
    expect("exp(" in body["module"] and "@main" in body["module"], f"planned module lost exp/@main: {body['module']!r}")
    types = {vd.get("device_type") for vd in body["virtual_devices"]}
    expect("cuda" in types, f"no cuda device in the output table: {body['virtual_devices']}")
    summary = body["summary"]
    expect(summary["device_copies"] == [], f"unexpected copies: {summary['device_copies']}")
    by_device = summary["expressions_by_device"]
    expect(by_device and all("cuda" in dev for dev in by_device), f"expressions off cuda: {by_device}")
    main = summary["functions"].get("main") or summary["functions"].get("@main")
    expect(main is not None, f"no main in functions: {summary['functions']}")
    expect("cuda" in main["result"], f"main's result not on cuda: {main}")
    expect(all("cuda" in p["device"] for p in main["params"]), f"main's params not on cuda: {main}")
    return f"devices {sorted(by_device)}, solver {body['solver']['classes']} classes"


def check_problem(base: str) -> str:
    """A malformed module is a 400 problem with a location, not a 500."""
    reply = request(base, "POST", "/plan", {"module": "def @main( {"})
    expect(reply.status == 400, f"malformed module answered {reply.status}: {reply.body[:300]!r}")
    expect(reply.content_type.startswith("application/problem+json"), f"content type {reply.content_type!r}")
    expect(bool(reply.json().get("locations")), f"no locations in {reply.json()}")
    return "400 application/problem+json"


def check_key(base: str) -> str:
    """With the key set, /plan needs it: 401 without, the health probes stay open."""
    if not auth_headers():
        return "no DEVPLAN_SMOKE_KEY: not checked"
    reply = request(base, "POST", "/plan", {"module": EXAMPLE_MODULE}, keyed=False)
    expect(reply.status == 401, f"/plan without the key answered {reply.status}: {reply.body[:200]!r}")
    expect(request(base, "GET", "/healthz", keyed=False).status == 200, "/healthz needs a key")
    return "401 without the key, /healthz open"


ATTACK_MARKER = "/tmp/devplan-smoke-pwned"
# TVMScript whose annotation TVM's parser would evaluate, running its __import__ (the full image has TVM).
ATTACK_MODULE = f"""@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor((__import__("os").system("touch {ATTACK_MARKER}") + 4,), dtype="float32")):
        return x
"""


def check_attack(base: str) -> str:
    """TVMScript that would run code is a located 400; smoke.sh then checks the file is absent."""
    reply = request(base, "POST", "/plan", {"module": ATTACK_MODULE})
    expect(reply.status == 400, f"the attack answered {reply.status}: {reply.body[:300]!r}")
    body = reply.json()
    expect(body.get("type", "").endswith("/malformed-module"), f"not malformed-module: {body}")
    where = [(loc["line"], loc["column"]) for loc in body.get("locations", [])]
    line = ATTACK_MODULE.splitlines()[3]
    expect(where[:1] == [(4, line.index("__import__") + 1)], f"refusal located at {where}")
    return f"400 malformed-module at {where[0][0]}:{where[0][1]}"


def check_docs(base: str) -> str:
    reply = request(base, "GET", "/docs")
    expect(reply.status == 200, f"/docs answered {reply.status}")
    return "swagger ui served"


def check_picture(base: str) -> str:
    """The image carries Graphviz: /plan/picture draws an SVG, and /explore is served."""
    reply = request(base, "POST", "/plan/picture", {"module": EXAMPLE_MODULE})
    expect(reply.status == 200, f"/plan/picture answered {reply.status}: {reply.body[:300]!r}")
    expect(reply.content_type.startswith("image/svg+xml"), f"content type {reply.content_type!r}")
    expect(b"<svg" in reply.body, "no <svg> element in the picture")
    page = request(base, "GET", "/explore")
    expect(page.status == 200, f"/explore answered {page.status}")
    return f"svg {len(reply.body)} bytes, explore page served"


def check_version(base: str, variant: str) -> str:
    reply = request(base, "GET", "/version")
    expect(reply.status == 200, f"/version answered {reply.status}")
    body = reply.json()
    if variant == "full":
        expect(bool(body.get("tvm")), f"full variant without TVM: {body}")
    else:
        expect(body.get("tvm") is None, f"plan variant should not carry TVM: {body}")
    return f"{body}"


RELAX_MODULE = """@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor((4,), "float32")) -> R.Tensor((4,), "float32"):
        y = R.exp(x)
        return y
"""


def check_relax(base: str, variant: str) -> str:
    """The full image plans a Relax module; the plan image (no TVM) answers 503
    tvm-unavailable for it and still plans Relay."""
    reply = request(base, "POST", "/plan", {"module": RELAX_MODULE, "default_device": "cpu"})
    if variant == "full":
        expect(reply.status == 200, f"Relax /plan answered {reply.status}: {reply.body[:500]!r}")
        text = reply.json()["module"]
        expect("R.exp" in text and "vdevice" in text, f"the planned Relax module has no vdevice: {text[:300]!r}")
        return "a Relax module planned (TVMScript in, TVMScript with vdevices out)"
    expect(reply.status == 503, f"Relax /plan without TVM answered {reply.status}: {reply.body[:300]!r}")
    expect(reply.json().get("type", "").endswith("/tvm-unavailable"), f"not tvm-unavailable: {reply.body[:300]!r}")
    return "503 tvm-unavailable for Relax, as documented"


def check_compile(base: str) -> str:
    """Full variant: /compile for llvm, when the service has the route."""
    spec = request(base, "GET", "/openapi.json").json()
    if "/compile" not in spec.get("paths", {}):
        return "route /compile not in this build (skipped)"
    payload = {"module": EXAMPLE_MODULE, "default_device": "cpu", "targets": {"cpu": "llvm"}}
    reply = request(base, "POST", "/compile", payload, timeout=300)
    expect(reply.status == 200, f"/compile answered {reply.status}: {reply.body[:500]!r}")
    body = reply.json()
    art = request(base, "GET", body["download"], timeout=60)
    expect(art.status == 200 and len(art.body) == body["size_bytes"], f"artifact download {art.status}")
    again = request(base, "POST", "/compile", payload, timeout=300)
    expect(again.status == 200, f"second /compile answered {again.status}: {again.body[:300]!r}")
    expect(again.json()["artifact_id"] == body["artifact_id"], "same request, different artifact")
    expect(again.json().get("cache_hit") is True, "second identical /compile was not a cache hit")
    report = body["report"]
    return (
        f"artifact {body['artifact_id']} {body['size_bytes']} bytes, compile {report['compile_ms']:.0f} ms,"
        " then a cache hit"
    )


def chain_module(n: int) -> str:
    """A let-chain of n exp calls: planning it takes seconds, long enough to overlap a stop."""
    lines = ['#[version = "0.0.5"]', "def @main(%x: Tensor[(4), float32]) {"]
    prev = "%x"
    for i in range(n):
        lines.append(f"  %{i} = exp({prev});")
        prev = f"%{i}"
    lines += [f"  {prev}", "}"]
    return "\n".join(lines) + "\n"


def inflight(base: str, out: Path, n: int = 60_000) -> int:
    """Send a slow /plan, mark OUT.sent once the whole request is on the wire, then wait for the answer.

    The caller stops the container after OUT.sent appears; a graceful server still answers this request
    (200 with the full plan) before it exits. OUT gets {status, seconds, expressions, done_at}; done_at
    (Unix time of the answer) lets the caller check the answer came after it sent the stop.
    """
    url = urlsplit(base)
    body = json.dumps({"module": chain_module(n), "timeout_ms": 120_000}).encode()
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=120)
    t0 = time.perf_counter()
    conn.request("POST", "/plan", body=body, headers={"Content-Type": "application/json", **auth_headers()})
    out.with_suffix(".sent").write_text("sent\n")
    result: dict[str, Any] = {}
    try:
        resp = conn.getresponse()
        data = resp.read()
        result["status"] = resp.status
        if resp.status == 200:
            result["expressions"] = sum(json.loads(data)["summary"]["expressions_by_device"].values())
        else:
            result["body"] = data[:300].decode(errors="replace")
    except (OSError, http.client.HTTPException) as err:
        result["status"] = None
        result["error"] = f"{type(err).__name__}: {err}"
    result["seconds"] = round(time.perf_counter() - t0, 2)
    result["done_at"] = time.time()
    result["n"] = n
    out.write_text(json.dumps(result) + "\n")
    return 0


def main(argv: list[str]) -> int:
    if argv[0] == "--inflight":
        return inflight(argv[1].rstrip("/"), Path(argv[2]))
    base, variant = argv[0].rstrip("/"), argv[1]
    check("health", check_health, base)
    check("key", check_key, base)
    check("plan", check_plan, base)
    check("problem", check_problem, base)
    check("docs", check_docs, base)
    check("picture", check_picture, base)
    check("version", check_version, base, variant)
    check("relax", check_relax, base, variant)
    if variant == "full":
        check("attack", check_attack, base)
        check("compile", check_compile, base)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
