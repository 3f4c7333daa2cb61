"""The legacy->MRTR bridge's own sessions are bounded: idle expiry, a cap, and 404 for a forgotten one.

A legacy client may initialize as often as it likes and never DELETE; each session the bridge mints
is kept only while used. An expired or evicted session answers 404 (the spec's word for "initialize
again"), never anything that looks like the server failing.
"""

from __future__ import annotations

import dataclasses
import gc
from typing import Any

from proxy.engine.commands import EndClientResponse, Log, ReplyJson, SendLeg
from proxy.engine.events import ClientRequestReceived, UpstreamEraProbed
from proxy.engine.legacy_client.engine import LegacyToMrtrEngine
from proxy.wire.jsonrpc import request as req
from tests.engine.test_legacy_to_mrtr import (
    DISCOVERY,
    UPSTREAM,
    Counter,
    call,
    get,
    head,
    initialize,
    ok,
    post,
    up,
)


def at(event: ClientRequestReceived, when: float) -> ClientRequestReceived:
    return dataclasses.replace(event, at=when)


def engine_with(**options: Any) -> LegacyToMrtrEngine:
    """An engine that has discovered the upstream (its first initialize opened `session-1` at t=1000)."""
    engine = LegacyToMrtrEngine(UPSTREAM, Counter(), **options)
    engine.handle(at(initialize(), 1000.0))
    engine.handle(head("leg-1"))
    engine.handle(up("leg-1", ok("leg-1", DISCOVERY)))
    return engine


def open_session(engine: LegacyToMrtrEngine, when: float) -> tuple[str, list[Any]]:
    commands = engine.handle(at(initialize("x-new"), when))
    reply = commands[-1]
    assert isinstance(reply, ReplyJson)
    assert reply.status == 200, reply
    return dict(reply.headers)["Mcp-Session-Id"], commands


def ping(engine: LegacyToMrtrEngine, session: str, when: float) -> ReplyJson:
    (reply,) = engine.handle(at(post("x-ping", req(1, "ping"), session=session), when))
    assert isinstance(reply, ReplyJson)
    return reply


def test_a_session_unused_past_the_idle_timeout_answers_404_so_the_client_initializes_again() -> None:
    engine = engine_with(session_idle=60.0)
    assert ping(engine, "session-1", 1059.0).status == 200  # used: the idle clock restarts
    assert ping(engine, "session-1", 1118.0).status == 200
    gone = ping(engine, "session-1", 1179.0)
    assert gone.status == 404
    assert gone.message is not None
    assert gone.message["error"]["message"] == "Session not found"
    assert engine.table_sizes()["sessions"] == 0


def test_expired_sessions_are_forgotten_when_a_new_one_is_minted_without_being_asked_for() -> None:
    engine = engine_with(session_idle=60.0)
    for n in range(5):
        open_session(engine, 1000.0 + n)
    assert engine.table_sizes()["sessions"] == 6
    _, commands = open_session(engine, 2000.0)
    assert engine.table_sizes()["sessions"] == 1
    assert (
        Log("legacy_sessions_dropped", "info", {"dropped": 6, "held": 0, "max_legacy_sessions": 10000})
        in commands
    )


def test_past_the_cap_the_least_recently_used_idle_session_makes_room() -> None:
    engine = engine_with(max_sessions=3)
    second, _ = open_session(engine, 1001.0)
    third, _ = open_session(engine, 1002.0)
    assert ping(engine, "session-1", 1003.0).status == 200  # session-1 is now the most recently used
    fourth, _ = open_session(engine, 1004.0)
    assert engine.table_sizes()["sessions"] == 3
    assert ping(engine, second, 1005.0).status == 404, "the least recently used went"
    for kept in ("session-1", third, fourth):
        assert ping(engine, kept, 1006.0).status == 200


def from_address(event: ClientRequestReceived, peer: str, when: float) -> ClientRequestReceived:
    return dataclasses.replace(event, at=when, peer=peer)


def test_one_address_at_its_cap_makes_room_from_its_own_sessions_never_anothers() -> None:
    engine = engine_with(max_sessions=10, max_sessions_per_client=3)  # session-1 came from "" (unknown)
    others = [open_session(engine, 1001.0 + n)[0] for n in range(2)]  # the same unknown address
    flood: list[str] = []
    said: list[Log] = []
    for n in range(20):  # one client opening sessions without end
        commands = engine.handle(from_address(initialize(f"x-{n}"), "198.51.100.7", 1010.0 + n))
        reply = commands[-1]
        assert isinstance(reply, ReplyJson)
        assert reply.status == 200, reply
        flood.append(dict(reply.headers)["Mcp-Session-Id"])
        said += [c for c in commands if isinstance(c, Log) and c.event == "legacy_sessions_dropped"]
    assert engine.table_sizes()["sessions"] == 6
    assert len(said) == 17  # each session it let go is said, with the setting that made it go
    assert said[0].fields == {"dropped": 1, "held_by_client": 3, "max_legacy_sessions_per_client": 3}
    for kept in ("session-1", *others, *flood[-3:]):
        assert ping(engine, kept, 1100.0).status == 200
    assert ping(engine, flood[0], 1101.0).status == 404, "its own oldest went"


