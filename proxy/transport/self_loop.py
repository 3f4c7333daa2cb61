"""Refusing an upstream that is the proxy's own listener: every request would come back to the proxy.

`--listen 127.0.0.1:8080 --upstream http://127.0.0.1:8080/mcp` is an easy slip (the two ports look
alike). Served, one request turns into thousands of connections to itself, and the era probe waits
on itself for `upstream_timeout`. The check compares the upstream's host and port with the address
the front bound, without resolving names (no DNS at start): the same host, both loopback, or a
loopback upstream under a listener on every interface.
"""

from __future__ import annotations

from proxy.framing.http import Upstream, is_loopback

_WILDCARDS = frozenset({"", "0.0.0.0", "::"})


class UpstreamIsThisProxy(OSError):
    """The upstream URL names the proxy's own MCP listener (a start refused, as a bind failure is)."""


def upstream_is_listener(upstream: Upstream, host: str, port: int) -> bool:
    """Would requests to `upstream` reach the listener bound at `host`:`port`?"""
    if upstream.scheme == "stdio" or upstream.port != port:
        return False
    target, own = upstream.host.strip("[]").lower(), host.strip("[]").lower()
    if target == own:
        return True
    return is_loopback(target) and (own in _WILDCARDS or is_loopback(own))


def loop_refusal(upstream: Upstream, listen: str) -> UpstreamIsThisProxy:
    """The start refusal that says why, and what to change."""
    return UpstreamIsThisProxy(
        f"upstream ({upstream.origin}) is this proxy's own listener (listen {listen}): every request "
        "would come back to the proxy. Point --upstream at the MCP server's address, or move the "
        "proxy with --listen HOST:PORT"
    )
