"""Optional API keys: bearer tokens checked in the middleware, before a body is read.

Off unless `DEVPLAN_API_KEYS` (or `DEVPLAN_COMPILE_API_KEYS`) is set. Then every
route needs `Authorization: Bearer <key>` except the public ones: health probes,
the docs and schema, static pages (their own API calls carry the key) and
`/metrics` unless `DEVPLAN_METRICS_REQUIRE_KEY=1`. `/compile` and `/artifacts`
take the compile keys when those are set, the API keys otherwise. Tokens are
compared with `hmac.compare_digest` against every configured key, so the time
taken does not depend on where a guess first differs nor on which key matched.

No open service by accident (`serve_refusal`, docs/security.md): `devplan
serve` on an address other than loopback (127.0.0.0/8, ::1, `localhost`)
needs `DEVPLAN_API_KEYS`, since compile keys alone leave `/plan` open, unless
`DEVPLAN_ALLOW_ANONYMOUS=1` says that is meant.
"""

from __future__ import annotations

import hmac
import ipaddress
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from service.config import Settings

SCHEME_NAME = "bearerAuth"

# Paths that never need a key (exact) and prefixes of static pages.
PUBLIC_PATHS = frozenset(
    {"/healthz", "/readyz", "/docs", "/docs/oauth2-redirect", "/openapi.json", "/explore", "/explore/"}
)
COMPILE_PREFIXES = ("/compile", "/artifacts", "/jobs")


def is_loopback(host: str) -> bool:
    """`host` only reaches this machine: `localhost`, 127.0.0.0/8, ::1 (an
    IPv4-mapped ::ffff:127.x too). Any other name or address may be reachable."""
    name = host.strip().strip("[]").rstrip(".").lower()
    if name == "localhost":
        return True
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback


def serve_refusal(settings: Settings) -> str | None:
    """Why `devplan serve` must not start with these settings, or None: a
    non-loopback bind address without API keys and without the opt-out."""
    if is_loopback(settings.host) or settings.allow_anonymous:
        return None
    if _split_keys(settings.api_keys.get_secret_value()):
        return None
    compile_only = (
        " (DEVPLAN_COMPILE_API_KEYS alone does not count: it leaves /plan open)"
        if _split_keys(settings.compile_api_keys.get_secret_value())
        else ""
    )
    return (
        f"refusing to serve on {settings.host!r}, which is not a loopback address, without API keys: "
        f"anyone who can reach the port could use the service. Set DEVPLAN_API_KEYS=<key>[,<key>...]"
        f"{compile_only}, bind 127.0.0.1, or set DEVPLAN_ALLOW_ANONYMOUS=1 to serve without keys anyway"
    )


def _split_keys(value: str) -> tuple[bytes, ...]:
    return tuple(k.strip().encode() for k in value.split(",") if k.strip())


def _matches(token: bytes, keys: tuple[bytes, ...]) -> bool:
    """Constant-time membership: every key is compared, no early exit."""
    found = False
    for key in keys:
        found |= hmac.compare_digest(token, key)
    return found


@dataclass(frozen=True, slots=True)
class AccessPolicy:
    """Which keys open which paths; `enabled` is False when no key is configured."""

    api_keys: tuple[bytes, ...]
    compile_keys: tuple[bytes, ...]
    metrics_require_key: bool
    static_prefixes: tuple[str, ...]

    @classmethod
    def from_settings(cls, settings: Settings, static_prefixes: tuple[str, ...] = ()) -> AccessPolicy:
        return cls(
            api_keys=_split_keys(settings.api_keys.get_secret_value()),
            compile_keys=_split_keys(settings.compile_api_keys.get_secret_value()),
            metrics_require_key=settings.metrics_require_key,
            static_prefixes=tuple(p.rstrip("/") + "/" for p in static_prefixes),
        )

    @property
    def enabled(self) -> bool:
        return bool(self.api_keys or self.compile_keys)

    def keys_for(self, path: str) -> tuple[bytes, ...] | None:
        """The keys that open `path`; None when it is public."""
        if not self.enabled or path in PUBLIC_PATHS:
            return None
        if path == "/metrics" and not self.metrics_require_key:
            return None
        if any(path.startswith(prefix) for prefix in self.static_prefixes):
            return None
        is_compile = any(path == p or path.startswith(p + "/") for p in COMPILE_PREFIXES)
        if is_compile and self.compile_keys:
            return self.compile_keys
        # With only compile keys configured, the rest of the API stays open.
        return self.api_keys or None

    def allows(self, path: str, authorization: str | None) -> bool:
        """Whether a request for `path` with this Authorization header may proceed."""
        keys = self.keys_for(path)
        if keys is None:
            return True
        token = bearer_token(authorization)
        return token is not None and _matches(token, keys)


