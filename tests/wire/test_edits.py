"""`proxy.wire.edits`: what an edited or typed message must be before it takes a held one's place."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.flows.redact import Redactor
from proxy.wire.edits import EditRefused, answer_message, check_message, kind_of, restore_stand_ins

LIMIT = 1024
CALL = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "echo", "arguments": {"a": 1}}}


def refused(edited: Any, *, kind: str = "request", ident: Any = 7) -> str:
    with pytest.raises(EditRefused) as caught:
        check_message(edited, kind=kind, ident=ident, max_bytes=LIMIT)
    return str(caught.value)


def test_an_edit_that_keeps_kind_and_id_is_taken_as_it_is() -> None:
    edited = {**CALL, "params": {"name": "echo", "arguments": {"a": 2}}}
    assert check_message(edited, kind="request", ident=7, max_bytes=LIMIT) is edited
    note = {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progress": 1}}
    assert check_message(note, kind="notification", ident=None, max_bytes=LIMIT) is note


@pytest.mark.parametrize(
    ("edited", "reason"),
    [
        ([CALL], "is a JSON object, got an array"),
        ("hello", "is a JSON object, got a string"),
        ({**CALL, "jsonrpc": "1.0"}, '"jsonrpc" must be "2.0", got "1.0"'),
        ({"jsonrpc": "2.0", "id": 7}, 'has a "method"'),
        ({**CALL, "id": 8}, "keeps the held message's id 7, got 8"),
        ({**CALL, "id": "7"}, 'keeps the held message\'s id 7, got "7"'),
        ({k: v for k, v in CALL.items() if k != "id"}, "keeps it a request, this is a notification"),
        ({**CALL, "method": ""}, '"method" is a non-empty string'),
        ({**CALL, "params": "x"}, '"params" is an object or an array, got a string'),
        ({**CALL, "params": {"blob": "x" * LIMIT}}, "over the 1024-byte body limit (max_body_bytes)"),
    ],
)
def test_an_edit_that_is_not_a_fitting_request_is_refused_with_the_reason(edited: Any, reason: str) -> None:
    assert reason in refused(edited)


@pytest.mark.parametrize(
    ("edited", "reason"),
    [
        ({"jsonrpc": "2.0", "id": 3, "result": {}, "error": {"code": 1, "message": "m"}}, "exactly one of"),
        ({"jsonrpc": "2.0", "id": 3, "error": {"code": "x", "message": "m"}}, '"error.code" is a 32-bit'),
        ({"jsonrpc": "2.0", "id": 3, "error": {"code": True, "message": "m"}}, '"error.code" is a 32-bit'),
        ({"jsonrpc": "2.0", "id": 3, "error": {"code": 1}}, '"error.message" is a string'),
        ({"jsonrpc": "2.0", "id": 3, "error": "bad"}, '"error" is an object'),
        ({"jsonrpc": "2.0", "id": 3, "method": "x"}, "keeps it a response, this is a request"),
    ],
)
def test_a_response_needs_exactly_one_well_formed_result_or_error(edited: Any, reason: str) -> None:
    assert reason in refused(edited, kind="response", ident=3)


def test_a_typed_answer_makes_a_response_with_the_held_id_and_null_is_a_result() -> None:
    assert answer_message(5, {"result": None}, max_bytes=LIMIT) == {"jsonrpc": "2.0", "id": 5, "result": None}
    error = {"code": -32000, "message": "no"}
    assert answer_message("a", {"error": error}, max_bytes=LIMIT)["error"] == error
    with pytest.raises(EditRefused, match="exactly one of"):
        answer_message(5, {}, max_bytes=LIMIT)
    with pytest.raises(EditRefused, match=r"error\.message"):
        answer_message(5, {"error": {"code": 1}}, max_bytes=LIMIT)


def test_kind_of_names_requests_notifications_and_responses() -> None:
    assert kind_of(CALL) == "request"
    assert kind_of({"jsonrpc": "2.0", "method": "x"}) == "notification"
    assert kind_of({"jsonrpc": "2.0", "id": 1, "error": {}}) == "response"
    assert kind_of([]) is None


def secret_call() -> tuple[dict[str, Any], dict[str, Any]]:
    original = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "echo", "arguments": {"a": 1}, "requestState": "s3cret-state-of-the-server"},
    }
    shown = Redactor().body(original)
    assert shown["params"]["requestState"].startswith("<requestState len=26 hmac:")
    return original, shown


def test_a_stand_in_left_where_it_was_shown_gets_the_secret_back() -> None:
    original, shown = secret_call()
    edited = {**shown, "params": {**shown["params"], "arguments": {"a": 2}}}
    restored = restore_stand_ins(edited, shown, original)
    assert restored["params"] == {
        "name": "echo",
        "arguments": {"a": 2},
        "requestState": original["params"]["requestState"],
    }
    assert edited["params"]["requestState"] == shown["params"]["requestState"]  # the edit itself is untouched


def test_a_stand_in_moved_or_altered_is_refused_never_sent() -> None:
    original, shown = secret_call()
    stand_in = shown["params"]["requestState"]
    moved = {**shown, "params": {"name": "echo", "arguments": {"a": stand_in}}}
    with pytest.raises(EditRefused, match=r"at params.arguments.a was shown at params.requestState"):
        restore_stand_ins(moved, shown, original)
    altered = {**shown, "params": {**shown["params"], "requestState": "<requestState len=26 hmac:00000000>"}}
    with pytest.raises(EditRefused, match="not the one shown there"):
        restore_stand_ins(altered, shown, original)
    with pytest.raises(EditRefused, match="not the one shown there"):  # the TUI checks without the secret
        restore_stand_ins(altered, shown, restore=False)


def test_a_secret_typed_in_place_of_its_stand_in_is_sent_as_typed() -> None:
    original, shown = secret_call()
    typed = {**shown, "params": {**shown["params"], "requestState": "a-new-state"}}
    assert restore_stand_ins(typed, shown, original)["params"]["requestState"] == "a-new-state"


def echoed_token_call() -> tuple[dict[str, Any], dict[str, Any]]:
    """A call whose argument repeats the client's bearer token inside a longer string, and how a held
    message shows it once the redactor has seen that token in the client's `Authorization`."""
    token = "sk-live-PARTIAL-0123456789"
    redactor = Redactor()
    redactor.headers({"Authorization": f"Bearer {token}"})
    original = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": "echo", "arguments": {"note": f"configure with {token} please", "n": 1}},
    }
    shown = redactor.body(original)
    assert shown["params"]["arguments"]["note"] == f"configure with {redactor.token(token)} please"
    return original, shown


