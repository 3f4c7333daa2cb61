"""Both bridges judge a caller by what crosses to the upstream, Playbook style.

A client may list `Origin` or `Authorization` in its `Connection` header: the field is hop-by-hop
then, and the bridge drops it from the leg it sends. The upstream judges the leg without it, so the
bridge's check of the request and what the leg's success teaches must read the same caller; else the
modern-client bridge pings the upstream for ever for one `server/discover`, and the legacy-client
bridge never answers the `initialize`. Builders and ids come from `test_mrtr_to_legacy` and
`test_bridged_callers`.
"""

from __future__ import annotations

from typing import Final
from unittest.mock import ANY

from proxy.engine.commands import Log, ReplyJson, SendLeg
from proxy.engine.events import LegEnded, LegResponded
from proxy.engine.origins import Caller, KnownCallers
from proxy.wire.jsonrpc import request as req
from proxy.wire.jsonrpc import result_response as ok
from tests.engine import test_bridged_callers as legacy_side
from tests.engine import test_mrtr_to_legacy as modern_side
from tests.engine.builders import up
from tests.engine.playbook import Playbook

PAGE: Final = ("Origin", "http://localhost:6274")
HOP: Final = ("Connection", "Origin")
"""`Origin` named hop-by-hop: it ends at the proxy and never reaches the upstream."""


class ForgetfulCallers(KnownCallers):
    """A stand-in table that learns no caller, so a check's success never makes its caller known:
    what any disagreement between judging and learning would look like (no real peer causes one)."""

    def learn(self, caller: Caller, status: int | None) -> None:
        return None


def ping(leg: str, exchange: str, *relayed: tuple[str, str]) -> SendLeg:
    """The origin check: a `ping` in the session, with the client headers that cross."""
    return SendLeg(leg, exchange, modern_side.legacy_headers(*relayed), req(leg, "ping", {}))


def test_a_modern_discover_from_a_new_origin_is_checked_once_upstream_and_then_answered() -> None:
    engine = modern_side.ready_engine()

    assert (
        Playbook(engine)
        >> modern_side.send("x1", 1, "server/discover", {}, PAGE)
        << ping("leg-3", "x1", PAGE)
        >> LegResponded("leg-3", 200, (("Content-Type", "application/json"),))
        << ReplyJson("x1", 200, ANY)
        >> modern_side.send("x2", 2, "server/discover", {}, PAGE)  # known now: no second check
        << ReplyJson("x2", 200, ANY)
    )
    assert modern_side.drained(engine)


def test_a_modern_discover_whose_origin_is_hop_by_hop_is_answered_as_the_caller_the_upstream_sees() -> None:
    engine = modern_side.ready_engine()

    assert (
        Playbook(engine)
        >> modern_side.send("x1", 1, "server/discover", {}, PAGE, HOP)
        << ReplyJson("x1", 200, ANY)
    )
    assert modern_side.drained(engine)


def test_a_modern_discover_is_checked_at_most_once_even_when_its_caller_stays_unknown() -> None:
    engine = modern_side.ready_engine()
    engine._ctx.callers = ForgetfulCallers()

    assert (
        Playbook(engine)
        >> modern_side.send("x1", 1, "server/discover", {}, PAGE)
        << ping("leg-3", "x1", PAGE)
        >> LegResponded("leg-3", 200, (("Content-Type", "application/json"),))
        << ReplyJson("x1", 200, ANY)
        >> LegEnded("leg-3")
    )
    assert modern_side.drained(engine)


def test_a_legacy_initialize_whose_origin_is_hop_by_hop_is_answered_as_the_caller_the_upstream_sees() -> None:
    engine = legacy_side.served()

    assert (
        Playbook(engine)
        >> legacy_side.initialize_as("x2", legacy_side.AUTH, PAGE, HOP)
        << ReplyJson("x2", 200, ANY, (("Mcp-Session-Id", "session-2"),))
    )


def test_a_legacy_initialize_is_answered_by_its_own_discovery_even_if_its_caller_stays_unknown() -> None:
    engine = legacy_side.served()
    engine._ctx.callers = ForgetfulCallers()
    said = Log("upstream_discovered", "info", {"server": "weather"})

    assert (
        Playbook(engine)
        >> legacy_side.initialize_as("x2", PAGE)
        << SendLeg("leg-2", "x2", ANY, legacy_side.discover("leg-2"))
        >> legacy_side.initialize_as("x3", PAGE)  # the same caller: it waits for the same discovery
        >> legacy_side.head("leg-2")
        >> up("leg-2", ok("leg-2", legacy_side.DISCOVERY))
        << said
        << ReplyJson("x2", 200, ANY, (("Mcp-Session-Id", "session-2"),))
        << ReplyJson("x3", 200, ANY, (("Mcp-Session-Id", "session-3"),))
    )
