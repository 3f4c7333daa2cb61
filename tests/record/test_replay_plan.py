"""Planning a recorded chain's replay: what the client sent, the answers it gave, what it cannot resend.

Chains are written in the shapes the demo's SDK peers produce (tests/e2e/test_replay.py replays real
ones).
"""

from __future__ import annotations

from typing import Any

from proxy.flows.events import ChainSummary, Channel, Direction, HttpInfo, MessageRecord, Mode, Side
from proxy.record.replay_plan import (
    AnswerMiss,
    PlanKind,
    headers_to_send,
    plan_chain,
    question_key,
    redacted_paths,
)

NAME = {"mode": "form", "message": "What is your name?", "requestedSchema": {"type": "object"}}
COLOR = {"mode": "form", "message": "Colour?", "requestedSchema": {"type": "object"}}
HEADERS = {"Host": "127.0.0.1:9", "accept": "application/json, text/event-stream", "Content-Length": "9"}


def summary(
    method: str, era: str = "legacy", session: str | None = "<redacted len=32 hmac:ab12cd34>"
) -> ChainSummary:
    return ChainSummary(
        id="r5", started=0.0, client_era=era, method=method, session=session, mode=Mode.PASSTHROUGH
    )


def rec(direction: Direction, body: dict[str, Any], *, side: Side = Side.BOTH, **kw: Any) -> MessageRecord:
    kind = (
        "request" if "method" in body and "id" in body else "notification" if "method" in body else "result"
    )
    http = HttpInfo(method="POST", path="/mcp", headers=HEADERS) if direction is Direction.TO_SERVER else None
    return MessageRecord(
        seq=0,
        ts=0.0,
        side=side,
        direction=direction,
        channel=Channel.POST,
        exchange="x1",
        kind=kind,
        jsonrpc_id=body.get("id"),
        method=body.get("method"),
        body={"jsonrpc": "2.0", **body},
        http=http,
        **kw,
    )


def test_a_legacy_call_keeps_its_request_and_its_in_flight_answers_in_order() -> None:
    plan = plan_chain(
        summary("tools/call"),
        [
            rec(Direction.TO_SERVER, {"id": 7, "method": "tools/call", "params": {"name": "survey"}}),
            rec(Direction.TO_CLIENT, {"id": 1, "method": "elicitation/create", "params": NAME}),
            rec(Direction.TO_SERVER, {"id": 1, "result": {"action": "accept", "content": {"name": "Ada"}}}),
            rec(Direction.TO_CLIENT, {"id": 2, "method": "elicitation/create", "params": COLOR}),
            rec(Direction.TO_SERVER, {"id": 2, "result": {"action": "accept", "content": {"color": "teal"}}}),
            rec(Direction.TO_CLIENT, {"id": 7, "result": {"content": []}}),
        ],
    )

    assert plan.kind is PlanKind.CALL
    assert plan.first is not None
    assert plan.first.body["id"] == 7
    assert plan.retries == []
    color = plan.answers.take("elicitation/create", {**COLOR, "_meta": {"x": 1}})
    name = plan.answers.take("elicitation/create", NAME)
    again = plan.answers.take("elicitation/create", NAME)
    assert not isinstance(color, AnswerMiss)
    assert color.answer == {"action": "accept", "content": {"color": "teal"}}
    assert not isinstance(name, AnswerMiss)
    assert name.answer == {"action": "accept", "content": {"name": "Ada"}}
    assert isinstance(again, AnswerMiss)  # each recorded answer is given once, and the miss says so
    assert again.text() == (
        'asked elicitation/create {"message":"What is your name?","mode":"form","requestedSchema":'
        '{"type":"object"}} more often than recorded: the recording answered it once, and the replay '
        "asked it again"
    )


def test_a_question_never_recorded_is_missed_naming_the_nearest_recorded_question() -> None:
    plan = plan_chain(
        summary("tools/call"),
        [
            rec(Direction.TO_SERVER, {"id": 7, "method": "tools/call", "params": {"name": "greet"}}),
            rec(Direction.TO_CLIENT, {"id": 1, "method": "elicitation/create", "params": NAME}),
            rec(Direction.TO_SERVER, {"id": 1, "result": {"action": "accept"}}),
            rec(Direction.TO_CLIENT, {"id": 2, "method": "roots/list"}),
            rec(Direction.TO_SERVER, {"id": 2, "result": {"roots": []}}),
        ],
    )

    miss = plan.answers.take("elicitation/create", {**NAME, "message": "What is your age?"})

    assert isinstance(miss, AnswerMiss)
    assert miss.text().startswith('no recorded answer to elicitation/create {"message":"What is your age?"')
    assert '; nearest recorded: elicitation/create {"message":"What is your name?"' in miss.text()


