"""The chain builder: every observed message lands in the chain of the client operation it serves.

Each test plays the transport's part (open an exchange, report messages both ways, the response head,
the close) against a builder with a fake clock and a list sink, then reads the chains in the store and
the flow events on the sink.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from proxy.flows.chains import ChainBuilder
from proxy.flows.events import (
    ChainChanged,
    ChainOpened,
    ChainStatus,
    ChainSummary,
    Channel,
    Direction,
    FlowEvent,
    MessageRecorded,
    Mode,
    SessionChanged,
    event_to_json,
)
from proxy.flows.exchange_closing import LEGACY_LEFT_BRIDGE, MODERN_CANCEL, NO_STREAM_NOTE
from proxy.flows.observations import LATE_CANCEL_S
from proxy.flows.redact import Redactor
from proxy.flows.retries import AMBIGUOUS_RETRY, NO_FIT, OTHER_AUTHORIZATION_RETRY
from proxy.flows.store import Chain, ChainStore
from proxy.wire.jsonrpc import classify_value, error_response, notification, request, result_response
from proxy.wire.mcp import META_CLIENT_INFO, META_PROTOCOL_VERSION

SSE = "text/event-stream"
JSON = "application/json"
SESSION = "sess-7f3a-secret-session-value"
STATE_1 = "opaque-state-round-one-XYZ"
STATE_2 = "opaque-state-round-two-QRS"


class Clock:
    """A clock the test moves by hand (binary-exact steps keep the millisecond sums exact)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class World:
    """A builder wired to a fake clock, a list sink and a store: the transport's view of it."""

    clock: Clock = field(default_factory=Clock)
    events: list[FlowEvent] = field(default_factory=list)
    store: ChainStore = field(default_factory=ChainStore)
    redactor: Redactor = field(default_factory=Redactor)
    body_limit: int = 65536
    builder: ChainBuilder = field(init=False)

    def __post_init__(self) -> None:
        self.builder = ChainBuilder(
            self.store, self.events.append, self.redactor, clock=self.clock, body_limit=self.body_limit
        )

    # -- the client side --------------------------------------------------------------------------

    def open(
        self,
        exchange: str,
        *,
        method: str = "POST",
        session: str | None = None,
        connection: str | None = None,
        **headers: str,
    ) -> None:
        sent = {k.replace("_", "-"): v for k, v in headers.items()}
        if session is not None:
            sent["Mcp-Session-Id"] = session
        self.builder.open_exchange(
            exchange, http_method=method, path="/mcp", headers=sent, session=session, connection=connection
        )

    def up(self, exchange: str, value: dict[str, Any]) -> str | None:
        """The client sent this message on the exchange's POST."""
        return self.builder.message(
            exchange, classify_value(value), size=100, direction=Direction.TO_SERVER, channel=Channel.POST
        )

    def post(
        self,
        exchange: str,
        value: dict[str, Any],
        *,
        session: str | None = None,
        connection: str | None = None,
        **headers: str,
    ) -> str:
        """Open a POST exchange carrying one message; return the chain it joined."""
        self.open(exchange, session=session, connection=connection, **headers)
        chain_id = self.up(exchange, value)
        assert chain_id is not None
        return chain_id

    # -- the upstream side ------------------------------------------------------------------------

    def head(self, exchange: str, status: int = 200, content_type: str | None = SSE, **headers: str) -> None:
        sent = {k.replace("_", "-"): v for k, v in headers.items()}
        if content_type is not None:
            sent["Content-Type"] = content_type
        self.builder.response_head(exchange, status=status, content_type=content_type, headers=sent)

    def down(self, exchange: str, value: dict[str, Any], channel: Channel = Channel.SSE) -> str | None:
        """The upstream sent this message on the exchange's response."""
        return self.builder.message(
            exchange, classify_value(value), size=50, direction=Direction.TO_CLIENT, channel=channel
        )

    def close(self, exchange: str, outcome: str | None = None) -> None:
        self.builder.close_exchange(exchange, outcome)

    # -- reading ------------------------------------------------------------------------------------

    def chain(self, chain_id: str | None) -> Chain:
        assert chain_id is not None
        chain = self.store.get(chain_id)
        assert chain is not None, f"chain {chain_id} not in the store"
        return chain

    def summary(self, chain_id: str | None) -> ChainSummary:
        return self.chain(chain_id).summary

    def trail(self, chain_id: str | None) -> list[tuple[str, str, str, str | None]]:
        """(exchange, direction, kind, method) of each message the chain holds, in order."""
        return [(m.exchange, m.direction.value, m.kind, m.method) for m in self.chain(chain_id).messages]

    def of_type(self, kind: type[Any]) -> list[Any]:
        return [event for event in self.events if isinstance(event, kind)]


def meta(**extra: Any) -> dict[str, Any]:
    return {META_PROTOCOL_VERSION: "2026-07-28", **extra}


