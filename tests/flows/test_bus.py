"""The event bus: publishing never waits, each subscriber has its own bounded queue and lag marker."""

from __future__ import annotations

import asyncio

import pytest

from proxy.flows.bus import EventBus, Subscription
from proxy.flows.events import FlowEvent, Lagged, SessionChanged


def ev(n: int) -> SessionChanged:
    """A small, distinguishable flow event."""
    return SessionChanged(ts=float(n), session=f"s{n}", state="opened")


def drain(sub: Subscription) -> list[FlowEvent]:
    out: list[FlowEvent] = []
    while (event := sub.get_nowait()) is not None:
        out.append(event)
    return out


def test_publish_returns_at_once_even_when_a_subscriber_never_reads() -> None:
    bus = EventBus()
    sub = bus.subscribe("stuck", maxsize=3)

    for n in range(10_000):
        bus.publish(ev(n))

    assert bus.published == 10_000
    assert len(sub) == 3
    assert sub.dropped_total == 9_997
    assert bus.dropped_total == 9_997


def test_a_subscriber_that_fell_behind_is_told_at_its_next_read_not_behind_its_full_queue() -> None:
    bus = EventBus()
    sub = bus.subscribe("slow", maxsize=3)
    for n in range(1, 11):
        bus.publish(ev(n))

    assert sub.get_nowait() == Lagged(dropped=7)
    assert drain(sub) == [ev(8), ev(9), ev(10)]  # the newest events, the oldest ones dropped
    assert sub.dropped_total == 7


def test_the_marker_sits_where_the_gap_is_between_what_was_read_and_the_newest_events() -> None:
    bus = EventBus()
    sub = bus.subscribe("slow", maxsize=2)
    for n in range(1, 3):
        bus.publish(ev(n))

    assert sub.get_nowait() == ev(1)
    for n in range(3, 6):
        bus.publish(ev(n))  # ev(2) and ev(3) make room for ev(4) and ev(5)

    assert drain(sub) == [Lagged(dropped=2), ev(4), ev(5)]
    assert drain(sub) == []


def test_drops_before_the_marker_is_read_join_its_gap() -> None:
    bus = EventBus()
    sub = bus.subscribe("slow", maxsize=1)

    bus.publish(ev(1))
    bus.publish(ev(2))
    bus.publish(ev(3))

    assert drain(sub) == [Lagged(dropped=2), ev(3)]


def test_each_gap_gets_its_own_marker() -> None:
    bus = EventBus()
    sub = bus.subscribe("slow", maxsize=1)

    bus.publish(ev(1))
    bus.publish(ev(2))
    assert drain(sub) == [Lagged(dropped=1), ev(2)]
    bus.publish(ev(3))
    bus.publish(ev(4))
    bus.publish(ev(5))

    assert drain(sub) == [Lagged(dropped=2), ev(5)]


def test_subscribers_are_independent_a_slow_one_never_costs_a_fast_one_events() -> None:
    bus = EventBus()
    fast = bus.subscribe("fast", maxsize=100)
    slow = bus.subscribe("slow", maxsize=1)

    for n in range(5):
        bus.publish(ev(n))

    assert drain(fast) == [ev(n) for n in range(5)]
    assert drain(slow) == [Lagged(dropped=4), ev(4)]
    assert fast.dropped_total == 0


def test_a_subscriber_without_a_size_uses_the_bus_default() -> None:
    bus = EventBus(default_maxsize=7)

    assert bus.subscribe("a").maxsize == 7
    assert bus.subscribe("b", maxsize=2).maxsize == 2


async def test_iteration_yields_events_as_they_are_published() -> None:
    bus = EventBus()
    sub = bus.subscribe("reader")
    got: list[FlowEvent] = []
    reading = asyncio.Event()

    async def read_two() -> None:
        reading.set()  # the reader parks on the empty queue before the test resumes
        async for event in sub:
            got.append(event)
            if len(got) == 2:
                return

    async with asyncio.timeout(5):
        async with asyncio.TaskGroup() as group:
            group.create_task(read_two())
            await reading.wait()
            bus.publish(ev(1))
            bus.publish(ev(2))

    assert got == [ev(1), ev(2)]


async def test_close_ends_iteration_after_the_queue_drains() -> None:
    bus = EventBus()
    sub = bus.subscribe("reader")
    bus.publish(ev(1))
    sub.close()
    bus.publish(ev(2))

    async with asyncio.timeout(5):
        got = [event async for event in sub]

    assert got == [ev(1)]
    assert bus.subscribers == []


async def test_close_wakes_a_reader_waiting_on_an_empty_queue() -> None:
    bus = EventBus()
    sub = bus.subscribe("reader")

    reading = asyncio.Event()

    async def read_all() -> list[FlowEvent]:
        reading.set()  # the reader parks on the empty queue before the test resumes
        return [event async for event in sub]

    async with asyncio.timeout(5):
        async with asyncio.TaskGroup() as group:
            task = group.create_task(read_all())
            await reading.wait()
            assert sub._waiter is not None
            sub.close()

    assert task.result() == []


async def test_get_after_close_raises_stop_async_iteration() -> None:
    bus = EventBus()
    sub = bus.subscribe("reader")
    sub.close()

    with pytest.raises(StopAsyncIteration):
        await sub.get()


def test_unsubscribe_is_idempotent_and_stops_delivery() -> None:
    bus = EventBus()
    sub = bus.subscribe("a")
    bus.unsubscribe(sub)
    bus.unsubscribe(sub)

    bus.publish(ev(1))

    assert len(sub) == 0
    assert bus.subscribers == []
