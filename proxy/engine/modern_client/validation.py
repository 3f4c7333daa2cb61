"""Checks a 2026-07-28 server runs on every request, for the bridge that plays one (MRTR->legacy).

A 2026 client learns about its own mistakes from these answers (a `-32020` makes SDK clients
refresh `tools/list`; a `-32022` makes them renegotiate), so the bridge answers exactly as a 2026
server would, in the order the Python SDK's validation ladder uses (first failure wins):

1. routing headers (`MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`) sent more than once -> -32020;
2. `params._meta` with the required envelope keys -> else -32602;
3. headers agree with the body (version, method, name/uri) -> else -32020;
4. the version is a string and one this bridge serves -> else -32602 / -32022 with
   `data: {supported, requested}` (2026-07-28's layout: the versions `server/discover` lists, and
   the version asked for, echoed as sent);
5. `Mcp-Param-*` headers agree with the tool arguments they mirror, and a mirrored argument the
   body carries has its header -> else -32020;
6. only then does the method matter: ones 2026-07-28 removed get HTTP 404 with -32601.

`Mcp-Param-*` checking needs to know which argument a header mirrors; that comes from the
`x-mcp-header` annotations in `tools/list` results the bridge relayed (`ToolHeaders`). A header
that maps to no known argument cannot be checked and is accepted (the legacy upstream never sees
these headers anyway). Pure functions; no commands, no state beyond that cache.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

from proxy.engine.tool_headers import ToolHeaders
from proxy.framing.http import header
from proxy.wire import errors
from proxy.wire.headers import METHOD, NAME, PARAM_PREFIX, PROTOCOL_VERSION, decode_param_value
from proxy.wire.jsonrpc import RequestId, error_response
from proxy.wire.mcp import (
    LEGACY_ONLY_METHODS,
    META_CLIENT_CAPABILITIES,
    META_PROTOCOL_VERSION,
    request_meta,
    target_name,
)
from proxy.wire.versions import MODERN_VERSIONS

SUPPORTED_VERSIONS: Final[tuple[str, ...]] = MODERN_VERSIONS
"""What the bridge serves toward the client: the one list behind `server/discover`'s
`supportedVersions` and a -32022's `data.supported`, so a client that renegotiates from the error
picks a version discovery also offers."""

_ROUTING: Final = frozenset(h.lower() for h in (PROTOCOL_VERSION, METHOD, NAME))


@dataclass(frozen=True, slots=True)
class Refusal:
    """A request the bridge answers itself with an error: HTTP status plus JSON-RPC error fields."""

    status: int
    code: int
    message: str
    data: Any = None

    def body(self, ident: RequestId | None) -> dict[str, Any]:
        """The JSON-RPC error response for the refused request."""
        return error_response(ident, self.code, self.message, self.data)


def _mismatch(text: str) -> Refusal:
    return Refusal(400, errors.HEADER_MISMATCH, text)


def validate(
    method: str, params: dict[str, Any], headers: Iterable[tuple[str, str]], tools: ToolHeaders
) -> Refusal | None:
    """Run the 2026-07-28 request ladder; None when the request may be served."""
    items = tuple(headers)
    return (
        _duplicated(items)
        or _envelope(params)
        or _headers_match(method, params, items)
        or _version(request_meta(params).get(META_PROTOCOL_VERSION))
        or _param_headers(method, params, items, tools)
    )


def removed(method: str) -> Refusal | None:
    """Methods 2026-07-28 removed (`initialize`, `ping`, ...): HTTP 404 with -32601, as a 2026 server."""
    if method in LEGACY_ONLY_METHODS:
        return Refusal(404, errors.METHOD_NOT_FOUND, f"Method not found: {method}")
    return None


def _duplicated(headers: tuple[tuple[str, str], ...]) -> Refusal | None:
    seen: set[str] = set()
    for name, _ in headers:
        key = name.lower()
        if key in _ROUTING:
            if key in seen:
                return _mismatch(f"{name} header appears more than once")
            seen.add(key)
    return None


def _envelope(params: dict[str, Any]) -> Refusal | None:
    meta = params.get("_meta")
    if not isinstance(meta, dict):
        text = (
            f"params._meta must be an object carrying the required {META_PROTOCOL_VERSION!r} "
            f"and {META_CLIENT_CAPABILITIES!r} envelope keys"
        )
        return Refusal(400, errors.INVALID_PARAMS, text)
    missing = [key for key in (META_PROTOCOL_VERSION, META_CLIENT_CAPABILITIES) if key not in meta]
    if missing:
        text = f"params._meta is missing the required envelope key(s): {', '.join(missing)}"
        return Refusal(400, errors.INVALID_PARAMS, text)
    return None


def _headers_match(
    method: str, params: dict[str, Any], headers: tuple[tuple[str, str], ...]
) -> Refusal | None:
    version = header(headers, PROTOCOL_VERSION)
    if version is None or version != request_meta(params).get(META_PROTOCOL_VERSION):
        return _mismatch(f"{PROTOCOL_VERSION} header does not match the request envelope's protocol version")
    if header(headers, METHOD) != method:
        return _mismatch(f"{METHOD} header does not match the request body's method")
    name = target_name(method, params) if method in ("tools/call", "prompts/get", "resources/read") else None
    if name is not None and _decoded(header(headers, NAME)) != name:
        field_name = "uri" if method == "resources/read" else "name"
        return _mismatch(f"{NAME} header does not match the request body's {field_name!r} parameter")
    return None


def _version(version: Any) -> Refusal | None:
    if not isinstance(version, str):
        return Refusal(400, errors.INVALID_PARAMS, "the protocol-version envelope value must be a string")
    if version not in SUPPORTED_VERSIONS:
        data = {"supported": list(SUPPORTED_VERSIONS), "requested": version}
        return Refusal(400, errors.UNSUPPORTED_PROTOCOL_VERSION, "Unsupported protocol version", data)
    return None


def _param_headers(
    method: str, params: dict[str, Any], headers: tuple[tuple[str, str], ...], tools: ToolHeaders
) -> Refusal | None:
    """Each `Mcp-Param-*` header must equal the argument it mirrors, and each mirrored argument the
    body carries must have its header (where the tool's annotations are known)."""
    if method != "tools/call":
        return None
    arguments = params.get("arguments")
    arguments = arguments if isinstance(arguments, dict) else {}
    mirrored = tools.mirrored(params.get("name"))
    prefix = PARAM_PREFIX.lower()
    seen: set[str] = set()
    for name, raw in headers:
        if not name.lower().startswith(prefix):
            continue
        suffix = name[len(prefix) :].lower()
        argument = mirrored.get(suffix)
        if argument is None:
            continue
        seen.add(suffix)
        decoded = _decoded(raw)
        if decoded is None:
            return _mismatch(f"{name} header carries a malformed base64 sentinel value")
        if _rendered(arguments.get(argument)) != decoded:
            return _mismatch(f"{name} header does not match the request body's {argument!r} argument")
    for suffix, argument in mirrored.items():
        if suffix not in seen and _rendered(arguments.get(argument)) is not None:
            text = f"{PARAM_PREFIX}{suffix} header is missing; the request body has the {argument!r} argument"
            return _mismatch(f"{text} it mirrors")
    return None


def _decoded(raw: str | None) -> str | None:
    if raw is None:
        return None
    try:
        return decode_param_value(raw)
    except ValueError:  # binascii.Error and UnicodeDecodeError are both ValueErrors
        return None


def _rendered(value: Any) -> str | None:
    """How a client mirrors an argument into a header (None: absent or not mirrorable)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, str | int):
        return str(value)
    return None