def call(
    ident: int, name: str = "deploy", args: dict[str, Any] | None = None, **params: Any
) -> dict[str, Any]:
    return request(ident, "tools/call", {"name": name, "arguments": args or {"env": "prod"}, **params})


def elicit(ident: int) -> dict[str, Any]:
    return request(ident, "elicitation/create", {"message": "Really?", "requestedSchema": {"type": "object"}})


def input_required(
    ident: int, keys: tuple[str, ...] = ("confirm",), state: str | None = None
) -> dict[str, Any]:
    result: dict[str, Any] = {
        "resultType": "input_required",
        "inputRequests": {key: {"method": "elicitation/create", "params": {"message": key}} for key in keys},
    }
    if state is not None:
        result["requestState"] = state
    return result_response(ident, result)


def retry(
    ident: int, answers: tuple[str, ...] = ("confirm",), state: str | None = None, **params: Any
) -> dict[str, Any]:
    extra: dict[str, Any] = {"inputResponses": {key: {"action": "accept"} for key in answers}}
    if state is not None:
        extra["requestState"] = state
    return call(ident, _meta=meta(), **extra, **params)


def done(ident: int, **result: Any) -> dict[str, Any]:
    return result_response(ident, {"content": [{"type": "text", "text": "ok"}], **result})


def progress(value: int) -> dict[str, Any]:
    return notification("notifications/progress", {"progressToken": "p", "progress": value})


@pytest.fixture
def world() -> World:
    return World()


# -- legacy: in-flight requests on the POST's stream -------------------------------------------------


def legacy_call_with_elicitation(world: World) -> str:
    """A legacy tools/call whose SSE stream asks the user something; the answer comes on another POST."""
    cid = world.post("x1", call(1), session=SESSION)
    world.head("x1", 200, SSE)
    world.clock.advance(0.25)
    assert world.down("x1", elicit(0)) == cid
    assert world.summary(cid).status is ChainStatus.WAITING_CLIENT

    world.clock.advance(2.0)  # the human thinks
    assert (
        world.post("x2", result_response(0, {"action": "accept", "content": {"ok": True}}), session=SESSION)
        == cid
    )
    assert world.summary(cid).status is ChainStatus.PENDING
    world.head("x2", 202, None)
    world.close("x2")

    world.clock.advance(0.5)
    assert world.down("x1", progress(1)) == cid
    assert world.down("x1", done(1)) == cid
    world.close("x1")
    return cid


def test_the_answer_to_an_in_flight_request_joins_the_chain_of_the_call_that_asked(world: World) -> None:
    cid = legacy_call_with_elicitation(world)

    assert world.trail(cid) == [
        ("x1", "to_server", "request", "tools/call"),
        ("x1", "to_client", "request", "elicitation/create"),
        ("x2", "to_server", "result", None),
        ("x2", "to_client", "http", None),
        ("x1", "to_client", "notification", "notifications/progress"),
        ("x1", "to_client", "result", None),
    ]
    summary = world.summary(cid)
    assert (summary.status, summary.nested, summary.method, summary.name) == (
        ChainStatus.OK,
        1,
        "tools/call",
        "deploy",
    )
    assert len(world.of_type(ChainOpened)) == 1


def test_time_waiting_on_the_client_is_split_from_time_spent_upstream(world: World) -> None:
    cid = legacy_call_with_elicitation(world)

    summary = world.summary(cid)
    assert summary.duration_ms == 2750.0
    assert summary.client_wait_ms == 2000.0
    assert summary.upstream_ms == 750.0


def test_progress_notifications_on_the_stream_join_the_chain(world: World) -> None:
    cid = world.post("x1", call(1), session=SESSION)
    world.head("x1", 200, SSE)

    assert world.down("x1", progress(1)) == cid
    assert world.down("x1", progress(2)) == cid
    assert world.down("x1", done(1)) == cid

    assert [m.method for m in world.chain(cid).messages] == [
        "tools/call",
        "notifications/progress",
        "notifications/progress",
        None,
    ]
    assert world.summary(cid).status is ChainStatus.OK


def test_a_cancellation_joins_the_chain_of_the_request_it_cancels(world: World) -> None:
    cid = world.post("x1", call(5), session=SESSION)
    world.head("x1", 200, SSE)

    joined = world.post("x2", notification("notifications/cancelled", {"requestId": 5}), session=SESSION)

    assert joined == cid
    assert "cancelled by the client" in world.summary(cid).notes
    assert world.trail(cid)[-1] == ("x2", "to_server", "notification", "notifications/cancelled")


def test_a_call_the_client_cancelled_ends_cancelled_not_in_error_whatever_the_server_answers(
    world: World,
) -> None:
    cid = world.post("x1", call(5), session=SESSION)
    world.head("x1", 200, SSE)
    world.post("x2", notification("notifications/cancelled", {"requestId": 5}), session=SESSION)
    world.down("x1", error_response(5, -32800, "Request cancelled"))

    summary = world.summary(cid)
    assert summary.status is ChainStatus.CANCELLED
    assert summary.error == "-32800: Request cancelled"  # the server's answer is kept
    assert summary.ended is not None


