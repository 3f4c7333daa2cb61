"""`replay --set PATH=VALUE`: how an edit is read and where it may go."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.flows.redact import Redactor
from proxy.record.replay_edit import EditError, apply_edits, parse_edit

CALL: dict[str, Any] = {
    "jsonrpc": "2.0",
    "id": 3,
    "method": "tools/call",
    "params": {"name": "add", "arguments": {"a": 2, "b": 3, "items": ["x", "y"]}},
}


@pytest.mark.parametrize(
    ("text", "path", "value"),
    [
        ("params.arguments.b=4", ("params", "arguments", "b"), 4),
        ('params.name="other"', ("params", "name"), "other"),
        ("params.name=other", ("params", "name"), "other"),  # not JSON: the text as it is
        ("params.arguments.items[1]=null", ("params", "arguments", "items", 1), None),
        ("params.arguments.extra=[1, 2]", ("params", "arguments", "extra"), [1, 2]),
        ("params.arguments.eq=a=b", ("params", "arguments", "eq"), "a=b"),
    ],
)
def test_an_edit_is_a_path_under_params_and_a_json_or_text_value(
    text: str, path: tuple[Any, ...], value: Any
) -> None:
    edit = parse_edit(text)
    assert (edit.path, edit.value) == (path, value)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("params.arguments.b", "expected PATH=VALUE"),
        ("=4", "expected PATH=VALUE"),
        ("arguments.b=4", "PATH is a place under params"),
        ("params=4", "PATH is a place under params"),
        ("params..b=4", "cannot read the path"),
        ("params.items[x]=4", "cannot read the path"),
    ],
)
def test_an_edit_that_does_not_parse_says_why(text: str, says: str) -> None:
    with pytest.raises(EditError, match=says):
        parse_edit(text)


def test_edits_change_a_copy_in_order_and_may_add_keys() -> None:
    edits = tuple(
        parse_edit(t)
        for t in ("params.arguments.a=40", "params.arguments.items[0]=1", "params.arguments.new.x=1")
    )
    out = apply_edits(CALL, edits)
    assert out["params"]["arguments"] == {"a": 40, "b": 3, "items": [1, "y"], "new": {"x": 1}}
    assert CALL["params"]["arguments"]["a"] == 2  # the recording is left as it was


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("params.arguments.a.b=1", "'b' is not under an object"),
        ("params.arguments.items[5]=1", r"no item \[5\]"),
        ("params.name[0]=1", r"no item \[0\]"),
    ],
)
def test_an_edit_that_does_not_fit_the_request_says_where(text: str, says: str) -> None:
    with pytest.raises(EditError, match=says):
        apply_edits(CALL, (parse_edit(text),))


@pytest.mark.parametrize(
    "text", ["params.requestState.x=1", "params.requestState=1", 'params["requeststate"]=1']
)
def test_an_edit_of_the_requests_request_state_is_refused_as_the_replays_own(text: str) -> None:
    with pytest.raises(EditError, match=r"is the replay's own .* it cannot be edited"):
        parse_edit(text)


def test_an_edit_inside_a_value_masked_whole_is_announced_as_its_holder_masked() -> None:
    """A place inside an object the replay's proxy masks whole (under a key it redacts) is shown as the
    request sent shows it: the holder's stand-in, the value typed nowhere."""
    mask = Redactor(body_keys=["credentials"], key=b"k").body
    edit = parse_edit("params.arguments.credentials.user=bob-the-SECRET")

    said = edit.announced(mask)

    assert said.startswith("params.arguments.credentials=<redacted len=")
    assert "bob-the-SECRET" not in said
