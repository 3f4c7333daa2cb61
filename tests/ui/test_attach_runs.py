"""An attached TUI across its proxy going away: it says so at once, and who answers when one is back.

End to end with real `mcp-proxy` processes (one stopped, another started on the same admin port and
a different upstream) and real SDK clients; the same-run reconnection and the wording are driven by a
scripted feed, and the model's rules are checked without an app.
"""

from __future__ import annotations

import asyncio

import pytest
from textual.widgets._toast import Toast

from proxy.flows.events import ChainStatus, Lagged, ProxyInfo, SessionChanged, Side
from tests.peers.runner import PeerServer
from tests.peers.scenarios import run_scenario
from tests.sidecar import ProxyProcess, clean_env, settings_env
from tests.ui.desk_double import DeskDouble
from tests.ui.desk_double import held as held_message
from tests.ui.helpers import BASE, ScriptedFeed, finished, opened, wait_for
from ui.app import ProxyTui
from ui.feeds import AttachFeed, FeedStatus
from ui.model import RUN_ENDED, ViewModel
from ui.render import chain_cells, session_cells
from ui.screens.main import MainScreen
from ui.widgets.status_bar import StatusBar, ViewFlags, status_text

TOKEN = "attach-runs-token"
ADMIN = "http://127.0.0.1:9901"


def run_info(run: str, upstream: str = "http://127.0.0.1:8000/mcp", era: str = "legacy") -> ProxyInfo:
    return ProxyInfo(
        ts=BASE,
        version="0.1.0",
        listen="http://127.0.0.1:8080",
        upstream=upstream,
        upstream_era=era,
        run=run,
        started=BASE,
    )


def lost(retry: float = 1.0) -> FeedStatus:
    return FeedStatus("reconnecting", "connection lost", retry, address=ADMIN, again=True)


def back() -> FeedStatus:
    return FeedStatus("live", ADMIN, address=ADMIN, again=True)


# -- the model and the status line, without an app ---------------------------------------------


def test_a_lost_proxy_shows_no_upstream_until_one_answers_and_the_same_run_is_said_to_be_back() -> None:
    model = ViewModel()
    model.apply_all([run_info("cb00287"), opened("cb00287-1")])
    model.detach()

    gone = status_text(model, lost(), ViewFlags()).plain
    assert gone.startswith("○ proxy gone, reconnecting to 127.0.0.1:9901 (connection lost; retry in 1s)")
    assert "8000/mcp" not in gone  # the lost run's upstream is not shown as current

    model.apply(run_info("cb00287", era="modern"))  # the same run (an era change repeats its info)
    again = status_text(model, back(), ViewFlags(reattached=model.reattached)).plain
    assert again.startswith("● live  │ reconnected: the same proxy run (cb00287)")
    assert "1 chains" in again
    assert all(entry.earlier_run is None for entry in model.chains.values())


def test_a_capture_of_several_runs_says_its_addresses_are_the_last_runs() -> None:
    model = ViewModel()
    model.apply_all([run_info("aa11111"), run_info("bb22222", upstream="http://127.0.0.1:8001/mcp")])
    model.apply(run_info("cc33333", upstream="http://127.0.0.1:8002/mcp"))

    ended = status_text(model, FeedStatus("ended"), ViewFlags()).plain
    assert ended.endswith("127.0.0.1:8002/mcp ⇠ 127.0.0.1:8080 (the last of 3 runs)")
    assert "8000/mcp" not in ended
    one = ViewModel()
    one.apply(run_info("aa11111"))
    assert "runs" not in status_text(one, FeedStatus("ended"), ViewFlags()).plain


