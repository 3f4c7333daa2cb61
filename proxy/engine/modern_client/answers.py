"""What a 2026-07-28 client is shown when a legacy upstream answers (the MRTR->legacy bridge).

The mirror of `legacy_client.answers`: a 2026 client reads every result's `resultType`, expects caching
hints on list and read results, knows no `-32002` and no `-32042`, and reads HTTP statuses from one
table. Also here: how a client request is dressed down for a legacy server (its 2026 `_meta` keys
and MRTR fields removed), and the per-request capability gate for in-flight server requests.

Decisions (documented in the engine module too):

- `ttlMs: 0` and `cacheScope: "private"` are added where a 2026 server must send them and the
  legacy upstream could not: a proxy cannot know how long a legacy server's lists stay valid, nor
  whether they differ per caller, so it promises nothing.
- HTTP status of an error reply: the 2026 table (400 for -32700/-32600/-32602/-32020/-32021/-32022,
  404 for -32601) and 200 for every other code, as the SDK servers do; the proxy's own gateway
  faults use -32000 with 502 (upstream failed) or 503 (continuation table full).

Pure functions over JSON values; no commands, no state.
"""

from __future__ import annotations

import copy
from typing import Any, Final

from proxy.engine.modern_client.validation import SUPPORTED_VERSIONS
from proxy.wire import errors
from proxy.wire.capabilities import has_capability, required_capability
from proxy.wire.jsonrpc import RequestId, error_response, result_response
from proxy.wire.mcp import CACHEABLE_METHODS, META_SERVER_INFO, RESULT_COMPLETE, RESULT_INPUT_REQUIRED

DEFAULT_TTL_MS: Final = 0
DEFAULT_CACHE_SCOPE: Final = "private"

MODERN_META_PREFIX: Final = "io.modelcontextprotocol/"
"""`_meta` keys under this prefix are 2026 envelope facts; a legacy server must not see them."""

_MRTR_FIELDS: Final = ("inputResponses", "requestState")

_STATUS: Final[dict[int, int]] = {
    errors.PARSE_ERROR: 400,
    errors.INVALID_REQUEST: 400,
    errors.INVALID_PARAMS: 400,
    errors.HEADER_MISMATCH: 400,
    errors.MISSING_REQUIRED_CLIENT_CAPABILITY: 400,
    errors.UNSUPPORTED_PROTOCOL_VERSION: 400,
    errors.METHOD_NOT_FOUND: 404,
}

_SERVER_CAPABILITIES_DROPPED: Final = ("tasks",)
"""Legacy capability families with no 2026-07-28 core meaning (tasks moved to an extension)."""


def status_for(code: Any) -> int:
    """The HTTP status a 2026 server answers a JSON-RPC error code with (200 when the table is silent)."""
    return _STATUS.get(code, 200) if isinstance(code, int) else 200


def upstream_params(params: dict[str, Any]) -> dict[str, Any]:
    """A client request's params as a legacy server gets them: no MRTR fields, no 2026 `_meta` keys.

    The client's own `_meta` entries (`progressToken`, trace keys) are kept; an emptied `_meta` goes.
    """
    out = {key: value for key, value in params.items() if key not in _MRTR_FIELDS}
    meta = params.get("_meta")
    if isinstance(meta, dict):
        kept = {key: value for key, value in meta.items() if not key.startswith(MODERN_META_PREFIX)}
        if kept:
            out["_meta"] = kept
        else:
            out.pop("_meta", None)
    return out


def complete_result(method: str, result: Any, server_info: Any) -> Any:
    """A legacy result in 2026 dress: `resultType`, caching hints where required, `_meta.serverInfo`."""
    if not isinstance(result, dict):
        return result
    out = dict(result)
    out.setdefault("resultType", RESULT_COMPLETE)
    if method in CACHEABLE_METHODS:
        out.setdefault("ttlMs", DEFAULT_TTL_MS)
        out.setdefault("cacheScope", DEFAULT_CACHE_SCOPE)
    meta = out.get("_meta")
    if server_info is not None and (meta is None or isinstance(meta, dict)):
        meta = dict(meta or {})
        meta.setdefault(META_SERVER_INFO, server_info)
        out["_meta"] = meta
    return out


def modern_server_capabilities(legacy: Any) -> dict[str, Any]:
    """The upstream's InitializeResult capabilities as `server/discover` shows them.

    Legacy `tasks` goes; `resources.subscribe` stays because the bridge emulates it through
    `subscriptions/listen`; unknown families are kept (relay-safe).
    """
    source = legacy if isinstance(legacy, dict) else {}
    return {k: copy.deepcopy(v) for k, v in source.items() if k not in _SERVER_CAPABILITIES_DROPPED}


