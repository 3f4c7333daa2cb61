"""Every Textual message of the TUI, in one place: what workers and widgets tell the app.

Workers post `EventsArrived` and `FeedStatusChanged`; widgets post what the user chose. Handlers in
the app own the state (the view model); widgets get their data handed down as attributes.
"""

from __future__ import annotations

from collections.abc import Callable

from textual.message import Message

from proxy.flows.events import FlowEvent
from ui.body_search import ListFilter
from ui.capture_index import IndexReady
from ui.desk import Intercepts
from ui.feeds import FeedStatus
from ui.model import ChainEntry


class EventsArrived(Message):
    """A coalesced batch of flow events from the feed worker; `ack` makes room for the next batch."""

    def __init__(self, events: list[FlowEvent], ack: Callable[[], None]) -> None:
        super().__init__()
        self.events = events
        self.ack = ack


class IndexArrived(Message):
    """The index of a big capture is ready: every chain, to show instead of the newest part."""

    def __init__(self, index: IndexReady) -> None:
        super().__init__()
        self.index = index


class FeedStatusChanged(Message):
    """The feed connected, dropped, is reconnecting, or ended; a newer one replaces an unread one."""

    def __init__(self, status: FeedStatus) -> None:
        super().__init__()
        self.status = status

    def can_replace(self, message: Message) -> bool:
        """Only the latest feed status matters once the app gets to it."""
        return isinstance(message, FeedStatusChanged)


class FeedLost(Message):
    """The attached feed lost its proxy. Never coalesced: the next `proxy_info` is judged against it."""


class ChainHighlighted(Message):
    """The cursor of the chain table moved onto a chain (by its view-model key)."""

    def __init__(self, key: str) -> None:
        super().__init__()
        self.key = key

    def can_replace(self, message: Message) -> bool:
        """Scrolling through many rows only needs the tree of the last one."""
        return isinstance(message, ChainHighlighted)


class ChainChosen(Message):
    """The user pressed enter on a chain: show its tree with the focus in it."""

    def __init__(self, key: str) -> None:
        super().__init__()
        self.key = key


class MessageChosen(Message):
    """The user chose one message of a chain (in the tree) to see in full."""

    def __init__(self, key: str, seq: int) -> None:
        super().__init__()
        self.key = key
        self.seq = seq


class CopyRequested(Message):
    """The user asked to copy one message of a chain: as curl (`C`) or as JSON-RPC (`c`)."""

    def __init__(self, key: str, seq: int, *, curl: bool) -> None:
        super().__init__()
        self.key = key
        self.seq = seq
        self.curl = curl


class FilterChanged(Message):
    """The filter bar's text changed (debounced by the bar)."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text


class BodiesFound(Message):
    """What a step of the filter's body search found (`ui.body_search`); `search` is the filter it
    searched for, so what a replaced filter's search still hands over is told apart. `failed` says why
    the search stopped short."""

    def __init__(
        self, search: ListFilter, found: list[tuple[ChainEntry, int]], failed: str | None = None
    ) -> None:
        super().__init__()
        self.search = search
        self.found = found
        self.failed = failed


class FollowChanged(Message):
    """Following the tail was switched on or off (by a key, or by scrolling back)."""

    def __init__(self, follow: bool) -> None:
        super().__init__()
        self.follow = follow


class HeldChanged(Message):
    """The intercept rules or the held messages changed (the held watcher read them anew)."""

    def __init__(self, state: Intercepts) -> None:
        super().__init__()
        self.state = state

    def can_replace(self, message: Message) -> bool:
        """Only the newest state matters."""
        return isinstance(message, HeldChanged)


class HeldDecided(Message):
    """A held message was released (or a rule deleted) from a screen: read the held messages now."""

    def __init__(self, held_id: str | None) -> None:
        super().__init__()
        self.held_id = held_id


class DeskFailed(Message):
    """The held watcher cannot read the proxy's intercepts; the reason is shown once."""

    def __init__(self, reason: str) -> None:
        super().__init__()
        self.reason = reason
