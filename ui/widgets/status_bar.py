"""The status bar: feed state, the markers that must never be missed, then counts and addresses.

Ordered by importance, because an 80-column terminal cuts the end: feed state (`behind` while an
attached view that fell behind reads a fresh history), a standing notice, "lagged N", paused, filter
errors, how many chains the filter matches and how far its search of bodies is first; upstream URL
and listen address last. An attached feed that lost its proxy says so first, with the address it
reconnects to, and shows no upstream, era or count of the lost run as current; once a proxy answers,
it says for a while whether it is the same run, after the markers (the sentence is long, and a
marker must not be pushed off the line by it).
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text
from textual.widgets import Static

from proxy.wire.visible import visible
from ui.body_search import ListFilter
from ui.feeds import FeedStatus
from ui.model import MAX_RUNS, ViewModel
from ui.render import era_badge
from ui.runs import Reattached, run_label

_STATE_STYLE = {
    "connecting": ("◌ connecting", "yellow"),
    "indexing": ("◌ indexing", "yellow"),
    "live": ("● live", "green"),
    "behind": ("◌ behind", "bold yellow"),
    "reconnecting": ("○ disconnected", "bold red"),
    "ended": ("■ ended", "dim"),
    "failed": ("✖ failed", "bold red"),
}


@dataclass(slots=True)
class ViewFlags:
    """What the main screen's keys switched: paused (with how many events held), follow, filter."""

    paused: bool = False
    held: int = 0
    follow: bool = True
    filter: ListFilter | None = None
    """The filter applied, and how far its search of an indexed capture's bodies is."""
    filter_error: str | None = None
    """Why the filter typed last was not applied (the list still shows `filter`'s chains)."""
    sessions: bool = False
    intercepted: int = 0
    """Messages an intercept rule holds now, waiting for a decision (`I`)."""
    notice: str | None = None
    """A standing notice from whoever runs the app (the demo's result), shown after the feed state."""
    matched: int | None = None
    """Chains that match the filter in force (None: no filter), said before the counts."""
    reattached: Reattached | None = None
    """Who answered when a lost feed came back, while that is news (the main screen lets it go)."""


def _short(url: str) -> str:
    return visible(url.removeprefix("http://").removeprefix("https://"))


def status_text(model: ViewModel, feed: FeedStatus | None, flags: ViewFlags) -> Text:
    """The whole status line (pure, so it is tested without an app)."""
    sep = ("  │ ", "dim")
    text = Text()
    if feed is not None:
        text.append_text(feed_text(feed))
        text.append(*sep)
    if flags.notice:
        text.append(flags.notice, style="bold")
        text.append(*sep)
    if flags.intercepted:
        text.append(f" {flags.intercepted} held ", style="bold white on magenta")
        text.append(*sep)
    if model.lagged_total:
        text.append(f" lagged {model.lagged_total} ", style="bold white on red")
        text.append(*sep)
    if flags.paused:
        text.append(f" PAUSED +{flags.held} ", style="bold black on yellow")
        text.append(*sep)
    live = feed is None or feed.state == "live"  # a capture's last word on its upstream is history
    for info in list(model.proxies.values())[-2:]:
        if live and info.upstream_unreachable:  # nothing passes: said before the counts, not at the end
            text.append(" upstream not answering ", style="bold black on yellow")
            text.append(*sep)
            break
    if flags.filter_error:
        text.append(flags.filter_error, style="bold red")
        text.append(*sep)
    if flags.matched is not None:
        text.append(f"filter: {flags.matched} of {len(model.chains)} chains match", style="bold cyan")
        text.append(*sep)
    if flags.filter is not None and flags.filter.to_search:
        text.append_text(search_text(flags.filter))
        text.append(*sep)
    back = flags.reattached
    if back is not None and live:
        text.append(reattached_text(back), style="green" if back.same else "bold yellow")
        text.append(*sep)
    text.append(f"{len(model.chains) - model.earlier} chains {model.messages_seen} msgs")
    if model.earlier:
        text.append(f" +{model.earlier} of an earlier run", style="dim")
    if model.parked:
        text.append(*sep)
        text.append(f"parked {model.parked}", style="bold blue")
    if flags.follow:
        text.append("  follow", style="cyan")
    proxies = list(model.proxies.values())
    for info in proxies[-2:]:
        text.append(*sep)
        text.append_text(era_badge(info.upstream_era))
        text.append(f" {_short(info.upstream)} ⇠ {_short(info.listen)}")
    runs = len(model.runs)
    if not live and runs > 1 and proxies:  # a capture of several runs: the addresses are its last run's
        text.append(f" (the last of {runs}{'+' if runs >= MAX_RUNS else ''} runs)", style="dim")
    return text


def search_text(search: ListFilter) -> Text:
    """How far the filter's search of the bodies the view does not hold is (the list grows meanwhile)."""
    if search.failed is not None:
        stopped = f"body search stopped: {search.failed}; the chains not read are not shown"
        return Text(stopped, style="bold red")
    if search.searching:
        return Text(f"searching bodies {search.searched} of {search.to_search} chains", style="bold yellow")
    return Text("bodies of every chain searched", style="green")


def feed_text(feed: FeedStatus) -> Text:
    """The feed's state; an attached feed that lost its proxy says so, and where it looks."""
    word, style = _STATE_STYLE[feed.state]
    text = Text()
    if feed.again and feed.state in ("reconnecting", "connecting"):
        text.append("○ proxy gone", style="bold red")
        retry = f"; retry in {feed.retry_in:g}s" if feed.retry_in is not None else ""
        reason = f" ({feed.detail}{retry})" if feed.state == "reconnecting" else ""
        text.append(f", reconnecting to {_short(feed.address)}{reason}", style="red")
        return text
    text.append(word, style=style)
    if feed.state == "reconnecting":
        retry = f" retry in {feed.retry_in:g}s" if feed.retry_in is not None else ""
        text.append(f" ({feed.detail}){retry}", style="red")
    elif feed.state == "failed":
        text.append(f" {feed.detail}", style="red")
    elif feed.state in ("indexing", "behind"):
        text.append(f" {feed.detail}", style="yellow")
    if feed.warning:
        text.append(f" {feed.warning}", style="yellow")
    return text


def reattached_text(back: Reattached, address: str = "", kept: int = 0) -> str:
    """What a reconnection found, in a sentence: the same run, or a different one (with its upstream),
    and how many chains of the run it replaced are `kept` (the status bar counts them itself)."""
    where = f" at {_short(address)}" if address else ""
    if back.same:
        return f"reconnected{where}: the same proxy run ({run_label(back.info)})"
    upstream = _short(back.info.upstream)
    earlier = ""
    if kept and back.earlier is not None:
        earlier = f"; {kept} chains of {run_label(back.earlier)} kept, dimmed"
    return (
        f"now attached{where} to a different proxy run ({run_label(back.info)}, upstream {upstream}){earlier}"
    )


class StatusBar(Static):
    """One line at the bottom, above the footer."""

    def show(self, model: ViewModel, feed: FeedStatus | None, flags: ViewFlags) -> None:
        """Redraw from the current state."""
        self.update(status_text(model, feed, flags))
