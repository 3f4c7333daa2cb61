"""The Content-Type note reads a repeated field as the media types it joins, quoted commas kept.

A repeated Content-Type is recorded joined with ", ", so the note splits it back: only at a comma
between media types, never at one inside a quoted parameter, which belongs to its type.
"""

from __future__ import annotations

from proxy.flows.answer_faults import content_type_problem, media_types

PROFILED = 'application/json; profile="a,b"'
ACCEPTS = ": a Streamable HTTP client accepts application/json or text/event-stream only, and may refuse it"


def test_a_comma_inside_a_quoted_parameter_does_not_split_a_media_type() -> None:
    assert media_types(f"{PROFILED}, text/html") == [PROFILED, "text/html"]
    assert media_types('text/plain; x="q\\",z", a/b') == ['text/plain; x="q\\",z"', "a/b"]
    assert media_types(" , application/json ,") == ["application/json"]


def test_the_same_profiled_type_sent_twice_is_one_type_and_no_problem() -> None:
    assert content_type_problem(PROFILED, {"Content-Type": f"{PROFILED}, {PROFILED}"}) is None


def test_two_types_are_named_whole_when_one_holds_a_quoted_comma() -> None:
    said = content_type_problem(PROFILED, {"Content-Type": f"{PROFILED}, text/html"})
    assert said == f"the answer has two Content-Types ({PROFILED}, text/html){ACCEPTS}"
