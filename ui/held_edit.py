"""An edit of a held message, checked before it goes out: JSON first, then JSON-RPC the proxy would send.

Pure (no Textual), so the editor screens and their tests share it. An edit that does not parse, or is
not the JSON-RPC the held message may become (the same kind and id; an answer is a response to it),
is refused with the reason and never reaches the proxy; the proxy checks it again on its side (and
puts back redacted values), so its own refusal is shown too.
"""

from __future__ import annotations

import json
import re
from typing import Any

from proxy.wire.edits import EditRefused, check_message, restore_stand_ins
from proxy.wire.visible import UNSAFE_BESIDE_LINES
from ui.answer_templates import answer_result
from ui.desk import Held

__all__ = ["EditRefused", "answer_skeleton", "editable_text", "parse_edit"]

MAX_BYTES = 8 * 1024 * 1024
"""The proxy's default body limit: the editor refuses a bigger message (the proxy checks its own limit)."""

STAND_IN_NOTE = "a <redacted …> stand-in left in place is sent as the original value"
"""What the editors say about the redacted values they show."""


def editable_text(message: dict[str, Any]) -> str:
    """A message as the editor shows it: indented JSON, keys in the order the proxy gave them, each
    character a terminal would act on (DEL, C1, bidi controls; JSON escapes C0 itself) written as its
    JSON escape `\\u202e`, which parses back to the same value."""
    return UNSAFE_BESIDE_LINES.sub(_json_escape, json.dumps(message, indent=2, ensure_ascii=False))


def _json_escape(found: re.Match[str]) -> str:
    return f"\\u{ord(found.group()):04x}"


def answer_skeleton(held: Held) -> str:
    """The editor's start for an answer: a result to the held message's id, valid for its method."""
    result = answer_result(held.method, held.message)
    return editable_text({"jsonrpc": "2.0", "id": held.jsonrpc_id, "result": result})


def parse_edit(text: str, held: Held, *, answer: bool = False) -> dict[str, Any]:
    """The edited message, or EditRefused saying why it cannot be sent.

    An answer must be a response to the held message (same id); any other edit must keep the held
    message's kind and id.
    """
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        reason = exc.msg.removesuffix(" at")  # `json` ends some reasons with "at", before the position
        raise EditRefused(f"not JSON: {reason} at line {exc.lineno} column {exc.colno}") from exc
    except RecursionError as exc:
        raise EditRefused("not JSON this editor can read: nested too deeply") from exc
    kind = "response" if answer else held.kind
    message = check_message(value, kind=kind, ident=held.jsonrpc_id, max_bytes=MAX_BYTES)
    restore_stand_ins(message, held.message, restore=False)  # a moved or altered stand-in is refused
    return message
