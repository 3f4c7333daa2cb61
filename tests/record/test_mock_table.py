"""The mock's table: recorded chains become operations with their rounds, matched and missed by name.

Chains are written here as the chain builder emits them (ChainOpened, then MessageRecorded events),
in the shapes real SDK peers produce (the e2e tests in tests/e2e/test_mock.py serve real captures).
"""

from __future__ import annotations

from typing import Any

from proxy.flows.events import (
    ChainOpened,
    ChainSummary,
    Channel,
    Direction,
    FlowEvent,
    MessageRecord,
    MessageRecorded,
    Mode,
    Side,
)
from proxy.record.mock_table import (
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    Miss,
    Operation,
    TableReport,
    build_table,
    match_key,
)

ASK_NAME = {"mode": "form", "message": "What is your name?", "requestedSchema": {"type": "object"}}
ASK_COLOR = {"mode": "form", "message": "Color?", "requestedSchema": {"type": "object"}}
META = {"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}


class Chain:
    """Events of one chain, written message by message."""

    def __init__(
        self,
        chain_id: str,
        era: str = "legacy",
        side: Side = Side.BOTH,
        *,
        method: str | None = None,
        mode: Mode = Mode.PASSTHROUGH,
    ) -> None:
        summary = ChainSummary(id=chain_id, started=0.0, upstream_era=era, mode=mode, method=method)
        self.events: list[FlowEvent] = [ChainOpened(chain=summary)]
        self.id = chain_id
        self.side = side

    def msg(self, direction: Direction, body: dict[str, Any], *, side: Side | None = None) -> Chain:
        kind = (
            "request"
            if "method" in body and "id" in body
            else "notification"
            if "method" in body
            else ("result" if "result" in body else "error")
        )
        record = MessageRecord(
            seq=len(self.events),
            ts=0.0,
            side=side or self.side,
            direction=direction,
            channel=Channel.POST,
            exchange="x1",
            kind=kind,
            jsonrpc_id=body.get("id"),
            method=body.get("method"),
            body=body,
        )
        self.events.append(MessageRecorded(chain_id=self.id, message=record))
        return self

    def to_server(self, body: dict[str, Any], **kw: Any) -> Chain:
        return self.msg(Direction.TO_SERVER, {"jsonrpc": "2.0", **body}, **kw)

    def to_client(self, body: dict[str, Any], **kw: Any) -> Chain:
        return self.msg(Direction.TO_CLIENT, {"jsonrpc": "2.0", **body}, **kw)


def call(msg_id: Any, name: str, arguments: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    params: dict[str, Any] = {"name": name, "arguments": arguments or {}, **extra}
    return {"id": msg_id, "method": "tools/call", "params": params}


def text(value: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": value}], "isError": False}


def only(table_ops: dict[str, list[Operation]]) -> Operation:
    (ops,) = table_ops.values()
    (op,) = ops
    return op


def test_in_flight_questions_asked_one_after_another_answer_are_rounds_of_their_own() -> None:
    chain = (
        Chain("r1")
        .to_server(call(5, "ask_twice"))
        .to_client({"id": 5, "method": "elicitation/create", "params": ASK_NAME})
        .to_server({"id": 5, "result": {"action": "accept", "content": {"name": "octocat"}}})
        .to_client({"id": 6, "method": "elicitation/create", "params": ASK_COLOR})
        .to_server({"id": 6, "error": {"code": -1, "message": "no"}})
        .to_client({"id": 5, "result": text("done")})
    )

    op = only(build_table(chain.events).operations)

    assert [[(a.method, a.params) for a in r.asks] for r in op.rounds] == [
        [("elicitation/create", ASK_NAME)],
        [("elicitation/create", ASK_COLOR)],
    ]
    assert op.rounds[0].asks[0].answer == {"action": "accept", "content": {"name": "octocat"}}
    assert op.rounds[1].asks[0].answer == {"error": {"code": -1, "message": "no"}}
    assert op.answer == {"result": text("done")}  # the client's id 5 and the server's id 5 never mix


def test_in_flight_questions_sent_before_any_answer_share_one_round() -> None:
    chain = (
        Chain("r1")
        .to_server(call(1, "ask_two_at_once"))
        .to_client({"id": 1, "method": "elicitation/create", "params": ASK_NAME})
        .to_client({"id": 2, "method": "sampling/createMessage", "params": {"maxTokens": 5}})
        .to_server({"id": 2, "result": {"role": "assistant"}})
        .to_server({"id": 1, "result": {"action": "accept"}})
        .to_client({"id": 1, "result": text("both")})
    )

    op = only(build_table(chain.events).operations)

    (round_,) = op.rounds
    assert [(a.key, a.method, a.answer) for a in round_.asks] == [
        ("ask-1", "elicitation/create", {"action": "accept"}),
        ("ask-2", "sampling/createMessage", {"role": "assistant"}),
    ]


def test_mrtr_rounds_keep_their_keys_and_take_the_answers_of_each_retry() -> None:
    first = {
        "resultType": "input_required",
        "inputRequests": {"name": {"method": "elicitation/create", "params": ASK_NAME}},
        "requestState": "<redacted len=40 sha256:ab>",
    }
    second = {
        "resultType": "input_required",
        "inputRequests": {"color": {"method": "elicitation/create", "params": ASK_COLOR}},
        "requestState": "<redacted len=40 sha256:cd>",
    }
    chain = (
        Chain("r4", era="modern")
        .to_server(call(5, "ask_twice", **META))
        .to_client({"id": 5, "result": first})
        .to_server(call(6, "ask_twice", inputResponses={"name": {"action": "accept"}}, requestState="x"))
        .to_client({"id": 6, "result": second})
        .to_server(call(7, "ask_twice", inputResponses={"color": {"action": "decline"}}, requestState="y"))
        .to_client({"id": 7, "result": {"resultType": "complete", **text("ok")}})
    )

    table = build_table(chain.events)
    op = only(table.operations)

    assert [[(a.key, a.answer) for a in r.asks] for r in op.rounds] == [
        [("name", {"action": "accept"})],
        [("color", {"action": "decline"})],
    ]
    assert op.answer == {"result": {"resultType": "complete", **text("ok")}}
    assert table.era == "modern"


def test_behind_a_bridge_only_the_servers_side_is_recorded_as_the_operation() -> None:
    chain = (
        Chain("r2", era="modern", side=Side.CLIENT)
        .to_server({"id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25"}})
        .to_server({"id": "leg-1", "method": "server/discover", "params": META}, side=Side.UPSTREAM)
        .to_client({"id": "leg-1", "result": {"supportedVersions": ["2026-07-28"]}}, side=Side.UPSTREAM)
        .to_client({"id": 1, "result": {"protocolVersion": "2025-11-25"}})
    )

    op = only(build_table(chain.events).operations)

    assert (op.method, op.answer) == ("server/discover", {"result": {"supportedVersions": ["2026-07-28"]}})


def test_behind_the_modern_to_legacy_bridge_its_own_handshake_is_served_as_one_never_as_the_call() -> None:
    # The bridge opens its upstream session on the call's chain, and a leg may reuse a JSON-RPC id.
    bridged_init = {"protocolVersion": "2025-11-25", "capabilities": {}, "serverInfo": {"name": "srv"}}
    client_init = {**bridged_init, "instructions": "from a legacy client's own handshake"}
    up = {"side": Side.UPSTREAM}
    bridged = (
        Chain("r1", side=Side.CLIENT, method="tools/call", mode=Mode.MRTR_TO_LEGACY)
        .to_server(call(1, "echo", {"text": "hello"}, **META))
        .to_server({"id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25"}}, **up)
        .to_client({"id": 1, "result": bridged_init}, **up)
        .to_server({"method": "notifications/initialized"}, **up)
        .to_server(call(1, "echo", {"text": "hello"}), **up)
        .to_client({"id": 1, "result": text("hello")}, **up)
        .to_client({"id": 1, "result": {"resultType": "complete", **text("hello")}})
    )
    passthrough = (
        Chain("r2", method="initialize")
        .to_server({"id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25"}})
        .to_client({"id": 1, "result": client_init})
    )
    report = TableReport()

    alone = build_table(bridged.events, report)
    mixed = build_table([*bridged.events, *passthrough.events])

    echoed = alone.lookup("tools/call", {"name": "echo", "arguments": {"text": "hello"}})
    handshake = alone.recorded("initialize")
    assert isinstance(echoed, Operation)
    assert echoed.answer == {"result": text("hello")}
    assert echoed.params == {"name": "echo", "arguments": {"text": "hello"}}
    assert handshake is not None
    assert (handshake.chain, handshake.answer) == ("r1", {"result": bridged_init})
    assert report.unanswered == 0
    own = mixed.recorded("initialize")  # a client's own recorded handshake comes before a bridge's
    assert own is not None
    assert (own.chain, own.answer) == ("r2", {"result": client_init})


