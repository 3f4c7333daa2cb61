"""A server asking the client for something the client never declared it could answer is noted in its
chain: the usual cause of a client's -32601 there (an MCP Inspector CLI declares no capability)."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.flows.events import Channel, Direction, Mode
from proxy.wire.jsonrpc import classify_value, request, result_response
from tests.flows.test_sink import HEADERS, SESSION, Rig

FORM = {"message": "Your name?", "requestedSchema": {"type": "object", "properties": {}}}
ASKED = "the server asked elicitation/create, but the client declared no elicitation.form capability"


def legacy_session_asking(caps: dict[str, Any]) -> Rig:
    """A legacy client's `initialize` declaring `caps`, then a call whose server asks in flight."""
    rig = Rig()
    rig.bus.subscribe("tui")
    init = request(
        0,
        "initialize",
        {"protocolVersion": "2025-11-25", "capabilities": caps, "clientInfo": {"name": "c", "version": "1"}},
    )
    rig.facts.open_exchange("i1", http_method="POST", path="/mcp", headers={}, session=None)
    rig.facts.message("i1", classify_value(init), size=1, direction=Direction.TO_SERVER, channel=Channel.POST)
    rig.facts.response_head(
        "i1", status=200, content_type="application/json", headers={"Mcp-Session-Id": SESSION}
    )
    done = result_response(
        0, {"protocolVersion": "2025-11-25", "capabilities": {}, "serverInfo": {"name": "s", "version": "1"}}
    )
    rig.facts.message("i1", classify_value(done), size=1, direction=Direction.TO_CLIENT, channel=Channel.JSON)
    rig.facts.close_exchange("i1", None)
    call = request(1, "tools/call", {"name": "ask_name", "arguments": {}})
    rig.facts.open_exchange("x1", http_method="POST", path="/mcp", headers=HEADERS, session=SESSION)
    rig.facts.message("x1", classify_value(call), size=1, direction=Direction.TO_SERVER, channel=Channel.POST)
    rig.facts.response_head("x1", status=200, content_type="text/event-stream", headers={})
    asked = request(7, "elicitation/create", FORM)
    rig.facts.message("x1", classify_value(asked), size=1, direction=Direction.TO_CLIENT, channel=Channel.SSE)
    return rig


def notes_of(rig: Rig, name: str) -> list[str]:
    (chain,) = [c for c in rig.chains() if c.summary.name == name]
    return list(chain.summary.notes)


@pytest.mark.parametrize(
    ("caps", "noted"), [({}, True), ({"sampling": {}}, True), ({"elicitation": {}}, False)]
)
def test_a_question_the_clients_initialize_never_declared_is_noted_in_its_chain(
    caps: dict[str, Any], noted: bool
) -> None:
    notes = notes_of(legacy_session_asking(caps), "ask_name")
    assert any(note.startswith(ASKED) for note in notes) is noted, notes
    assert not noted or any("in its initialize" in note for note in notes)


def test_an_input_required_asking_what_the_2026_request_never_declared_is_noted() -> None:
    rig = Rig()
    rig.bus.subscribe("tui")
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    call = request(1, "tools/call", {"name": "ask_name", "arguments": {}, "_meta": meta})
    modern = {"client_era": "modern", "upstream_era": "modern", "mode": Mode.PASSTHROUGH}
    rig.facts.open_exchange("x1", http_method="POST", path="/mcp", headers={}, session=None, **modern)
    rig.facts.message("x1", classify_value(call), size=1, direction=Direction.TO_SERVER, channel=Channel.POST)
    rig.facts.response_head("x1", status=200, content_type="application/json", headers={})
    asks = {
        "resultType": "input_required",
        "requestState": "s",
        "inputRequests": {"name": {"method": "elicitation/create", "params": FORM}},
    }
    rig.facts.message(
        "x1",
        classify_value(result_response(1, asks)),
        size=1,
        direction=Direction.TO_CLIENT,
        channel=Channel.JSON,
    )
    rig.facts.close_exchange("x1", None)
    notes = notes_of(rig, "ask_name")
    assert any(note.startswith(ASKED) and "this request's clientCapabilities" in note for note in notes), (
        notes
    )
