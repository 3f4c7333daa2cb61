"""Checks on a JSON-RPC message a person edits, or types as an answer, in place of one the proxy holds.

An intercepted message may be sent on edited, or answered with a result or error typed in. The proxy
checks the new message before it goes anywhere, and the TUI's editor checks it with these same
functions before submitting, so both refuse the same edits with the same reasons: it must be one
JSON-RPC 2.0 object of the held message's kind (request, notification or response), keep the held
message's id, have a well-formed `params`, `result` or `error`, and fit the body limit.

Held messages are shown redacted (`proxy.flows.redact`): secrets stand in as
`<redacted len=N hmac:…>` (or `<requestState len=N hmac:…>`), a whole string or inside a longer one. An
edit that leaves a string holding a stand-in as it was shown gets the original string back
(`restore_stand_ins`); a stand-in moved elsewhere, one that is not the one shown there, or one inside
a string that was changed, is refused: the proxy will not send a stand-in as if it were the secret,
nor guess which secret was meant or how a changed string should read with it. Nor does it put a
secret back into a message whose edit changed what it does (another method, tool, prompt or
resource): the answer to such a message may show the secret to whoever reads it. Pure: no I/O; the
UI may import it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any, Final

import orjson

from proxy.wire.jsonrpc import JSONRPC_VERSION, RequestId

STAND_IN: Final = re.compile(r"<(?:redacted|requestState) len=\d+ hmac:[0-9a-f]{8}>")
"""A redaction stand-in, as the proxy shows a secret in a held message: a whole string, or part of one
(a client's token echoed inside a longer text)."""

KINDS: Final = ("request", "notification", "response")
"""The kinds of message a hold keeps, and an edit must keep."""

_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1

Path = tuple[str | int, ...]


class EditRefused(ValueError):
    """An edit or typed answer that is not sent: the message says why and what would be accepted."""


def kind_of(message: Any) -> str | None:
    """`request`, `notification` or `response` for a JSON-RPC object by its members; None for neither."""
    if not isinstance(message, dict):
        return None
    if "method" in message:
        return "request" if "id" in message else "notification"
    if "result" in message or "error" in message:
        return "response"
    return None


def check_message(edited: Any, *, kind: str, ident: RequestId | None, max_bytes: int) -> dict[str, Any]:
    """The edited message when it may take the held one's place; EditRefused naming why not.

    `kind` and `ident` are the held message's: an edit keeps both (a request stays a request with the
    same id, so the answer still finds its way back to whoever asked).
    """
    if not isinstance(edited, dict):
        raise EditRefused(f"a JSON-RPC message is a JSON object, got {_type(edited)}")
    if edited.get("jsonrpc") != JSONRPC_VERSION:
        raise EditRefused(f'"jsonrpc" must be "2.0", got {_shown(edited.get("jsonrpc"))}')
    found = kind_of(edited)
    if found is None:
        raise EditRefused(
            'a JSON-RPC message has a "method" (request, notification) or a "result" or "error"'
        )
    if found != kind:
        raise EditRefused(f"the held message is a {kind}; an edit keeps it a {kind}, this is a {found}")
    if kind == "response":
        _check_response(edited)
    else:
        _check_call(edited)
    if kind != "notification" and ("id" not in edited or not _same_id(edited["id"], ident)):
        raise EditRefused(
            f"an edit keeps the held message's id {_shown(ident)}, got {_shown(edited.get('id'))}"
        )
    size = len(orjson.dumps(edited))
    if size > max_bytes:
        raise EditRefused(
            f"the message is {size} bytes, over the {max_bytes}-byte body limit (max_body_bytes)"
        )
    return edited


def answer_message(ident: RequestId | None, typed: Mapping[str, Any], *, max_bytes: int) -> dict[str, Any]:
    """The response a typed answer makes: `typed` holds exactly one of `result` (any JSON value, null
    included) and `error` (`{code, message[, data]}`); EditRefused naming why not."""
    if ("result" in typed) == ("error" in typed):
        raise EditRefused(
            'an answer gives exactly one of "result" (a JSON value) or "error" ({code, message})'
        )
    message: dict[str, Any] = {"jsonrpc": JSONRPC_VERSION, "id": ident}
    if "result" in typed:
        message["result"] = typed["result"]
    else:
        message["error"] = typed["error"]
    return check_message(message, kind="response", ident=ident, max_bytes=max_bytes)


def _check_call(message: dict[str, Any]) -> None:
    method = message.get("method")
    if not isinstance(method, str) or not method:
        raise EditRefused(f'"method" is a non-empty string, got {_shown(method)}')
    if "params" in message and not isinstance(message["params"], dict | list):
        raise EditRefused(f'"params" is an object or an array, got {_type(message["params"])}')
    if "result" in message or "error" in message:
        raise EditRefused('a request or notification carries no "result" or "error"')


def _check_response(message: dict[str, Any]) -> None:
    if ("result" in message) == ("error" in message):
        raise EditRefused('a response has exactly one of "result" and "error"')
    if "error" not in message:
        return
    error = message["error"]
    if not isinstance(error, dict):
        raise EditRefused(f'"error" is an object {{code, message}}, got {_type(error)}')
    code = error.get("code")
    if not isinstance(code, int) or isinstance(code, bool) or not _INT_MIN <= code <= _INT_MAX:
        raise EditRefused(f'"error.code" is a 32-bit integer, got {_shown(code)}')
    if not isinstance(error.get("message"), str):
        raise EditRefused(f'"error.message" is a string, got {_shown(error.get("message"))}')


def _same_id(given: Any, held: RequestId | None) -> bool:
    """Equal and of the same JSON type: `1` and `"1"` are different ids to a JSON-RPC peer."""
    if isinstance(given, bool) or type(given) is not type(held):
        return False
    return bool(given == held)


def restore_stand_ins(edited: Any, shown: Any, original: Any = None, *, restore: bool = True) -> Any:
    """`edited` with each stand-in left where `shown` had it replaced by `original`'s value there.

    Raises EditRefused for a stand-in `shown` did not have at that place (moved, altered or made up):
    the secret behind it cannot be known, so the edit would send a placeholder. With `restore` False
    (the TUI, which never holds the original) it only checks.
    """
    where = dict(_stand_ins(shown))
    for path, text in _stand_ins(edited):
        if where.get(path) != text:
            raise _refusal(path, text, where)
    _keeps_meaning(edited, shown)
    if not restore:
        return edited
    out = edited
    for path, _text in _stand_ins(edited):
        out = _put(out, path, _get(original, path))
    return out


def _refusal(path: Path, text: str, where: Mapping[Path, str]) -> EditRefused:
    """Why `text`, a string at `path` holding a stand-in, cannot be sent: `where` is what was shown."""
    at = _path_text(path)
    elsewhere = [p for p, t in where.items() if t == text]
    if elsewhere:
        return EditRefused(
            f"the redacted stand-in at {at} was shown at {_path_text(elsewhere[0])}: a secret can "
            "only stay where it was; type the value itself to put one elsewhere"
        )
    if STAND_IN.fullmatch(text):
        return EditRefused(
            f"{at} holds a redacted stand-in that is not the one shown there ({text}): the proxy "
            "cannot know the secret it stands for; put back the stand-in as shown, or type the value"
        )
    return EditRefused(
        f"{at} holds a redacted stand-in inside a string that is not the one shown there: the proxy "
        "puts a secret back only into a string left as shown; leave the string as shown, or type it whole"
    )


def restored_values(edited: Any, original: Any) -> list[Any]:
    """The secrets `restore_stand_ins` puts back into `edited`: `original`'s values where a whole string
    was a stand-in (a stand-in inside a longer string masks a secret the redactor already knows)."""
    return [_get(original, path) for path, text in _stand_ins(edited) if STAND_IN.fullmatch(text)]


MEANING: Final = (("method",), ("params", "name"), ("params", "uri"))
"""What says what a message does: its method, and the tool, prompt or resource it names."""


def _keeps_meaning(edited: Any, shown: Any) -> None:
    """Refuse an edit that keeps a stand-in but changes what the message does.

    A secret goes back only into the message it was sent in: renamed to a tool that echoes its
    arguments, or to another method, the same message would hand the secret to whoever reads the answer.
    """
    stand_in = next(_stand_ins(edited), None)
    if stand_in is None:
        return
    for path in MEANING:
        before, after = _member(shown, path), _member(edited, path)
        if before != after:
            raise EditRefused(
                f"{_path_text(stand_in[0])} holds a redacted stand-in and the edit changes "
                f"{_path_text(path)} ({_shown(before)} -> {_shown(after)}): a secret goes back only into "
                "the message it was sent in; keep the name and method, or type the value itself"
            )


def _member(value: Any, path: Path) -> Any:
    """The member at `path`, or None where the message has none."""
    for step in path:
        if not isinstance(value, dict):
            return None
        value = value.get(step)
    return value


def _stand_ins(value: Any) -> Iterator[tuple[Path, str]]:
    """Every string in `value` that holds a stand-in (the whole string, or inside a longer one where a
    known secret text was masked), with its path (iterative: no depth limit)."""
    stack: list[tuple[Path, Any]] = [((), value)]
    while stack:
        path, node = stack.pop()
        if isinstance(node, str):
            if STAND_IN.search(node):
                yield path, node
        elif isinstance(node, dict):
            stack.extend(((*path, k), v) for k, v in node.items())
        elif isinstance(node, list):
            stack.extend(((*path, i), v) for i, v in enumerate(node))


def _get(value: Any, path: Path) -> Any:
    for step in path:
        value = value[step]
    return value


def _put(value: Any, path: Path, new: Any) -> Any:
    """A copy of `value` with `new` at `path` (copies only the containers on the way down)."""
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        return {**value, head: _put(value[head], rest, new)}
    copy = list(value)
    assert isinstance(head, int)
    copy[head] = _put(copy[head], rest, new)
    return copy


def _path_text(path: Path) -> str:
    if not path:
        return "the message"
    return "".join(f"[{step}]" if isinstance(step, int) else f".{step}" for step in path).lstrip(".")


def _type(value: Any) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number")


def _shown(value: Any) -> str:
    try:
        text = orjson.dumps(value).decode()
    except TypeError:
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