def test_a_string_left_as_shown_around_an_embedded_stand_in_gets_its_secret_back() -> None:
    original, shown = echoed_token_call()
    edited = {**shown, "params": {**shown["params"], "arguments": {**shown["params"]["arguments"], "n": 2}}}

    restored = restore_stand_ins(edited, shown, original)

    assert restored["params"]["arguments"] == {**original["params"]["arguments"], "n": 2}


def test_a_changed_string_around_an_embedded_stand_in_is_refused_naming_its_path() -> None:
    original, shown = echoed_token_call()
    note = shown["params"]["arguments"]["note"]
    changed = {**shown, "params": {**shown["params"], "arguments": {"note": f"{note}!", "n": 1}}}
    moved = {**shown, "params": {**shown["params"], "arguments": {"n": 1, "other": note}}}

    with pytest.raises(
        EditRefused, match=r"^params.arguments.note holds a redacted stand-in inside a string"
    ):
        restore_stand_ins(changed, shown, original)
    with pytest.raises(
        EditRefused, match=r"^params.arguments.note holds a redacted stand-in inside a string"
    ):
        restore_stand_ins(changed, shown, restore=False)  # the TUI's check says the same
    with pytest.raises(EditRefused, match=r"at params.arguments.other was shown at params.arguments.note"):
        restore_stand_ins(moved, shown, original)


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"name": "dump"}, 'params.name ("echo" -> "dump")'),
        ({"name": None, "uri": "file:///etc/passwd"}, "params.name"),
        ({"uri": "res://x"}, 'params.uri (null -> "res://x")'),
    ],
)
def test_a_stand_in_is_not_put_back_into_a_call_whose_edit_changes_what_it_does(
    change: dict[str, Any], named: str
) -> None:
    original, shown = secret_call()
    params = {k: v for k, v in {**shown["params"], **change}.items() if v is not None}
    edited = {**shown, "params": params}
    for restore in (True, False):  # the proxy and the TUI's editor refuse it alike
        with pytest.raises(EditRefused, match=r"params.requestState holds a redacted stand-in") as caught:
            restore_stand_ins(edited, shown, original, restore=restore)
        assert named in str(caught.value)
    renamed_method = {**shown, "method": "prompts/get"}
    with pytest.raises(EditRefused, match=r'changes method \("tools/call" -> "prompts/get"\)'):
        restore_stand_ins(renamed_method, shown, original)
    typed = {**edited, "params": {**params, "requestState": "typed-by-hand"}}  # no stand-in: no secret
    assert restore_stand_ins(typed, shown, original) == typed