def test_a_request_matches_whatever_its_meta_and_a_handshake_whatever_its_params() -> None:
    events = [
        *Chain("r1")
        .to_server(call(1, "add", {"a": 2, "b": 3}, **META))
        .to_client({"id": 1, "result": text("5")})
        .events,
        *Chain("r2")
        .to_server({"id": 2, "method": "initialize", "params": {"clientInfo": {"name": "a"}}})
        .to_client({"id": 2, "result": {"protocolVersion": "2025-11-25"}})
        .events,
    ]
    table = build_table(events)

    found = table.lookup("tools/call", {"name": "add", "arguments": {"b": 3, "a": 2}})
    handshake = table.lookup("initialize", {"clientInfo": {"name": "someone else"}})

    assert isinstance(found, Operation)
    assert found.chain == "r1"
    assert isinstance(handshake, Operation)
    assert handshake.chain == "r2"
    assert match_key("tools/call", {"name": "x"}) == match_key("tools/call", {"name": "x", "arguments": {}})


def test_the_same_call_recorded_twice_is_answered_in_recorded_order_then_the_last_repeats() -> None:
    events = [
        *Chain("r1").to_server(call(1, "roll")).to_client({"id": 1, "result": text("1")}).events,
        *Chain("r2").to_server(call(2, "roll")).to_client({"id": 2, "result": text("6")}).events,
    ]
    table = build_table(events)

    answers = [table.lookup("tools/call", {"name": "roll"}) for _ in range(3)]

    assert [a.chain for a in answers if isinstance(a, Operation)] == ["r1", "r2", "r2"]


