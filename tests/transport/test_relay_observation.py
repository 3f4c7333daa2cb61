"""What pass-through leaves behind for people: the JSONL capture and the round-trip log, both without secrets.

The upstream is a real MCP server (the SDK's legacy peer), so the session id is one a server minted
and the traffic is what a real exchange looks like.
"""

from __future__ import annotations

import json
import re

import aiohttp
import pytest

from proxy.flows.events import ChainChanged, ChainOpened, ChainStatus, Direction, MessageRecorded
from proxy.record.capture import read_capture
from proxy.runtime import Proxy
from tests.peers.runner import PeerServer
from tests.transport.helpers import (
    CLIENT_ACCEPT,
    bounded,
    captured_logs,
    client_session,
    drained,
    rpc,
    wait_until,
)

TOKEN = "tok-Zq8v-do-not-leak-4711"
"""The bearer token the client sends; it must never appear in a capture or a log."""

AUTH = {"Authorization": f"Bearer {TOKEN}"}


def stand_in(proxy: Proxy, secret: str) -> str:
    """The redacted form a secret must take: its length and the proxy's keyed digest of it."""
    shown = proxy.redactor.token(secret)
    assert re.fullmatch(rf"<redacted len={len(secret)} hmac:[0-9a-f]{{8}}>", shown)
    return shown


async def exchange(
    proxy: Proxy, client: aiohttp.ClientSession, body: bytes, headers: dict[str, str]
) -> aiohttp.ClientResponse:
    """POST one message through the proxy, read the whole answer, and wait until the proxy closed it."""
    async with client.post(proxy.endpoint(), data=body, headers={**CLIENT_ACCEPT, **headers}) as response:
        await bounded(response.read(), what="the upstream's answer through the proxy")
    await wait_until(lambda: drained(proxy), what="the proxy to close the exchange")
    return response


async def open_session(proxy: Proxy, client: aiohttp.ClientSession) -> str:
    """Run the legacy handshake through the proxy; returns the session id the server minted."""
    init = rpc(
        "initialize",
        1,
        protocolVersion="2025-11-25",
        capabilities={},
        clientInfo={"name": "transport-test", "version": "1"},
    )
    response = await exchange(proxy, client, init, AUTH)
    assert response.status == 200
    session = response.headers["Mcp-Session-Id"]
    done = await exchange(
        proxy, client, rpc("notifications/initialized", None), {**AUTH, "Mcp-Session-Id": session}
    )
    assert done.status == 202
    return session


@pytest.mark.parametrize("watched", [False, True], ids=["nobody-watching", "watched-live"])
async def test_capture_reads_back_the_chains_events_and_holds_no_secret_header_value(
    proxy_for, legacy_server: PeerServer, tmp_path, watched: bool
):
    path = tmp_path / "run.jsonl"
    async with proxy_for(legacy_server.url, capture=path) as proxy:
        watcher = proxy.bus.subscribe("tui") if watched else None
        async with client_session() as client:
            session = await open_session(proxy, client)
            listed = await exchange(proxy, client, rpc("tools/list", 2), {**AUTH, "Mcp-Session-Id": session})
            assert listed.status == 200
        chain = next(c for c in proxy.chains() if c.summary.method == "tools/list")
        assert chain.summary.status is ChainStatus.OK
        if watcher is not None:
            watcher.close()
    # the proxy has stopped: the capture is flushed and closed

    text = path.read_text(encoding="utf-8")
    # Watched or not, the capture keeps the observations, never the bus's events.
    assert '"type":"obs"' in text
    assert '"type":"chain_opened"' not in text
    events = list(read_capture(path))
    opened = [e.chain for e in events if isinstance(e, ChainOpened) and e.chain.method == "tools/list"]
    assert len(opened) == 1
    chain_id = opened[0].id
    recorded = [e.message for e in events if isinstance(e, MessageRecorded) and e.chain_id == chain_id]
    changed = [e.chain for e in events if isinstance(e, ChainChanged) and e.chain.id == chain_id]
    assert [(m.direction, m.method, m.jsonrpc_id) for m in recorded] == [
        (Direction.TO_SERVER, "tools/list", 2),
        (Direction.TO_CLIENT, None, 2),
    ]
    # Built later or live, the chain read back is the chain the proxy held, times included.
    assert changed[-1].model_dump(exclude={"id"}) == chain.summary.model_dump(exclude={"id"})
    assert [m.model_dump() for m in recorded] == [m.model_dump() for m in chain.messages]

    assert TOKEN not in text
    assert session not in text
    assert f"Bearer {stand_in(proxy, TOKEN)}" in text
    assert stand_in(proxy, session) in text


@pytest.mark.parametrize("watched", [False, True], ids=["nobody-watching", "watched-live"])
async def test_one_exchange_logs_one_exchange_event_with_its_fields_and_no_secret(
    proxy_for, legacy_server: PeerServer, watched: bool
):
    async with proxy_for(legacy_server.url) as proxy:
        watcher = proxy.bus.subscribe("tui") if watched else None
        async with client_session() as client:
            session = await open_session(proxy, client)
            body = rpc("tools/list", 2)
            with captured_logs() as logs:
                response = await exchange(proxy, client, body, {**AUTH, "Mcp-Session-Id": session})
        assert response.status == 200
        chain = next(c for c in proxy.chains() if c.summary.method == "tools/list")
        if watcher is not None:
            watcher.close()

    (line,) = [entry for entry in logs if entry["event"] == "exchange"]
    assert line["log_level"] == "info"
    # Watched or not, the line is the same: the exchange id links it to its chain.
    assert "chain_id" not in line
    assert line["exchange"] in {record.exchange for record in chain.messages}
    assert line["method"] == "tools/list"
    assert line["http_method"] == "POST"
    assert line["ids"] == [2]
    assert line["status"] == 200
    assert line["content_type"] == response.headers["Content-Type"]
    assert line["bytes_in"] == len(body)
    assert line["bytes_out"] > 0
    assert line["messages_out"] == 1
    assert line["duration_ms"] >= 0
    assert line["session"] == stand_in(proxy, session)
    everything = json.dumps(logs, default=str)
    assert TOKEN not in everything
    assert session not in everything
