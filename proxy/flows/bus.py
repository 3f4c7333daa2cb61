"""The event bus: fans flow events out to subscribers, each on its own bounded queue.

Publishing never waits. A subscriber that falls behind loses its *oldest* waiting events: the queue
always holds the newest ones, and the subscriber's next read is a `Lagged` marker saying how many were
lost, then the events after the gap. So a slow reader learns it fell behind at once, not after working
through a full queue of old events, and what it reads next is as recent as the bound allows. Traffic
is never slowed by an observer.
"""

from __future__ import annotations

import asyncio
from collections import deque

from proxy.flows.events import FlowEvent, Lagged


class Subscription:
    """One observer's bounded queue; iterate it with `async for` or drain it with `get_nowait`."""

    def __init__(self, bus: EventBus, name: str, maxsize: int) -> None:
        self.name = name
        self.maxsize = maxsize
        self.dropped_total = 0
        self._bus = bus
        self._queue: deque[FlowEvent] = deque()
        self._pending_drops = 0
        self._waiter: asyncio.Future[None] | None = None
        self.closed = False

    def offer(self, event: FlowEvent) -> None:
        """Queue an event; when the queue is full its oldest event goes (counted) to make room."""
        queue = self._queue
        if len(queue) >= self.maxsize:
            # The gap grows at the front, next to the one not yet reported: still one gap.
            queue.popleft()
            self._pending_drops += 1
            self.dropped_total += 1
        queue.append(event)
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def get_nowait(self) -> FlowEvent | None:
        """The next event, or None when empty; a Lagged marker first when events were dropped.

        Drops are always the oldest events, so the gap is always at the front of the queue: the
        marker read first sits exactly where the events were lost.
        """
        if self._pending_drops:
            dropped, self._pending_drops = self._pending_drops, 0
            return Lagged(dropped=dropped)
        if self._queue:
            return self._queue.popleft()
        return None

    async def get(self) -> FlowEvent:
        """Wait for the next event; raises StopAsyncIteration once the subscription is closed."""
        while True:
            event = self.get_nowait()
            if event is not None:
                return event
            if self.closed:
                raise StopAsyncIteration
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> FlowEvent:
        return await self.get()

    def close(self) -> None:
        """Stop receiving; a pending `get` ends after the queue drains."""
        self.closed = True
        self._bus.unsubscribe(self)
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def __len__(self) -> int:
        return len(self._queue)


class EventBus:
    """Publishes each flow event to every subscriber without ever blocking the publisher."""

    def __init__(self, default_maxsize: int = 10000) -> None:
        self.default_maxsize = default_maxsize
        self._subs: list[Subscription] = []
        self.live = self._subs
        """The subscribers, as one list never replaced: non-empty when someone wants chains as they
        happen (the observation sink reads it on every observation without a call)."""
        self.published = 0

    def subscribe(self, name: str, maxsize: int | None = None) -> Subscription:
        """Add an observer with its own bounded queue (chains are then built as they happen)."""
        sub = Subscription(self, name, maxsize or self.default_maxsize)
        self._subs.append(sub)
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        """Remove an observer (idempotent)."""
        if sub in self._subs:
            self._subs.remove(sub)

    def publish(self, event: FlowEvent) -> None:
        """Offer the event to every subscriber; never waits."""
        self.published += 1
        for sub in self._subs:
            sub.offer(event)

    @property
    def subscribers(self) -> list[Subscription]:
        """Current observers (for metrics: queue depth and drops)."""
        return list(self._subs)

    @property
    def dropped_total(self) -> int:
        """Events dropped across current subscribers."""
        return sum(s.dropped_total for s in self._subs)
