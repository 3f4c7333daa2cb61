"""What the gate needs of a message, and the messages a fault puts in place of one: pure functions.

`seen` describes a message for a rule (a response by the request it answers); `error_answer`,
`drop_answer` and `dropped_answer` are the JSON-RPC errors a fault answers with, each saying the
proxy made it;
`corrupt_state` alters a retry's `requestState` so a server that checks it must refuse it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, Protocol

import orjson

from proxy.engine.gate.actions import Action
from proxy.engine.gate.match import Seen
from proxy.wire.jsonrpc import Kind, Message, RequestId, error_response
from proxy.wire.mcp import target_name

DROPPED_CODE: Final = -32000
"""The JSON-RPC code a client gets for a request, or a server's answer, a `drop` fault kept back (an
implementation-defined server error: the server's own answer never reached the client)."""

INJECTED_BY: Final = "mcp-debug-proxy fault injection"
"""`error.data.injectedBy` of every error a fault makes, so a client's log tells it from the server's."""


class Masks(Protocol):
    """How secrets are shown (`proxy.flows.redact.Redactor`): a rule sees a message as the chains do."""

    def token(self, value: str) -> str:
        """The stand-in of a secret value (a session id)."""
        ...

    def body(self, value: Any) -> Any:
        """A message with its secrets masked."""
        ...


Asked = Mapping[RequestId, tuple[str | None, str | None]]
"""Request id -> (method, name) of the requests an exchange's messages answer: the client's own
requests (their answers come back on it) and the server's requests the client answers in it."""


def seen(
    msg: Message,
    direction: str,
    *,
    era: str,
    session: str | None,
    asked: Asked,
    masks: Masks,
    mode: str = "passthrough",
) -> Seen:
    """A message as a rule sees it; an answer takes the method and name of the request it answers.

    Its session id and body are seen masked (`masks`), as the chains show them.
    """
    kind = str(msg.kind)
    if msg.is_response:
        method, name = asked.get(msg.id, (None, None)) if msg.id is not None else (None, None)
    else:
        method, name = msg.method, target_name(msg.method, msg.params)
    return Seen(
        direction=direction,
        kind=kind,
        method=method,
        name=name,
        era=era,
        mode=mode,
        session=masks.token(session) if session else None,
        round=_round(msg) if direction == "client" and msg.kind is Kind.REQUEST else None,
        body=_lazy_body(msg.raw, masks),
    )


def asked_of(
    messages: Sequence[Message], answered: Callable[[RequestId], str | None] | None = None
) -> dict[RequestId, tuple[str | None, str | None]]:
    """The client's requests in a body, by id: what their answers are matched as; and, through
    `answered` (the method of the server's request with that id, if known), what the client's own
    answers in the body answer."""
    asked: dict[RequestId, tuple[str | None, str | None]] = {}
    for msg in messages:
        if msg.id is None:
            continue
        if msg.kind is Kind.REQUEST:
            asked[msg.id] = (msg.method, target_name(msg.method, msg.params))
        elif msg.is_response and answered is not None:
            method = answered(msg.id)
            if method is not None:
                asked[msg.id] = (method, None)
    return asked


def _round(msg: Message) -> int:
    """1 for a first request, 2 for an MRTR retry (it carries `inputResponses` or `requestState`)."""
    params = msg.params
    return 2 if "inputResponses" in params or "requestState" in params else 1


def _lazy_body(raw: Any, masks: Masks) -> Callable[[], str]:
    def body() -> str:
        return orjson.dumps(masks.body(raw)).decode("utf-8", "replace").lower()

    return body


def error_answer(ident: RequestId | None, action: Action, rule: str) -> dict[str, Any]:
    """The JSON-RPC error an `error=` fault answers a request with (or puts in place of its answer)."""
    return error_response(ident, action.code, action.message, {"injectedBy": INJECTED_BY, "rule": rule})


def dropped_answer(ident: RequestId | None, rule: str) -> dict[str, Any]:
    """The error a client gets in place of the server's answer a `drop` fault kept from it: the server
    did get the request, and may have acted on it (a client must not take this as safe to retry)."""
    return error_response(
        ident,
        DROPPED_CODE,
        f"the proxy dropped the server's answer to this request (fault injection rule {rule}); the "
        "server received the request and may have acted on it",
        {"injectedBy": INJECTED_BY, "rule": rule, "fault": "drop"},
    )


def drop_answer(ident: RequestId | None, rule: str) -> dict[str, Any]:
    """The error a client gets for a request a `drop` fault kept from the server."""
    return error_response(
        ident,
        DROPPED_CODE,
        f"the proxy dropped this request before it reached the server (fault injection rule {rule}); "
        "the server never saw it",
        {"injectedBy": INJECTED_BY, "rule": rule, "fault": "drop"},
    )


INTERCEPTED_BY: Final = "mcp-debug-proxy intercept"
"""`error.data.interceptedBy` of every error an intercept's drop makes."""


def intercept_drop_answer(ident: RequestId | None, rule: str) -> dict[str, Any]:
    """The error a client gets for its request an intercept held and a person dropped."""
    return error_response(
        ident,
        DROPPED_CODE,
        f"the proxy's intercept ({rule}) dropped this request before it reached the server; the "
        "server never saw it",
        {"interceptedBy": INTERCEPTED_BY, "rule": rule, "decision": "drop"},
    )


def intercept_reply(
    answer: dict[str, Any] | None, ident: RequestId | None, rule: str
) -> tuple[dict[str, Any], str]:
    """What the client gets for a held request an intercept answered (`answer`) or dropped (None), and
    the note its record carries, in pass-through and bridges alike."""
    if answer is not None:
        return answer, f"answered by the proxy's intercept ({rule})"
    return intercept_drop_answer(ident, rule), f"dropped by the proxy's intercept ({rule})"


def intercept_dropped_answer(ident: RequestId | None, rule: str) -> dict[str, Any]:
    """What the client gets in place of a server's answer an intercept held and a person dropped: the
    server received the request and may have acted on it."""
    return error_response(
        ident,
        DROPPED_CODE,
        f"the proxy's intercept ({rule}) dropped the server's answer to this request; the server "
        "received the request and may have acted on it",
        {"interceptedBy": INTERCEPTED_BY, "rule": rule, "decision": "drop"},
    )


def intercept_refusal(ident: RequestId | None, rule: str) -> dict[str, Any]:
    """The answer a server gets, on the client's behalf, to its request an intercept dropped."""
    return error_response(
        ident,
        DROPPED_CODE,
        f"the proxy's intercept ({rule}) dropped this request before it reached the client; the "
        "client never saw it",
        {"interceptedBy": INTERCEPTED_BY, "rule": rule, "decision": "drop"},
    )


def corrupt_state(raw: bytes) -> tuple[bytes, str] | None:
    """The body with its `requestState` altered (one character changed), and what was done; None when
    the body is not one request carrying a string `requestState`.

    The state keeps its length and alphabet, so it still looks like a token: a server that checks its
    seal must refuse it, one that does not shows what it makes of a wrong state.
    """
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    params = body.get("params") if isinstance(body, dict) else None
    if not isinstance(params, dict):
        return None
    state = params.get("requestState")
    if not isinstance(state, str) or not state:
        return None
    middle = len(state) // 2
    swap = "B" if state[middle] == "A" else "A"
    params["requestState"] = state[:middle] + swap + state[middle + 1 :]
    return orjson.dumps(body), f"requestState ({len(state)} characters) changed at character {middle + 1}"
