"""SSE events kept as the bytes they came in: any chunking of a stream gives the same events."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.framing.sse_events import EventSplitter, event_message, event_with_data

PROGRESS = b'{"jsonrpc":"2.0","method":"notifications/progress","params":{}}'
EVENTS = [
    b"id: 0\ndata:\n\n",  # a priming event
    b": keep-alive\r\n\r\n",
    b"event: message\r\nid: 1\r\ndata: " + PROGRESS + b"\r\n\r\n",
    b'data: {"jsonrpc":"2.0","id":2,\rdata: "result":{}}\r\r',
]
STREAM = b"".join(EVENTS)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=12))
def test_any_chunking_gives_the_same_events_byte_for_byte(cuts: list[int]) -> None:
    splitter = EventSplitter()
    events: list[bytes] = []
    start = 0
    for cut in [*sorted(cuts), len(STREAM)]:
        events += splitter.feed(STREAM[start:cut])
        start = cut
    assert events == EVENTS
    assert splitter.rest == b""


def test_an_events_message_is_read_and_its_data_can_be_replaced_keeping_its_id() -> None:
    assert event_message(EVENTS[0]) is None
    assert event_message(EVENTS[1]) is None
    progress = event_message(EVENTS[2])
    assert progress is not None
    assert progress.method == "notifications/progress"
    answer = event_message(EVENTS[3])
    assert answer is not None
    assert answer.id == 2
    replaced = event_with_data(EVENTS[2], '{"jsonrpc":"2.0","id":1,"error":{"code":1,"message":"x"}}')
    assert (
        replaced
        == b'event: message\nid: 1\ndata: {"jsonrpc":"2.0","id":1,"error":{"code":1,"message":"x"}}\n\n'
    )
