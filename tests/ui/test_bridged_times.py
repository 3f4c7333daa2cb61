"""An MRTR->legacy bridged chain's tree says when an answer came in a later round: its time then holds
the client's part, which the headline counts as the client's, not the upstream's or the proxy's.

The records are those a real run files (`mcp-proxy` bridging the SDK's 2026-07-28 client to its legacy
server, `ask_name`): the upstream call and the server's question in round 1, their answers in round 2.
"""

from __future__ import annotations

from typing import Any

from proxy.flows.events import Channel, Direction, Mode, Side
from tests.ui.helpers import BASE, message, opened
from ui.model import ViewModel
from ui.render import node_label
from ui.timeline import Node, build_timeline

ASK = {"message": "What is your name?", "requestedSchema": {"type": "object"}}


def sent(seq: int, ms: float, side: Side, direction: Direction, body: dict[str, Any], **extra: Any) -> Any:
    kind = "request" if "method" in body else ("result" if "result" in body else "error")
    extra.setdefault("channel", Channel.POST if direction is Direction.TO_SERVER else Channel.SSE)
    return message(
        "c1",
        seq,
        ts=BASE + ms / 1000,
        side=side,
        direction=direction,
        kind=kind,
        jsonrpc_id=body.get("id"),
        method=body.get("method"),
        body={"jsonrpc": "2.0", **body},
        **extra,
    )


def labels(nodes: list[Node]) -> list[str]:
    out: list[str] = []
    for node in nodes:
        out.append(node_label(node, bridged=True).plain)
        out.extend(labels(node.children))
    return out


def test_answers_that_came_in_the_next_round_say_so_and_no_client_wait_is_claimed() -> None:
    call = {"method": "tools/call", "params": {"name": "ask_name"}}
    events = [
        opened("c1", mode=Mode.MRTR_TO_LEGACY, client_era="modern", upstream_era="legacy"),
        sent(1, 0, Side.CLIENT, Direction.TO_SERVER, {"id": 1, **call}, exchange="x1", round=1),
        sent(2, 1, Side.UPSTREAM, Direction.TO_SERVER, {"id": "leg-5", **call}, exchange="l1", round=1),
        sent(
            3,
            3,
            Side.UPSTREAM,
            Direction.TO_CLIENT,
            {"id": 1, "method": "elicitation/create", "params": ASK},
            exchange="l1",
            round=1,
        ),
        sent(
            4,
            5,
            Side.CLIENT,
            Direction.TO_CLIENT,
            {"id": 1, "result": {"resultType": "input_required"}},
            exchange="x1",
            round=1,
            channel=Channel.JSON,
        ),
        sent(5, 9, Side.CLIENT, Direction.TO_SERVER, {"id": 2, **call}, exchange="x2", round=2),
        sent(
            6,
            10,
            Side.UPSTREAM,
            Direction.TO_SERVER,
            {"id": 1, "result": {"action": "accept"}},
            exchange="l2",
            round=2,
        ),
        sent(
            7,
            11,
            Side.UPSTREAM,
            Direction.TO_CLIENT,
            {"id": "leg-5", "result": {"content": []}},
            exchange="l1",
            round=2,
        ),
        sent(
            8,
            12,
            Side.CLIENT,
            Direction.TO_CLIENT,
            {"id": 2, "result": {"content": []}},
            exchange="x2",
            round=2,
            channel=Channel.JSON,
        ),
    ]
    model = ViewModel()
    model.apply_all(events)
    (entry,) = model.chains.values()

    text = "\n".join(labels(build_timeline(entry.summary, entry.messages)))

    assert "upstream tools/call #leg-5 → ok  answered in round 2, 10ms after" in text, text
    assert "server asks elicitation/create #1 → accept  answered in round 2, 7ms after" in text, text
    assert "client waited" not in text, text  # the proxy answered the server, from the client's retry
    assert "call tools/call #1 → input_required [state only]  took 5ms" in text, text