def test_a_modern_client_closing_its_stream_before_the_answer_cancels_and_a_legacy_one_fails(
    world: World,
) -> None:
    for exchange, era, ident in (("x1", "modern", 1), ("x2", "legacy", 2)):
        world.builder.open_exchange(
            exchange, http_method="POST", path="/mcp", headers={}, session=None, client_era=era
        )
        world.up(exchange, call(ident, _meta=meta()) if era == "modern" else call(ident))
        world.head(exchange, 200, SSE)
        world.close(exchange, "client_disconnected")
    modern, legacy = (next(c.summary for c in world.store if c.summary.jsonrpc_id == i) for i in (1, 2))
    assert (modern.status, modern.error) == (ChainStatus.CANCELLED, "client_disconnected")
    assert MODERN_CANCEL in modern.notes
    assert legacy.status is ChainStatus.ERROR  # a legacy client's stream may drop without a cancel


def test_a_legacy_client_hanging_up_on_the_legacy_to_2026_bridge_notes_what_became_of_the_upstream(
    world: World,
) -> None:
    """The bridge closes the call's upstream 2026-07-28 stream, which is that era's cancel: the chain
    says so, as it does for the other ways a call is cancelled, and still ends in error once no
    cancel of the client's came within the window."""
    world.builder.open_exchange(
        "x1", http_method="POST", path="/mcp", headers={}, session=SESSION, client_era="legacy",
        mode=Mode.LEGACY_TO_MRTR,
    )  # fmt: skip
    world.up("x1", call(5))
    world.head("x1", 200, SSE)
    world.close("x1", "client_disconnected")
    world.builder.sweep(world.clock.now + LATE_CANCEL_S + 0.5)
    summary = next(c.summary for c in world.store if c.summary.jsonrpc_id == 5)
    assert (summary.status, summary.error) == (ChainStatus.ERROR, "client_disconnected")
    assert summary.notes == [LEGACY_LEFT_BRIDGE]


def test_a_cancellation_just_after_its_request_closed_unanswered_joins_that_requests_chain(
    world: World,
) -> None:
    """The TypeScript SDK v2 closes a `subscriptions/listen` (or aborts a call) before it sends the
    `notifications/cancelled` naming it: the cancel still belongs to that request's chain."""
    world.builder.open_exchange(
        "x1", http_method="POST", path="/mcp", headers={}, session=None, client_era="modern"
    )
    cid = world.up("x1", request("listen:0", "subscriptions/listen", {"_meta": meta()}))
    world.head("x1", 200, SSE)
    world.close("x1", "client_disconnected")

    world.builder.open_exchange(
        "x2", http_method="POST", path="/mcp", headers={}, session=None, client_era="modern"
    )
    joined = world.up("x2", notification("notifications/cancelled", {"requestId": "listen:0"}))

    assert joined == cid
    assert world.summary(cid).status is ChainStatus.CANCELLED
    assert world.trail(cid)[-1] == ("x2", "to_server", "notification", "notifications/cancelled")
    assert [c.summary.method for c in world.store] == ["subscriptions/listen"]


def test_a_cancellation_long_after_its_request_closed_opens_a_chain_of_its_own(world: World) -> None:
    cid = world.post("x1", call(5), session=SESSION)
    world.close("x1", "client_disconnected")
    world.clock.advance(LATE_CANCEL_S + 1)

    other = world.post("x2", notification("notifications/cancelled", {"requestId": 5}), session=SESSION)

    assert other != cid
    assert world.summary(other).method == "notifications/cancelled"


def test_a_cancellation_in_another_session_does_not_join(world: World) -> None:
    cid = world.post("x1", call(5), session=SESSION)

    other = world.post(
        "x2", notification("notifications/cancelled", {"requestId": 5}), session="other-session"
    )

    assert other != cid
    assert world.summary(other).method == "notifications/cancelled"


def test_messages_on_the_get_stream_join_the_get_chain_and_so_do_the_answers(world: World) -> None:
    world.open("g1", method="GET", session=SESSION)
    world.head("g1", 200, SSE)
    (opened,) = world.of_type(ChainOpened)
    gid = opened.chain.id
    assert opened.chain.method == "GET stream"

    assert world.down("g1", notification("notifications/tools/list_changed"), Channel.GET_SSE) == gid
    assert world.down("g1", request(9, "roots/list"), Channel.GET_SSE) == gid
    assert world.summary(gid).status is ChainStatus.WAITING_CLIENT
    assert world.post("x2", result_response(9, {"roots": []}), session=SESSION) == gid
    world.close("x2")
    world.close("g1")

    summary = world.summary(gid)
    assert (summary.status, summary.nested) == (ChainStatus.OK, 1)
    assert [kind for _, _, kind, _ in world.trail(gid)] == ["http", "notification", "request", "result"]


