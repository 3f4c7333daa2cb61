"""The variables Kubernetes puts in every pod for a Service named `mcp-proxy` or `mcp-proxy-*`.

They share the proxy's `MCP_PROXY_` prefix without being its settings, so they are passed over
rather than refused as misspelt ones, which would stop a sidecar from starting beside the Service
that fronts it. Each is recognised by its name and by the shape of its value, as the kubelet writes
both: `MCP_PROXY_PORT=9000` has a link's name but a number for a value, so it is a user's guess at a
setting, not a link, and is refused by name. Pure: stdlib only.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable
from typing import Final
from urllib.parse import urlsplit

_SERVICE: Final = r"MCP_PROXY_(?:[A-Z0-9_]+_)?"
_PROTOCOLS: Final = ("tcp", "udp", "sctp")


def _is_ip(value: str) -> bool:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return True


def _is_port(value: str) -> bool:
    return value.isascii() and value.isdigit() and 0 < int(value) <= 65535


def _is_link_url(value: str) -> bool:
    """`tcp://10.96.0.12:8080` (IPv6 in brackets), the kubelet's `<protocol>://<cluster IP>:<port>`."""
    parts = urlsplit(value)
    try:
        port = parts.port
    except ValueError:
        return False
    return (
        parts.scheme in _PROTOCOLS
        and parts.hostname is not None
        and _is_ip(parts.hostname)
        and port is not None
        and value == f"{parts.scheme}://{parts.netloc}"
    )


_SHAPES: Final[tuple[tuple[re.Pattern[str], Callable[[str], bool]], ...]] = (
    (re.compile(_SERVICE + r"SERVICE_HOST"), _is_ip),
    (re.compile(_SERVICE + r"SERVICE_PORT(?:_[A-Z0-9_]+)?"), _is_port),
    (re.compile(_SERVICE + r"PORT(?:_[0-9]+_(?:TCP|UDP|SCTP))?"), _is_link_url),
    (re.compile(_SERVICE + r"PORT_[0-9]+_(?:TCP|UDP|SCTP)_PROTO"), lambda value: value in _PROTOCOLS),
    (re.compile(_SERVICE + r"PORT_[0-9]+_(?:TCP|UDP|SCTP)_PORT"), _is_port),
    (re.compile(_SERVICE + r"PORT_[0-9]+_(?:TCP|UDP|SCTP)_ADDR"), _is_ip),
)
"""Each link variable's name, with the shape the kubelet gives its value."""


def is_service_link(var: str, value: str) -> bool:
    """Whether `var=value` is one a Kubernetes Service link sets: its name and its value both fit."""
    return any(name.fullmatch(var) and fits(value) for name, fits in _SHAPES)
