"""What a server did wrong in answering a request, in words: the one source of that wording.

A request its exchange left unanswered fails; the chain's error, its notes and the round-trip log
line say why in the same words, made here from what the exchange carried: a response whose id
matches no request (a wrong id, none, `null`), one that is no valid JSON-RPC response, a body that
held nothing (a 202 or 204 to a request, an empty 200), or a stream that ended first. The checks a
passing answer gets (its Content-Type, a batch the request's version does not have) are worded here
too. Pure functions of plain values: no I/O, no clock, no state; called on the failure paths only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from proxy.wire.jsonrpc import Kind, Message, RequestId

UNANSWERED: Final = "response stream ended without a response"
"""The error of a request whose response stream ended cleanly without its answer."""

NO_HEAD: Final = "no response"
"""Why a request went unanswered when its exchange ended cleanly before any response head."""

STRAY_NOTES: Final = 5
"""Stray responses one exchange's chain notes (a server repeating the fault is told by the first)."""

JSON_TYPE: Final = "application/json"
SSE_TYPE: Final = "text/event-stream"
ACCEPTED_TYPES: Final = frozenset((JSON_TYPE, SSE_TYPE))
"""The media types a Streamable HTTP client accepts in answer to a POST carrying requests."""

BATCHLESS_VERSIONS: Final = frozenset(("2025-06-18", "2025-11-25", "2026-07-28"))
"""Protocol versions without JSON-RPC batches (removed in 2025-06-18): a batch answer breaks them."""

IDS_LISTED: Final = 10
"""Request ids one note lists (each bounded), the rest said as a count."""

_NO_BODY: Final = {202: "202 Accepted with no body", 204: "204 No Content"}


def media_type(content_type: str | None) -> str:
    """The media type of a Content-Type value, lower-cased, parameters dropped ("" when none)."""
    return (content_type or "").split(";", 1)[0].strip().lower()


def is_stray(msg: Message, ids: Sequence[RequestId] | Mapping[RequestId, Any]) -> bool:
    """Whether a message the server sent is a response that answers none of `ids`: a result or error
    with another id (or none), or a value shaped like a response that is no valid JSON-RPC one."""
    if msg.is_response:
        return msg.id is None or msg.id not in ids
    return msg.kind is Kind.INVALID and _response_shaped(msg.raw)


def _response_shaped(raw: Any) -> bool:
    return isinstance(raw, dict) and "method" not in raw and ("result" in raw or "error" in raw)


def stray_note(msg: Message) -> str:
    """The note on the chain a stray response rode into (`is_stray`): what the server sent."""
    raw = msg.raw
    if msg.kind is Kind.INVALID:
        return f"the server sent a response that is no valid JSON-RPC response: {_invalid_why(msg)}"
    if "id" not in raw:
        return "a response with no id, which no request can be matched to"
    if raw["id"] is None:
        return f"a response with id null{_error_text(msg, ': ')}, which no request can be matched to"
    if msg.id is None:
        return f"a response with id {_shown(raw['id'])}, which JSON-RPC does not allow"
    return f"a response to id {_shown(msg.id)}, which no request of this exchange carried"


def unmatched(ids: Sequence[RequestId], stray: Message) -> str:
    """Why requests `ids` went unanswered though the server sent `stray` (`is_stray`)."""
    raw = stray.raw
    was = _requests(ids)
    if stray.kind is Kind.INVALID:
        named = _listed(ids)
        return f"the server's answer to id {named} is no valid JSON-RPC response: {_invalid_why(stray)}"
    if "id" not in raw:
        return f"the server's answer has no id; {was}"
    if raw["id"] is None:
        return f"the server answered with id null{_error_text(stray, ': ')}; {was}"
    return f"the server answered id {_shown(raw['id'])}; {was}"


def no_answer(
    ids: Sequence[RequestId], status: int | None, content_type: str | None, messages: int, problem: str | None
) -> str:
    """Why requests `ids` went unanswered when the server sent no response at all: what its body was.

    `messages`: the messages its body carried; `problem`: why a body that was no JSON-RPC was not."""
    kind = media_type(content_type)
    if kind == SSE_TYPE:
        return UNANSWERED
    if status is None:
        return NO_HEAD
    to = "a request" if len(ids) == 1 else "requests"
    if messages == 0 and status in _NO_BODY:
        return f"the server answered {_NO_BODY[status]} to {to}"
    if messages == 0:
        return f"the server's {status} answer has an empty body, no response to {to}"
    what = "JSON" if kind == JSON_TYPE else (kind or "untyped")
    said = f"the {what} answer holds no response to {_requests(ids, 'the request')}"
    return f"{said} ({problem})" if problem else said


