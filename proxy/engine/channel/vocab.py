"""The channel core's vocabulary: events (facts, past tense) and commands (orders).

An *exchange* is one HTTP request the proxy's relay, bridges or probe made toward the upstream; the
shell that owns the channel names it and turns the commands into that request's response.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from proxy.engine.commands import Log
from proxy.wire.jsonrpc import Body, Message

Headers = tuple[tuple[str, str], ...]


# -- events ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PostReceived:
    """A POST toward the channel, with its body as sent (one message or a 2025-03-26 batch).

    `parsed` is the body already decoded by whoever read it (it is then not decoded again); a copy of
    what `body` says, so it takes no part in comparing events.
    """

    exchange: str
    body: bytes
    parsed: Body | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class StreamRequested:
    """A GET toward the channel: a stream for the server's messages that belong to no call."""

    exchange: str


@dataclass(frozen=True, slots=True)
class DeleteRequested:
    """A DELETE toward the channel: the client ends its session."""

    exchange: str


@dataclass(frozen=True, slots=True)
class HeadDue:
    """The caller waited as long as the shell lets a head wait: the response must start now."""

    exchange: str


@dataclass(frozen=True, slots=True)
class ExchangeAbandoned:
    """The caller dropped the response before its end (its client left, or it gave up)."""

    exchange: str


@dataclass(frozen=True, slots=True)
class ChannelReceived:
    """One message's bytes arrived from the peer (a stdout line, an SSE `message` event's data)."""

    data: bytes


@dataclass(frozen=True, slots=True)
class ChannelOversized:
    """The peer sent a message over the size bound; only its first and last bytes were kept."""

    size: int
    head: bytes
    tail: bytes
    limit: int


@dataclass(frozen=True, slots=True)
class ChannelWriteFailed:
    """A message the core ordered written for `exchange` did not reach the peer (`detail` says why)."""

    exchange: str
    detail: str


@dataclass(frozen=True, slots=True)
class ChannelClosed:
    """The channel is gone (the child exited, the GET stream ended); `reason` is shown to clients."""

    reason: str


ChannelEvent = (
    PostReceived
    | StreamRequested
    | DeleteRequested
    | HeadDue
    | ExchangeAbandoned
    | ChannelReceived
    | ChannelOversized
    | ChannelWriteFailed
    | ChannelClosed
)


# -- commands -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WriteChannel:
    """Send one message to the peer: `data` is its JSON, without a newline.

    `exchange` is the exchange whose POST carried it (a failure is reported as ChannelWriteFailed),
    or None for a message the core made itself (a cancellation).
    """

    data: bytes
    exchange: str | None


@dataclass(frozen=True, slots=True)
class Answer:
    """Answer `exchange` with a whole response (`body` empty for none); the shell adds its length.

    `message` is the body's one message as decoded from the peer's line, when `body` is exactly that
    line (None for an answer the core made or rewrote): an executor that observes it need not decode
    it again. A copy of what `body` says, so it takes no part in comparing commands.
    """

    exchange: str
    status: int
    headers: Headers
    body: bytes
    message: Message | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class OpenStream:
    """Start `exchange`'s response as an SSE stream (status 200); messages follow as StreamMessage."""

    exchange: str
    headers: Headers


@dataclass(frozen=True, slots=True)
class StreamMessage:
    """Send one message (`data`, its JSON) as an SSE `message` event on `exchange`'s stream.

    `message` is `data` decoded, when the core has it (as for `Answer`).
    """

    exchange: str
    data: bytes
    message: Message | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class EndStream:
    """End `exchange`'s SSE stream."""

    exchange: str


@dataclass(frozen=True, slots=True)
class CloseChannel:
    """Stop the channel (stop the child, close the GET stream); ChannelClosed follows."""

    reason: str


ChannelCommand = WriteChannel | Answer | OpenStream | StreamMessage | EndStream | CloseChannel | Log
