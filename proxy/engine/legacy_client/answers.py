"""What a legacy client is shown when a 2026-07-28 upstream answers: results, errors and failures.

A 2025-era client must never read a 2026-only error code (`-32020/-32021/-32022`, which it would
misreport) nor a 2026-only result field; and when the bridge itself cannot finish a call it fails
it the way the SDKs' legacy fulfillment shims do, so clients see the same thing whether the server
runs a shim or sits behind this proxy.

Pure functions over JSON values; no commands, no state.
"""

from __future__ import annotations

import hashlib
from typing import Any, Final

from proxy.wire import errors
from proxy.wire.jsonrpc import RequestId, error_response, result_response

MODERN_RESULT_KEYS: Final[tuple[str, ...]] = ("resultType", "ttlMs", "cacheScope")
"""2026-only result fields stripped before a result reaches a legacy client (the chain keeps them)."""


def legacy_result(result: Any) -> Any:
    """A complete upstream result as a legacy client expects it (2026-only fields removed)."""
    if not isinstance(result, dict):
        return result
    return {key: value for key, value in result.items() if key not in MODERN_RESULT_KEYS}


def call_failure(method: str, ident: RequestId, text: str) -> dict[str, Any]:
    """Fail a bridged call like the shims: a tool error result for tools/call, -32603 otherwise.

    A tool result with `isError` lets the model read what went wrong; prompts and resources have no
    such channel, so they get a JSON-RPC error.
    """
    if method == "tools/call":
        return result_response(ident, {"content": [{"type": "text", "text": text}], "isError": True})
    return error_response(ident, errors.INTERNAL_ERROR, text)


def upstream_fault(ident: RequestId, method: str, text: str) -> dict[str, Any]:
    """A transport-level fault of the upstream during a call (always JSON-RPC -32603)."""
    return error_response(ident, errors.INTERNAL_ERROR, f"upstream MCP server failed during {method}: {text}")


def legacy_failure(
    method: str, ident: RequestId, error: dict[str, Any], *, sent_state: bool
) -> dict[str, Any]:
    """An upstream error for a legacy client; a missing capability fails the call like the shims do."""
    if error.get("code") == errors.MISSING_REQUIRED_CLIENT_CAPABILITY:
        text = _translated(error, sent_state=False)
        return call_failure(method, ident, text or "missing client capability")
    return legacy_error(ident, error, sent_state=sent_state)


def legacy_error(ident: RequestId, error: dict[str, Any], *, sent_state: bool) -> dict[str, Any]:
    """An upstream JSON-RPC error re-addressed to the client, with 2026-only codes translated.

    Codes a legacy client understands pass unchanged (including -32601, which the caller sends with
    HTTP 200: HTTP 404 would tell a legacy client its session is gone).
    """
    code = error.get("code")
    message = str(error.get("message", ""))
    data = error.get("data")
    translated = _translated(error, sent_state=sent_state)
    if translated is not None:
        return error_response(ident, errors.INTERNAL_ERROR, translated)
    return error_response(ident, code if isinstance(code, int) else errors.INTERNAL_ERROR, message, data)


def _translated(error: dict[str, Any], *, sent_state: bool) -> str | None:
    """The -32603 message replacing a code a legacy client must not see (None: keep the error)."""
    code, message, data = error.get("code"), str(error.get("message", "")), error.get("data")
    if code == errors.HEADER_MISMATCH:
        return f"upstream rejected the bridged request's Mcp-* headers: {message}"
    if code == errors.MISSING_REQUIRED_CLIENT_CAPABILITY:
        needed = ", ".join(_dotted(_field(data, "requiredCapabilities"))) or "unspecified"
        return f"upstream needs client capability {needed}, which the client did not declare: {message}"
    if code == errors.UNSUPPORTED_PROTOCOL_VERSION:
        supported = _field(data, "supported")
        return f"upstream does not accept protocol 2026-07-28 (it supports {supported}): {message}"
    if sent_state and errors.refuses_request_state(error):
        return f"upstream rejected the echoed requestState, so the call cannot resume: {message}"
    return None


def state_fingerprint(state: str | None) -> dict[str, Any] | None:
    """Length and SHA-256 prefix of a `requestState`: recognisable across rounds, never readable."""
    if state is None:
        return None
    return {"length": len(state), "sha256": hashlib.sha256(state.encode("utf-8")).hexdigest()[:8]}


def _field(data: Any, name: str) -> Any:
    return data.get(name) if isinstance(data, dict) else None


def _dotted(caps: Any, prefix: str = "") -> list[str]:
    """`{"elicitation": {"url": {}}, "sampling": {}}` -> `["elicitation.url", "sampling"]`."""
    if not isinstance(caps, dict):
        return []
    names: list[str] = []
    for key, value in caps.items():
        inner = _dotted(value, f"{prefix}{key}.")
        names.extend(inner or [f"{prefix}{key}"])
    return names
