"""Calls whose SSE stream closed unanswered after an event id, through `mcp-proxy`, with real servers.

A legacy client's call stream cut on its side (it left, or the proxy's `cut_after` fault cut it) is
resumed with GET + `Last-Event-ID` against the Python SDK server with an event store
(``legacy-resumable``): the client gets its answer there, and the chain ends `ok`, noted resumed, with
no error counted; never resumed, it fails as it was cut once its session is deleted. A call whose
stream the server dropped after its priming event (``legacy-polling``) and that the client cancels
instead of resuming ends `cancelled`. A cut call's line, written at the cut, says `end: resumable`;
when its session ends unresumed after that, a `stream_not_resumed` warning says no resume can come.
The client is raw HTTP, so the test decides exactly where each stream is cut.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import orjson
import pytest

from proxy.flows.resumes import NEVER_RESUMED, SESSION_ENDED
from proxy.framing.sse import SseDecoder, SseEvent
from tests.e2e.commanded import Commanded, own_proxy
from tests.peers.runner import PeerServer
from tests.sidecar import until
from tests.transport.helpers import bounded

pytestmark = pytest.mark.e2e

VERSION = "2025-11-25"
POSTED = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
ERRORS = 'mcp_proxy_errors_total{method="tools/call",mode="passthrough"}'
STEPS = 40
"""Progress steps of `slow_progress` (10 ms each): the call is still running when its stream is cut."""


async def open_session(http: aiohttp.ClientSession, url: str) -> dict[str, str]:
    """Initialize a legacy session; the headers each later request of it carries."""
    init = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": VERSION,
            "capabilities": {},
            "clientInfo": {"name": "raw", "version": "1"},
        },
    }
    async with http.post(url, json=init, headers=POSTED) as resp:
        assert resp.status == 200, await resp.text()
        session = resp.headers["Mcp-Session-Id"]
        await resp.read()
    headers = {**POSTED, "Mcp-Session-Id": session, "MCP-Protocol-Version": VERSION}
    await notify(http, url, headers, "notifications/initialized", {})
    return headers


async def notify(
    http: aiohttp.ClientSession, url: str, headers: dict[str, str], method: str, params: dict[str, Any]
) -> None:
    async with http.post(
        url, json={"jsonrpc": "2.0", "method": method, "params": params}, headers=headers
    ) as r:
        assert r.status == 202, await r.text()


async def events(resp: aiohttp.ClientResponse) -> AsyncIterator[SseEvent]:
    """The SSE events of a response as they arrive (priming events too)."""
    decoder = SseDecoder()
    async for chunk in resp.content.iter_any():
        for item in decoder.feed(chunk):
            if isinstance(item, SseEvent):
                yield item


def answer_in(event: SseEvent, ident: int) -> dict[str, Any] | None:
    """The answer to request `ident` the event carries, if it does."""
    if not event.carries_message:
        return None
    message: dict[str, Any] = orjson.loads(event.data)
    return message if message.get("id") == ident and "method" not in message else None


async def read_until(
    resp: aiohttp.ClientResponse, ident: int, *, ids_wanted: int | None = None
) -> tuple[list[str], dict[str, Any] | None]:
    """Read a stream until it ends, carries the answer to `ident`, or (`ids_wanted`) that many event
    ids have passed: the ids seen and the answer, if any."""
    ids: list[str] = []
    try:
        async for event in events(resp):
            if event.id:
                ids.append(event.id)
            answer = answer_in(event, ident)
            if answer is not None or (ids_wanted is not None and len(ids) >= ids_wanted):
                return ids, answer
    except aiohttp.ClientPayloadError:
        pass  # the stream was cut mid-body: what came before it is what the client has
    return ids, None


async def call_cut_then_resumed(proxy: Commanded, *, client_cuts: bool) -> dict[str, Any]:
    """Call `slow_progress`; the stream is cut after two event ids (by the client, or by the proxy's
    fault); resume with GET + `Last-Event-ID` and return the answer the resumed stream carries."""
    url = proxy.endpoint()
    call = {"name": "slow_progress", "arguments": {"steps": STEPS}, "_meta": {"progressToken": 7}}
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": call}
    async with aiohttp.ClientSession() as http:
        headers = await open_session(http, url)
        async with http.post(url, json=body, headers=headers) as resp:
            assert resp.headers["Content-Type"].startswith("text/event-stream")
            wanted = 2 if client_cuts else None  # else the fault cuts it: read to its end
            ids, answer = await bounded(read_until(resp, 1, ids_wanted=wanted), what="the cut stream")
        assert answer is None, "the cut came before the answer"
        assert len(ids) >= 2, ids
        resumed = {**headers, "Accept": "text/event-stream", "Last-Event-ID": ids[-1]}
        async with http.get(url, headers=resumed) as resp:
            assert resp.status == 200, await resp.text()
            _, answer = await bounded(read_until(resp, 1), what="the answer on the resumed stream")
    assert answer is not None
    return answer


def exchange_lines(proxy: Commanded) -> list[dict[str, Any]]:
    """The proxy's round-trip log lines so far (initialize, initialized, the call, the resume)."""
    return [line for line in proxy.lines() if line.get("event") == "exchange"]


