"""The Textual app: one feed worker posts batches of flow events, the app folds them into the model.

The worker (`_pump`) runs the feed through a `Batcher`, which posts one `EventsArrived` per burst;
the handler applies the batch to the `ViewModel`, acknowledges it (letting the worker hand over the
next), and gives the main screen the change set. Nothing here knows where events come from: a bus
subscription, a remote admin feed and a capture file look the same.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from textual.app import App
from textual.binding import Binding, BindingType

from proxy.flows.events import FlowEvent
from ui.capture_index import IndexReady
from ui.copying import as_curl, as_jsonrpc
from ui.feeds import Batcher, Feed, FeedStatus
from ui.messages import CopyRequested, EventsArrived, FeedStatusChanged, IndexArrived, MessageChosen
from ui.model import MAX_CHAINS, ViewModel
from ui.replaying import Replayer, start_replay
from ui.screens.copied import CopiedScreen
from ui.screens.help import HelpScreen
from ui.screens.main import MainScreen
from ui.screens.message import MessageScreen


class ProxyTui(App[None]):
    """mcp-proxy's live view of chains."""

    CSS_PATH = "app.tcss"
    TITLE = "mcp-proxy"
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (120, "-wide")]
    ENABLE_COMMAND_PALETTE = False
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("question_mark", "help", "Help"),
        Binding("f1", "help", "Help", show=False),
        Binding("q", "quit", "Quit"),
        Binding("r", "replay", "Replay", show=False),  # in the help; the footer is left as it was
    ]

    def __init__(
        self,
        feed: Feed | None = None,
        *,
        max_chains: int = MAX_CHAINS,
        save_dir: Path | None = None,
        batch_delay: float = 0.05,
        batch_size: int = 500,
        replayer: Replayer | None = None,
    ) -> None:
        super().__init__()
        self.feed = feed
        self.replayer = replayer
        """Replays a chain for `r` (the command line's; None where no replay can run)."""
        self.model = ViewModel(max_chains=max_chains)
        self.save_dir = save_dir or Path.cwd()
        self.batch_delay = batch_delay
        self.batch_size = batch_size
        self.main = MainScreen(self.model)
        self.feed_status: FeedStatus | None = None

    def on_mount(self) -> None:
        """Show the main screen and start the feed worker."""
        self.push_screen(self.main)
        if self.feed is not None:
            self.run_worker(self._pump(self.feed), name="feed", group="feed", exit_on_error=False)

    async def _pump(self, feed: Feed) -> None:
        """The feed worker: events in, one message per coalesced burst out."""
        batcher: Batcher

        def events(batch: list[FlowEvent]) -> None:
            self.post_message(EventsArrived(batch, batcher.applied))

        def status(state: FeedStatus) -> None:
            self.post_message(FeedStatusChanged(state))

        def index(ready: IndexReady) -> None:
            self.post_message(IndexArrived(ready))

        batcher = Batcher(
            events, status, on_index=index, max_items=self.batch_size, max_delay=self.batch_delay
        )
        try:
            await batcher.run(feed)
        except Exception as exc:  # a broken feed must show in the status bar, not kill the app
            self.post_message(FeedStatusChanged(FeedStatus("failed", _reason(exc))))

    def on_events_arrived(self, message: EventsArrived) -> None:
        """Fold a batch into the model and let the main screen show what changed."""
        try:
            changes = self.model.apply_all(message.events)
            self.main.take(changes, len(message.events))
        finally:
            message.ack()

    def on_index_arrived(self, message: IndexArrived) -> None:
        """Show every chain of an indexed capture instead of its newest part."""
        index = message.index
        changes = self.model.load_index(index.chains, index.events, index.load)
        self.main.take(changes, len(index.chains))

    def on_feed_status_changed(self, message: FeedStatusChanged) -> None:
        """Keep the feed's state for the status bar."""
        self.feed_status = message.status
        self.main.set_feed_status(message.status)

    def on_message_chosen(self, message: MessageChosen) -> None:
        """Open the message screen."""
        self.push_screen(MessageScreen(self.model, message.key, message.seq, self.save_dir))

    def on_copy_requested(self, message: CopyRequested) -> None:
        """Put the message (or its request as curl) on the clipboard with OSC 52; a command is shown."""
        entry = self.model.get(message.key)
        record = entry.message(message.seq) if entry is not None else None
        if entry is None or record is None:
            self.notify("this message is no longer held (cleared or evicted)", severity="warning")
            return
        copied = as_curl(self.model, entry, record) if message.curl else as_jsonrpc(entry, record)
        if not copied.text:
            self.notify(copied.title, severity="warning")
            return
        self.copy_to_clipboard(copied.text)
        if message.curl:  # a command is worth reading before it is run
            self.push_screen(CopiedScreen(copied.title, copied.text))
        else:
            self.notify(f"{copied.title} ({len(copied.text)} characters)")

    def announce(self, text: str) -> None:
        """Keep a notice in the status bar (where it covers nothing) until another replaces it."""
        self.main.set_notice(text)

    def action_replay(self) -> None:
        """Replay the chain under the cursor against the upstream and show both side by side."""
        start_replay(self, self.main.table.selected_key)

    def action_help(self) -> None:
        """Show the help screen (once)."""
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())


def _reason(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        return _reason(exc.exceptions[0])
    return str(exc) or type(exc).__name__
