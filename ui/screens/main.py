"""The main screen: filter bar, live chain list, the selected chain's tree (or the sessions), status.

It owns the view state the keys switch (follow, pause, filter, sessions view) and hands the model
and each change set down to its widgets. Over an indexed capture it runs the filter's search of the
bodies the model does not hold (`ui.body_search`) and redraws the list as chains are found, paced so
that redrawing a long list never takes most of the screen's time. While paused it folds incoming
change sets together and applies them in one go on resume, so nothing is lost and nothing moves in
between.
"""

from __future__ import annotations

import time
from typing import ClassVar

from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import ContentSwitcher, Footer, Input

from proxy.flows.query import Query, parse_query
from ui.body_search import ListFilter, RedrawPace, search_bodies
from ui.feeds import FeedStatus
from ui.messages import BodiesFound, ChainChosen, ChainHighlighted, FilterChanged, FollowChanged
from ui.model import ChainEntry, Changes, RecordLoader, ViewModel
from ui.render import cell
from ui.runs import run_label
from ui.widgets.chain_table import ChainTable
from ui.widgets.chain_tree import ChainTree
from ui.widgets.filter_bar import FilterBar
from ui.widgets.sessions_table import SessionsTable
from ui.widgets.status_bar import StatusBar, ViewFlags

_SEARCH = "body-search"
"""The worker group of the filter's body search (one at a time)."""

_FED_WIDGETS = (ChainTable, ChainTree, SessionsTable, StatusBar, ContentSwitcher)
"""What showing a batch reaches; while any is missing (mounting, or shutting down) batches are held."""


def chain_title(entry: ChainEntry | None) -> Text:
    """The tree's border title: the chain's id, and the run it came from when that run is gone (a
    `Text`, since a border title given as `str` is read as markup)."""
    if entry is None:
        return cell("chain")
    if entry.earlier_run is not None:
        return cell(f"chain {entry.summary.id} (earlier proxy run {run_label(entry.earlier_run)})")
    return cell(f"chain {entry.summary.id}")