async def the_call(proxy: Commanded, name: str) -> dict[str, Any]:
    """The chain of this test's one call of `name`, once every exchange has closed."""
    await proxy.no_exchange_open()
    (found,) = [c for c in await proxy.chains() if c.get("method") == "tools/call" and c.get("name") == name]
    return found


@pytest.mark.parametrize("client_cuts", [True, False], ids=["client-left", "cut-by-fault"])
async def test_a_legacy_call_cut_after_an_event_and_resumed_ends_ok_and_counts_no_error(
    peer_factory: Callable[..., PeerServer], client_cuts: bool
) -> None:
    server = peer_factory("legacy-resumable")
    async with own_proxy(server.url) as proxy:
        if not client_cuts:
            await proxy.add_faults("tool:slow_progress => cut_after=1")
        answer = await call_cut_then_resumed(proxy, client_cuts=client_cuts)
        chain = await the_call(proxy, "slow_progress")
        errors = await proxy.counted(ERRORS)

    assert answer["result"]["content"][0]["text"] == f"done {STEPS}"
    assert chain["status"] == "ok", chain
    assert any(n.startswith("stream resumed with Last-Event-ID") for n in chain["notes"]), chain
    assert errors == 0


@pytest.mark.parametrize("client_cuts", [True, False], ids=["client-left", "cut-by-fault"])
async def test_the_log_lines_of_a_resumed_call_show_no_trouble_and_the_resuming_get_names_its_id(
    peer_factory: Callable[..., PeerServer], client_cuts: bool
) -> None:
    server = peer_factory("legacy-resumable")
    async with own_proxy(server.url) as proxy:
        if not client_cuts:
            await proxy.add_faults("tool:slow_progress => cut_after=1")
        await call_cut_then_resumed(proxy, client_cuts=client_cuts)
        await proxy.settled()
        # A client's hang-up holds the call's line up to 2 s for its cancel (`LATE_CANCEL_S`).
        await until(lambda: len(exchange_lines(proxy)) >= 4, what="the cut call's line", seconds=10)
        lines = exchange_lines(proxy)

    (cut,) = [line for line in lines if line["carried"] == "tools/call slow_progress"]
    (resumed,) = [line for line in lines if line["carried"] == "GET stream"]
    assert (cut["trouble"], cut.get("end")) == (None, "resumable"), cut
    assert cut["outcome"] == ("client_disconnected" if client_cuts else "cut_by_fault")
    assert (resumed["trouble"], resumed["ids"]) == (None, [1]), resumed
    assert [line for line in lines if line["trouble"]] == []


async def test_a_call_whose_dropped_stream_the_client_cancels_instead_of_resuming_ends_cancelled(
    peer_factory: Callable[..., PeerServer],
) -> None:
    server = peer_factory("legacy-polling")  # drops each call's stream after its priming event
    async with own_proxy(server.url) as proxy, aiohttp.ClientSession() as http:
        url = proxy.endpoint()
        headers = await open_session(http, url)
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "ask_name"}}
        async with http.post(url, json=body, headers=headers) as resp:
            ids, answer = await bounded(read_until(resp, 1), what="the server to drop the stream")
        assert ids, "the server primed the stream with an event id"
        assert answer is None
        await notify(http, url, headers, "notifications/cancelled", {"requestId": 1})
        chain = await the_call(proxy, "ask_name")
        errors = await proxy.counted(ERRORS)

    assert chain["status"] == "cancelled", chain
    assert "cancelled by the client" in chain["notes"]
    assert errors == 0