def discover_result(init: dict[str, Any]) -> dict[str, Any]:
    """`server/discover` answered from the upstream's InitializeResult."""
    result: dict[str, Any] = {
        "resultType": RESULT_COMPLETE,
        "supportedVersions": list(SUPPORTED_VERSIONS),
        "capabilities": modern_server_capabilities(init.get("capabilities")),
    }
    instructions = init.get("instructions")
    if isinstance(instructions, str):
        result["instructions"] = instructions
    result["_meta"] = {META_SERVER_INFO: server_info(init)}
    result["ttlMs"] = DEFAULT_TTL_MS
    result["cacheScope"] = DEFAULT_CACHE_SCOPE
    return result


def server_info(init: dict[str, Any] | None) -> Any:
    """The upstream's `serverInfo` (a fallback identity when it sent none)."""
    info = init.get("serverInfo") if init else None
    return info if isinstance(info, dict) else {"name": "unknown-upstream", "version": "unknown"}


def relayed_error(ident: RequestId, error: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """An upstream JSON-RPC error re-addressed to the client; `-32002` becomes 2026's `-32602`, and the
    retired `-32042` becomes `-32603` (the bridge turns it into a URL round where it can)."""
    code = error.get("code")
    message = error.get("message")
    text = message if isinstance(message, str) else ""
    if code == errors.RESOURCE_NOT_FOUND_LEGACY:
        code = errors.INVALID_PARAMS
    elif code == errors.URL_ELICITATION_REQUIRED:  # retired in 2026-07-28: never on its wire
        code, text = (
            errors.INTERNAL_ERROR,
            f"upstream required a URL elicitation the bridge could not relay: {text}",
        )
    if not isinstance(code, int) or isinstance(code, bool):
        code = errors.INTERNAL_ERROR
    body = error_response(ident, code, text, error.get("data"))
    return status_for(code), body


def gateway_fault(ident: RequestId, method: str, text: str) -> dict[str, Any]:
    """The upstream failed while the client waited: -32000 naming the fault (sent with HTTP 502)."""
    return error_response(
        ident, errors.UPSTREAM_UNAVAILABLE, f"upstream MCP server failed during {method}: {text}"
    )


def input_required(entries: dict[str, Any], token: str, server_info: Any) -> dict[str, Any]:
    """The interim result that parks a call: the questions, the sealed state and `_meta.serverInfo`,
    which a 2026-07-28 server puts in every result, so the client learns whom it talks to from the
    first answer of a call as well as from its `complete` one."""
    return {
        "resultType": RESULT_INPUT_REQUIRED,
        "inputRequests": entries,
        "requestState": token,
        "_meta": {META_SERVER_INFO: server_info},
    }


def as_result(ident: RequestId, result: Any) -> dict[str, Any]:
    """A JSON-RPC result response (re-exported so the bridge builds every answer from one module)."""
    return result_response(ident, result)


# -- the capability gate ----------------------------------------------------------------------------


_NEEDED_SHAPE: Final[dict[str, dict[str, Any]]] = {
    "elicitation.form": {"elicitation": {"form": {}}},
    "elicitation.url": {"elicitation": {"url": {}}},
    "sampling": {"sampling": {}},
    "sampling.tools": {"sampling": {"tools": {}}},
    "sampling.context": {"sampling": {"context": {}}},
    "roots": {"roots": {}},
}
"""ClientCapabilities-shaped `requiredCapabilities` for each capability the gate can ask for."""


def missing_capability(method: str, params: Any, caps: Any) -> str | None:
    """The capability an in-flight request needs that this client request did not declare (None: ok).

    Uses the same table as the legacy->MRTR gate (`capabilities.required_capability`), plus the
    deprecated `sampling.context` for an `includeContext` other than `none`.
    """
    declared = caps if isinstance(caps, dict) else {}
    fields: dict[str, Any] = params if isinstance(params, dict) else {}
    needed = required_capability({"method": method, "params": fields})
    if needed is None:  # not an input method at all; callers only gate the three input kinds
        return None
    if not has_capability(declared, needed):
        return needed
    include = fields.get("includeContext")
    if method == "sampling/createMessage" and include in ("thisServer", "allServers"):
        sampling = declared.get("sampling")
        if not (isinstance(sampling, dict) and "context" in sampling):
            return "sampling.context"
    return None


def required_capabilities(needed: str) -> dict[str, Any]:
    """`data.requiredCapabilities` of a -32021 for one missing capability."""
    return copy.deepcopy(_NEEDED_SHAPE.get(needed, {}))


def missing_capability_error(ident: RequestId, method: str, needed: str) -> dict[str, Any]:
    """-32021 naming what the client must declare for the server's in-flight `method`."""
    text = f"Missing required client capability {needed} (the server sent {method} in flight)"
    return error_response(
        ident,
        errors.MISSING_REQUIRED_CLIENT_CAPABILITY,
        text,
        {"requiredCapabilities": required_capabilities(needed)},
    )
