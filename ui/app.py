"""The Textual app: one feed worker posts batches of flow events, the app folds them into the model.

The worker (`_pump`) runs the feed through a `Batcher`, which posts one `EventsArrived` per burst;
the handler applies the batch to the `ViewModel`, acknowledges it (letting the worker hand over the
next), and gives the main screen the change set. Nothing here knows where events come from: a bus
subscription, a remote admin feed and a capture file look the same.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import ClassVar

from textual.app import App
from textual.binding import Binding, BindingType

from proxy.flows.events import FlowEvent
from proxy.flows.query import message_match
from proxy.wire.visible import visible
from ui.capture_index import IndexReady
from ui.copying import as_curl, as_jsonrpc
from ui.desk import READ_ONLY_CAPTURE, DeskError, Intercepts, RuleDesk
from ui.feeds import Batcher, BusFeed, Feed, FeedStatus
from ui.held_watch import HeldWatcher
from ui.messages import (
    CopyRequested,
    DeskFailed,
    EventsArrived,
    FeedLost,
    FeedStatusChanged,
    HeldChanged,
    HeldDecided,
    IndexArrived,
    MessageChosen,
)
from ui.model import MAX_CHAINS, ViewModel
from ui.replaying import Replayer, start_replay
from ui.screens.copied import CopiedScreen
from ui.screens.events import EventsScreen, ProxyLog
from ui.screens.faults import FaultScreen
from ui.screens.held_editor import HeldEditor
from ui.screens.help import HelpScreen
from ui.screens.intercepts import InterceptScreen
from ui.screens.main import MainScreen
from ui.screens.message import MessageScreen
from ui.screens.rule_prompt import RulePrompt
from ui.widgets.status_bar import reattached_text


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
        # The rule desk: fault rules, intercept rules, held messages (ui/desk.py). Off the footer,
        # which 80 columns already fill: the help lists them, and a held message is announced with its key.
        Binding("F", "faults", "Faults", show=False),
        Binding("i", "intercept", "Intercept", show=False),
        Binding("I", "held", "Held", show=False),
        Binding("r", "replay", "Replay", show=False),  # the chain under the cursor (ui/replaying.py)
        Binding("E", "events", "Events", show=False),  # the proxy's own log (a proxy in this process)
    ]

    LOG_CHECK = 1.0
    """Seconds between looks at the proxy's log for new warnings to announce."""

    def __init__(
        self,
        feed: Feed | None = None,
        *,
        max_chains: int = MAX_CHAINS,
        save_dir: Path | None = None,
        batch_delay: float = 0.05,
        batch_size: int = 500,
        desk: RuleDesk | None = None,
        no_desk: str = READ_ONLY_CAPTURE,
        replayer: Replayer | None = None,
        log: ProxyLog | None = None,
    ) -> None:
        super().__init__()
        self.proxy_log = log
        """The proxy's own log lines, when the proxy runs in this process (`E` shows them)."""
        self._quit_told = False
        self._warnings_told = 0
        self.desk = desk
        self.no_desk = no_desk
        """What the rule keys say when there is no desk (a capture file, the demo)."""
        self.intercepts = Intercepts()
        self.watcher: HeldWatcher | None = None
        self._desk_failure: str | None = None
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
        if self.desk is not None:
            self.watcher = HeldWatcher(self.desk, self._held_state, self._desk_failed)
            self.run_worker(self._watch(self.watcher), name="held", group="held", exit_on_error=False)
        if self.proxy_log is not None:
            self.set_interval(self.LOG_CHECK, self._new_warnings)

    def _new_warnings(self) -> None:
        """Announce warnings the proxy logged since the last look, once per look, pointing at `E`."""
        log = self.proxy_log
        if log is None or log.warnings == self._warnings_told:
            return
        new, self._warnings_told = log.warnings - self._warnings_told, log.warnings
        last = next((e for e in reversed(log.events) if e[1] in ("warning", "error", "critical")), None)
        said = f": {last[2]}" if last is not None else ""
        self.notify(f"the proxy logged {new} warning(s){said} (E shows its log)", severity="warning")

    def _held_state(self, state: Intercepts) -> None:
        self.post_message(HeldChanged(state))

    def _desk_failed(self, reason: str) -> None:
        self.post_message(DeskFailed(reason))

    async def _watch(self, watcher: HeldWatcher) -> None:
        """The held worker: the watcher until the app ends, then the desk's connections closed."""
        try:
            await watcher.run()
            await asyncio.Event().wait()  # it gave up (no intercepts there): the rule keys still use the desk
        finally:
            await watcher.desk.close()

    async def _pump(self, feed: Feed) -> None:
        """The feed worker: events in, one message per coalesced burst out."""
        batcher: Batcher

        def events(batch: list[FlowEvent]) -> None:
            self.post_message(EventsArrived(batch, batcher.applied))

        def status(state: FeedStatus) -> None:
            if state.again and state.state == "reconnecting":
                self.post_message(FeedLost())
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
        self.main.search_bodies()  # the filter's body terms now reach chains whose messages are not held
        self.main.take(changes, len(index.chains))

    def on_feed_lost(self, message: FeedLost) -> None:
        """The proxy went away: nothing it said of itself is shown as current until one answers again."""
        self.main.take(self.model.detach(), 0)

    def on_feed_status_changed(self, message: FeedStatusChanged) -> None:
        """Keep the feed's state for the status bar; say who answered when a lost feed is live again."""
        status = message.status
        self.feed_status = status
        if status.state == "behind":
            self.main.take(self.model.resync(), 0)
        self.main.set_feed_status(status)
        if status.unfinished:
            self.main.take(self.model.settle(status.unfinished), 0)
        back = self.model.reattached
        if status.state == "live" and status.again and back is not None:
            self.notify(
                reattached_text(back, status.address, self.model.earlier),
                severity="information" if back.same else "warning",
            )

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
            self.notify(visible(copied.title), severity="warning", markup=False)
            return
        self.copy_to_clipboard(copied.text)
        if message.curl:  # a command is worth reading before it is run
            self.push_screen(CopiedScreen(copied.title, copied.text))
        else:
            self.notify(visible(f"{copied.title} ({len(copied.text)} characters)"), markup=False)

    # -- the rule desk ------------------------------------------------------------------------

    def on_held_changed(self, message: HeldChanged) -> None:
        """New intercept state: the status bar's count, the intercept screen, a notice per new message."""
        known = {held.id for held in self.intercepts.held}
        self.intercepts = message.state
        self._desk_failure = None
        self.main.set_intercepted(len(message.state.held))
        for screen in self.screen_stack:
            if isinstance(screen, InterceptScreen | HeldEditor):
                screen.take(message.state)
        new = [held for held in message.state.held if held.id not in known]
        if len(new) == 1:
            (held,) = new
            what = f"{held.kind} {held.method}".rstrip()
            self.notify(
                visible(f"held {held.label}: {what} from the {held.direction} (I to decide)"), markup=False
            )
        elif new:  # a burst: one notice, not a screenful
            self.notify(f"{len(new)} more messages held (I to decide)")

    def on_held_decided(self, message: HeldDecided) -> None:
        """A decision went out from this TUI: read the held messages now."""
        if self.watcher is not None:
            self.watcher.kick()

    def on_desk_failed(self, message: DeskFailed) -> None:
        """The watcher cannot read the intercepts: say so once per reason."""
        if message.reason != self._desk_failure:
            self._desk_failure = message.reason
            self.notify(visible(f"intercepts: {message.reason}"), severity="warning", markup=False)

    def action_faults(self) -> None:
        """The fault rules screen."""
        if self.desk is None:
            self.notify(self.no_desk, severity="warning")
        elif not isinstance(self.screen, FaultScreen):
            self.push_screen(FaultScreen(self.desk))

    def action_held(self) -> None:
        """The intercept screen: rules and held messages."""
        if self.desk is None:
            self.notify(self.no_desk, severity="warning")
        elif not isinstance(self.screen, InterceptScreen):
            self.push_screen(InterceptScreen(self.desk, self.intercepts))

    def action_intercept(self) -> None:
        """Add an intercept rule, starting from the filter bar's query when it picks single messages."""
        desk = self.desk
        if desk is None:
            self.notify(self.no_desk, severity="warning")
            return

        async def submit(text: str) -> str | None:
            match, timeout = split_timeout(text)
            try:
                rule = await desk.add_intercept(match, timeout)
            except DeskError as exc:
                return str(exc)
            in_force = f"intercept {rule.id} in force: {rule.match} (held up to {rule.timeout_s:g}s)"
            self.notify(visible(in_force), markup=False)
            if self.watcher is not None:
                self.watcher.kick()
            return None

        prefill = message_match(self.main.query_.text)
        title = "hold messages matching (Enter adds, Esc cancels)"
        self.push_screen(RulePrompt(title, prefill, HINT, submit))

    def announce(self, text: str) -> None:
        """Keep a notice in the status bar (where it covers nothing) until another replaces it."""
        self.main.set_notice(text)

    def action_replay(self) -> None:
        """Replay the chain under the cursor against the upstream and show both side by side."""
        start_replay(self, self.main.table.selected_key)

    async def action_quit(self) -> None:
        """Quit; with messages held, the first `q` says what becomes of them and the next one quits."""
        held = len(self.intercepts.held)
        if held and not self._quit_told:
            self._quit_told = True
            fate = (
                "go on unchanged as the proxy stops"
                if isinstance(self.feed, BusFeed)  # the proxy runs in this process: it stops too
                else "stay held at the proxy until their timeout"
            )
            self.notify(f"{held} held message(s) {fate}: q again quits", severity="warning", timeout=10)
            return
        self.exit()

    def action_events(self) -> None:
        """The proxy's own log lines (a proxy in this process; an attached proxy logs where it runs)."""
        if self.proxy_log is None:
            self.notify(NO_LOG, severity="warning")
        elif not isinstance(self.screen, EventsScreen):
            self.push_screen(EventsScreen(self.proxy_log))

    def action_help(self) -> None:
        """Show the help screen (once)."""
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())


NO_LOG = "an attached proxy (or a capture) logs where it runs: E shows the log of a proxy run with --tui"
"""What `E` says where the proxy's log is not in this process."""

HINT = (
    "MATCH [timeout=30s]   e.g. method:tools/call tool:delete_*   dir:server method:elicitation/create"
    "   round:>1\nfields: method tool name era mode session body dir round (docs/intercept.md); "
    "a held message goes on unchanged at its timeout"
)


def split_timeout(text: str) -> tuple[str, str | None]:
    """`MATCH [timeout=30s]` as the match and the timeout (None: the proxy's default)."""
    words = text.split()
    if words and words[-1].lower().startswith("timeout="):
        return " ".join(words[:-1]), words[-1].partition("=")[2]
    return text.strip(), None


def _reason(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        return _reason(exc.exceptions[0])
    return str(exc) or type(exc).__name__
