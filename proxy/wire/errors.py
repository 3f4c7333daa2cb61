"""JSON-RPC and MCP error codes, each named once with the version that defines it."""

from __future__ import annotations

from typing import Any, Final

PARSE_ERROR: Final = -32700
"""JSON-RPC 2.0: the body is not valid JSON."""

INVALID_REQUEST: Final = -32600
"""JSON-RPC 2.0: the JSON is not a valid request object."""

METHOD_NOT_FOUND: Final = -32601
"""JSON-RPC 2.0: no such method (2026-07-28 pairs it with HTTP 404 for removed methods)."""

INVALID_PARAMS: Final = -32602
"""JSON-RPC 2.0: bad params; MCP uses it for missing `_meta` and bad `requestState`."""

INTERNAL_ERROR: Final = -32603
"""JSON-RPC 2.0: internal error; the legacy shims use it when a bridged round cannot complete."""

UPSTREAM_UNAVAILABLE: Final = -32000
"""Implementation-defined (-32000..-32019): the proxy could not reach or hear from the upstream."""

RESOURCE_NOT_FOUND_LEGACY: Final = -32002
"""2025-era resource-not-found code; 2026-07-28 uses -32602 instead."""

HEADER_MISMATCH: Final = -32020
"""2026-07-28 (SEP-2243): an `Mcp-*` header is missing or disagrees with the body."""

MISSING_REQUIRED_CLIENT_CAPABILITY: Final = -32021
"""2026-07-28: the server needs a client capability the request did not declare."""

UNSUPPORTED_PROTOCOL_VERSION: Final = -32022
"""2026-07-28: the requested protocol version is not served here."""

URL_ELICITATION_REQUIRED: Final = -32042
"""2025-11-25 only: URL elicitation must complete first; retired in 2026-07-28."""

INVALID_STATE_MESSAGE: Final = "Invalid or expired requestState"
"""2026-07-28 SDK practice: the one text of a -32602 that refuses a retry's `requestState`."""

INVALID_STATE_REASON: Final = "invalid_request_state"
"""2026-07-28 SDK practice (TypeScript, and this proxy's bridge): `data.reason` of that -32602."""

INVALID_ANSWERS_REASON: Final = "invalid_input_responses"
"""This proxy's MRTR->legacy bridge: `data.reason` of the -32602 that refuses a retry whose answer is no
result of its question (the call stays parked for a good retry)."""


def refuses_request_state(error: Any) -> bool:
    """Whether a JSON-RPC error object is a server's refusal of the `requestState` it was sent.

    Such a refusal touches nothing on the server: the call the token names still waits for a good
    retry. The SDKs say so by `data.reason` (TypeScript) or by the message alone (Python, Ruby).
    """
    if not isinstance(error, dict) or error.get("code") != INVALID_PARAMS:
        return False
    data, message = error.get("data"), error.get("message")
    if isinstance(data, dict) and data.get("reason") == INVALID_STATE_REASON:
        return True
    return isinstance(message, str) and "requeststate" in message.lower()


def refuses_retry(error: Any) -> bool:
    """Whether a JSON-RPC error refuses an MRTR retry while the call it retries still waits: its
    `requestState` refused, or (this proxy's bridge) an answer that is no result of its question."""
    if refuses_request_state(error):
        return True
    data = error.get("data") if isinstance(error, dict) and error.get("code") == INVALID_PARAMS else None
    return isinstance(data, dict) and data.get("reason") == INVALID_ANSWERS_REASON
