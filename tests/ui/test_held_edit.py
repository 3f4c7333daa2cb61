"""The edit check's reasons, read by a user in the held editor."""

from __future__ import annotations

import pytest

from tests.ui.desk_double import held
from ui.held_edit import EditRefused, parse_edit


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ('{"id": 7,\n "method": "to\tols/call"}', "not JSON: Invalid control character at line 2"),
        ('{"id": 7,', "not JSON: Expecting property name enclosed in double quotes at line 1"),
    ],
)
def test_an_edit_that_is_not_json_says_why_and_where_in_one_sentence(text: str, reason: str) -> None:
    with pytest.raises(EditRefused) as refused:
        parse_edit(text, held("h1"))
    assert str(refused.value).startswith(reason)
    assert " at at " not in str(refused.value)