# Paths a keyless loopback server answers whatever the Host: health probes (they change nothing
# and cost nothing, and some probes send odd Host headers).
HOST_EXEMPT_PATHS = frozenset({"/healthz", "/readyz"})


def _host_name(authority: str) -> str:
    """The host of a `Host` header value (`name`, `name:port`, `[v6]:port`), lower case."""
    authority = authority.strip().lower()
    if authority.startswith("["):
        return authority[1:].partition("]")[0]
    if authority.count(":") == 1:
        return authority.partition(":")[0]
    return authority  # a bare name, or a bare IPv6 address


@dataclass(frozen=True, slots=True)
class HostGuard:
    """A keyless server on loopback is not a drive-by target (DNS rebinding, cross-site forms).

    Such a server answers only requests whose `Host` names it: a loopback address, `localhost`,
    the configured bind host, or a name in DEVPLAN_ALLOWED_HOSTS (otherwise 421). A request that
    carries an `Origin` (a web page sent it) must come from a page of this server (a loopback
    name on this port) or of an allowed name (any port), else 403; health probes are exempt
    and static pages and docs are only read. Servers with API keys skip both checks: a page
    cannot attach a key across origins, and proxies that rewrite `Host` keep working.
    """

    names: frozenset[str]  # DEVPLAN_ALLOWED_HOSTS
    bound: str  # the bind host (DEVPLAN_HOST)

    @classmethod
    def from_settings(cls, settings: Settings) -> HostGuard:
        extra = {n.strip().lower().rstrip(".") for n in settings.allowed_hosts.split(",") if n.strip()}
        return cls(frozenset(extra), _host_name(settings.host).rstrip("."))

    def _own(self, name: str) -> bool:
        """A name of this machine's loopback interface: where this server listens."""
        return is_loopback(name) or name == self.bound

    @staticmethod
    def applies(server: Any) -> bool:
        """Whether the connection came in on a loopback address (uvicorn's `scope["server"]`)."""
        return isinstance(server, (tuple, list)) and len(server) == 2 and is_loopback(str(server[0]))

    def host_refusal(self, host: str | None) -> str | None:
        """Why a request with this `Host` header is refused, or None."""
        if host is None:
            return None  # HTTP/1.0 without Host: no browser sends that
        name = _host_name(host).rstrip(".")
        if self._own(name) or name in self.names:
            return None
        return (
            f"this server has no API keys and answers only to its own names (loopback addresses, localhost"
            f"{', ' + ', '.join(sorted(self.names)) if self.names else ''}), not to Host {host[:200]!r}; "
            "add the name to DEVPLAN_ALLOWED_HOSTS, or set API keys"
        )

    def origin_refusal(self, origin: str | None, port: int) -> str | None:
        """Why a request sent by a web page of `origin` is refused, or None (no Origin: not a page)."""
        if origin is None:
            return None
        try:
            parts = urlsplit(origin.strip())
            name = (parts.hostname or "").lower().rstrip(".")
            origin_port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError:
            name, origin_port = "", 0
        if name and (name in self.names or (self._own(name) and origin_port == port)):
            return None
        return (
            f"this server has no API keys and takes costly or state-changing requests only from its own "
            f"pages, not from a page of {origin[:200]!r}; add its host to DEVPLAN_ALLOWED_HOSTS, or set API keys"
        )


def bearer_token(authorization: str | None) -> bytes | None:
    """The token of an `Authorization: Bearer <token>` header (scheme case-insensitive)."""
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return None
    return token.encode("latin-1")


def add_security_scheme(schema: dict[str, Any]) -> None:
    """Declare the HTTP bearer scheme in an OpenAPI document so Swagger UI offers "Authorize".

    Operations on public paths get `security: []`; the others accept the bearer
    scheme or nothing (`{}`), since keys are optional and off by default, and
    document the 401 problem.
    """
    schemes = schema.setdefault("components", {}).setdefault("securitySchemes", {})
    schemes[SCHEME_NAME] = {
        "type": "http",
        "scheme": "bearer",
        "description": "An API key (`DEVPLAN_API_KEYS`, or `DEVPLAN_COMPILE_API_KEYS` for /compile and "
        "/artifacts). Needed only when the server sets keys; 401 `unauthorized` otherwise.",
    }
    for path, item in schema.get("paths", {}).items():
        public = path in PUBLIC_PATHS
        for operation in item.values():
            if not isinstance(operation, dict):
                continue
            operation["security"] = [] if public else [{SCHEME_NAME: []}, {}]
            if not public:
                operation.setdefault("responses", {}).setdefault("401", _unauthorized_response())


def _unauthorized_response() -> dict[str, Any]:
    """A fresh OpenAPI response object for 401 (fresh, so the YAML has no shared anchors)."""
    return {
        "description": "A valid API key is required (`https://devplan.dev/problems/unauthorized`); "
        "only when the server sets keys",
        "content": {"application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}},
    }