def test_a_modern_call_keeps_its_retries_and_reads_answers_from_their_input_responses() -> None:
    first = {"id": 1, "method": "tools/call", "params": {"name": "greet"}}
    retry = {
        "id": 2,
        "method": "tools/call",
        "params": {"name": "greet", "inputResponses": {"name": {"action": "accept"}}, "requestState": "<s>"},
    }
    plan = plan_chain(
        summary("tools/call", era="modern", session=None),
        [
            rec(Direction.TO_SERVER, first),
            rec(
                Direction.TO_CLIENT,
                {
                    "id": 1,
                    "result": {
                        "resultType": "input_required",
                        "inputRequests": {"name": {"method": "elicitation/create", "params": NAME}},
                    },
                },
            ),
            rec(Direction.TO_SERVER, retry),
            rec(Direction.TO_CLIENT, {"id": 2, "result": {"resultType": "complete", "content": []}}),
        ],
    )

    assert [s.body["id"] for s in plan.retries] == [2]
    found = plan.answers.take("elicitation/create", NAME)
    assert not isinstance(found, AnswerMiss)
    assert found.answer == {"action": "accept"}


def test_a_modern_call_its_client_never_retried_stops_at_the_question_it_was_asked() -> None:
    asked = {
        "id": 1,
        "result": {
            "resultType": "input_required",
            "inputRequests": {"name": {"method": "elicitation/create", "params": NAME}},
        },
    }
    plan = plan_chain(
        summary("tools/call", era="modern", session=None),
        [
            rec(Direction.TO_SERVER, {"id": 1, "method": "tools/call", "params": {"name": "greet"}}),
            rec(Direction.TO_CLIENT, asked),
        ],
    )

    assert plan.retries == []
    assert plan.stopped is not None
    assert plan.stopped.startswith('elicitation/create {"message":"What is your name?"')
    other = plan.answers.take("elicitation/create", COLOR)
    found = plan.answers.take("elicitation/create", NAME)
    assert isinstance(other, AnswerMiss)  # the recording was asked something, and says what
    assert "the recording was asked nothing" not in other.text()
    assert other.text().endswith("(asked, and never answered: its client stopped there)")
    assert not isinstance(found, AnswerMiss)
    assert found.answer is None  # asked, and where its client stopped


def test_a_bridged_chain_is_planned_from_the_clients_side_only() -> None:
    plan = plan_chain(
        summary("tools/call"),
        [
            rec(
                Direction.TO_SERVER,
                {"id": 4, "method": "tools/call", "params": {"name": "greet"}},
                side=Side.CLIENT,
            ),
            rec(
                Direction.TO_SERVER,
                {"id": "leg-4", "method": "tools/call", "params": {"name": "greet"}},
                side=Side.UPSTREAM,
            ),
            rec(
                Direction.TO_SERVER,
                {"id": "leg-6", "method": "tools/call", "params": {"name": "greet"}},
                side=Side.UPSTREAM,
            ),
        ],
    )

    assert plan.first is not None
    assert plan.first.body["id"] == 4
    assert plan.retries == []


def test_a_handshake_keeps_its_initialized_notification() -> None:
    plan = plan_chain(
        summary("initialize"),
        [
            rec(
                Direction.TO_SERVER,
                {"id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25"}},
            ),
            rec(Direction.TO_CLIENT, {"id": 1, "result": {"protocolVersion": "2025-11-25"}}),
            rec(Direction.TO_SERVER, {"method": "notifications/initialized"}),
        ],
    )

    assert plan.kind is PlanKind.HANDSHAKE
    assert [n.body["method"] for n in plan.notes] == ["notifications/initialized"]


def test_streams_deletes_and_cut_requests_are_told_apart() -> None:
    cut = plan_chain(
        summary("tools/call"),
        [rec(Direction.TO_SERVER, {"id": 1, "method": "tools/call"}, truncated=True)],
    )

    assert plan_chain(summary("GET stream"), []).kind is PlanKind.STREAM
    oauth = summary("POST")
    oauth.name = "/token"  # a plain HTTP request beside the endpoint: an OAuth step
    form = rec(Direction.TO_SERVER, {"grant_type": "refresh_token"})
    form = form.model_copy(update={"kind": "http", "body": "grant_type=refresh_token"})
    token = plan_chain(oauth, [form])
    assert (token.kind, token.problem) == (PlanKind.HTTP, None)
    assert plan_chain(summary("DELETE session"), []).kind is PlanKind.DELETE
    assert cut.kind is PlanKind.OTHER
    assert cut.problem is not None
    assert "capture_body_limit" in cut.problem


def test_a_cut_answer_is_a_problem_not_a_question_the_client_never_answered() -> None:
    plan = plan_chain(
        summary("tools/call"),
        [
            rec(Direction.TO_SERVER, {"id": 7, "method": "tools/call", "params": {"name": "survey"}}),
            rec(Direction.TO_CLIENT, {"id": 1, "method": "elicitation/create", "params": NAME}),
            rec(Direction.TO_SERVER, {"id": 1, "result": {"action": "accept"}}, truncated=True),
        ],
    )

    assert plan.problem is not None
    assert plan.problem.startswith("the client's answer to a question was cut at the capture's body limit")