def test_an_address_whose_sessions_are_all_busy_is_refused_naming_the_setting() -> None:
    engine = engine_with(max_sessions_per_client=1)  # session-1 (address "") has a call in flight
    engine.handle(at(call("x-call", 7), 1001.0))
    reply = engine.handle(at(initialize("x-new"), 1002.0))[-1]
    assert isinstance(reply, ReplyJson)
    assert reply.status == 503
    assert reply.message is not None
    assert reply.message["error"]["data"] == {"limit": 1, "setting": "max_legacy_sessions_per_client"}
    assert reply.message["id"] == 0
    other = engine.handle(from_address(initialize("x-other"), "203.0.113.9", 1003.0))[-1]
    assert isinstance(other, ReplyJson)
    assert other.status == 200, "another address is served"


def test_a_session_with_a_call_in_flight_is_neither_expired_nor_evicted() -> None:
    engine = engine_with(max_sessions=1, session_idle=60.0)
    commands = engine.handle(at(call("x-call", 7), 1001.0))
    assert isinstance(commands[0], SendLeg)
    full = engine.handle(at(initialize("x-new"), 5000.0))
    reply = full[-1]
    assert isinstance(reply, ReplyJson)
    assert reply.status == 503
    assert reply.message is not None
    assert "max_legacy_sessions=1" in reply.message["error"]["message"]
    assert reply.message["id"] == 0
    assert ("Retry-After", "1") in reply.headers
    assert engine.table_sizes()["sessions"] == 1


def test_an_open_get_stream_does_not_keep_a_session_from_being_evicted_its_stream_ends() -> None:
    engine = engine_with(max_sessions=1)
    opened = engine.handle(at(get("x-get", "session-1"), 1001.0))
    assert opened, "the GET stream opened"
    _, commands = open_session(engine, 1002.0)
    assert EndClientResponse("x-get", "session_evicted") in commands
    assert ping(engine, "session-1", 1003.0).status == 404
    assert engine.table_sizes()["get_streams"] == 0


def test_sessions_that_declared_the_same_capabilities_share_them() -> None:
    engine = engine_with()
    second, _ = open_session(engine, 1001.0)
    sessions = engine._ctx.sessions
    assert sessions["session-1"].capabilities is sessions[second].capabilities
    assert sessions["session-1"].client_info is sessions[second].client_info


def test_thirty_thousand_never_deleted_sessions_grow_rss_by_less_than_32_mib() -> None:
    engine = engine_with(max_sessions=40_000, max_sessions_per_client=40_000)
    events = [at(initialize(f"x{n}"), 1001.0 + n / 1000) for n in range(30_000)]
    gc.collect()
    before = rss()
    for event in events:
        engine.handle(event)
    gc.collect()
    grown = rss() - before
    assert engine.table_sizes()["sessions"] == 30_001
    print(f"\n30,000 legacy sessions: RSS grew {grown / 2**20:.1f} MiB")
    assert grown < 32 * 2**20


def rss() -> int:
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith("VmRSS:"))
    return int(line.split()[1]) * 1024


def test_a_flood_of_sessions_past_an_addresss_cap_is_one_line_a_second_counting_the_rest() -> None:
    engine = engine_with(max_sessions=100, max_sessions_per_client=3)
    said: list[Log] = []
    times = [1010.0 + n / 100 for n in range(20)] + [1011.5]  # 20 within 0.2 s, one a second later
    for n, when in enumerate(times):
        commands = engine.handle(from_address(initialize(f"x-{n}"), "198.51.100.7", when))
        said += [c for c in commands if isinstance(c, Log) and c.event == "legacy_sessions_dropped"]
    setting = {"held_by_client": 3, "max_legacy_sessions_per_client": 3}
    assert [c.fields for c in said] == [
        {"dropped": 1, **setting},  # the first in full
        {"dropped": 1, **setting, "also_unlogged": 16},  # the next, a second on, counts the rest
    ]


def test_sessions_are_retired_when_the_upstream_stops_speaking_2026_so_their_next_request_gets_404() -> None:
    # A rollback to a legacy server: every leg of these sessions would be refused for its era, so
    # each client is told to initialize again (and is then routed by the new verdict).
    engine = engine_with()
    open_session(engine, 1001.0)
    assert engine.handle(UpstreamEraProbed(legacy=True, modern=True, label="dual")) == []
    retired = Log(
        "legacy_sessions_retired",
        "warning",
        {
            "sessions": 2,
            "why": "the era probe found the upstream legacy: it no longer serves 2026-07-28",
            "then": "each session's next request gets 404, so its client initializes again",
        },
    )
    assert engine.handle(UpstreamEraProbed(legacy=True, modern=False, label="legacy")) == [retired]
    assert engine.handle(UpstreamEraProbed(legacy=True, modern=False, label="legacy")) == []  # said once
    gone = ping(engine, "session-1", 1002.0)
    assert gone.status == 404
    assert gone.message is not None
    assert gone.message["error"] == {"code": -32001, "message": "Session not found"}
    assert engine.table_sizes()["sessions"] == 1
    assert ping(engine, "session-2", 1003.0).status == 404
    assert engine.table_sizes()["sessions"] == 0