def test_an_unmatched_call_is_refused_naming_the_nearest_recorded_call_of_its_method() -> None:
    events = [
        *Chain("r1")
        .to_server(call(1, "add", {"a": 2, "b": 3}))
        .to_client({"id": 1, "result": text("5")})
        .events,
        *Chain("r2")
        .to_server(call(2, "echo", {"text": "hi"}))
        .to_client({"id": 2, "result": text("hi")})
        .events,
    ]
    table = build_table(events)
    prompts = Chain("r3").to_server({"jsonrpc": "2.0", "id": 3, "method": "prompts/list"})
    greeting = Chain("r4").to_server(call(4, "greeting", {"name": "ada"}))  # reads more like the ask
    with_prompts = build_table(
        [
            *events,
            *prompts.to_client({"id": 3, "result": {"prompts": []}}).events,
            *greeting.to_client({"id": 4, "result": text("hi ada")}).events,
        ]
    )

    other_args = table.lookup("tools/call", {"name": "add", "arguments": {"a": 2, "b": 4}})
    other_method = table.lookup("prompts/get", {"name": "add"})
    its_family = with_prompts.lookup("prompts/get", {"name": "greeting", "arguments": {"name": "octocat"}})

    assert isinstance(other_args, Miss)
    assert other_args.code == INVALID_PARAMS
    assert other_args.message == (
        'mock: no recorded tools/call matches tools/call add {"a":2,"b":4}; '
        'nearest recorded: tools/call add {"a":2,"b":3} (chain r1); they differ at arguments.b'
    )
    assert isinstance(other_method, Miss)
    assert other_method.code == METHOD_NOT_FOUND
    assert other_method.message.startswith(
        "mock: prompts/get was never recorded; nearest recorded: tools/call add"
    )
    assert isinstance(its_family, Miss)  # a method of its own family is nearer than any tool call
    assert its_family.message.startswith(
        "mock: prompts/get was never recorded; nearest recorded: prompts/list"
    )