def test_a_different_run_keeps_the_earlier_chains_apart_and_counts_only_its_own() -> None:
    model = ViewModel()
    held = SessionChanged(ts=BASE, session="<redacted:1a2b>", state="opened", side=Side.CLIENT)
    kept = SessionChanged(ts=BASE, session="<redacted:3c4d>", state="opened")
    model.apply_all([run_info("cb00287"), opened("cb00287-1"), opened("cb00287-2", started=BASE + 1)])
    model.apply_all([held, kept, Lagged(ts=BASE, dropped=7)])
    model.detach()

    changes = model.apply(run_info("cf11111", upstream="http://127.0.0.1:9000/mcp"))
    model.apply(opened("cf11111-1", started=BASE + 2))
    model.apply(kept.model_copy(update={"ts": BASE + 3, "state": "reinitialized"}))  # heard of again

    assert changes.cleared  # every row is redrawn, the earlier ones dimmed
    assert changes.sessions
    line = status_text(model, back(), ViewFlags(reattached=model.reattached)).plain
    assert "now attached to a different proxy run (cf11111, upstream 127.0.0.1:9000/mcp)" in line
    assert "1 chains 0 msgs +2 of an earlier run" in line
    assert "8000/mcp" not in line
    assert "lagged" not in line  # the earlier run's drops are not the new one's
    states = {s.session: str(session_cells(s)["state"]) for s in model.sessions.values()}
    assert states == {"<redacted:1a2b>": "opened, earlier run", "<redacted:3c4d>": "reinitialized"}
    earlier = [e.summary.id for e in model.chains.values() if e.earlier_run is not None]
    assert earlier == ["cb00287-1", "cb00287-2"]

    model.clear()  # the user's x: the earlier run's chains go, and nothing still claims them
    assert "earlier run" not in status_text(model, back(), ViewFlags()).plain


def upstream_session(run_ts: float, state: str, principal: str) -> SessionChanged:
    return SessionChanged(
        ts=run_ts, session="upstream-2", state=state, side=Side.UPSTREAM, principal=principal
    )


def test_each_runs_upstream_session_is_its_own_row_though_every_run_names_its_first_alike() -> None:
    model = ViewModel()
    model.apply_all([run_info("cb00287"), upstream_session(BASE, "opened", "aaaa")])
    model.apply(upstream_session(BASE + 5, "ended", "aaaa"))  # the proxy stopped and ended it
    model.detach()
    model.apply_all([run_info("cf11111"), upstream_session(BASE + 9, "opened", "bbbb")])

    rows = [session_cells(s) for s in model.sessions.values()]
    shown = [(str(r["session"]), str(r["principal"]), str(r["state"]), str(r["history"])) for r in rows]
    assert shown == [
        ("upstream-2", "aaaa", "ended, earlier run", "opened → ended"),
        ("upstream-2", "bbbb", "opened", "opened"),
    ]


def test_a_call_its_run_left_running_ends_incomplete_once_another_run_answers() -> None:
    model = ViewModel()
    model.apply_all([run_info("cb00287"), opened("cb00287-1"), opened("cb00287-2", started=BASE + 1)])
    model.apply(finished("cb00287-2", started=BASE + 1))
    model.detach()
    model.apply(run_info("cb00287"))  # the same run back: its call may still answer
    model.detach()
    assert [e.summary.status for e in model.chains.values()] == [ChainStatus.PENDING, ChainStatus.OK]

    model.apply(run_info("cf11111"))

    left, done = model.chains.values()
    assert left.summary.status is ChainStatus.INCOMPLETE
    assert left.summary.notes[-1] == RUN_ENDED
    assert str(chain_cells(left)["status"]) == "incomplete"
    assert done.summary.status is ChainStatus.OK


# -- the app, on a scripted feed -------------------------------------------------------------


async def test_the_status_bar_says_at_once_the_proxy_is_gone_and_when_the_same_run_is_back() -> None:
    feed = ScriptedFeed(run_info("cb00287"), FeedStatus("live", ADMIN, address=ADMIN), opened("cb00287-1"))
    app = ProxyTui(feed, batch_delay=0.01)
    async with app.run_test(size=(160, 24)):

        def status() -> str:
            return str(app.main.query_one(StatusBar).content)

        await wait_for(lambda: "127.0.0.1:8000/mcp" in status(), what="the proxy's upstream")
        feed.push(lost())
        await wait_for(lambda: "proxy gone, reconnecting to 127.0.0.1:9901" in status(), what="the loss")
        assert "127.0.0.1:8000/mcp" not in status()

        feed.push(run_info("cb00287"), back())
        await wait_for(lambda: "reconnected: the same proxy run (cb00287)" in status(), what="the return")
        assert "127.0.0.1:8000/mcp" in status()
        assert "earlier run" not in status()


async def test_the_notice_of_a_different_run_leaves_the_status_bar_readable_to_its_end() -> None:
    feed = ScriptedFeed(run_info("cb00287"), FeedStatus("live", ADMIN, address=ADMIN), opened("cb00287-1"))
    app = ProxyTui(feed, batch_delay=0.01)
    async with app.run_test(size=(200, 50), notifications=True) as pilot:
        bar = app.main.query_one(StatusBar)
        await wait_for(lambda: "127.0.0.1:8000/mcp" in str(bar.content), what="the proxy's upstream")
        feed.push(lost(), run_info("cf11111", upstream="http://127.0.0.1:9000/mcp"), back())
        await wait_for(lambda: bool(app.screen.query(Toast)), what="the notice")
        await pilot.pause()

        (toast,) = app.screen.query(Toast)
        assert "now attached at 127.0.0.1:9901 to a different proxy run" in str(toast.render())
        assert not toast.region.overlaps(bar.region)  # the new run's upstream and listen address show
        assert "127.0.0.1:9000/mcp ⇠ 127.0.0.1:8080" in str(bar.content)