def test_a_get_stream_that_fails_ends_its_chain_in_error(world: World) -> None:
    world.open("g1", method="GET", session=SESSION)
    world.head("g1", 404, None)
    world.close("g1")

    (opened,) = world.of_type(ChainOpened)
    assert world.summary(opened.chain.id).status is ChainStatus.ERROR


def test_a_get_stream_the_server_declines_with_405_ends_ok_saying_it_offers_none(world: World) -> None:
    """405 is the transport's one alternative to an event stream: the server offers none there."""
    world.open("g1", method="GET", session=SESSION)
    world.head("g1", 405, None)
    world.close("g1")

    (opened,) = world.of_type(ChainOpened)
    summary = world.summary(opened.chain.id)
    assert (summary.status, summary.error) == (ChainStatus.OK, None)
    assert summary.notes == [NO_STREAM_NOTE]


# -- sessions --------------------------------------------------------------------------------------


def initialize(world: World) -> str:
    cid = world.post(
        "x1",
        request(0, "initialize", {"protocolVersion": "2025-11-25", "clientInfo": {"name": "claude-code"}}),
    )
    world.head("x1", 200, JSON, Mcp_Session_Id=SESSION)
    world.down("x1", result_response(0, {"protocolVersion": "2025-11-25", "capabilities": {}}), Channel.JSON)
    world.close("x1")
    return cid


def test_an_initialize_answered_with_a_session_id_opens_a_session(world: World) -> None:
    cid = initialize(world)

    (opened,) = world.of_type(SessionChanged)
    assert opened.state == "opened"
    assert opened.client_name == "claude-code"
    assert opened.protocol_version == "2025-11-25"
    assert opened.session == world.redactor.token(SESSION)
    summary = world.summary(cid)
    assert (summary.status, summary.client_name) == (ChainStatus.OK, "claude-code")
    assert summary.session == world.redactor.token(SESSION)


def test_later_chains_of_the_session_carry_the_clients_name(world: World) -> None:
    initialize(world)

    cid = world.post("x2", request(1, "tools/list"), session=SESSION)

    summary = world.summary(cid)
    assert summary.client_name == "claude-code"
    assert summary.session == world.redactor.token(SESSION)


def test_the_initialized_notification_joins_the_initialize_chain(world: World) -> None:
    cid = initialize(world)

    assert world.post("x2", notification("notifications/initialized"), session=SESSION) == cid


def test_a_message_joining_an_ended_chain_is_counted_in_a_headline_announced_after_it(world: World) -> None:
    """A feed reader takes a chain's last `chain_changed` as its headline: the initialized
    notification joins the initialize chain after it ended, and the headline says so."""
    cid = initialize(world)
    before = world.summary(cid).messages

    world.post("x2", notification("notifications/initialized"), session=SESSION)

    last = [e for e in world.events if isinstance(e, ChainChanged) and e.chain.id == cid][-1]
    assert last.chain.messages == before + 1 == world.summary(cid).messages
    assert last.chain.bytes_to_server == world.summary(cid).bytes_to_server
    assert world.events[-1] is last  # announced after the message it counts


def test_a_delete_ends_the_session(world: World) -> None:
    initialize(world)
    world.open("d1", method="DELETE", session=SESSION)
    world.head("d1", 200, None)
    world.close("d1")

    assert [e.state for e in world.of_type(SessionChanged)] == ["opened", "ended"]


def test_a_modern_request_names_its_client_from_meta(world: World) -> None:
    cid = world.post("x1", call(1, _meta=meta(**{META_CLIENT_INFO: {"name": "inspector"}})))

    assert world.summary(cid).client_name == "inspector"


# -- MRTR rounds -----------------------------------------------------------------------------------


def test_a_retry_carrying_the_request_state_joins_the_chain_and_completes_it(world: World) -> None:
    cid = world.post("x1", call(1, _meta=meta()))
    world.head("x1", 200, JSON)
    world.clock.advance(0.25)
    world.down("x1", input_required(1, state=STATE_1), Channel.JSON)
    world.close("x1")
    assert world.summary(cid).status is ChainStatus.WAITING_CLIENT

    world.clock.advance(3.0)
    assert world.post("x2", retry(2, state=STATE_1)) == cid
    summary = world.summary(cid)
    assert (summary.rounds, summary.status, summary.jsonrpc_id) == (2, ChainStatus.PENDING, 2)

    world.head("x2", 200, JSON)
    world.clock.advance(0.5)
    assert world.down("x2", done(2), Channel.JSON) == cid
    world.close("x2")

    summary = world.summary(cid)
    assert (summary.status, summary.rounds, summary.error) == (ChainStatus.OK, 2, None)
    assert (summary.duration_ms, summary.client_wait_ms, summary.upstream_ms) == (3750.0, 3000.0, 750.0)
    assert [m.round for m in world.chain(cid).messages] == [1, 1, 2, 2]
    assert len(world.of_type(ChainOpened)) == 1


