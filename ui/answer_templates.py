"""Where an answer to a held message starts: the smallest result the held method's client accepts.

An answer goes to a real client, whose SDK validates the result against the method's schema: an empty
`{}` for `tools/call` is rejected (no `content`), so the editor starts from a result that is valid as
it stands and only needs its values typed in. A 2026-07-28 request's result also carries
`resultType`, and the cacheable list and read methods their `ttlMs` and `cacheScope`
(`proxy.wire.mcp.CACHEABLE_METHODS`). A method not named here (`ping`, `logging/setLevel`, a method
this table does not know) starts from `{}`, the result every JSON-RPC answer may have.

Pure (no Textual), so the templates are tested without an app.
"""

from __future__ import annotations

import copy
from typing import Any, Final

from proxy.wire.mcp import CACHEABLE_METHODS, era_of_request
from proxy.wire.versions import LATEST_LEGACY, LATEST_MODERN, Era

_EMPTY_TEXT: Final = {"type": "text", "text": ""}

RESULTS: Final[dict[str, dict[str, Any]]] = {
    "tools/call": {"content": [_EMPTY_TEXT], "isError": False},
    "tools/list": {"tools": []},
    "prompts/list": {"prompts": []},
    "prompts/get": {"messages": []},
    "resources/list": {"resources": []},
    "resources/templates/list": {"resourceTemplates": []},
    "resources/read": {"contents": []},
    "completion/complete": {"completion": {"values": []}},
    "initialize": {
        "protocolVersion": LATEST_LEGACY,
        "capabilities": {},
        "serverInfo": {"name": "", "version": ""},
    },
    "server/discover": {"supportedVersions": [LATEST_MODERN], "capabilities": {}},
    "elicitation/create": {"action": "decline"},
    "sampling/createMessage": {"role": "assistant", "content": _EMPTY_TEXT, "model": ""},
    "roots/list": {"roots": []},
}
"""The minimal valid result of each method an answer is typed for (the MCP schema's required fields)."""


def answer_result(method: str, message: dict[str, Any]) -> dict[str, Any]:
    """The result an answer to `message` (a held `method`) starts from."""
    result = copy.deepcopy(RESULTS.get(method, {}))
    if method == "initialize":  # the version the client asked for is one it speaks
        asked = _params(message).get("protocolVersion")
        if isinstance(asked, str) and asked:
            result["protocolVersion"] = asked
    if _modern(method, message):
        result["resultType"] = "complete"
        if method in CACHEABLE_METHODS:
            result.update(ttlMs=0, cacheScope="private")
    return result


def _params(message: dict[str, Any]) -> dict[str, Any]:
    params = message.get("params")
    return params if isinstance(params, dict) else {}


def _modern(method: str, message: dict[str, Any]) -> bool:
    """Whether the held request is a 2026-07-28 one (its `_meta` or its method says so)."""
    if "method" not in message:
        result = message.get("result")
        return isinstance(result, dict) and "resultType" in result  # a held answer of that era
    return era_of_request(method, _params(message), None) is Era.MODERN