class MainScreen(Screen[None]):
    """Chains as they happen."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("slash", "filter", "Filter"),
        Binding("f", "toggle_follow", "Follow"),
        Binding("p", "toggle_pause", "Pause"),
        Binding("x", "clear", "Clear"),
        Binding("s", "toggle_sessions", "Sessions"),
        Binding("escape", "focus_chains", "Chains", show=False),
    ]
    REATTACHED_SHOWN: ClassVar[float] = 20.0
    """Seconds the status bar says who answered a lost feed: news, not a state (a toast says it too)."""

    def __init__(self, model: ViewModel) -> None:
        super().__init__()
        self.model = model
        self.flags = ViewFlags()
        self.filter_ = ListFilter()
        self.feed_status: FeedStatus | None = None
        self._held = Changes()
        self._pace = RedrawPace()
        self._redraw_due = False
        """The body search found chains the list does not show yet."""
        self._redraw_timer: Timer | None = None
        self._reattached_timer: Timer | None = None
        """Running while the status bar says who answered when the feed came back."""

    def compose(self) -> ComposeResult:
        """Filter bar, chain list, tree/sessions switcher, status bar, footer."""
        yield FilterBar(id="filter")
        with Vertical(id="body"):
            yield ChainTable(id="chains")
            with ContentSwitcher(initial="tree", id="details"):
                yield ChainTree(id="tree")
                yield SessionsTable(id="sessions")
        yield StatusBar(id="status")
        yield Footer(compact=True)

    def on_mount(self) -> None:
        """Focus the chain list and draw what the model already holds."""
        self.table.focus()
        self.table.rebuild(self.model, self.filter_)
        self.refresh_status()

    @property
    def query_(self) -> Query:
        """The filter applied (the last one typed that parsed)."""
        return self.filter_.query

    # -- widgets -----------------------------------------------------------------------------

    @property
    def table(self) -> ChainTable:
        """The chain list."""
        return self.query_one(ChainTable)

    @property
    def chain_tree(self) -> ChainTree:
        """The chain tree."""
        return self.query_one(ChainTree)

    @property
    def sessions(self) -> SessionsTable:
        """The sessions table."""
        return self.query_one(SessionsTable)

    # -- fed by the app ----------------------------------------------------------------------

    @property
    def ready(self) -> bool:
        """True while every widget a batch reaches exists.

        Batches still arrive while the app shuts down, and the shutdown removes the widgets one by
        one, so one still being there says nothing of the others.
        """
        return all(self.query(kind) for kind in _FED_WIDGETS)

    def take(self, changes: Changes, events: int) -> None:
        """Show what a batch changed, or hold it while paused."""
        if not self.ready:
            self._held.merge(changes)
            return
        if self.flags.paused:
            self._held.merge(changes)
            self.flags.held += events
        else:
            self._show(changes)
        self.refresh_status()

    def set_feed_status(self, status: FeedStatus) -> None:
        """The feed's state changed (connected, dropped, ended); a lost feed live again is news a while."""
        self.feed_status = status
        if self._reattached_timer is not None:
            self._reattached_timer.stop()
            self._reattached_timer = None
        if status.state == "live" and status.again:
            self._reattached_timer = self.set_timer(self.REATTACHED_SHOWN, self._reattached_told)
        if self.ready:
            self.refresh_status()

    def _reattached_told(self) -> None:
        self._reattached_timer = None
        if self.ready:
            self.refresh_status()

    def set_notice(self, text: str | None) -> None:
        """A standing notice for the status bar (the demo's result), or none."""
        self.flags.notice = text
        if self.ready:
            self.refresh_status()

    def set_intercepted(self, count: int) -> None:
        """How many messages an intercept rule holds now (the status bar says so while > 0)."""
        self.flags.intercepted = count
        if self.ready:
            self.refresh_status()

    def _show(self, changes: Changes) -> None:
        if not changes:
            return
        self.table.sync(self.model, changes, self.filter_, time.time())
        key = self.chain_tree.chain_key
        if changes.cleared or (key is not None and (key in changes.updated or key in changes.removed)):
            self.chain_tree.show(self.model.get(key) if key is not None else None)
        if self.chain_tree.chain_key is None and self.table.selected_key is not None:
            self.chain_tree.show(self.model.get(self.table.selected_key))
        if changes.sessions and self.flags.sessions:
            self.sessions.sync(self.model)

    def refresh_status(self) -> None:
        """Redraw the status bar."""
        self.flags.follow = self.table.follow
        self.flags.filter = self.filter_
        self.flags.matched = self.table.matched if self.query_.active else None
        self.flags.reattached = self.model.reattached if self._reattached_timer is not None else None
        self.query_one(StatusBar).show(self.model, self.feed_status, self.flags)
        key = self.chain_tree.chain_key
        entry = self.model.get(key) if key is not None else None
        title = cell("sessions") if self.flags.sessions else chain_title(entry)
        self.query_one(ContentSwitcher).border_title = title

    # -- what widgets tell us ----------------------------------------------------------------

    def on_chain_highlighted(self, message: ChainHighlighted) -> None:
        """The cursor moved: show that chain's tree."""
        self.chain_tree.show(self.model.get(message.key))
        self.refresh_status()

    def on_chain_chosen(self, message: ChainChosen) -> None:
        """Enter on a chain: show its tree and move the focus into it."""
        self.chain_tree.show(self.model.get(message.key))
        self.query_one(ContentSwitcher).current = "tree"
        self.flags.sessions = False
        tree = self.chain_tree
        tree.focus()
        if tree.root.children:
            tree.move_cursor(tree.root.children[0])

    def on_filter_changed(self, message: FilterChanged) -> None:
        """Apply the new filter to the whole list; one that does not parse leaves the list as it was.

        Showing every chain for a misspelt field would read as "everything matched", so the view
        keeps the filter last applied and the status bar says why the new one was not.
        """
        query = parse_query(message.text)
        if query.error:
            kept = f"the filter {self.query_.text.strip()!r}" if self.query_.active else "every chain"
            self.flags.filter_error = f"{query.error}; still showing {kept}"
        else:
            self.flags.filter_error = None
            self.filter_ = ListFilter(query)
            self.search_bodies()
            self.table.rebuild(self.model, self.filter_, time.time())
            if self.table.selected_key is None:  # nothing matches: no chain of before stays shown
                self.chain_tree.show(None)
        self.refresh_status()

    def search_bodies(self) -> None:
        """Start the filter's search of the bodies an indexed capture's chains do not hold (stopping
        the one of the filter before); the list shows the chains it finds as they come."""
        self.workers.cancel_group(self, _SEARCH)
        self._redraw_due = False  # the caller draws the list for the new filter
        search = self.filter_
        todo = search.start(self.model.chains.values(), time.time())
        loader = self.model.loader
        if todo and loader is not None:
            self.run_worker(self._search(search, todo, loader), group=_SEARCH, exit_on_error=False)
        else:
            search.to_search = 0

    async def _search(self, search: ListFilter, todo: list[ChainEntry], loader: RecordLoader) -> None:
        try:
            async for found in search_bodies(loader, search.terms, todo):
                self.post_message(BodiesFound(search, found))
        except Exception as exc:  # the list must say it is short, not lose the worker silently
            self.post_message(BodiesFound(search, [], failed=str(exc) or type(exc).__name__))

    def on_bodies_found(self, message: BodiesFound) -> None:
        """The body search read more chains: show those that match now (paced, and at its end)."""
        search = message.search
        if search is not self.filter_:
            return  # a replaced filter's search, stopping
        search.failed = message.failed
        if search.took(message.found):
            self._redraw_due = True
        wait = self._pace.wait(time.monotonic())
        if not search.searching or (self._redraw_due and wait <= 0):
            self._redraw_found()  # at the end at once: the list is whole when the status bar says so
        elif self._redraw_due and self._redraw_timer is None:
            self._redraw_timer = self.set_timer(wait, self._redraw_found)
        if self.ready:
            self.refresh_status()

    def _redraw_found(self) -> None:
        if self._redraw_timer is not None:
            self._redraw_timer.stop()
            self._redraw_timer = None
        if not self._redraw_due:
            return
        self._redraw_due = False
        if self.flags.paused or not self.ready:
            self._held.merge(Changes(cleared=True))
            return
        started = time.monotonic()
        self.table.rebuild(self.model, self.filter_, time.time())
        self._pace.drew(started, time.monotonic())
        self.refresh_status()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        """Enter in the filter bar applied the filter: back to the chain list, so the keys act on it again."""
        if isinstance(event.input, FilterBar):
            event.stop()
            self.table.focus()

    def on_follow_changed(self, message: FollowChanged) -> None:
        """Scrolling back stopped following."""
        self.refresh_status()

    def on_resize(self, event: events.Resize) -> None:
        """Use the column set that fits the terminal's width (wider ones show more, and more of each)."""
        self.table.set_width(event.size.width, self.model, self.filter_)

    # -- actions -----------------------------------------------------------------------------

    def action_filter(self) -> None:
        """Move the focus to the filter bar."""
        self.query_one(FilterBar).focus()

    def action_focus_chains(self) -> None:
        """Back to the chain list."""
        self.table.focus()

    def action_toggle_follow(self) -> None:
        """Follow the newest chain, or stop following."""
        table = self.table
        table.follow = not table.follow
        if table.follow and table.row_count:
            table.move_cursor(row=table.row_count - 1)
        self.refresh_status()

    def action_toggle_pause(self) -> None:
        """Freeze the list and tree (events are still counted and kept), or apply what was held."""
        self.flags.paused = not self.flags.paused
        if not self.flags.paused:
            held, self._held = self._held, Changes()
            self.flags.held = 0
            self._show(held)
        self.refresh_status()

    def action_clear(self) -> None:
        """Forget every chain shown so far (the proxy keeps its own)."""
        self.workers.cancel_group(self, _SEARCH)
        self.filter_.to_search = 0
        self._redraw_due = False
        self._held = Changes()
        self.flags.held = 0
        self._show(self.model.clear())
        self.chain_tree.show(None)
        self.refresh_status()

    def action_toggle_sessions(self) -> None:
        """Switch the lower pane between the chain tree and the sessions view."""
        switcher = self.query_one(ContentSwitcher)
        self.flags.sessions = switcher.current != "sessions"
        switcher.current = "sessions" if self.flags.sessions else "tree"
        if self.flags.sessions:
            self.sessions.sync(self.model)
        self.refresh_status()
