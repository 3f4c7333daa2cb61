"""Engine output: orders for the transport, in the imperative."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class SendUpstream:
    """Send an HTTP request upstream for this exchange."""

    exchange: str
    http_method: str
    path: str
    headers: tuple[tuple[str, str], ...]
    body: bytes


@dataclass(frozen=True, slots=True)
class StartClientResponse:
    """Send the client the response head (status and headers)."""

    exchange: str
    status: int
    headers: tuple[tuple[str, str], ...]
    content_length: int | None = None


@dataclass(frozen=True, slots=True)
class RelayBody:
    """Copy the upstream body to the client byte for byte as it arrives, observing what it carries."""

    exchange: str


@dataclass(frozen=True, slots=True)
class RespondToClient:
    """Answer the client with a complete response the proxy made itself."""

    exchange: str
    status: int
    body: dict[str, Any] | None
    headers: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class CloseUpstream:
    """Abort the upstream request of this exchange (its connection is closed, not reused)."""

    exchange: str


@dataclass(frozen=True, slots=True)
class EndClientResponse:
    """Finish the client's response (the stream ends)."""

    exchange: str
    outcome: str | None = None


@dataclass(frozen=True, slots=True)
class Log:
    """Emit one structured log line (logging is an order, so tests can see which event caused it)."""

    event: str
    level: str = "info"
    fields: dict[str, Any] = field(default_factory=dict)


Command = (
    SendUpstream | StartClientResponse | RelayBody | RespondToClient | CloseUpstream | EndClientResponse | Log
)