def test_each_round_with_a_new_state_joins_the_same_chain(world: World) -> None:
    cid = world.post("x1", call(1, _meta=meta()))
    world.down("x1", input_required(1, ("step1",), STATE_1), Channel.JSON)
    assert world.post("x2", retry(2, ("step1",), STATE_1)) == cid
    world.down("x2", input_required(2, ("step2",), STATE_2), Channel.JSON)
    assert world.post("x3", retry(3, ("step2",), STATE_2)) == cid
    world.down("x3", done(3), Channel.JSON)

    summary = world.summary(cid)
    assert (summary.rounds, summary.status) == (3, ChainStatus.OK)


def test_a_retry_without_request_state_is_matched_by_method_name_arguments_and_answered_keys(
    world: World,
) -> None:
    cid = world.post("x1", call(1, args={"env": "prod"}, _meta=meta()))
    world.down("x1", input_required(1, ("confirm", "reason")), Channel.JSON)
    other = world.post("x9", call(9, args={"env": "staging"}, _meta=meta()))
    world.down("x9", input_required(9, ("confirm",)), Channel.JSON)

    assert world.post("x2", retry(2, ("confirm", "reason"), args={"env": "prod"})) == cid
    world.down("x2", done(2), Channel.JSON)

    assert world.summary(cid).rounds == 2
    assert world.summary(cid).status is ChainStatus.OK
    assert world.summary(other).status is ChainStatus.WAITING_CLIENT


def test_a_retry_answering_keys_that_were_not_asked_opens_a_new_chain(world: World) -> None:
    cid = world.post("x1", call(1, _meta=meta()))
    world.down("x1", input_required(1, ("confirm",)), Channel.JSON)

    new = world.post("x2", retry(2, ("something_else",)))

    assert new != cid
    assert world.summary(new).notes == [NO_FIT]


def test_lookalike_retries_of_two_clients_continue_each_clients_own_call_by_its_authorization(
    world: World,
) -> None:
    alice = world.post("x1", call(1, _meta=meta()), Authorization="Bearer alice")
    world.down("x1", input_required(1), Channel.JSON)
    bob = world.post("x2", call(1, _meta=meta()), Authorization="Bearer bob")
    world.down("x2", input_required(1), Channel.JSON)

    assert world.post("x3", retry(2), Authorization="Bearer bob") == bob
    assert world.post("x4", retry(2), Authorization="Bearer alice") == alice
    assert world.summary(alice).notes == world.summary(bob).notes == []


def test_a_retry_continuing_a_call_made_with_another_authorization_says_so(world: World) -> None:
    alice = world.post("x1", call(1, _meta=meta()), Authorization="Bearer alice")
    world.down("x1", input_required(1), Channel.JSON)
    anyone = world.post("x2", call(2, _meta=meta()))
    world.down("x2", input_required(2), Channel.JSON)

    assert world.post("x3", retry(3), Authorization="Bearer mallory") == alice
    assert world.post("x4", retry(4)) == anyone  # anonymous, as its call was: nothing to say

    assert world.summary(alice).notes == [
        AMBIGUOUS_RETRY.format(ident=3, count=2),
        OTHER_AUTHORIZATION_RETRY.format(ident=3),
    ]
    assert world.summary(anyone).notes == []


def test_a_lone_fitting_call_continued_by_a_retry_with_another_authorization_says_so(world: World) -> None:
    alice = world.post("x1", call(1, _meta=meta()), Authorization="Bearer alice")
    world.down("x1", input_required(1), Channel.JSON)

    assert world.post("x2", retry(2)) == alice

    assert world.summary(alice).notes == [OTHER_AUTHORIZATION_RETRY.format(ident=2)]


def test_lookalike_retries_of_two_clients_continue_each_clients_own_call_by_its_connection(
    world: World,
) -> None:
    alice = world.post("x1", call(1, _meta=meta()), connection="k1")
    world.down("x1", input_required(1), Channel.JSON)
    bob = world.post("x2", call(1, _meta=meta()), connection="k2")
    world.down("x2", input_required(1), Channel.JSON)

    assert world.post("x3", retry(2), connection="k2") == bob
    assert world.post("x4", retry(2), connection="k1") == alice
    assert world.summary(alice).notes == world.summary(bob).notes == []


def test_a_retry_that_fits_two_calls_nothing_tells_apart_continues_the_oldest_and_says_so(
    world: World,
) -> None:
    first = world.post("x1", call(1, _meta=meta()))
    world.down("x1", input_required(1), Channel.JSON)
    second = world.post("x2", call(2, _meta=meta()))
    world.down("x2", input_required(2), Channel.JSON)

    assert world.post("x3", retry(3)) == first
    assert world.post("x4", retry(4)) == second

    assert world.summary(first).notes == [AMBIGUOUS_RETRY.format(ident=3, count=2)]
    assert world.summary(second).notes == []
    assert (world.summary(first).rounds, world.summary(second).rounds) == (2, 2)
    assert len(world.of_type(ChainOpened)) == 2


