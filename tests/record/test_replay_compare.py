"""Comparing a recorded chain with its replay: what is normalised away, what is not, and where it differs.

Messages are written in the shapes the demo's SDK peers produce on the wire (the e2e tests in
tests/e2e/test_replay.py compare real chains); each test names one rule of the comparison.
"""

from __future__ import annotations

from typing import Any

import pytest

from proxy.flows.events import Channel, Direction, MessageRecord, Side
from proxy.record.replay_compare import (
    MISSING,
    Difference,
    IgnoreRules,
    compare_chains,
    shown,
)

META_REQUEST = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}},
    "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
}
ASK_NAME = {
    "method": "elicitation/create",
    "params": {"mode": "form", "message": "What is your name?", "requestedSchema": {"type": "object"}},
}
ASK_COLOR = {
    "method": "elicitation/create",
    "params": {"mode": "form", "message": "Colour?", "requestedSchema": {"type": "object"}},
}


def record(
    direction: Direction, body: dict[str, Any], *, side: Side = Side.BOTH, seq: int = 0
) -> MessageRecord:
    kind = (
        "request"
        if "method" in body and "id" in body
        else "notification"
        if "method" in body
        else "result"
        if "result" in body
        else "error"
    )
    return MessageRecord(
        seq=seq,
        ts=float(seq),
        side=side,
        direction=direction,
        channel=Channel.POST,
        exchange="x1",
        kind=kind,
        jsonrpc_id=body.get("id"),
        method=body.get("method"),
        body={"jsonrpc": "2.0", **body},
    )


def up(body: dict[str, Any], **kw: Any) -> MessageRecord:
    return record(Direction.TO_SERVER, body, **kw)


def down(body: dict[str, Any], **kw: Any) -> MessageRecord:
    return record(Direction.TO_CLIENT, body, **kw)


def call(msg_id: Any, text: str, **result: Any) -> list[MessageRecord]:
    return [
        up({"id": msg_id, "method": "tools/call", "params": {"name": "greet"}}),
        down({"id": msg_id, "result": {"content": [{"type": "text", "text": text}], **result}}),
    ]


def test_the_same_call_under_other_ids_is_the_same() -> None:
    assert compare_chains(call(4, "Hello, Ada!"), call("replay-9", "Hello, Ada!")) is None


def test_a_changed_text_is_named_by_message_label_and_path_with_both_values() -> None:
    found = compare_chains(call(4, "Hello Ada"), call(4, "Hello Bob"))

    assert found == Difference(2, "tools/call result", "result.content[0].text", "Hello Ada", "Hello Bob", 2)
    assert found.text() == (
        'message 2 (tools/call result) result.content[0].text: recorded "Hello Ada", replayed "Hello Bob"'
    )


def test_the_protocol_envelope_in_meta_is_not_compared_but_a_servers_own_meta_is() -> None:
    recorded = call(1, "5")
    envelope = {"_meta": {"io.modelcontextprotocol/serverInfo": {"name": "other", "version": "2"}}}
    own = {"_meta": {"com.example/cost": 3}}

    assert compare_chains(recorded, call(1, "5", **envelope)) is None
    found = compare_chains(recorded, call(1, "5", **own))
    assert found is not None
    assert found.path == "result._meta"
    assert found.recorded is MISSING
    assert found.replayed == {"com.example/cost": 3}


def test_request_meta_envelope_and_trace_context_are_left_out() -> None:
    recorded = [up({"id": 1, "method": "tools/list", "params": {"_meta": META_REQUEST}})]
    replayed = [up({"id": 1, "method": "tools/list"})]

    assert compare_chains(recorded, replayed) is None


def test_input_requests_are_compared_by_question_whatever_the_server_named_them() -> None:
    def rounds(first: str, second: str, state: str | None) -> list[MessageRecord]:
        state_field = {"requestState": state} if state else {}
        required = {"resultType": "input_required", "inputRequests": {first: ASK_NAME, second: ASK_COLOR}}
        return [
            up({"id": 1, "method": "tools/call", "params": {"name": "survey"}}),
            down({"id": 1, "result": {**required, **state_field}}),
            up(
                {
                    "id": 2,
                    "method": "tools/call",
                    "params": {
                        "name": "survey",
                        "inputResponses": {first: {"action": "accept"}, second: {"action": "decline"}},
                        **state_field,
                    },
                }
            ),
        ]

    same = compare_chains(rounds("name", "color", None), rounds("elicitation-1", "elicitation-2", "s"))
    swapped = compare_chains(rounds("name", "color", None), rounds("elicitation-2", "elicitation-1", None))

    assert same is None
    assert swapped is None


