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

from proxy.flows.events import Channel, Direction, FlowEvent, MessageRecorded, Mode, Side
from proxy.flows.store import Chain
from proxy.record.capture import read_capture
from proxy.record.export import Format, export_capture
from proxy.record.har import upstream_url
from proxy.record.har_live import UNFILED_HEAD, LiveDrafts
from proxy.wire.jsonrpc import Kind, Message, classify_value, parse_body, request, result_response
from tests.flows.bridge_play import LEG_STATUSES, PARK_HEADERS, UPSTREAM_SESSION, refused_leg_call
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


def _legacy_sse_client(obs: Any, clock: Any) -> list[Any]:
    """A 2024-11-05 HTTP+SSE client's call: the proxy carries its message as a Streamable HTTP
    exchange of its own making (`client_transport` `sse`), with a priming event before the answer."""
    call = classify_value(request(1, "tools/call", {"name": "echo", "arguments": {"text": "é"}}))
    obs.open_exchange(
        "x1", http_method="POST", path="/mcp", headers=HEADERS, session=SESSION, body_size=80,
        client_transport="sse",
    )  # fmt: skip
    obs.message("x1", call, size=80, direction=Direction.TO_SERVER, channel=Channel.POST)
    clock.now += 0.25
    obs.response_head("x1", status=200, content_type="text/event-stream", headers={})
    obs.add_bytes_out("x1", 14)
    obs.note_event_id("x1", "p0")
    clock.now += 0.5
    done = classify_value(result_response(1, {"content": [{"type": "text", "text": "é"}]}))
    obs.message("x1", done, size=75, direction=Direction.TO_CLIENT, channel=Channel.SSE, sse_id="e1")
    clock.now += 0.125
    return [obs.close_exchange("x1", None)]


def _answer_not_json(obs: Any, clock: Any) -> list[Any]:
    """A server that answers a call with a body that is not JSON (a 404 page): its message says why."""
    call = classify_value(request(1, "tools/call", {"name": "echo", "arguments": {}}))
    obs.open_exchange("x1", http_method="POST", path="/mcp", headers=HEADERS, session=SESSION, body_size=60)
    obs.message("x1", call, size=60, direction=Direction.TO_SERVER, channel=Channel.POST)
    clock.now += 0.25
    obs.response_head("x1", status=404, content_type="text/plain", headers={})
    page = Message(Kind.INVALID, "Not Found", problem=parse_body(b"Not Found").parse_error)  # as relayed
    obs.message("x1", page, size=9, direction=Direction.TO_CLIENT, channel=Channel.HTTP)
    clock.now += 0.125
    return [obs.close_exchange("x1", None)]


PLAYS: dict[str, Play] = {
    **SCENARIOS,
    "streams-and-delete": streams_and_delete,
    "refused-leg-call": refused_leg_call,
    "hung-up-calls": _hung_up_calls,
    "legacy-sse-client": _legacy_sse_client,
    "answer-not-json": _answer_not_json,
}


