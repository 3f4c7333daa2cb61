"""The MCP shapes the proxy reasons about: `_meta` keys, method families, MRTR results.

Models keep unknown fields (`extra="allow"`) so a relay never drops what it does not understand.
"""

from __future__ import annotations

from typing import Any, Final, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field

from proxy.wire.versions import Era, era_of_version

# Enum members read through their class cost about ten times a module constant's on Python 3.11
# (the enum metaclass's attribute hook): the traffic path reads these.
_LEGACY = Era.LEGACY
_MODERN = Era.MODERN
_UNKNOWN = Era.UNKNOWN

META_PROTOCOL_VERSION: Final = "io.modelcontextprotocol/protocolVersion"
"""2026-07-28 (SEP-2575): required per-request protocol version in `params._meta`."""

META_CLIENT_CAPABILITIES: Final = "io.modelcontextprotocol/clientCapabilities"
"""2026-07-28: required per-request client capabilities in `params._meta`."""

META_CLIENT_INFO: Final = "io.modelcontextprotocol/clientInfo"
"""2026-07-28: recommended per-request client identity in `params._meta`."""

META_LOG_LEVEL: Final = "io.modelcontextprotocol/logLevel"
"""2026-07-28: per-request log level, replacing `logging/setLevel`."""

META_SERVER_INFO: Final = "io.modelcontextprotocol/serverInfo"
"""2026-07-28: server identity stamped on results."""

META_SUBSCRIPTION_ID: Final = "io.modelcontextprotocol/subscriptionId"
"""2026-07-28: tags each notification on a `subscriptions/listen` stream."""

LISTEN: Final = "subscriptions/listen"
"""2026-07-28: the request whose SSE response stays open to carry change notifications."""

LISTEN_ACKNOWLEDGED: Final = "notifications/subscriptions/acknowledged"
"""2026-07-28: the first message of every listen stream (the subset of notifications honoured): the
server's answer to the listen, after which the stream only stays open."""

INPUT_METHODS: Final[frozenset[str]] = frozenset(
    {"elicitation/create", "sampling/createMessage", "roots/list"}
)
"""The server->client requests that MRTR can embed (and legacy servers send in flight)."""

ELICITATION_ACTIONS: Final = ("accept", "decline", "cancel")


def answer_problem(method: str, result: dict[str, Any]) -> str | None:
    """What makes `result` no answer to a `method` request (the fields its result schema requires),
    or None. A JSON-RPC response sent where its bare result belongs is named as such."""
    if "jsonrpc" in result and ("result" in result or "error" in result):
        return "a whole JSON-RPC response, where the bare result object belongs"
    if method == "elicitation/create":
        action = result.get("action")
        if action not in ELICITATION_ACTIONS:
            return f"'action' must be one of {', '.join(ELICITATION_ACTIONS)}, got {action!r}"
        if "content" in result and not isinstance(result["content"], dict):
            return "'content' must be an object"
    elif method == "sampling/createMessage":
        if result.get("role") not in ("user", "assistant"):
            return f"'role' must be user or assistant, got {result.get('role')!r}"
        if not isinstance(result.get("content"), dict | list):
            return "'content' must be a content object (or a list of them)"
        if not isinstance(result.get("model"), str):
            return "'model' must be a string"
    elif method == "roots/list":
        roots = result.get("roots")
        if not isinstance(roots, list) or not all(
            isinstance(r, dict) and isinstance(r.get("uri"), str) for r in roots
        ):
            return "'roots' must be a list of objects each with a 'uri' string"
    return None


MRTR_METHODS: Final[frozenset[str]] = frozenset({"tools/call", "prompts/get", "resources/read"})
"""The only requests a 2026-07-28 server may answer with `input_required`."""

LEGACY_ONLY_METHODS: Final[frozenset[str]] = frozenset(
    {"initialize", "ping", "logging/setLevel", "resources/subscribe", "resources/unsubscribe"}
)
"""Client->server requests that 2026-07-28 removed."""

MODERN_ONLY_METHODS: Final[frozenset[str]] = frozenset({"server/discover", LISTEN})
"""Client->server requests that exist only from 2026-07-28 on (no handshake version has them)."""

SERVER_SENT_METHODS: Final[frozenset[str]] = frozenset(
    {
        *INPUT_METHODS,
        "ping",
        "notifications/message",
        "notifications/progress",
        "notifications/cancelled",
        "notifications/resources/updated",
        "notifications/resources/list_changed",
        "notifications/tools/list_changed",
        "notifications/prompts/list_changed",
        "notifications/elicitation/complete",
        "notifications/tasks/status",
    }
)
"""Methods a server sends a client, in either era."""