REDACTED_PW = "<redacted len=7 hmac:31712897>"
OTHER_PW = "<redacted len=7 hmac:0badf00d>"


def test_a_redacted_recorded_value_matches_any_value_and_the_recordings_own_stand_in_picks_its_call() -> None:
    events = [
        *Chain("r1")
        .to_server(call(1, "login", {"user": "bob", "password": REDACTED_PW}))
        .to_client({"id": 1, "result": text("welcome")})
        .events,
        *Chain("r2")
        .to_server(call(2, "login", {"user": "bob", "password": OTHER_PW}))
        .to_client({"id": 2, "result": text("wrong password")})
        .events,
        *Chain("r3")
        .to_server(call(3, "say", {"text": f"token {REDACTED_PW} used"}))
        .to_client({"id": 3, "result": text("said")})
        .events,
    ]
    table = build_table(events)
    table.masked = lambda params: {**params, "arguments": {**params["arguments"], "password": OTHER_PW}}

    any_password = build_table(events).lookup(
        "tools/call", call(9, "login", {"user": "bob", "password": 42})["params"]
    )
    hashed_as_r2 = table.lookup(
        "tools/call", call(9, "login", {"user": "bob", "password": "pw-two"})["params"]
    )
    within_text = table.lookup("tools/call", call(9, "say", {"text": "token s3cret-ABC used"})["params"])
    other_user = table.lookup("tools/call", call(9, "login", {"user": "alice", "password": "x"})["params"])

    assert isinstance(any_password, Operation)
    assert any_password.chain == "r1"
    assert isinstance(hashed_as_r2, Operation)
    assert hashed_as_r2.chain == "r2"
    assert isinstance(within_text, Operation)
    assert within_text.chain == "r3"
    assert isinstance(other_user, Miss)
    assert other_user.message.endswith("they differ at arguments.user")


def test_a_chain_the_server_never_answered_is_counted_not_served_and_a_cut_one_is_marked() -> None:
    unanswered = Chain("r1").to_server(call(1, "slow"))
    cut = Chain("r2").to_server(call(2, "big")).to_client({"id": 2, "result": text("x")})
    cut_record = cut.events[-1]
    assert isinstance(cut_record, MessageRecorded)
    cut.events[-1] = MessageRecorded(
        chain_id="r2",
        message=cut_record.message.model_copy(
            update={"body": {"$truncated": True, "size": 70_000, "preview": '{"jsonrpc":"2.0","id":2,'}}
        ),
    )
    report = TableReport()

    table = build_table([*unanswered.events, *cut.events], report)

    assert report.unanswered == 1
    op = only(table.operations)
    assert op.cut


def test_notifications_on_the_calls_stream_go_before_the_round_or_the_answer_they_preceded() -> None:
    def progress(value: int) -> dict[str, Any]:
        return {"method": "notifications/progress", "params": {"progressToken": 7, "progress": value}}

    chain = (
        Chain("r1")
        .to_server(call(1, "slow", _meta={"progressToken": 7}))
        .to_client(progress(1))
        .to_client({"id": 9, "method": "roots/list"})
        .to_server({"id": 9, "result": {"roots": []}})
        .to_client(progress(2))
        .to_client({"id": 1, "result": text("done")})
        .to_client(progress(3))  # after the answer: nothing to play back
    )

    op = only(build_table(chain.events).operations)

    assert [n["params"]["progress"] for n in op.rounds[0].notes] == [1]
    assert [n["params"]["progress"] for n in op.notes] == [2]


