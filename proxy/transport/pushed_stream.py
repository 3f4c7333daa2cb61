"""A started SSE response relayed from the upstream connection's reads, without a task.

Why: an event that waits in a task waits for a loop turn, and the task for its wake-up, after the read
that brought it; the proxy and the upstream often share a CPU, so that time is added to every event
the client waits for. Here the upstream connection calls the stream once per read (`listen`), and the
read's chunks go out to the client in one write from that call, observed as the task would observe
them; when the body ends, the exchange ends there too. Same bytes on the wire, same observations, same
endings as `PassthroughRelay.stream` (its steps are the relay's: `streamed`, `body_ended_now`).

A client that reads too slowly is the one case where the stream must wait: it goes on in a task
(`PassthroughRelay.stream_on`, after a drain), which keeps the bounds of the task path.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from proxy.engine.passthrough import body_end
from proxy.transport.client_side import ClientGone, PromptSide
from proxy.transport.observe import BodyObserver
from proxy.transport.relay import PassthroughRelay, Started


class PushedStream:
    """The rest of one started response, written as the upstream's reads bring it."""

    __slots__ = ("ended", "observer", "on_end", "on_failure", "on_slow", "relay", "side", "upstream")

    def __init__(
        self,
        relay: PassthroughRelay,
        side: PromptSide,
        started: Started,
        *,
        on_end: Callable[[], None],
        on_slow: Callable[[Coroutine[Any, Any, None]], None],
        on_failure: Callable[[], None],
    ) -> None:
        """`on_end`: the exchange ended; `on_slow`: run this rest in a task (the client reads slowly);
        `on_failure`: a bug broke the stream off (the exchange was abandoned)."""
        self.relay = relay
        self.side = side
        self.upstream = started.upstream
        self.on_end = on_end
        self.on_slow = on_slow
        self.on_failure = on_failure
        self.ended = False
        self.observer: BodyObserver = relay.observer_for(started.upstream, started.sent)

    def start(self) -> None:
        """Listen to the upstream's reads; what arrived since the head is written at once."""
        self.relay.ctx.open_streams += 1
        upstream = self.upstream
        upstream.listen(self.arrived)
        if upstream.buffered or upstream.ended:
            self.arrived()

    def arrived(self) -> None:
        """The upstream's latest read brought body bytes or the body's end."""
        try:
            rest = self._relay_read()
        except Exception:
            self._stop()
            self.relay.abandon("proxy_error")
            self.on_failure()
            return
        if rest is not None:
            self.on_slow(rest)
        elif self.ended:
            self.on_end()

    def _relay_read(self) -> Coroutine[Any, Any, None] | None:
        """Write and observe what arrived; the rest to run in a task when the client reads slowly."""
        upstream, relay = self.upstream, self.relay
        chunks = upstream.take_chunks()
        done = upstream.ended
        cut = upstream.error
        gone: str | None = None
        slow = False
        if chunks:
            try:
                slow = self.side.write_now(chunks, end=done and cut is None)
            except ClientGone as exc:
                gone = exc.outcome
            relay.streamed(self.observer, chunks, flush=not (gone or done))
        if gone or done:
            self._stop()
            end = body_end(upstream_cut=cut is not None, client_gone=gone)
            relay.body_ended_now(end, self.observer, cut, self.side.finish_now)
        elif slow:
            self._stop()
            return self._in_task()
        return None

    def abandon(self, outcome: str) -> None:
        """The client's connection went away (or the proxy stops): drop the upstream request."""
        self._stop()
        self.relay.abandon(outcome)

    def _stop(self) -> None:
        if not self.ended:
            self.ended = True
            self.upstream.listen(None)
            self.relay.ctx.open_streams -= 1

    async def _in_task(self) -> None:
        """The rest, once the client has read enough: the task path's stream, from here on."""
        relay = self.relay
        with relay.given_up_on_failure():
            try:
                await self.side.drain()
            except ClientGone as exc:
                gone = body_end(upstream_cut=False, client_gone=exc.outcome)
                relay.body_ended_now(gone, self.observer, None, self.side.finish_now)
                return
            await relay.stream_on(self.upstream, self.observer)
