"""The chain tree's shape and the client-side/server-side pairing, on a real recorded tour (and on a
scripted session's GET streams and DELETE)."""

from __future__ import annotations

from pathlib import Path

from proxy.flows.events import Direction, Mode, Side
from tests.flows.bridge_play import refused_leg_call
from tests.flows.stream_play import streams_and_delete
from tests.record.captures import record_play
from tests.ui.helpers import tour_events
from ui.model import ChainEntry, ViewModel
from ui.render import node_label, offset
from ui.timeline import Node, build_timeline, counterparts, pair_messages


def tour_chain(name: str, mode: Mode) -> ChainEntry:
    model = ViewModel()
    model.apply_all(tour_events())
    (entry,) = [e for e in model.chains.values() if e.summary.name == name and e.summary.mode is mode]
    return entry


def labels(nodes: list[Node], depth: int = 0) -> list[str]:
    out: list[str] = []
    for node in nodes:
        out.append("  " * depth + node_label(node).plain)
        out.extend(labels(node.children, depth + 1))
    return out


def test_a_bridged_two_round_call_reads_request_rounds_result() -> None:
    entry = tour_chain("survey", Mode.LEGACY_TO_MRTR)

    nodes = build_timeline(entry.summary, entry.messages)

    assert [n.kind for n in nodes] == ["message", "round", "round", "round", "message"]
    head, *rounds, tail = nodes
    assert head.message is not None
    assert head.message.side is Side.CLIENT
    assert tail.message is not None
    assert tail.message.direction is Direction.TO_CLIENT
    first = [child.pair.role for child in rounds[0].children if child.pair is not None]
    assert first == ["leg", "nested"]
    text = "\n".join(labels(nodes))
    assert "upstream tools/call" in text
    assert "input_required [name]" in text
    assert "asks client elicitation/create" in text
    assert "client waited" in text


def test_an_mrtr_client_through_pass_through_shows_each_retry_in_its_round() -> None:
    entry = tour_chain("survey", Mode.PASSTHROUGH)

    nodes = build_timeline(entry.summary, entry.messages)

    assert [n.kind for n in nodes] == ["round", "round", "round"]
    roles = [child.pair.role for r in nodes for child in r.children if child.pair is not None]
    assert roles == ["call", "call", "call"]


def test_requests_pair_with_their_responses_by_side_direction_and_id() -> None:
    entry = tour_chain("greet", Mode.LEGACY_TO_MRTR)

    pairs = pair_messages(entry.messages)

    roles = [p.role for p in pairs]
    assert roles.count("call") == 1
    assert roles.count("leg") == 2
    assert roles.count("nested") == 1
    assert all(p.response is not None for p in pairs if p.role in ("call", "leg", "nested"))


def test_a_rewritten_message_finds_what_the_other_side_saw() -> None:
    entry = tour_chain("greet", Mode.LEGACY_TO_MRTR)
    messages = entry.messages
    client_request = next(m for m in messages if m.side is Side.CLIENT and m.kind == "request")
    nested = next(m for m in messages if m.side is Side.CLIENT and m.method == "elicitation/create")
    answer = next(
        m
        for m in messages
        if m.side is Side.CLIENT and m.jsonrpc_id == nested.jsonrpc_id and m.kind == "result"
    )

    (upstream_request,) = counterparts(messages, client_request)
    (input_required,) = counterparts(messages, nested)
    (retry,) = counterparts(messages, answer)

    assert upstream_request.side is Side.UPSTREAM
    assert upstream_request.method == "tools/call"
    assert input_required.body["result"]["resultType"] == "input_required"
    assert retry.method == "tools/call"
    assert retry.round == 2
    assert answer in counterparts(messages, retry)


def test_pass_through_messages_have_no_other_side() -> None:
    entry = tour_chain("greet", Mode.PASSTHROUGH)

    assert all(counterparts(entry.messages, m) == [] for m in entry.messages)


def test_a_get_stream_and_a_delete_show_their_request_line_with_the_bare_answer_under_it(
    tmp_path: Path,
) -> None:
    store, _ = record_play(streams_and_delete, tmp_path / "streams.jsonl")
    trees = {
        chain.summary.method: labels(build_timeline(chain.summary, list(chain.messages)))
        for chain in store
        if chain.summary.mode is Mode.PASSTHROUGH
    }
    bridged = next(chain for chain in store if chain.summary.mode is Mode.LEGACY_TO_MRTR)

    assert [line.split("  http ")[0] for line in trees["DELETE session"]] == [
        "▶ [client→server] http DELETE /mcp?trace=1",
        "  ◀ [server→client] http HTTP 200",  # under the request it answers
    ]
    stream = trees["GET stream"]
    assert stream[0].startswith("▶ [client→server] http GET /mcp")
    assert stream[1].startswith("◀ [server→client] notification notifications/tools/list_changed")
    assert stream[2].startswith("▶ [client→server] http GET /mcp")  # resumed with Last-Event-ID
    tree = labels(build_timeline(bridged.summary, list(bridged.messages)))
    assert tree[0].startswith("▶ [client→proxy] http GET /mcp")


def test_a_leg_the_upstream_refused_says_its_http_status_beside_its_error(tmp_path: Path) -> None:
    _, events = record_play(refused_leg_call, tmp_path / "refused.jsonl")
    model = ViewModel()
    model.apply_all(events)
    (entry,) = model.chains.values()

    text = labels(build_timeline(entry.summary, entry.messages))

    (refused,) = [line for line in text if "Session not found" in line]
    assert "[server→proxy]" in refused
    assert "HTTP 404" in refused
    assert not [line for line in text if "HTTP 404" in line and line is not refused]
    assert any("HTTP 202" in line for line in text)  # the bodiless acknowledgement's own record


def test_given_the_chains_start_each_node_says_when_it_came_so_the_tree_reads_as_a_timeline() -> None:
    entry = tour_chain("survey", Mode.LEGACY_TO_MRTR)
    nodes = build_timeline(entry.summary, entry.messages)
    start = entry.summary.started

    def flat(nodes: list[Node]) -> list[Node]:
        return [n for node in nodes for n in (node, *flat(node.children))]

    timed = [(node, node_label(node, True, start).plain) for node in flat(nodes) if node.kind != "round"]
    for node, label in timed:
        assert label.lstrip().split()[0] == offset(first_ts(node) - start), label
    offsets = [first_ts(node) for node, _ in timed]
    assert offsets[-1] > offsets[0]  # the final result came after the call
    assert all(not node_label(n, True, start).plain.startswith("+") for n in nodes if n.kind == "round")


def first_ts(node: Node) -> float:
    first = node.pair.first if node.kind == "pair" and node.pair is not None else node.message
    assert first is not None
    return first.ts


def test_offsets_keep_to_milliseconds_below_a_second() -> None:
    assert [offset(s) for s in (0.0, -0.001, 0.0003, 0.0042, 0.203, 1.25)] == [
        "+0ms",
        "+0ms",
        "+0.3ms",
        "+4.2ms",
        "+203ms",
        "+1.25s",
    ]
