"""The admin API's defences against web pages: the `Host`, `Origin` and `Content-Type` a request carries.

A page open in the developer's browser can reach an admin API on loopback. A cross-site "simple"
POST (`text/plain`, no preflight) reaches it blind, and DNS rebinding points the page's own name at
127.0.0.1 so the page reads the answers. The browser sets what this guard checks and the page cannot
change it: `Host` is the page's own name (not a loopback name) under rebinding, `Origin` names the
page on every cross-site POST, fetch and feed (`EventSource`), and a body the page may send without a
preflight is never `application/json`. So a request is refused when

- its `Host` is not a loopback name or address, nor the host the admin API is bound to, while the
  admin API has no token (with a token, the token is the defence: a page cannot know it, and a
  sidecar is reached by whatever name its network gives it);
- it carries an `Origin` that is not the admin API's own (`http://` or `https://` and the `Host` the
  request names): clients that are no browser (curl, the TUI, Prometheus) send none;
- it changes state with a body that is not `Content-Type: application/json`, on a path and method
  that take one (a method the path does not take is 405 first, naming the methods it takes).

`/healthz` and `/readyz` are left alone, as the token guard leaves them: probes name the pod by its
address and those answers hold status only.

The token itself is judged here too (`token_refusal`). Each refusal is logged and counted by why
(`proxy.transport.admin_refusals`): someone probing the admin port, or a page trying it, is what
on-call wants to see.
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Awaitable, Callable
from urllib.parse import urlsplit

from aiohttp import web
from aiohttp.typedefs import Middleware

from proxy.transport.admin_refusals import Refusal
from proxy.transport.health import OPEN_PATHS

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
"""Methods that change state: their body must be JSON (a browser sends no JSON cross-site unasked)."""

JSON_TYPE = "application/json"


def is_loopback(host: str) -> bool:
    """Whether a host (a name, an address, or an address in brackets) names this machine only."""
    if host.lower() in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def browser_guard(*, has_token: bool, bound_host: Callable[[], str]) -> Middleware:
    """The middleware that refuses what a web page could send: a foreign `Host` (without a token), a
    foreign `Origin`, a body that changes state and is not JSON.

    `bound_host` is read when a request comes: the admin API binds after its app is made.
    """

    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path in OPEN_PATHS:
            return await handler(request)
        refusal = refusal_of(request, has_token=has_token, bound_host=bound_host())
        return refusal if refusal is not None else await handler(request)

    return guard


def refusal_of(request: web.Request, *, has_token: bool, bound_host: str) -> web.Response | None:
    """The 403 or 415 a request gets from the guard, naming why; None when it may go on."""
    host = request.headers.get("Host", "")
    if not has_token and not _host_allowed(host, bound_host):
        return _refused(
            403,
            "foreign_host",
            f"Host {host!r} is not this admin API's: without a token it answers only requests to a "
            "loopback name or address (localhost, 127.0.0.1, [::1]), which a web page cannot send "
            "(DNS rebinding); set --admin-token (MCP_PROXY_ADMIN_TOKEN) to reach it by another name",
        )
    origin = request.headers.get("Origin")
    if origin is not None and not _own_origin(origin, host):
        return _refused(
            403,
            "foreign_origin",
            f"Origin {origin!r} is not this admin API's (http://{host}): requests from web pages are "
            "refused; clients that are no browser send no Origin",
        )
    if _writes_a_body(request) and _routed(request) and request.content_type != JSON_TYPE:
        return _refused(
            415,
            "not_json",
            f"{request.method} {request.path} takes a JSON body: send Content-Type: {JSON_TYPE} "
            f"(got {request.headers.get('Content-Type') or 'none'})",
        )
    return None


def _host_allowed(host: str, bound_host: str) -> bool:
    try:
        name = urlsplit(f"//{host}").hostname
    except ValueError:
        return False
    if not name:
        return False
    return is_loopback(name) or name == bound_host.strip("[]").lower()


def _own_origin(origin: str, host: str) -> bool:
    scheme, sep, authority = origin.lower().partition("://")
    return bool(sep) and scheme in ("http", "https") and bool(host) and authority == host.lower()


def _routed(request: web.Request) -> bool:
    """Whether a handler takes the request: a path unknown or a method the path does not take is
    answered 404 or 405 (with `Allow`) before its body's type is judged, as what to fix first."""
    return request.match_info.http_exception is None


def _writes_a_body(request: web.Request) -> bool:
    return request.method in WRITE_METHODS and (request.method != "DELETE" or request.body_exists)


_ERRORS = {403: "forbidden", 415: "unsupported_media_type"}


def _refused(status: int, why: str, message: str) -> web.Response:
    """The JSON refusal, carrying `why` so the admin API logs and counts it (`admin_refusals`)."""
    return Refusal(status, _ERRORS[status], why, message)


def token_refusal(header: str | None, token: str) -> str | None:
    """Why an `Authorization` header does not carry the admin token (`UNAUTHORIZED_WHYS`); None when it
    does. The token given is compared in constant time and never returned."""
    if header is None or not header.strip():
        return "missing"
    scheme, _, given = header.strip().partition(" ")
    if scheme.lower() != "bearer":
        return "not_bearer"
    return None if hmac.compare_digest(given.strip().encode(), token.encode()) else "wrong_token"