async def test_at_80_columns_the_reattach_notice_leaves_the_markers_in_view_and_then_goes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A user at 80 columns who reattached to a new proxy run still sees what is held, that the view
    is paused and why the filter was not applied; the notice of the new run then goes away."""
    monkeypatch.setattr(MainScreen, "REATTACHED_SHOWN", 1.0, raising=False)
    feed = ScriptedFeed(run_info("cb00287"), FeedStatus("live", ADMIN, address=ADMIN), opened("cb00287-1"))
    app = ProxyTui(feed, batch_delay=0.01, desk=DeskDouble(held_message("h1")))
    async with app.run_test(size=(80, 24)) as pilot:
        bar = app.main.query_one(StatusBar)

        def shown() -> str:
            return "".join(str(segment.text) for segment in bar.render_line(0))

        await wait_for(lambda: "1 held" in shown(), what="the held message")
        feed.push(lost(), run_info("cf11111", upstream="http://127.0.0.1:9000/mcp"), back())
        await wait_for(lambda: "now attached" in str(bar.content), what="the new run")
        await pilot.press("p", "slash", *"status:bogus", "enter")
        await wait_for(lambda: "still showing every chain" in str(bar.content), what="the filter error")

        line = shown()
        assert line.startswith("● live  │  1 held   │  PAUSED +0   │ filter: status:"), line
        await wait_for(lambda: "now attached" not in str(bar.content), what="the notice to go")
        assert "1 held" in shown()


async def test_a_wide_terminal_shows_whole_chain_ids_and_how_many_chains_a_filter_matches() -> None:
    first = [opened("cc13470-21", name="ask_name"), opened("cc13470-22", started=BASE + 1)]
    feed = ScriptedFeed(run_info("cc13470"), FeedStatus("live", ADMIN, address=ADMIN), *first)
    app = ProxyTui(feed, batch_delay=0.01)
    async with app.run_test(size=(200, 50)) as pilot:
        bar, table = app.main.query_one(StatusBar), app.main.table
        await wait_for(lambda: table.row_count == 2, what="the first run's chains")
        feed.push(
            lost(), run_info("c793c00"), back(), opened("c793c00-21", started=BASE + 2, name="ask_name")
        )
        await wait_for(lambda: table.row_count == 3, what="the second run's chain")

        await pilot.press("slash", *"tool:ask_name", "enter")
        await wait_for(lambda: table.row_count == 2, what="the filter")
        ids = [str(table.get_cell(key, "id")) for key in table.rows]
        assert ids == ["cc13470-21", "c793c00-21"]  # two runs' chain 21, told apart
        assert "filter: 2 of 3 chains match" in str(bar.content)

        await pilot.press("slash", "ctrl+u", *"tool:nothing_has_this", "enter")
        await wait_for(lambda: table.row_count == 0, what="a filter matching nothing")
        assert "filter: 0 of 3 chains match" in str(bar.content)
        assert app.main.chain_tree.chain_key is None  # no chain of before stays shown beside no rows

        await pilot.press("slash", "ctrl+u", "enter")
        await wait_for(lambda: table.row_count == 3, what="no filter")
        assert "filter:" not in str(bar.content)


# -- real proxies ------------------------------------------------------------------------------


def done(app: ProxyTui, name: str) -> bool:
    return any(
        e.summary.name == name and e.summary.status is ChainStatus.OK for e in app.model.chains.values()
    )


@pytest.mark.e2e
async def test_a_proxy_replaced_on_the_admin_port_is_said_to_be_a_different_run_and_kept_apart(
    legacy_server: PeerServer, modern_server: PeerServer
) -> None:
    first = await asyncio.to_thread(
        ProxyProcess(clean_env(**settings_env(upstream=legacy_server.url, admin_token=TOKEN))).start
    )
    admin = first.admin
    second: ProxyProcess | None = None
    try:
        app = ProxyTui(AttachFeed(admin, TOKEN, backoff=(0.05, 0.1)), batch_delay=0.01)
        async with app.run_test(size=(200, 24)):

            def status() -> str:
                return str(app.main.query_one(StatusBar).content)

            await wait_for(lambda: legacy_server.url.removeprefix("http://") in status(), what="live")
            await run_scenario(first.listen + "/mcp", "legacy", "echo")
            await wait_for(lambda: done(app, "echo"), what="the first run's chain")
            first_run = app.model.info.run if app.model.info else None
            assert first_run

            await asyncio.to_thread(first.stop)
            where = admin.removeprefix("http://")
            await wait_for(lambda: f"proxy gone, reconnecting to {where}" in status(), what="the loss")
            assert legacy_server.url.removeprefix("http://") not in status()
            held = len(app.model.chains)  # the scenario's initialize, its call, its session's end...
            assert f"{held} chains" in status()  # still shown, as what this view holds

            env = settings_env(upstream=modern_server.url, admin_token=TOKEN, admin=where)
            second = await asyncio.to_thread(ProxyProcess(clean_env(**env)).start)
            await wait_for(lambda: "now attached" in status(), what="the new run", seconds=15)
            line = status()
            second_run = app.model.info.run if app.model.info else None
            assert second_run
            assert second_run != first_run
            upstream = modern_server.url.removeprefix("http://")
            assert f"to a different proxy run ({second_run}, upstream {upstream})" in line
            assert legacy_server.url.removeprefix("http://") not in line
            assert f"0 chains 0 msgs +{held} of an earlier run" in line

            kept = list(app.model.chains.values())  # the first run's chains stay, marked as its
            assert done(app, "echo")
            assert {e.earlier_run.run if e.earlier_run else None for e in kept} == {first_run}
            await run_scenario(second.listen + "/mcp", "legacy", "add")
            await wait_for(lambda: done(app, "add"), what="the second run's chain")
            fresh = len(app.model.chains) - held
            await wait_for(lambda: f"{fresh} chains" in status(), what="the new run's count")
            assert f"+{held} of an earlier run" in status()
            ids = [e.summary.id for e in app.model.chains.values() if e.earlier_run is None]
            assert len(ids) == fresh
            assert all(i.startswith(f"{second_run}-") for i in ids)
    finally:
        await asyncio.to_thread(first.stop)
        if second is not None:
            await asyncio.to_thread(second.stop)


def upstream_rows(app: ProxyTui) -> list[tuple[str, str]]:
    rows = (session_cells(s) for s in app.model.sessions.values() if s.side == "upstream")
    return [(str(r["session"]), str(r["state"])) for r in rows]


@pytest.mark.e2e
async def test_the_sessions_view_keeps_each_runs_upstream_session_and_shows_one_ended_at_stop_ended(
    legacy_server: PeerServer,
) -> None:
    env = settings_env(upstream=legacy_server.url, admin_token=TOKEN)
    first = await asyncio.to_thread(ProxyProcess(clean_env(**env)).start)
    second: ProxyProcess | None = None
    try:
        app = ProxyTui(AttachFeed(first.admin, TOKEN, backoff=(0.05, 0.1)), batch_delay=0.01)
        async with app.run_test(size=(200, 50)) as pilot:
            await run_scenario(first.listen + "/mcp", "2026-07-28", "ask_name")  # through the bridge
            await wait_for(lambda: [s for _, s in upstream_rows(app)] == ["opened"], what="its session")
            (name, _), first_run = upstream_rows(app)[0], app.model.info and app.model.info.run

            await asyncio.to_thread(first.stop)
            await wait_for(lambda: upstream_rows(app) == [(name, "ended")], what="its end at the stop")
            where = first.admin.removeprefix("http://")
            env = settings_env(upstream=legacy_server.url, admin_token=TOKEN, admin=where)
            second = await asyncio.to_thread(ProxyProcess(clean_env(**env)).start)
            await wait_for(
                lambda: app.model.info is not None and app.model.info.run != first_run, what="run 2"
            )
            await run_scenario(second.listen + "/mcp", "2026-07-28", "ask_name")

            both = [(name, "ended, earlier run"), (name, "opened")]  # each run names its first alike
            await wait_for(lambda: upstream_rows(app) == both, what="the second run's session")
            await pilot.press("s")
            table = app.main.sessions
            await wait_for(lambda: table.row_count == len(app.model.sessions), what="the sessions view")
            states = [str(table.get_cell(key, "state")) for key in table.rows]
            assert states.count("ended, earlier run") >= 1
    finally:
        await asyncio.to_thread(first.stop)
        if second is not None:
            await asyncio.to_thread(second.stop)
