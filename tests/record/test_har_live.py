"""The running proxy's HAR (drafted from chain records) agrees with a capture's (drafted from observations).

Each play runs once into a sink that builds chains at once and writes the same observations to a
capture. `/api/export.har`'s drafting (`har_live.entries_of`) over the live chains and `export --har`'s
(`HarFromCapture`) over the capture must then give every client exchange the same request line,
request headers, status and response headers, and the JSON of the chains the same records: a GET
stream or a DELETE carries no message, so its chain holds an `http` record of its request head.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import orjson
import pytest

from proxy.flows.events import Channel, Direction, FlowEvent, MessageRecorded
from proxy.flows.store import Chain
from proxy.record.capture import read_capture
from proxy.record.export import Format, export_capture
from proxy.record.har import upstream_url
from proxy.record.har_live import LiveDrafts
from proxy.wire.jsonrpc import classify_value, request, result_response
from tests.flows.bridge_play import LEG_STATUSES, UPSTREAM_SESSION, refused_leg_call
from tests.flows.stream_play import HEADERS, SESSION, TOKEN, streams_and_delete
from tests.flows.test_sink import SCENARIOS, Play
from tests.record.captures import LISTEN, UPSTREAM, record_play


def entries_of(chains: list[Chain], *, host: str, upstream: str) -> list[dict[str, Any]]:
    """Every HAR entry the admin API's export drafts from these chains, oldest first."""
    drafts = LiveDrafts(host=host, upstream=upstream)
    for chain in chains:
        drafts.add(chain)
    return list(drafts.entries())


def _heads(entries: list[dict[str, Any]]) -> dict[str, tuple[Any, ...]]:
    """Each client exchange's request line and headers, status and response headers."""
    return {
        e["_mcp"]["exchange"]: (
            e["request"]["method"],
            e["request"]["url"],
            e["request"]["headers"],
            "postData" in e["request"],
            e["response"]["status"],
            e["response"]["headers"],
            e["_mcp"]["chains"] != [],
        )
        for e in entries
        if e["_mcp"]["side"] == "client"
    }


def _leg_heads(entries: list[dict[str, Any]]) -> dict[str, tuple[Any, ...]]:
    """Each bridge leg's status, status text, response headers and content type."""
    return {
        e["_mcp"]["exchange"]: (
            e["response"]["status"],
            e["response"]["statusText"],
            e["response"]["headers"],
            e["response"]["content"]["mimeType"],
        )
        for e in entries
        if e["_mcp"]["side"] == "upstream"
    }