def test_redacted_headers_need_the_users_value_and_hop_by_hop_ones_are_not_copied() -> None:
    recorded = {
        **HEADERS,
        "Authorization": "Bearer <redacted len=40 hmac:0badc0de>",
        "Mcp-Session-Id": "<redacted len=32 hmac:ab12cd34>",
        "X-Tenant": "acme",
    }

    sent, missing = headers_to_send(recorded, {})
    given, none_missing = headers_to_send(recorded, {"authorization": "Bearer real"})

    assert missing == ["Authorization"]
    assert sent == {"accept": "application/json, text/event-stream", "X-Tenant": "acme"}
    assert none_missing == []
    assert given["authorization"] == "Bearer real"
    assert "Authorization" not in given


def test_a_redacted_body_value_is_found_by_its_path() -> None:
    params = {"name": "login", "arguments": {"user": "ada", "token": "<redacted len=12 hmac:0badc0de>"}}

    assert redacted_paths(params, "params") == ["params.arguments.token"]
    assert redacted_paths({"requestState": "<requestState len=9 hmac:1>"}, "params") == []


def test_questions_match_less_meta_and_ids_a_server_mints() -> None:
    url = {"mode": "url", "message": "Consent", "url": "https://x", "elicitationId": "e-1"}

    assert question_key("elicitation/create", url) == question_key(
        "elicitation/create", {**url, "elicitationId": "e-2", "_meta": {"k": 1}}
    )
    assert question_key("roots/list", {}) == question_key("roots/list", None)


def test_a_question_the_intercept_answered_in_the_clients_place_is_answered_as_the_server_got_it() -> None:
    desk = {"action": "accept", "content": {"name": "the desk"}}
    note = "typed at the proxy's intercept (i1), sent in the client's place"
    plan = plan_chain(
        summary("tools/call"),
        [
            rec(Direction.TO_SERVER, {"id": 7, "method": "tools/call", "params": {"name": "ask_name"}}),
            rec(
                Direction.TO_CLIENT,
                {"id": 1, "method": "elicitation/create", "params": NAME},
                side=Side.UPSTREAM,
                note="not forwarded to the client: answered at the proxy's intercept (i1)",
            ),
            rec(
                Direction.TO_SERVER,
                {"id": 1, "result": desk},
                side=Side.UPSTREAM,
                note=note,
                answered_by="intercept:i1",
            ),
            rec(Direction.TO_CLIENT, {"id": 7, "result": {"content": []}}),
        ],
    )

    taken = plan.answers.take("elicitation/create", NAME)
    again = plan.answers.take("elicitation/create", NAME)

    assert not isinstance(taken, AnswerMiss)
    assert taken.answer == desk
    assert isinstance(again, AnswerMiss)  # given once, as any recorded answer
    assert plan.retries == []  # the proxy's answer is no request of the client's to send again


def test_an_answer_the_proxy_relayed_for_the_client_is_not_taken_for_the_intercepts() -> None:
    # Behind a bridge the upstream side holds the bridge's relay of the client's own answer: the
    # client's answer is the recording's, and nothing is the intercept's.
    plan = plan_chain(
        summary("tools/call"),
        [
            rec(Direction.TO_SERVER, {"id": 7, "method": "tools/call", "params": {"name": "ask_name"}}),
            rec(
                Direction.TO_CLIENT,
                {"id": 1, "method": "elicitation/create", "params": NAME},
                side=Side.UPSTREAM,
            ),
            rec(Direction.TO_SERVER, {"id": 1, "result": {"action": "decline"}}, side=Side.UPSTREAM),
            rec(Direction.TO_CLIENT, {"id": 7, "result": {"content": []}}),
        ],
    )

    assert plan.answers.by_proxy == []
    assert isinstance(plan.answers.take("elicitation/create", NAME), AnswerMiss)


def test_a_records_note_alone_never_makes_it_the_intercepts_answer() -> None:
    # The note is for people: a record says it was made in the client's place by `answered_by` only.
    note = "typed at the proxy's intercept (i1), sent in the client's place"
    plan = plan_chain(
        summary("tools/call"),
        [
            rec(Direction.TO_SERVER, {"id": 7, "method": "tools/call", "params": {"name": "ask_name"}}),
            rec(
                Direction.TO_CLIENT,
                {"id": 1, "method": "elicitation/create", "params": NAME},
                side=Side.UPSTREAM,
            ),
            rec(
                Direction.TO_SERVER, {"id": 1, "result": {"action": "decline"}}, side=Side.UPSTREAM, note=note
            ),
            rec(Direction.TO_CLIENT, {"id": 7, "result": {"content": []}}),
        ],
    )

    assert plan.answers.by_proxy == []