def har_facts(entries: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """What an entry tells of its exchange's timing, sizes, bodies and `_mcp`, by exchange; chain ids
    left out (a running proxy's are `c…`, a capture's `r…`)."""
    facts = {}
    for e in entries:
        mcp = {k: v for k, v in e["_mcp"].items() if k not in ("chains", "proxy_changes")}
        mcp["messages"] = [{k: v for k, v in m.items() if k != "chain"} for m in mcp["messages"]]
        request, response = e["request"], e["response"]
        facts[e["_mcp"]["exchange"]] = {
            "startedDateTime": e["startedDateTime"],
            "time": e["time"],
            "timings": e["timings"],
            "request": (request["bodySize"], request.get("postData")),
            "response": (response["status"], response["bodySize"], response["content"]),
            "_mcp": mcp,
            "chains": len(e["_mcp"]["chains"]),
        }
    return facts


@pytest.mark.parametrize("play", PLAYS.values(), ids=PLAYS.keys())
def test_both_hars_give_each_exchange_the_same_timings_sizes_bodies_and_mcp_fields(
    play: Play, tmp_path: Path
) -> None:
    live, exported = both_hars(play, tmp_path / "play.jsonl")

    assert har_facts(live) == har_facts(exported)


def test_an_sse_responses_content_size_is_its_texts_length_and_its_body_size_the_bytes_on_the_wire(
    tmp_path: Path,
) -> None:
    for entries in both_hars(_legacy_sse_client, tmp_path / "sse.jsonl"):
        (entry,) = entries
        content = entry["response"]["content"]
        assert content["text"].startswith("id: p0\ndata: \n\nid: e1\ndata: {")
        assert content["size"] == len(content["text"].encode()) != len(content["text"])  # an é is 2 bytes
        assert entry["response"]["bodySize"] == 75 + 14  # the answer's event and the priming event
        assert entry["request"]["bodySize"] == 80
        assert entry["timings"] == {"send": 0, "wait": 250.0, "receive": 625.0}  # the head at 250 ms


def test_a_legacy_clients_entry_says_its_request_line_is_the_proxys_internal_form(tmp_path: Path) -> None:
    for entries in both_hars(_legacy_sse_client, tmp_path / "sse.jsonl"):
        (entry,) = entries
        assert entry["_mcp"]["client_transport"] == "sse"
        assert "HTTP+SSE" in entry["comment"]
        assert "the proxy's internal Streamable HTTP form" in entry["comment"]
    for entries in both_hars(SCENARIOS["nested-elicitation"], tmp_path / "http.jsonl"):
        assert {e["_mcp"]["client_transport"] for e in entries} == {"http"}
        assert not any("internal" in e.get("comment", "") for e in entries)


def test_a_leg_answering_a_parked_call_names_the_leg_it_serves_in_both_hars(tmp_path: Path) -> None:
    for entries in both_hars(SCENARIOS["parked-bridge-call"], tmp_path / "parked.jsonl"):
        related = {
            e["_mcp"]["exchange"]: e["_mcp"].get("related")
            for e in entries
            if e["_mcp"]["side"] == "upstream"
        }
        assert related["leg-3"] == "leg-1"


def _legs_awaiting_answers(obs: Any, clock: Any) -> list[Any]:
    """A modern call bridged to a legacy server, exported while two legs wait: leg-1's SSE head came
    and no event yet, leg-2's request went and no head yet."""
    modern = {"client_era": "modern", "upstream_era": "legacy", "mode": Mode.MRTR_TO_LEGACY}
    call = classify_value(request(1, "tools/call", {"name": "slow", "arguments": {}}))
    obs.open_exchange("x1", http_method="POST", path="/mcp", headers=PARK_HEADERS, session=None, **modern)
    obs.message("x1", call, size=70, direction=Direction.TO_SERVER, channel=Channel.POST, side=Side.CLIENT)
    for leg in ("leg-1", "leg-2"):
        upstream_call = request(f"legacy-{leg}", "tools/call", {"name": "slow", "arguments": {}})
        obs.leg_message(
            leg, "x1", upstream_call, size=70, direction=Direction.TO_SERVER, channel=Channel.POST
        )
    clock.now += 0.1
    obs.leg_head("leg-1", status=200, content_type="text/event-stream", headers={})
    return []


def test_an_open_legs_comment_says_whether_its_head_came_in_both_hars(tmp_path: Path) -> None:
    """The running proxy files a leg's head with its first message back, so an open leg whose head
    came shows none yet: its comment says one came, where the capture's shows it; a leg whose head has
    not come says so in both."""
    live, exported = both_hars(_legs_awaiting_answers, tmp_path / "waiting.jsonl")

    def legs(entries: list[dict[str, Any]]) -> dict[str, tuple[int, str]]:
        return {
            e["_mcp"]["exchange"]: (e["response"]["status"], e["comment"])
            for e in entries
            if e["_mcp"]["side"] == "upstream"
        }

    waiting = (0, "a bridge's upstream leg: no response head had come yet when it was exported")
    assert legs(live) == {"leg-1": (0, f"a bridge's upstream leg: {UNFILED_HEAD}"), "leg-2": waiting}
    assert legs(exported) == {
        "leg-1": (200, "a bridge's upstream leg: the proxy records its response head, not its request head"),
        "leg-2": waiting,
    }


def _unencodable_call(obs: Any, clock: Any) -> list[Any]:
    """A scripted fake: an answer holding a lone surrogate, which the recorder cannot encode as JSON. The
    proxy's own JSON reading refuses such text on the wire, so no real peer gets one to the recorder;
    the play stands in for whatever else might (a body built in process)."""
    call = classify_value(request(1, "tools/call", {"name": "echo", "arguments": {}}))
    obs.open_exchange("x1", http_method="POST", path="/mcp", headers=HEADERS, session=SESSION, body_size=60)
    obs.message("x1", call, size=60, direction=Direction.TO_SERVER, channel=Channel.POST)
    clock.now += 0.25
    obs.response_head("x1", status=200, content_type="application/json", headers={})
    done = classify_value(result_response(1, {"content": [{"type": "text", "text": "\ud800"}]}))
    obs.message("x1", done, size=70, direction=Direction.TO_CLIENT, channel=Channel.POST)
    return [obs.close_exchange("x1", None)]


def test_a_body_the_recorder_could_not_encode_is_not_described_as_cut_at_the_capture_limit(
    tmp_path: Path,
) -> None:
    """Live and read back from the capture, the entry says the response body is the `$unencodable`
    stand-in, not that it was cut at `capture_body_limit` (it was never cut)."""
    for entries in both_hars(_unencodable_call, tmp_path / "unencodable.jsonl"):
        (entry,) = entries
        assert entry["response"]["content"]["text"].startswith('{"$unencodable":true,')
        assert entry["comment"].endswith(
            "the proxy could not encode the response body as JSON to record it: each such message shows "
            'as {"$unencodable":true,"error":...}, not as it was sent'
        )
        assert "capture limit" not in entry["comment"]