def test_a_retry_with_an_unknown_request_state_opens_a_new_chain_with_a_note(world: World) -> None:
    cid = world.post("x1", call(1, _meta=meta()))
    world.down("x1", input_required(1, state=STATE_1), Channel.JSON)

    new = world.post("x2", retry(2, state=STATE_1 + "-TAMPERED"))

    assert new != cid
    assert world.summary(new).notes == ["retry carries a requestState no chain is waiting for"]
    assert world.summary(cid).status is ChainStatus.WAITING_CLIENT


def test_a_request_state_is_matched_once_only(world: World) -> None:
    cid = world.post("x1", call(1, _meta=meta()))
    world.down("x1", input_required(1, state=STATE_1), Channel.JSON)
    assert world.post("x2", retry(2, state=STATE_1)) == cid

    replay = world.post("x3", retry(3, state=STATE_1))

    assert replay != cid


def test_a_retry_without_state_still_joins_when_the_recorded_request_was_truncated() -> None:
    world = World(body_limit=64)
    cid = world.post("x1", call(1, args={"text": "x" * 500}, _meta=meta()))
    world.down("x1", input_required(1), Channel.JSON)
    assert world.chain(cid).messages[0].truncated

    assert world.post("x2", retry(2, args={"text": "x" * 500})) == cid


def test_a_retry_without_state_still_joins_when_an_argument_is_redacted() -> None:
    world = World(redactor=Redactor(body_keys=["password"]))
    cid = world.post("x1", call(1, args={"user": "u", "password": "hunter2"}, _meta=meta()))
    world.down("x1", input_required(1), Channel.JSON)

    assert world.post("x2", retry(2, args={"user": "u", "password": "hunter2"})) == cid


# -- outcomes --------------------------------------------------------------------------------------


def test_an_error_response_ends_the_chain_in_error_with_its_code(world: World) -> None:
    cid = world.post("x1", call(1))
    world.head("x1", 200, JSON)
    world.down(
        "x1", {"jsonrpc": "2.0", "id": 1, "error": {"code": -32602, "message": "bad args"}}, Channel.JSON
    )

    summary = world.summary(cid)
    assert (summary.status, summary.error, summary.http_status) == (
        ChainStatus.ERROR,
        "-32602: bad args",
        200,
    )


def test_a_tool_result_flagged_is_error_ends_the_chain_in_error(world: World) -> None:
    cid = world.post("x1", call(1))
    world.down("x1", done(1, isError=True), Channel.JSON)

    summary = world.summary(cid)
    assert (summary.status, summary.error) == (ChainStatus.ERROR, "tool result isError")


def test_an_exchange_closed_without_a_response_ends_the_chain_with_the_outcome(world: World) -> None:
    cid = world.post("x1", call(1))
    world.head("x1", 200, SSE)
    world.close("x1", "upstream_cut")

    summary = world.summary(cid)
    assert (summary.status, summary.error) == (ChainStatus.ERROR, "upstream_cut")
    assert summary.ended is not None


def test_a_stream_that_ends_without_a_response_is_an_error(world: World) -> None:
    cid = world.post("x1", call(1))
    world.head("x1", 200, SSE)
    world.close("x1")

    summary = world.summary(cid)
    assert (summary.status, summary.error) == (ChainStatus.ERROR, "response stream ended without a response")


def test_an_http_error_without_a_json_rpc_answer_ends_the_chain_with_the_status(world: World) -> None:
    cid = world.post("x1", call(1))
    world.head("x1", 500, None)
    world.close("x1")

    summary = world.summary(cid)
    assert (summary.status, summary.error, summary.http_status) == (ChainStatus.ERROR, "HTTP 500", 500)
    assert world.trail(cid)[-1] == ("x1", "to_client", "http", None)


def test_a_notification_post_is_a_chain_that_is_ok_at_once(world: World) -> None:
    cid = world.post("x1", notification("notifications/roots/list_changed"))

    assert world.summary(cid).status is ChainStatus.OK


def test_an_invalid_client_body_is_a_chain_that_ends_in_error_with_the_upstreams_answer(world: World) -> None:
    world.open("x1")
    cid = world.builder.mark_invalid("x1", "not JSON", size=9, body=b"not json!")
    world.head("x1", 400, JSON)
    parse_error = {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "Parse error"}}
    assert world.down("x1", parse_error, Channel.JSON) == cid
    world.close("x1")

    summary = world.summary(cid)
    assert summary.invalid
    assert summary.notes == ["invalid request: not JSON"]
    assert (summary.status, summary.error, summary.http_status) == (
        ChainStatus.ERROR,
        "invalid request: not JSON",
        400,
    )
    assert [kind for _, _, kind, _ in world.trail(cid)] == ["invalid", "error"]
    assert world.of_type(ChainChanged)[-1].chain.invalid


