"""The bridge driver's session watch: an engine's sessions view, diffed into upstream session observations.

The engine here is the real MRTR->legacy engine, driven by hand (a handshake, a loss, a
re-handshake, an idle close); the observer records what the watch announces.
"""

from __future__ import annotations

from proxy.engine.events import LegResponded, TimerFired
from proxy.engine.mrtr_to_legacy import MrtrToLegacyEngine
from proxy.flows.observations import Observation, UpstreamSessionMoved
from proxy.transport.bridge import _SessionWatch
from tests.engine.test_mrtr_to_legacy import DONE, KEY, UPSTREAM, Counter, call, ok, open_session, send, up


class Recorder:
    """Stands in for the observation sink: keeps each announcement."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, str]] = []

    def now(self) -> float:
        return 0.0

    def emit(self, obs: Observation) -> None:
        assert isinstance(obs, UpstreamSessionMoved)
        self.seen.append((obs.name, obs.state, obs.capabilities))


def test_a_session_is_announced_opened_reinitialized_and_expired_once_each() -> None:
    engine = MrtrToLegacyEngine(UPSTREAM, Counter(), state_key=KEY, session_ttl=30.0)
    watch, recorder = _SessionWatch(), Recorder()
    idle = TimerFired("session-idle:upstream-1")

    def diff() -> None:
        watch.diff(engine, recorder)  # type: ignore[arg-type]

    engine.handle(send("x0", 0, "server/discover", caps={"sampling": {}}))
    diff()
    assert recorder.seen == []  # not ready yet
    open_session(engine)
    diff()
    engine.handle(call("x1", 1, caps={"sampling": {}}))
    engine.handle(LegResponded("leg-3", 404, ()))  # the upstream forgot the session
    diff()
    open_session(engine, "x1", init="leg-4", notify="leg-5", session="up-session-2")
    diff()
    engine.handle(up("leg-6", ok("leg-6", DONE)))
    diff()
    engine.handle(idle)  # used in this period: it waits another
    diff()
    engine.handle(idle)
    diff()
    diff()

    assert recorder.seen == [
        ("upstream-1", "opened", "sampling"),
        ("upstream-1", "reinitialized", "sampling"),
        ("upstream-1", "expired", "sampling"),
    ]