async def test_a_cut_call_the_client_never_resumes_fails_as_cut_when_its_session_is_deleted(
    peer_factory: Callable[..., PeerServer],
) -> None:
    server = peer_factory("legacy-resumable")
    async with own_proxy(server.url) as proxy, aiohttp.ClientSession() as http:
        url = proxy.endpoint()
        headers = await open_session(http, url)
        call = {"name": "slow_progress", "arguments": {"steps": STEPS}, "_meta": {"progressToken": 7}}
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": call}
        async with http.post(url, json=body, headers=headers) as resp:
            await bounded(read_until(resp, 1, ids_wanted=2), what="two events")
        async with http.delete(url, headers=headers) as resp:
            assert resp.status == 200, await resp.text()
        chain = await the_call(proxy, "slow_progress")
        errors = await proxy.counted(ERRORS)

    assert (chain["status"], chain["error"]) == ("error", "client_disconnected"), chain
    assert SESSION_ENDED in chain["notes"]
    assert errors == 1


async def test_a_call_whose_stream_the_server_closes_because_of_the_delete_ends_with_its_session(
    peer_factory: Callable[..., PeerServer],
) -> None:
    server = peer_factory("legacy-resumable")
    async with own_proxy(server.url) as proxy, aiohttp.ClientSession() as http:
        url = proxy.endpoint()
        headers = await open_session(http, url)
        call = {"name": "slow_progress", "arguments": {"steps": 1000}, "_meta": {"progressToken": 7}}
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": call}
        async with http.post(url, json=body, headers=headers) as call_stream:
            await bounded(read_until(call_stream, 1, ids_wanted=2), what="two events")
            async with http.delete(url, headers=headers) as resp:
                assert resp.status == 200, await resp.text()
            _, answer = await bounded(read_until(call_stream, 1), what="the server to close the stream")
        assert answer is None
        chain = await the_call(proxy, "slow_progress")
        errors = await proxy.counted(ERRORS)

    assert chain["status"] == "error", chain
    assert SESSION_ENDED in chain["notes"]
    assert NEVER_RESUMED not in chain["notes"]
    assert errors == 1


async def test_a_cut_calls_resumable_line_is_followed_by_a_warning_when_its_session_ends_unresumed(
    peer_factory: Callable[..., PeerServer],
) -> None:
    server = peer_factory("legacy-resumable")
    async with own_proxy(server.url) as proxy, aiohttp.ClientSession() as http:
        url = proxy.endpoint()
        headers = await open_session(http, url)
        call = {"name": "slow_progress", "arguments": {"steps": STEPS}, "_meta": {"progressToken": 7}}
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": call}
        async with http.post(url, json=body, headers=headers) as resp:
            await bounded(read_until(resp, 1, ids_wanted=2), what="two events")
        # A client's hang-up holds the call's line up to 2 s for its cancel (`LATE_CANCEL_S`).
        await until(lambda: len(exchange_lines(proxy)) >= 3, what="the cut call's line", seconds=10)
        before = [line for line in proxy.lines() if line.get("event") == "stream_not_resumed"]
        async with http.delete(url, headers=headers) as resp:
            assert resp.status == 200, await resp.text()
        await until(
            lambda: any(line.get("event") == "stream_not_resumed" for line in proxy.lines()),
            what="the follow-up line",
        )
        lines = proxy.lines()

    (cut,) = [line for line in exchange_lines(proxy) if line["carried"] == "tools/call slow_progress"]
    (followed,) = [line for line in lines if line.get("event") == "stream_not_resumed"]
    assert cut.get("end") == "resumable", cut
    assert before == []
    assert followed["level"] == "warning"
    assert (followed["exchange"], followed["ids"], followed["carried"]) == (
        cut["exchange"],
        [1],
        cut["carried"],
    )
    assert (followed["trouble"], followed["note"]) == ("not resumed", SESSION_ENDED), followed