def test_an_invalid_message_in_a_batch_is_its_own_chain_ending_in_error(world: World) -> None:
    world.open("x1")
    good = world.up("x1", request(1, "tools/list"))
    bad = world.up("x1", {"jsonrpc": "2.0", "id": True, "method": "ping"})

    assert bad != good
    summary = world.summary(bad)
    assert (summary.status, summary.invalid) == (ChainStatus.ERROR, True)
    assert summary.error == 'invalid message: "id" must be a string or integer'
    assert world.summary(good).status is ChainStatus.PENDING


def test_observers_see_a_chain_wait_on_the_client_and_resume(world: World) -> None:
    cid = legacy_call_with_elicitation(world)

    statuses = [e.chain.status for e in world.of_type(ChainChanged) if e.chain.id == cid]
    assert statuses == [ChainStatus.WAITING_CLIENT, ChainStatus.PENDING, ChainStatus.OK]


def test_observers_see_each_mrtr_round_begin(world: World) -> None:
    cid = world.post("x1", call(1, _meta=meta()))
    world.down("x1", input_required(1, state=STATE_1), Channel.JSON)
    world.post("x2", retry(2, state=STATE_1))
    world.down("x2", done(2), Channel.JSON)

    changes = [(e.chain.status, e.chain.rounds) for e in world.of_type(ChainChanged) if e.chain.id == cid]
    assert changes == [(ChainStatus.WAITING_CLIENT, 1), (ChainStatus.PENDING, 2), (ChainStatus.OK, 2)]


def test_a_chains_last_headline_counts_its_final_message(world: World) -> None:
    cid = legacy_call_with_elicitation(world)

    last = [e for e in world.events if isinstance(e, ChainChanged | MessageRecorded)][-1]
    assert isinstance(last, ChainChanged)
    assert last.chain == world.summary(cid)
    assert last.chain.messages == 6


def test_a_client_response_to_no_known_request_is_its_own_chain_with_a_note(world: World) -> None:
    cid = world.post("x1", result_response(77, {}), session=SESSION)

    summary = world.summary(cid)
    assert (summary.method, summary.status) == ("(response)", ChainStatus.OK)
    assert summary.notes == ["response to a request the proxy did not see"]


def test_a_second_answer_to_a_question_is_named_a_repeated_answer_not_an_unknown_response(
    world: World,
) -> None:
    cid = legacy_call_with_elicitation(world)
    again = world.post("x3", result_response(0, {"action": "decline"}), session=SESSION)

    summary = world.summary(again)
    assert again != cid
    assert (summary.method, summary.status) == ("(response)", ChainStatus.OK)
    assert summary.notes == [f"repeated answer to the question 0, already answered in chain {cid}"]
    made_up = world.summary(world.post("x4", result_response(99999, {}), session=SESSION))
    assert made_up.notes == ["response to a request the proxy did not see"]


def test_messages_on_an_unknown_exchange_are_ignored(world: World) -> None:
    assert world.down("never-opened", done(1)) is None
    assert world.builder.close_exchange("never-opened") is None
    assert world.events == []


def test_every_change_of_a_chains_headline_is_emitted(world: World) -> None:
    cid = world.post("x1", call(1))
    world.down("x1", done(1), Channel.JSON)

    assert [type(e) for e in world.events] == [ChainOpened, MessageRecorded, MessageRecorded, ChainChanged]
    assert world.of_type(ChainChanged)[-1].chain == world.summary(cid)


# -- bounds ----------------------------------------------------------------------------------------


def test_correlation_tables_drain_once_chains_complete(world: World) -> None:
    legacy_call_with_elicitation(world)
    cid = world.post("m1", call(1, _meta=meta()))
    world.down("m1", input_required(1, state=STATE_1), Channel.JSON)
    world.close("m1")
    world.post("m2", retry(2, state=STATE_1))
    world.down("m2", done(2), Channel.JSON)
    world.close("m2")
    assert world.summary(cid).status is ChainStatus.OK

    assert world.builder.correlation_sizes() == {"exchanges": 0, "nested": 0, "requests": 0, "retries": 0}


def test_correlation_tables_drain_when_an_exchange_dies_without_a_response(world: World) -> None:
    world.post("x1", call(1), session=SESSION)
    world.head("x1", 200, SSE)
    world.close("x1", "upstream_cut")
    world.post("x2", call(1, _meta=meta()))
    world.close("x2", "client_disconnected")

    assert world.builder.correlation_sizes() == {"exchanges": 0, "nested": 0, "requests": 0, "retries": 0}


