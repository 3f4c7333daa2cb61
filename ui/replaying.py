"""What the TUI's `r` replays: the chain under the cursor as a replay plan, with its session's handshake.

The replay itself runs in the proxy (`proxy.replay`), which the UI must not import: the command line
hands the app a `Replayer` when one can run, and the app calls it with the plans made here from the
chains it holds, and the upstream its feed names, once the user said yes to the question naming
what goes where (a replay runs a tool again, side effects and all).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from proxy.flows.events import ProxyInfo
from proxy.record.replay_outcome import ChainOutcome
from proxy.record.replay_plan import ChainPlan, PlanKind, plan_chain
from proxy.wire.visible import visible
from ui.model import ChainEntry, ViewModel
from ui.screens.confirm_replay import ConfirmReplay
from ui.screens.replay import ReplayScreen

if TYPE_CHECKING:
    from ui.app import ProxyTui


class Replayer(Protocol):
    """Replays a chain against a live server (`proxy.replay.runner.TuiReplayer` is the real one).

    `recorded` is what the feed's proxy said of itself: its upstream (where a replay goes unless the
    replayer was given one) and the era it spoke there (which a replay speaks again).
    """

    def target(self, recorded: ProxyInfo | None) -> str | None:
        """Where a replay would go (None: nowhere known)."""
        ...

    async def __call__(
        self, plan: ChainPlan, handshake: ChainPlan | None, recorded: ProxyInfo | None
    ) -> ChainOutcome:
        """Replay the chain (after its session's handshake) and say how it went; raises with a message
        for the status bar when it cannot run at all."""
        ...


def plans_for(model: ViewModel, entry: ChainEntry) -> tuple[ChainPlan, ChainPlan | None]:
    """The chain's plan, and its legacy session's handshake (from the chains the TUI holds), if held."""
    plan = plan_chain(entry.summary, entry.messages)
    session = entry.summary.session
    if session is None or plan.era != "legacy" or entry.summary.method == "initialize":
        return plan, None
    for other in reversed(model.chains.values()):
        if other.summary.session == session and other.summary.method == "initialize":
            held = model.get(other.key)
            if held is not None:
                return plan, plan_chain(held.summary, held.messages)
    return plan, None


def start_replay(app: ProxyTui, key: str | None) -> None:
    """`r`: ask first (a replay sends real requests), then replay the chain with this key."""
    replayer = app.replayer
    entry = app.model.get(key) if key is not None else None
    if entry is None:
        app.notify("no chain under the cursor to replay", severity="warning")
        return
    if replayer is None:
        app.notify(
            "replay needs the proxy's own process: mcp-proxy --tui, tui --attach or tui --open",
            severity="warning",
        )
        return
    plan, handshake = plans_for(app.model, entry)
    if plan.kind in (PlanKind.STREAM, PlanKind.OTHER):
        app.notify(
            f"{plan.chain} cannot be replayed: {plan.problem or 'a standalone GET stream'}",
            severity="warning",
        )
        return
    info = app.model.info
    target = replayer.target(info)

    def answered(replay: bool | None) -> None:
        if replay:
            run_replay(app, replayer, (plan, handshake), info)

    if target is None:  # nothing can be sent: the replayer says why
        answered(True)
        return
    app.push_screen(
        ConfirmReplay(plan.chain, plan.headline(), target, handshake=handshake is not None), answered
    )


def run_replay(
    app: ProxyTui, replayer: Replayer, plans: tuple[ChainPlan, ChainPlan | None], recorded: ProxyInfo | None
) -> None:
    """Replay in a worker, then open the side-by-side screen (or say why it failed)."""
    plan, handshake = plans
    app.notify(visible(f"replaying {plan.chain} {plan.headline()}..."), markup=False)

    async def replay() -> None:
        try:
            outcome = await replayer(plan, handshake, recorded)
        except Exception as exc:  # the status bar says why (unreachable server, no upstream known)
            failed = visible(f"replay of {plan.chain} failed: {exc}")
            app.notify(failed, severity="error", timeout=10, markup=False)
            return
        app.push_screen(ReplayScreen(outcome))

    app.run_worker(replay(), name="replay", group="replay", exclusive=True, exit_on_error=False)