def both_hars(play: Play, capture: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The play's HAR entries twice: drafted from its live chains (`/api/export.har`) and from the
    capture it wrote (`export --har`)."""
    store, _ = record_play(play, capture)
    out = io.BytesIO()
    export_capture([capture], Format.HAR, out)
    live = entries_of(list(store), host=LISTEN.removeprefix("http://"), upstream=upstream_url(UPSTREAM))
    exported: list[dict[str, Any]] = orjson.loads(out.getvalue())["log"]["entries"]
    return live, exported


@pytest.mark.parametrize("play", SCENARIOS.values(), ids=SCENARIOS.keys())
def test_live_har_entries_have_the_request_and_response_heads_the_captures_have(
    play: Play, tmp_path: Path
) -> None:
    live, exported = both_hars(play, tmp_path / "play.jsonl")

    assert _heads(live) == _heads(exported)


@pytest.mark.parametrize("play", SCENARIOS.values(), ids=SCENARIOS.keys())
def test_live_har_leg_entries_have_the_upstream_heads_the_captures_have(play: Play, tmp_path: Path) -> None:
    live, exported = both_hars(play, tmp_path / "play.jsonl")

    assert _leg_heads(live) == _leg_heads(exported)


def test_a_legs_entry_has_the_status_headers_and_wait_the_upstream_answered_it_with(tmp_path: Path) -> None:
    live, exported = both_hars(refused_leg_call, tmp_path / "refused.jsonl")

    for entries in (live, exported):
        legs = {e["_mcp"]["exchange"]: e for e in entries if e["_mcp"]["side"] == "upstream"}
        assert {leg: e["response"]["status"] for leg, e in legs.items()} == LEG_STATUSES
        refused = legs["leg-2"]["response"]
        assert (refused["statusText"], refused["content"]["mimeType"]) == ("Not Found", "application/json")
        assert "Session not found" in refused["content"]["text"]
        minted = {h["name"]: h["value"] for h in legs["leg-3"]["response"]["headers"]}
        assert minted["Mcp-Session-Id"].startswith("<redacted len=")
        assert (
            legs["leg-4"]["response"]["statusText"],
            legs["leg-4"]["response"]["content"]["mimeType"],
        ) == (
            "Accepted",
            "",
        )
        assert legs["leg-5"]["response"]["content"]["mimeType"] == "text/event-stream"
        assert legs["leg-2"]["timings"]["wait"] == pytest.approx(50.0)  # the call to the 404's head
        assert all("response head is unknown" not in e.get("comment", "") for e in legs.values())
    assert UPSTREAM_SESSION not in orjson.dumps(live).decode()
    assert UPSTREAM_SESSION not in orjson.dumps(exported).decode()


def test_a_get_stream_and_a_delete_are_their_own_request_lines_in_both_hars(tmp_path: Path) -> None:
    capture = tmp_path / "streams.jsonl"
    store, _ = record_play(streams_and_delete, capture)

    live = entries_of(list(store), host=LISTEN.removeprefix("http://"), upstream=upstream_url(UPSTREAM))
    by_exchange = {e["_mcp"]["exchange"]: e["request"] for e in live}

    for exchange, method, url in (
        ("g1", "GET", f"{LISTEN}/mcp"),
        ("g2", "GET", f"{LISTEN}/mcp"),
        ("d1", "DELETE", f"{LISTEN}/mcp?trace=1"),
        ("g3", "GET", f"{LISTEN}/mcp"),
    ):
        request = by_exchange[exchange]
        assert (request["method"], request["url"]) == (method, url), exchange
        headers = {h["name"]: h["value"] for h in request["headers"]}
        assert headers["Mcp-Session-Id"].startswith("<redacted len=")
        assert headers["Authorization"].startswith("Bearer <redacted len=")
        assert "postData" not in request
    assert {h["name"]: h["value"] for h in by_exchange["g2"]["headers"]}["Last-Event-ID"] == "e1"
    text = orjson.dumps(live).decode()
    assert SESSION not in text
    assert TOKEN not in text


def test_the_chains_of_a_capture_hold_the_records_the_live_chains_hold(tmp_path: Path) -> None:
    capture = tmp_path / "streams.jsonl"
    _, live_events = record_play(streams_and_delete, capture)

    def records(events: list[FlowEvent]) -> list[dict[str, Any]]:
        return [e.message.model_dump() for e in events if isinstance(e, MessageRecorded)]

    live = records(live_events)
    assert records(list(read_capture(capture))) == live
    heads = [(m["exchange"], m["side"], m["http"]["method"]) for m in live if m["direction"] == "to_server"]
    assert heads == [
        ("g1", "both", "GET"),
        ("g2", "both", "GET"),
        ("d1", "both", "DELETE"),
        ("g3", "client", "GET"),
    ]


def test_a_message_the_proxy_changed_is_on_both_legs_and_the_har_body_is_the_clients_wire(
    tmp_path: Path,
) -> None:
    live, exported = both_hars(SCENARIOS["changed-by-the-proxy"], tmp_path / "changed.jsonl")

    for entry in (live, exported):
        (one,) = entry
        sides = [(m["direction"], m["side"], m["kind"]) for m in one["_mcp"]["messages"]]
        assert sides == [
            ("to_server", "client", "request"),  # the client's call reached the proxy only
            ("to_server", "upstream", "request"),  # the edit the server got
            ("to_client", "upstream", "result"),  # the server's answer
            ("to_client", "client", "error"),  # what the client got in its place
        ]
        assert '"text":"hi"' in one["request"]["postData"]["text"]
        assert "edited" not in one["request"]["postData"]["text"]
        assert "-32050" in one["response"]["content"]["text"]
        assert '"result"' not in one["response"]["content"]["text"]
        changes = one["_mcp"]["proxy_changes"]  # a HAR reader is told the wait was the proxy's
        assert any("fault injected by the proxy: delay 500 ms" in c for c in changes), changes
        assert any("forwarded edited by api" in c for c in changes), changes
        assert "the proxy changed its chain's traffic: " in one["comment"]


def test_the_server_legs_of_a_changed_message_carry_no_head_of_the_clients_exchange(tmp_path: Path) -> None:
    store, _ = record_play(SCENARIOS["changed-by-the-proxy"], tmp_path / "changed.jsonl")

    (chain,) = list(store)
    heads = [(m.side.value, m.direction.value, m.http is not None) for m in chain.messages]

    assert heads == [
        ("client", "to_server", True),  # the client's request, with its request head
        ("upstream", "to_server", False),  # the edit: never the client's Host or Content-Length
        ("upstream", "to_client", False),
        ("client", "to_client", True),  # what the client got, with the response head it got
    ]


def test_a_get_stream_and_a_delete_take_the_time_they_took_in_both_hars(tmp_path: Path) -> None:
    live, exported = both_hars(streams_and_delete, tmp_path / "streams.jsonl")

    def times(entries: list[dict[str, Any]]) -> dict[str, float]:
        return {
            e["_mcp"]["exchange"]: e["time"] for e in entries if e["request"]["method"] in ("GET", "DELETE")
        }

    assert times(live) == times(exported)
    assert (times(live)["g1"], times(live)["g3"]) == (1000.0, 500.0)  # each stream to its own close


def _hung_up_calls(obs: Any, clock: Any) -> list[Any]:
    """Two SSE calls whose client hangs up: `x1` once its result came, `x2` before any; and a GET
    stream its client leaves."""
    closed = []
    for ident, exchange, answered in ((1, "x1", True), (2, "x2", False)):
        call = classify_value(request(ident, "tools/call", {"name": "slow", "arguments": {}}))
        obs.open_exchange(exchange, http_method="POST", path="/mcp", headers=HEADERS, session=SESSION)
        obs.message(exchange, call, size=70, direction=Direction.TO_SERVER, channel=Channel.POST)
        obs.response_head(exchange, status=200, content_type="text/event-stream", headers={})
        if answered:
            done = classify_value(result_response(ident, {"content": []}))
            obs.message(exchange, done, size=50, direction=Direction.TO_CLIENT, channel=Channel.SSE)
        clock.now += 0.5
        closed.append(obs.close_exchange(exchange, "client_disconnected"))
    obs.open_exchange("g1", http_method="GET", path="/mcp", headers=HEADERS, session=SESSION)
    obs.response_head("g1", status=200, content_type="text/event-stream", headers={})
    clock.now += 1.0
    closed.append(obs.close_exchange("g1", "client_disconnected"))
    return closed


def test_both_hars_give_an_outcome_only_to_an_exchange_that_ended_badly(tmp_path: Path) -> None:
    """A client that hangs up after its answer, or leaves a GET stream, ended its exchange as meant:
    the `_mcp.outcome` a HAR reader filters failures by says so only for the call left unanswered."""
    for entries in both_hars(_hung_up_calls, tmp_path / "hung-up.jsonl"):
        outcomes = {e["_mcp"]["exchange"]: e["_mcp"].get("outcome") for e in entries}
        assert outcomes == {"x1": None, "x2": "client_disconnected", "g1": None}
