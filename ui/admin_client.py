"""The HTTP client of a proxy's admin API: on this machine's loopback, never through a forward proxy.

httpx takes `HTTP_PROXY`, `HTTPS_PROXY` and `ALL_PROXY` from the environment, which a user's shell
sets for the outside world. A forward proxy cannot reach this machine's loopback (at best its own),
and every admin request carries the admin token in clear: so an admin URL on the loopback
(127.0.0.0/8, ::1, `localhost`) is reached directly, as a `NO_PROXY` entry for its host would make
it. Any other host keeps httpx's handling of the environment (an admin API on another machine may
well be reached through the forward proxy). Stdlib and httpx only.
"""

from __future__ import annotations

import ipaddress
from typing import Any

import httpx


def admin_client(url: str, **options: Any) -> httpx.AsyncClient:
    """An `httpx.AsyncClient` (with `options`) for the admin API at `url`, direct when it is local."""
    return httpx.AsyncClient(mounts=direct_mounts(url), **options)


def direct_mounts(url: str) -> dict[str, httpx.AsyncBaseTransport | None]:
    """The mount that keeps requests to `url`'s host off any environment proxy, when the host is the
    loopback: no transport of its own (the client's default), matched before the environment's."""
    host = httpx.URL(url).host
    if not is_loopback(host):
        return {}
    return {f"all://[{host}]" if ":" in host else f"all://{host}": None}


def is_loopback(host: str) -> bool:
    """Whether `host` (a name, or an address without brackets) names this machine only."""
    if host.lower() in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