def test_a_different_answer_to_the_same_question_is_a_difference() -> None:
    def answered(action: str) -> list[MessageRecord]:
        return [
            up({"id": 1, "method": "tools/call", "params": {"name": "greet"}}),
            down({"id": "q1", **ASK_NAME}),
            up({"id": "q1", "result": {"action": action}}),
        ]

    found = compare_chains(answered("accept"), answered("decline"))

    assert found == Difference(3, "elicitation/create result", "result.action", "accept", "decline", 3)


def test_empty_params_and_absent_params_ask_the_same() -> None:
    recorded = [down({"id": 1, "method": "roots/list"})]
    replayed = [down({"id": "mrtr-3", "method": "roots/list", "params": {}})]

    assert compare_chains(recorded, replayed) is None


def test_the_proxys_own_upstream_leg_is_not_compared() -> None:
    recorded = call(1, "5")
    replayed = [*call(1, "5"), up({"id": "leg-1", "method": "tools/call"}, side=Side.UPSTREAM)]

    assert compare_chains(recorded, replayed) is None


def test_a_missing_message_is_named_with_what_the_other_side_had() -> None:
    recorded = call(1, "5")
    found = compare_chains(recorded, recorded[:1])

    assert found is not None
    assert (found.index, found.label, found.path) == (2, "tools/call result", "")
    assert found.replayed is MISSING
    assert "replayed (none)" in found.text()
    assert found.as_json()["replayed_missing"] is True


def test_an_error_instead_of_a_result_is_a_difference_of_the_message_itself() -> None:
    error = [call(1, "5")[0], down({"id": 1, "error": {"code": -32602, "message": "Unknown tool"}})]
    found = compare_chains(call(1, "5"), error)

    assert found is not None
    assert (found.index, found.path) == (2, "")
    # both messages themselves: the recorded result, and the error's own words (what a server said
    # when it refused a call, an edited one say); never the label, which reads as a value sent
    assert (found.recorded, found.replayed) == (
        {"result": {"content": [{"type": "text", "text": "5"}]}},
        {"error": {"code": -32602, "message": "Unknown tool"}},
    )
    assert found.text() == (
        'message 2 (tools/call result): recorded {"result":{"content":[{"type":"text","text":"5"}]}}, '
        'replayed {"error":{"code":-32602,"message":"Unknown tool"}}'
    )
    assert found.as_json()["recorded"] == {"result": {"content": [{"type": "text", "text": "5"}]}}


def test_a_result_where_the_recording_has_an_error_shows_the_new_result() -> None:
    error = [call(1, "5")[0], down({"id": 1, "error": {"code": -32603, "message": "db down"}})]

    found = compare_chains(error, call(1, "5"))

    assert found is not None
    assert (found.recorded, found.replayed) == (
        {"error": {"code": -32603, "message": "db down"}},
        {"result": {"content": [{"type": "text", "text": "5"}]}},
    )


@pytest.mark.parametrize(
    ("pattern", "path", "hidden"),
    [
        ("result.content[0].text", "result.content[0].text", True),
        ("result.content[0].text", "result.content[1].text", False),
        ("result.content[*].text", "result.content[7].text", True),
        ("*.timestamp", "timestamp", True),
        ("*.timestamp", "result.structuredContent.timestamp", True),
        ("*.timestamp", "result.timestamps", False),
        ("result.*", "result.isError", True),
        ('result._meta["com.example/cost"]', 'result._meta["com.example/cost"]', True),
    ],
)
def test_ignore_patterns_match_paths_glob_like(pattern: str, path: str, hidden: bool) -> None:
    assert IgnoreRules((pattern,)).hides(path) is hidden


def test_an_ignored_path_hides_its_difference_and_no_other() -> None:
    recorded = call(1, "at 10:00", isError=False)
    replayed = call(1, "at 10:05", isError=True)

    found = compare_chains(recorded, replayed, IgnoreRules(("result.content[*].text",)))

    assert found is not None
    assert found.path == "result.isError"
    assert compare_chains(recorded, replayed, IgnoreRules(("result.content[*].text", "*.isError"))) is None


def test_long_values_are_cut_when_shown() -> None:
    text = shown("x" * 500)

    assert len(text) == 120
    assert text.endswith("...")


ASK_LLM = {
    "method": "sampling/createMessage",
    "params": {
        "messages": [{"role": "user", "content": {"type": "text", "text": "Capital?"}}],
        "maxTokens": 9,
    },
}
SAMPLED = {"role": "assistant", "content": {"type": "text", "text": "Paris"}, "model": "m"}