SPEC_METHODS: Final[frozenset[str]] = frozenset(
    {
        *SERVER_SENT_METHODS,
        *LEGACY_ONLY_METHODS,
        *MODERN_ONLY_METHODS,
        "tools/list",
        "tools/call",
        "prompts/list",
        "prompts/get",
        "resources/list",
        "resources/templates/list",
        "resources/read",
        "completion/complete",
        "tasks/get",
        "tasks/list",
        "tasks/result",
        "tasks/cancel",
        "notifications/initialized",
        "notifications/roots/list_changed",
    }
)
"""Every method the protocol's eras define, either way: names a client cannot invent."""

REPEATABLE_METHODS: Final[frozenset[str]] = frozenset(
    {
        "initialize",
        "ping",
        "server/discover",
        "tools/list",
        "prompts/list",
        "prompts/get",
        "resources/list",
        "resources/templates/list",
        "resources/read",
        "resources/subscribe",
        "resources/unsubscribe",
        "logging/setLevel",
        "completion/complete",
    }
)
"""Requests with no effect beyond their answer, or the same effect however often they come (reads, a
ping, the handshakes, a subscription, a log level): one sent twice does no harm. Others (`tools/call`
above all, and any method not known here) may act on the world, and a server that received one may
have acted before its connection closed: those are never sent a second time."""


def repeatable(body: bytes) -> bool:
    """Whether a JSON-RPC body may reach the server twice: every message in it is a notification, a
    response to the server (a second one for the same id is ignored), or a `REPEATABLE_METHODS`
    request."""
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError:
        return False
    messages = value if isinstance(value, list) else [value]
    return bool(messages) and all(isinstance(m, dict) and _repeatable_message(m) for m in messages)


def _repeatable_message(message: dict[str, Any]) -> bool:
    method = message.get("method")
    if method is None:
        return "id" in message and ("result" in message or "error" in message)  # a response
    return "id" not in message or method in REPEATABLE_METHODS


RESULT_COMPLETE: Final = "complete"
RESULT_INPUT_REQUIRED: Final = "input_required"

CACHEABLE_METHODS: Final[frozenset[str]] = frozenset(
    {
        "server/discover",
        "tools/list",
        "prompts/list",
        "resources/list",
        "resources/templates/list",
        "resources/read",
    }
)
"""2026-07-28 (SEP-2549): complete results of these carry `ttlMs` and `cacheScope`."""


class Relayed(BaseModel):
    """Base for every wire model: unknown fields are kept so relays are lossless."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)


class InputRequest(Relayed):
    """One embedded request of an `input_required` result: no jsonrpc, no id."""

    method: str
    params: dict[str, Any] = Field(default_factory=dict)


class InputRequiredResult(Relayed):
    """SEP-2322 interim result: the server needs answers before it can complete."""

    result_type: Literal["input_required"] = Field(alias="resultType")
    input_requests: dict[str, InputRequest] | None = Field(default=None, alias="inputRequests")
    request_state: str | None = Field(default=None, alias="requestState")


def result_type(result: Any) -> str:
    """The `resultType` of a result; a missing one reads as `complete` (spec rule)."""
    if isinstance(result, dict):
        value = result.get("resultType", RESULT_COMPLETE)
        return value if isinstance(value, str) else "invalid"
    return RESULT_COMPLETE


def target_name(method: str | None, params: dict[str, Any]) -> str | None:
    """The `Mcp-Name` of a request: tool/prompt name, resource uri, or task id."""
    if method in ("tools/call", "prompts/get"):
        name = params.get("name")
    elif method in ("resources/read", "resources/subscribe", "resources/unsubscribe"):
        name = params.get("uri")
    elif method is not None and method.startswith("tasks/"):
        name = params.get("taskId")
    else:
        return None
    return name if isinstance(name, str) else None


def request_meta(params: dict[str, Any]) -> dict[str, Any]:
    """The request's `_meta` object (empty when absent or malformed)."""
    meta = params.get("_meta")
    return meta if isinstance(meta, dict) else {}


def era_of_request(method: str | None, params: dict[str, Any], header_version: str | None) -> Era:
    """Decide which era a client request belongs to, from its own bytes only."""
    meta_version = request_meta(params).get(META_PROTOCOL_VERSION)
    if isinstance(meta_version, str) and era_of_version(meta_version) is _MODERN:
        return _MODERN
    if method in MODERN_ONLY_METHODS:
        return _MODERN  # whatever version it names: answering it is the modern side's job
    if method == "initialize":
        return _LEGACY
    if header_version is not None:
        return era_of_version(header_version)
    return _UNKNOWN
