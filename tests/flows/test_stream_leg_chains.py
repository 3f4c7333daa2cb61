"""The chain builder files a bridge's session GET stream apart from the call it was opened for.

The modern-client -> legacy-server bridge opens a session's GET stream for the exchange that opened the
session: a 2026-07-28 client's first call, when it sends no `server/discover` first. What the server
sends there joins a call only when the capture says so (`joins`); the rest is the stream's own, even
while that first call is still open. A capture before 1.7 cannot tell a GET stream from a call's leg
until the exchange it names has closed, so there the first message keeps binding the leg to that
exchange's chain, as the capture format says.
"""

from __future__ import annotations

from typing import Any

import pytest

from proxy.flows.chains import ChainBuilder
from proxy.flows.events import ChainStatus, Channel, Direction, Mode, Side
from proxy.flows.observations import (
    ExchangeClosed,
    ExchangeOpened,
    LegClosed,
    LegMessageSeen,
    LegOpened,
    MessageSeen,
    Observation,
)
from proxy.flows.redact import Redactor
from proxy.flows.store import ChainStore
from proxy.wire.jsonrpc import classify_value, notification, request, result_response

MODE = Mode.MRTR_TO_LEGACY
CALL = request(1, "tools/call", {"name": "multi-greet", "arguments": {"name": "Bob"}})
UPSTREAM_CALL = request("legacy-1", "tools/call", {"name": "multi-greet", "arguments": {"name": "Bob"}})
ANSWER = {"content": [{"type": "text", "text": "Good morning, Bob!"}]}


def log(level: str, data: str) -> dict[str, Any]:
    return notification("notifications/message", {"level": level, "data": data})


class Bridge:
    """A builder fed the observations the bridge makes, one second apart."""

    def __init__(self) -> None:
        self.store = ChainStore()
        self.builder = ChainBuilder(self.store, [].append, Redactor(), clock=lambda: 0.0)
        self.t = 100.0

    def feed(self, obs: Observation) -> str | None:
        self.t += 1.0
        return self.builder.apply(obs)

    def stream(self, value: dict[str, Any], channel: Channel, joins: str | None = None) -> str | None:
        """The server sent this on the session's GET stream `g1`, opened for the first call's `x1`."""
        msg = classify_value(value)
        return self.feed(LegMessageSeen(self.t, "g1", "x1", msg, 60, Direction.TO_CLIENT, channel, joins))

    def first_call(self, *, leg_opened: bool) -> str | None:
        """A 2026-07-28 client's first call opens the upstream session and its GET stream (`leg_opened`
        as a capture of 1.7 or later says it); the call's upstream request goes out on `c1`."""
        modern = {"client_era": "modern", "upstream_era": "legacy", "mode": MODE}
        self.feed(ExchangeOpened(self.t, "x1", "POST", "/mcp", {}, None, **modern))
        asked = classify_value(CALL)
        up = Direction.TO_SERVER
        opened = self.feed(MessageSeen(self.t, "x1", asked, 90, up, Channel.POST, Side.CLIENT))
        if leg_opened:
            self.feed(LegOpened(self.t, "g1", "x1", "GET", MODE))
        sent = classify_value(UPSTREAM_CALL)
        self.feed(LegMessageSeen(self.t, "c1", "x1", sent, 80, Direction.TO_SERVER, Channel.POST))
        return opened

    def answer(self) -> None:
        """The call's answer upstream and to its client; its exchange closes."""
        done = classify_value(result_response("legacy-1", ANSWER))
        self.feed(LegMessageSeen(self.t, "c1", "x1", done, 75, Direction.TO_CLIENT, Channel.SSE))
        self.feed(LegClosed(self.t, "c1"))
        back = classify_value(result_response(1, {"resultType": "complete", **ANSWER}))
        self.feed(MessageSeen(self.t, "x1", back, 80, Direction.TO_CLIENT, Channel.JSON, Side.CLIENT))
        self.feed(ExchangeClosed(self.t, "x1", None))

    def logs(self, chain_id: str | None) -> list[str]:
        assert chain_id is not None
        chain = self.store.get(chain_id)
        assert chain is not None
        return [m.body["params"]["data"] for m in chain.messages if m.method == "notifications/message"]


@pytest.mark.parametrize(
    ("leg_opened", "channel"),
    [(True, Channel.GET_SSE), (True, Channel.SSE), (False, Channel.GET_SSE)],
    ids=["leg_opened-get_sse", "leg_opened", "get_sse"],
)
def test_a_get_stream_message_no_call_took_is_the_streams_own_even_during_the_call_it_was_opened_for(
    leg_opened: bool, channel: Channel
) -> None:
    bridge = Bridge()
    call = bridge.first_call(leg_opened=leg_opened)

    below = bridge.stream(log("debug", "Starting multi-greet for Bob"), channel)  # no call took it
    taken = bridge.stream(log("info", "Sending first greeting to Bob"), channel, joins="c1")
    bridge.answer()
    late = bridge.stream(log("info", "Sending second greeting to Bob"), channel)  # after the answer
    bridge.feed(LegClosed(bridge.t, "g1"))

    assert taken == call
    assert bridge.logs(call) == ["Sending first greeting to Bob"]
    assert below is not None
    assert below != call
    assert late == below
    assert bridge.logs(below) == ["Starting multi-greet for Bob", "Sending second greeting to Bob"]
    stream = bridge.store.get(below)
    assert stream is not None
    assert (stream.summary.method, stream.summary.mode) == ("GET stream", MODE)
    assert stream.summary.status is ChainStatus.OK  # ended with its leg, not with the call
    assert {m.side for m in stream.messages} == {Side.UPSTREAM}


def test_a_capture_before_1_7_files_a_stream_message_during_the_call_it_names_in_that_calls_chain() -> None:
    """Such a capture says nothing of GET streams (no `leg_opened`, channel `sse`): a leg's first
    message files it in the chain of the exchange it names while that is open, as any leg's does."""
    bridge = Bridge()
    call = bridge.first_call(leg_opened=False)

    first = bridge.stream(log("debug", "Starting multi-greet for Bob"), Channel.SSE)
    bridge.answer()
    late = bridge.stream(log("info", "Sending second greeting to Bob"), Channel.SSE)

    assert first == late == call