def test_questions_asked_at_once_are_the_same_whatever_order_they_were_answered_in() -> None:
    call_msg = up({"id": 9, "method": "tools/call", "params": {"name": "ask_two_at_once"}})
    final = down({"id": 9, "result": {"content": [{"type": "text", "text": "name=Ada llm=Paris"}]}})
    q1, q2 = down({"id": 1, **ASK_NAME}), down({"id": 2, **ASK_LLM})
    a1, a2 = up({"id": 1, "result": {"action": "accept"}}), up({"id": 2, "result": SAMPLED})

    together = [call_msg, q1, q2, a2, a1, final]
    in_turn = [call_msg, q2, a2, q1, a1, final]

    assert compare_chains(together, in_turn) is None


def test_one_round_of_two_questions_is_the_same_as_two_rounds_of_one() -> None:
    def retry(msg_id: int, answers: dict[str, Any]) -> MessageRecord:
        return up(
            {"id": msg_id, "method": "tools/call", "params": {"name": "two", "inputResponses": answers}}
        )

    def required(msg_id: int, asks: dict[str, Any]) -> MessageRecord:
        return down({"id": msg_id, "result": {"resultType": "input_required", "inputRequests": asks}})

    call_msg = up({"id": 1, "method": "tools/call", "params": {"name": "two"}})
    final = {"result": {"resultType": "complete", "content": []}}
    one_round = [
        call_msg,
        required(1, {"name": ASK_NAME, "llm": ASK_LLM}),
        retry(2, {"name": {"action": "accept"}, "llm": SAMPLED}),
        down({"id": 2, **final}),
    ]
    two_rounds = [
        call_msg,
        required(1, {"sampling-1": ASK_LLM}),
        retry(2, {"sampling-1": SAMPLED}),
        required(2, {"elicitation-2": ASK_NAME}),
        retry(3, {"elicitation-2": {"action": "accept"}}),
        down({"id": 3, **final}),
    ]
    other_answer = [*one_round[:2], retry(2, {"name": {"action": "decline"}, "llm": SAMPLED}), one_round[3]]

    assert compare_chains(one_round, two_rounds) is None
    found = compare_chains(one_round, other_answer)
    assert found is not None
    assert (found.label, found.path) == ("elicitation/create result", "result.action")
    assert (found.index, found.replayed_index) == (3, 3)


def test_a_message_label_as_an_ignore_pattern_leaves_those_messages_out() -> None:
    log = down({"method": "notifications/message", "params": {"level": "info", "data": "echo hi"}})
    recorded = [call(1, "hi")[0], log, call(1, "hi")[1]]

    assert compare_chains(recorded, call(1, "hi")) is not None
    assert compare_chains(recorded, call(1, "hi"), IgnoreRules(("notifications/message",))) is None


def tools_list(*names: str) -> list[MessageRecord]:
    tools = [{"name": name, "description": f"The {name} tool", "inputSchema": {}} for name in names]
    return [up({"id": 1, "method": "tools/list"}), down({"id": 1, "result": {"tools": tools}})]


def test_a_tool_added_to_a_list_is_named_as_that_tool_not_as_later_tools_changed() -> None:
    found = compare_chains(tools_list("add", "echo"), tools_list("add", "divide", "echo"))

    assert found is not None
    assert found.path == "result.tools[1]"
    assert found.recorded is MISSING
    assert found.replayed["name"] == "divide"
    assert 'replayed {"name":"divide",' in found.text()  # named first: a cut line still says which


def test_an_added_tool_is_named_first_in_its_line_however_long_it_is() -> None:
    recorded = tools_list("add")
    divide = {"description": "x" * 500, "inputSchema": {"type": "object"}, "name": "divide"}  # name last
    tools = [*recorded[1].body["result"]["tools"], divide]
    replayed = [recorded[0], down({"id": 1, "result": {"tools": tools}})]

    found = compare_chains(recorded, replayed)

    assert found is not None
    assert found.text().startswith(
        'message 2 (tools/list result) result.tools[1]: recorded (none), replayed {"name":"divide"'
    )


def test_a_tool_gone_from_a_list_is_named_as_that_tool() -> None:
    found = compare_chains(tools_list("add", "divide", "echo"), tools_list("add", "echo"))

    assert found is not None
    assert found.path == "result.tools[1]"
    assert found.recorded["name"] == "divide"
    assert found.replayed is MISSING
    assert 'recorded {"name":"divide",' in found.text()