def test_a_pass_through_answer_the_proxy_replaced_is_served_as_the_server_sent_it() -> None:
    # A fault or an intercept put an error in the server's answer's place: the chain holds both legs.
    chain = (
        Chain("r1")
        .to_server(call(3, "add", {"a": 2, "b": 3}))
        .to_client({"id": 3, "result": text("5")}, side=Side.UPSTREAM)
        .to_client(
            {"id": 3, "error": {"code": -32050, "message": "fault injected by the proxy"}}, side=Side.CLIENT
        )
    )

    op = only(build_table(chain.events).operations)

    assert op.answer == {"result": text("5")}


def test_a_call_an_intercept_edited_is_matched_as_the_server_got_it() -> None:
    chain = (
        Chain("r1")
        .to_server(call(3, "echo", {"text": "hello"}), side=Side.CLIENT)
        .to_server(call(3, "echo", {"text": "edited"}), side=Side.UPSTREAM)
        .to_client({"id": 3, "result": text("edited")})
    )

    op = only(build_table(chain.events).operations)

    assert op.params["arguments"] == {"text": "edited"}
    assert op.answer == {"result": text("edited")}


def test_a_call_an_intercept_edited_is_keyed_as_the_server_got_it_though_recorded_relayed_first() -> None:
    # A capture writes the client's call `both` as it arrives, before anyone decides on it; the edit
    # follows as the server's leg. The server answered the edit, so that is what the mock serves it for.
    chain = (
        Chain("r1")
        .to_server(call(2, "add", {"a": 2, "b": 3}))
        .to_server(call(2, "add", {"a": 40, "b": 3}), side=Side.UPSTREAM)
        .to_client({"id": 2, "result": text("43")})
    )

    table = build_table(chain.events)
    op = only(table.operations)

    assert op.params["arguments"] == {"a": 40, "b": 3}
    assert op.rounds == ()
    assert isinstance(table.lookup("tools/call", {"name": "add", "arguments": {"a": 2, "b": 3}}), Miss)
    assert table.lookup("tools/call", {"name": "add", "arguments": {"a": 40, "b": 3}}) is op


def test_a_clients_answer_an_intercept_edited_is_recorded_as_the_server_got_it() -> None:
    chain = (
        Chain("r1")
        .to_server(call(2, "ask_name"))
        .to_client({"id": 1, "method": "elicitation/create", "params": ASK_NAME})
        .to_server({"id": 1, "result": {"action": "accept", "content": {"name": "client"}}})
        .to_server({"id": 1, "result": {"action": "accept", "content": {"name": "edit"}}}, side=Side.UPSTREAM)
        .to_client({"id": 2, "result": text("Hello, edit!")})
    )

    op = only(build_table(chain.events).operations)

    assert [[a.answer for a in r.asks] for r in op.rounds] == [
        [{"action": "accept", "content": {"name": "edit"}}]
    ]


def test_an_answer_the_intercept_gave_in_the_clients_place_is_the_recorded_answer() -> None:
    # The server's question never reached the client: its leg and the proxy's answer are `upstream`.
    answer = {"action": "accept", "content": {"name": "the desk"}}
    chain = (
        Chain("r1")
        .to_server(call(2, "ask_name"))
        .to_client({"id": 1, "method": "elicitation/create", "params": ASK_NAME}, side=Side.UPSTREAM)
        .to_server({"id": 1, "result": answer}, side=Side.UPSTREAM)
        .to_client({"id": 2, "result": text("Hello, the desk!")})
    )

    op = only(build_table(chain.events).operations)

    assert [[a.answer for a in r.asks] for r in op.rounds] == [[answer]]