def test_correlation_tables_are_bounded() -> None:
    world = World(store=ChainStore(max_chains=10))
    bound = 10_000
    for n in range(bound + 50):  # requests whose answers never come, exchanges never closed
        world.post(f"x{n}", call(n), session=SESSION)
        world.down(f"x{n}", elicit(n))

    sizes = world.builder.correlation_sizes()
    assert (sizes["requests"], sizes["nested"]) == (bound, bound)


def test_an_open_chain_the_ring_lets_go_still_gets_its_progress_and_result() -> None:
    world = World(store=ChainStore(max_chains=2))
    first = world.post("x1", call(1))
    world.post("x2", call(2))
    world.post("x3", call(3))

    assert world.store.evicted == 1
    assert [c.summary.id for c in world.store] == ["c2", "c3"]
    assert world.down("x1", progress(1)) == first
    assert world.down("x1", done(1), Channel.SSE) == first
    chain = world.chain(first)
    assert chain.summary.status is ChainStatus.OK
    assert [m.kind for m in chain.messages] == ["request", "notification", "result"]
    recorded = [e for e in world.of_type(MessageRecorded) if e.chain_id == first]
    assert len(recorded) == 3
    world.close("x1")
    assert world.store.held == 0, "an ended chain whose exchange closed is held no longer"
    assert world.store.get(first) is None
    assert len(world.store) == 2


def test_a_finished_chain_the_ring_lets_go_is_gone_and_late_messages_for_it_are_ignored() -> None:
    world = World(store=ChainStore(max_chains=2))
    first = world.post("x1", call(1))
    world.down("x1", done(1), Channel.JSON)
    world.close("x1")
    world.post("x2", call(2))
    world.post("x3", call(3))

    assert world.store.get(first) is None
    assert world.down("x1", progress(1)) is None
    assert world.store.held == 0


def test_open_chains_held_past_the_ring_are_bounded_and_the_excess_counted() -> None:
    world = World(store=ChainStore(max_chains=1, max_unfinished=2))
    ids = [world.post(f"x{n}", call(n)) for n in range(5)]

    assert world.store.held == 2
    assert world.store.abandoned == 2
    assert world.store.get(ids[0]) is None
    assert world.store.get(ids[2]) is not None


def test_a_chain_past_its_message_bound_counts_what_it_dropped() -> None:
    world = World(store=ChainStore(max_messages_per_chain=3))
    cid = world.post("x1", call(1))
    for n in range(5):
        world.down("x1", progress(n))
    world.down("x1", done(1))

    chain = world.chain(cid)
    assert len(chain.messages) == 3
    assert chain.dropped_messages == 4
    assert chain.summary.messages == 7
    assert chain.summary.status is ChainStatus.OK


# -- secrets ---------------------------------------------------------------------------------------


def test_no_emitted_event_holds_a_raw_session_id_or_request_state(world: World) -> None:
    initialize(world)
    legacy_call_with_elicitation(world)
    world.open("g1", method="GET", session=SESSION)
    world.head("g1", 200, SSE, Mcp_Session_Id=SESSION)
    world.close("g1", "client_disconnected")
    cid = world.post("m1", call(1, _meta=meta()))
    world.head("m1", 200, JSON)
    world.down("m1", input_required(1, state=STATE_1), Channel.JSON)
    world.post("m2", retry(2, state=STATE_1))
    world.down("m2", input_required(2, state=STATE_2), Channel.JSON)
    world.post("m3", retry(3, state=STATE_2))
    world.down("m3", done(3), Channel.JSON)
    world.open("d1", method="DELETE", session=SESSION)
    world.close("d1")
    assert world.summary(cid).rounds == 3

    dumped = b"\n".join(event_to_json(event) for event in world.events).decode()
    assert len(world.events) > 20
    assert SESSION not in dumped
    assert STATE_1 not in dumped
    assert STATE_2 not in dumped
    assert world.redactor.token(SESSION) in dumped


def test_a_chain_the_ring_let_go_keeps_the_record_of_an_exchange_that_closes_after_its_end() -> None:
    # The answer's 202 exchange may close after the call's own (a loaded machine): its `http` record
    # still joins the chain, as a capture's reader (with room in its ring) files it.
    world = World(store=ChainStore(max_chains=1))
    cid = world.post("x1", call(1), session=SESSION)
    world.head("x1", 200, SSE)
    world.down("x1", elicit(0))
    world.post("x2", result_response(0, {"action": "accept", "content": {"ok": True}}), session=SESSION)
    world.head("x2", 202, None)
    world.post("x3", request(9, "ping", {}), session=SESSION)  # a newer chain: the ring lets x1's go
    world.down("x1", done(1))
    world.close("x1")  # the call ended; its answer's exchange is still open

    assert world.store.get(cid) is not None, "let go while one of its exchanges was open"
    world.close("x2")

    filed = [e.message for e in world.of_type(MessageRecorded) if e.chain_id == cid]
    assert [(m.exchange, m.kind) for m in filed][-1] == ("x2", "http")
    assert world.store.get(cid) is None  # nothing of it open any more: let go
