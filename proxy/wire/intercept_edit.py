"""Whether an edit of a held message is JSON-RPC the proxy may send in its place (pure).

The edit must be one JSON-RPC 2.0 object of the held message's kind with its id (a request keeps its
id and has a string method; a response has exactly one of result and error; an error has an integer
code and a string message; params are an object or an array). An answer to a held message is a
response with the held message's id. The reason of a refusal names what to change.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class EditRefused(ValueError):
    """The edit cannot be sent; the text says why."""


def kind_of(message: Mapping[str, Any]) -> str:
    """`request`, `notification` or `response` of a JSON-RPC object."""
    if "method" in message:
        return "request" if "id" in message else "notification"
    return "response"


def check_edit(held: Mapping[str, Any], edited: Any, *, answer: bool = False) -> dict[str, Any]:
    """`edited` when it may replace (or, with `answer`, answer) `held`; EditRefused otherwise."""
    if not isinstance(edited, dict):
        raise EditRefused(f"a JSON-RPC message is a JSON object, not {_json_type(edited)}")
    if edited.get("jsonrpc") != "2.0":
        raise EditRefused('"jsonrpc" must be "2.0"')
    want = "response" if answer else kind_of(held)
    got = kind_of(edited)
    if got != want:
        what = "an answer" if answer else f"the held {want}"
        raise EditRefused(f"{what} must stay a {want}, this is a {got}")
    if "id" in held and edited.get("id") != held["id"]:
        raise EditRefused(f'"id" must stay {held["id"]!r} (the held message\'s), not {edited.get("id")!r}')
    if got == "response":
        _check_response(edited)
    else:
        _check_call(edited)
    return edited


def _check_call(message: dict[str, Any]) -> None:
    if not isinstance(message["method"], str) or not message["method"]:
        raise EditRefused('"method" must be a non-empty string')
    if "params" in message and not isinstance(message["params"], dict | list):
        raise EditRefused(f'"params" must be an object or an array, not {_json_type(message["params"])}')


def _check_response(message: dict[str, Any]) -> None:
    if ("result" in message) == ("error" in message):
        raise EditRefused('a response has exactly one of "result" and "error"')
    if "error" in message:
        error = message["error"]
        if not isinstance(error, dict):
            raise EditRefused('"error" must be an object with "code" and "message"')
        code = error.get("code")
        if not isinstance(code, int) or isinstance(code, bool):
            raise EditRefused('"error.code" must be an integer')
        if not isinstance(error.get("message"), str):
            raise EditRefused('"error.message" must be a string')


def _json_type(value: Any) -> str:
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if value is None:
        return "null"
    if isinstance(value, bool | int | float):
        return "a number" if not isinstance(value, bool) else "a boolean"
    return "an object"
