"""The one table from JSON-RPC error codes to HTTP statuses, and the proxy's own error bodies."""

from __future__ import annotations

from typing import Any, Final

from proxy.wire import errors
from proxy.wire.jsonrpc import RequestId, error_response

HTTP_STATUS_FOR_CODE: Final[dict[int, int]] = {
    errors.PARSE_ERROR: 400,
    errors.INVALID_REQUEST: 400,
    errors.INVALID_PARAMS: 400,
    errors.METHOD_NOT_FOUND: 404,
    errors.HEADER_MISMATCH: 400,
    errors.MISSING_REQUIRED_CLIENT_CAPABILITY: 400,
    errors.UNSUPPORTED_PROTOCOL_VERSION: 400,
    errors.INTERNAL_ERROR: 500,
}
"""2026-07-28 Streamable HTTP status per error code; anything else the proxy answers itself is 500."""


def http_status_for(code: int) -> int:
    """The HTTP status a modern server uses for a JSON-RPC error code it answers with."""
    return HTTP_STATUS_FOR_CODE.get(code, 500)


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
