"""What the proxy says of bytes its HTTP/1.1 reader refuses: a warning and a count per cause.

Such a refusal (400, 431, 501, 505, then the connection closes) comes before any exchange exists,
so no exchange line or chain records it: without this, a client that cannot reach the proxy leaves
no trace in its log or `/metrics`. The most common case is a client given `https://` for the
proxy's plain-HTTP port: its TLS handshake reads as a malformed request, and its first bytes say so,
so the line says what to change. A flood of them is one line a second per cause (the lines counting
the ones held back, `proxy.engine.flood_lines`), while `/metrics` counts every one. Only refusals
come here: a request read whole never does.
"""

from __future__ import annotations

from proxy.logs import get_logger

TLS_HANDSHAKE = b"\x16\x03"
"""How every TLS connection opens (SSL 3.0 to TLS 1.3): a handshake record (type 22), version 3.x."""

TLS_HINT = (
    "a client spoke TLS to this plain-HTTP port: give it http://... (not https://), "
    "or put TLS in front of the proxy"
)

CAUSES = ("tls_handshake", "malformed", "head_too_large", "not_implemented", "http_version")
"""Every cause counted (`mcp_proxy_client_requests_unreadable_total{cause}`), each there from the start."""

_BY_STATUS = {400: "malformed", 431: "head_too_large", 501: "not_implemented", 505: "http_version"}

REASON_SHOWN = 200
"""Characters of the refusal's reason a line keeps: a reason may quote what the client sent (an
unknown transfer coding), and one client must not make a long line."""


def cause_of(status: int, read: bytes) -> str:
    """The cause a refusal is counted and logged under; `read` is the read the reader refused."""
    if status == 400 and read.startswith(TLS_HANDSHAKE):
        return "tls_handshake"
    return _BY_STATUS.get(status, "malformed")


def log_unreadable(peer: str, status: int, reason: str, cause: str, also_unlogged: int) -> None:
    """The warning for one refusal (the caller has decided it is due, and counted it)."""
    shown = reason if len(reason) <= REASON_SHOWN else reason[:REASON_SHOWN] + "..."
    fields: dict[str, object] = {"peer": peer, "status": status, "cause": cause, "reason": shown}
    if cause == "tls_handshake":
        fields["hint"] = TLS_HINT
    if also_unlogged:
        fields["also_unlogged"] = also_unlogged
    get_logger().warning("client_request_unreadable", **fields)
