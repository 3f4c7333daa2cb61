"""HTTP+SSE client paths and the per-stream queue, without sockets."""

from __future__ import annotations

import pytest

from proxy.config import Settings
from proxy.transport.client_side import ClientGone
from proxy.transport.sse_clients import SseOutbox, sse_paths


@pytest.mark.parametrize(
    ("base", "paths"),
    [
        ("/mcp", ("/sse", "/messages")),
        ("/api/mcp", ("/api/sse", "/api/messages")),
        ("/", ("/sse", "/messages")),
        ("/sse", ("/sse", "/messages")),
    ],
)
def test_unset_paths_are_siblings_of_the_upstreams_endpoint(base: str, paths: tuple[str, str]) -> None:
    assert sse_paths(Settings(), base) == paths


def test_paths_can_be_set_or_the_transport_turned_off() -> None:
    settings = Settings(sse_path="/events", sse_messages_path="/in")
    assert sse_paths(settings, "/mcp") == ("/events", "/in")
    assert sse_paths(Settings(sse_path="off"), "/mcp") is None


def test_a_path_that_is_not_one_is_refused_naming_what_is_expected() -> None:
    with pytest.raises(ValueError, match="starting with /"):
        Settings(sse_path="sse?x=1")


async def test_the_queue_hands_out_events_in_order_as_one_write() -> None:
    outbox = SseOutbox(1000)
    outbox.send(b'{"a":1}')
    outbox.send(b'{"b":2}')
    assert await outbox.take(1.0) == b'event: message\ndata: {"a":1}\n\nevent: message\ndata: {"b":2}\n\n'
    assert outbox.queued == 0


async def test_silence_gives_none_so_the_stream_can_keep_alive() -> None:
    assert await SseOutbox(1000).take(0.01) is None


async def test_a_queue_past_its_bound_closes_and_says_by_how_much() -> None:
    outbox = SseOutbox(100)
    outbox.send(b"x" * 40)
    with pytest.raises(ClientGone):
        outbox.send(b"y" * 40)
    assert outbox.closed
    assert outbox.overflow > 100
    with pytest.raises(ClientGone):
        await outbox.room()