def content_type_problem(content_type: str | None, headers: Mapping[str, str]) -> str | None:
    """What is wrong with the Content-Type of an answer to a POST carrying requests, if anything: none,
    one a Streamable HTTP client does not accept, or two that disagree."""
    sent = [content_type] if content_type else []
    for name, value in headers.items():
        if len(name) == 12 and name.lower() == "content-type" and value != content_type:
            # A repeated field is recorded joined with ", " (`proxy.wire.joined_headers`).
            sent.extend(part for part in media_types(value) if part not in sent)
    if len(sent) == 1 and media_type(sent[0]) in ACCEPTED_TYPES:
        return None
    accepted = " or ".join(sorted(ACCEPTED_TYPES))
    if not sent:
        said = "the answer has no Content-Type"
    elif len(sent) > 1:
        said = "the answer has two Content-Types (" + ", ".join(sent) + ")"
    else:
        said = f"the answer's Content-Type is {sent[0]}"
    return f"{said}: a Streamable HTTP client accepts {accepted} only, and may refuse it"


def media_types(joined: str) -> list[str]:
    """The media types of a joined Content-Type value, split at each comma between them: a comma
    inside a quoted parameter (`profile="a,b"`, backslash escapes kept) is part of its type."""
    parts: list[str] = []
    start, quoted, escaped = 0, False, False
    for at, char in enumerate(joined):
        if escaped:
            escaped = False
        elif quoted and char == "\\":
            escaped = True
        elif char == '"':
            quoted = not quoted
        elif char == "," and not quoted:
            parts.append(joined[start:at])
            start = at + 1
    parts.append(joined[start:])
    return [part.strip() for part in parts if part.strip()]


def declared_version(headers: Mapping[str, str]) -> str | None:
    """The protocol version a request declared in its `MCP-Protocol-Version` header (required from
    2025-06-18 on, and equal to a 2026-07-28 request's `_meta` one); None when it declared none."""
    return next((v for k, v in headers.items() if k.lower() == "mcp-protocol-version"), None)


def batch_note(version: str | None) -> str | None:
    """The note on a request answered with a JSON-RPC batch, when its declared `version` has none."""
    if version not in BATCHLESS_VERSIONS:
        return None
    return (
        f"the server answered with a JSON-RPC batch, which protocol {version} (the request's) does not "
        "have: batches were removed in 2025-06-18"
    )


def _requests(ids: Sequence[RequestId], one: str = "") -> str:
    if len(ids) == 1:
        return one or f"the request was id {_shown(ids[0])}"
    listed = _listed(ids)
    return f"the requests were ids {listed}" if not one else f"the requests {listed}"


def _listed(ids: Sequence[RequestId]) -> str:
    """Ids as a note lists them: the first `IDS_LISTED`, then how many more (a batch may hold
    hundreds, and the note goes into a log line)."""
    listed = ", ".join(_shown(i) for i in ids[:IDS_LISTED])
    rest = len(ids) - IDS_LISTED
    return f"{listed} and {rest} more" if rest > 0 else listed


def _error_text(msg: Message, lead: str) -> str:
    """`: -32700 Parse error` for an error response, "" for anything else."""
    err = msg.raw.get("error") if isinstance(msg.raw, dict) else None
    if not isinstance(err, dict):
        return ""
    code, message = err.get("code"), err.get("message")
    text = " ".join(str(part) for part in (code, message) if part is not None)
    return f"{lead}{text[:200]}" if text else ""


def _invalid_why(msg: Message) -> str:
    raw = msg.raw
    if isinstance(raw, dict) and "result" in raw and "error" in raw:
        return "it holds both result and error"
    return msg.problem or "not JSON-RPC"


def _shown(ident: Any) -> str:
    """An id as a note shows it: a string quoted, anything else as JSON would have it (bounded)."""
    if isinstance(ident, str):
        return repr(ident[:80])
    return str(ident)[:80]
