"""The proxy's own error bodies: gateway errors and size refusals carrying the request id."""

from __future__ import annotations

from typing import Any

from proxy.wire import errors
from proxy.wire.jsonrpc import RequestId, error_response


def gateway_error(
    status: int, ident: RequestId | None, message: str, data: Any = None
) -> tuple[int, dict[str, Any]]:
    """A proxy-made error reply (413, 502, 504): HTTP status + JSON-RPC error carrying the request id."""
    return status, error_response(
        ident, errors.UPSTREAM_UNAVAILABLE if status >= 500 else errors.INVALID_REQUEST, message, data
    )


def too_large(limit: int, ident: RequestId | None = None) -> tuple[int, dict[str, Any]]:
    """413 for a body over the configured limit, naming the limit so the user knows what to raise."""
    return gateway_error(
        413,
        ident,
        f"request body exceeds the proxy's limit of {limit} bytes (max_body_bytes)",
        {"limit": limit, "setting": "max_body_bytes"},
    )