def test_a_changed_tool_is_found_by_its_name_wherever_it_moved() -> None:
    replayed = tools_list("add", "echo")
    replayed[1].body["result"]["tools"].insert(0, {"name": "zero", "description": "", "inputSchema": {}})
    replayed[1].body["result"]["tools"][2]["description"] = "Echoes"

    found = compare_chains(tools_list("add", "echo"), replayed)

    assert found is not None
    assert (found.path, found.recorded, found.replayed) == (
        "result.tools[1].description",
        "The echo tool",
        "Echoes",
    )


def test_the_same_tools_in_another_order_are_the_same() -> None:
    assert compare_chains(tools_list("add", "echo", "greet"), tools_list("greet", "add", "echo")) is None


def test_a_tool_changed_in_a_reordered_list_is_named_at_its_recorded_place() -> None:
    replayed = tools_list("echo", "add")
    replayed[1].body["result"]["tools"][1]["description"] = "Adds"

    found = compare_chains(tools_list("add", "echo"), replayed)

    assert found is not None
    assert (found.path, found.recorded, found.replayed) == (
        "result.tools[0].description",
        "The add tool",
        "Adds",
    )


def five_tools(*changes: tuple[int, str]) -> list[MessageRecord]:
    chain = tools_list("add", "echo", "greet", "ask_llm", "roots")
    for place, description in changes:
        chain[1].body["result"]["tools"][place]["description"] = description
    return chain


def with_tool(chain: list[MessageRecord], place: int, name: str) -> list[MessageRecord]:
    chain[1].body["result"]["tools"].insert(place, {"name": name, "description": "", "inputSchema": {}})
    return chain


def test_ignoring_an_index_hides_an_item_only_the_replay_has_at_that_index() -> None:
    replayed = with_tool(five_tools(), 5, "divide")  # the new answer's sixth tool

    assert compare_chains(five_tools(), replayed) is not None
    assert compare_chains(five_tools(), replayed, IgnoreRules(("result.tools[5]",))) is None


def test_an_added_item_hidden_by_index_leaves_the_order_of_the_others_compared_by_name() -> None:
    # `divide` takes place 2 in the new answer: `greet` and the tools after it moved, unchanged.
    replayed = with_tool(five_tools(), 2, "divide")

    assert compare_chains(five_tools(), replayed, IgnoreRules(("result.tools[2]",))) is None


def test_a_changed_item_at_another_index_is_still_reported_when_an_added_one_is_hidden() -> None:
    replayed = with_tool(five_tools((1, "Echoes it back")), 5, "divide")

    found = compare_chains(five_tools(), replayed, IgnoreRules(("result.tools[5]",)))

    assert found is not None
    assert (found.path, found.recorded, found.replayed) == (
        "result.tools[1].description",
        "The echo tool",
        "Echoes it back",
    )


def test_an_index_of_a_list_matched_by_name_names_the_recorded_item_not_the_replays_item_there() -> None:
    # `divide` pushes `roots` (recorded at [4]) to the replay's [5]; `roots` changed there. Ignoring
    # [5] hides neither: the report names `roots` at [4] and `divide` at [4] of the new answer.
    replayed = with_tool(five_tools((4, "Lists roots")), 4, "divide")
    ignore_five = IgnoreRules(("result.tools[5]",))

    found = compare_chains(five_tools(), replayed, ignore_five)

    assert found is not None
    assert (found.path, found.replayed) == ("result.tools[4].description", "Lists roots")
    unchanged = with_tool(five_tools(), 4, "divide")
    added = compare_chains(five_tools(), unchanged, ignore_five)
    assert added is not None
    assert (added.path, added.recorded, added.replayed["name"]) == ("result.tools[4]", MISSING, "divide")


def test_ignoring_an_index_hides_the_recorded_item_gone_from_the_replay_and_no_item_after_it() -> None:
    replayed = five_tools((4, "Lists roots"))
    del replayed[1].body["result"]["tools"][2]  # `greet` gone; `roots` changed

    found = compare_chains(five_tools(), replayed, IgnoreRules(("result.tools[2]",)))

    assert found is not None
    assert found.path == "result.tools[4].description"
    assert compare_chains(five_tools(), replayed, IgnoreRules(("result.tools[2]", "result.tools[4]"))) is None


def test_an_index_of_a_list_not_matched_by_name_is_the_same_place_on_both_sides() -> None:
    recorded = call(1, "a")
    recorded[1].body["result"]["content"].append({"type": "text", "text": "b"})
    replayed = call(1, "a")
    replayed[1].body["result"]["content"].append({"type": "text", "text": "c"})

    assert compare_chains(recorded, replayed, IgnoreRules(("result.content[1]",))) is None
    found = compare_chains(recorded, replayed, IgnoreRules(("result.content[0]",)))
    assert found is not None
    assert found.path == "result.content[1].text"
