"""Parked calls are bounded per client address as well as per principal, with the real legacy server.

The principal of a parked call is only what its request claims (a hash of `Authorization`), so a
client that invents a fresh `Authorization` for every call once parked 1,000 calls and left everyone
else with 503 for the continuation TTL. The per-address bound stops it at its own limit while a
client from another address still parks its call. The upstream is the conformance suite's legacy
fixture server, whose elicitation tool asks in flight (so the bridge parks the call). The proxy is
the `mcp-proxy` command, given the bound as a user gives it (`--max-continuations-per-client`).
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.e2e.commanded import own_proxy
from tests.e2e.modern_raw import modern_call, modern_headers, modern_params
from tests.peers.runner import PeerServer
from tests.transport.helpers import wait_until

pytestmark = pytest.mark.e2e

ASK = {"name": "test_input_required_result_elicitation", "arguments": {}}


@pytest.fixture(scope="module")
def upstream() -> Iterator[PeerServer]:
    with PeerServer("conformance-legacy") as peer:
        yield peer


async def park(http: aiohttp.ClientSession, url: str, ident: int) -> tuple[int, dict[str, Any]]:
    """One call under a never-seen `Authorization`, left parked (the client never answers)."""
    auth = {"Authorization": f"Bearer {secrets.token_hex(8)}"}
    return await modern_call(http, url, "tools/call", ASK, ident=ident, headers=auth)


async def test_fresh_authorization_values_from_one_address_park_no_more_than_the_per_client_bound(
    upstream: PeerServer,
) -> None:
    async with (
        own_proxy(upstream.url, "--max-continuations-per-client", "3") as proxy,
        aiohttp.ClientSession() as attacker,
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(local_addr=("127.0.0.2", 0))) as other,
    ):
        url = proxy.endpoint()
        for ident in range(3):
            status, parked = await park(attacker, url, ident)
            assert status == 200, parked
            assert parked["result"]["resultType"] == "input_required"
        status, refused = await park(attacker, url, 99)
        other_status, others = await park(other, url, 100)

    assert status == 503
    assert refused["id"] == 99
    assert refused["error"]["code"] == -32000
    assert "max_continuations_per_client=3" in refused["error"]["message"]
    assert other_status == 200, "a client at another address still parks its call"
    assert others["result"]["resultType"] == "input_required"


async def test_a_call_never_retried_is_captured_expired_with_how_long_it_waited(
    upstream: PeerServer, tmp_path: Path
) -> None:
    capture = tmp_path / "capture.jsonl"
    args = ("--continuation-ttl", "0.5", "--capture", str(capture))
    async with own_proxy(upstream.url, *args) as proxy, aiohttp.ClientSession() as http:
        status, parked = await park(http, proxy.endpoint(), 1)
        assert status == 200, parked

        def expired() -> list[dict[str, Any]]:
            lines = capture.read_text().splitlines() if capture.exists() else []
            events = [json.loads(line) for line in lines if '"kind":"continuation"' in line]
            return [e for e in events if e.get("state") == "expired"]

        await wait_until(lambda: bool(expired()), what="the parked call to expire in the capture")

    (gone,) = expired()
    assert gone["age_ms"] >= 500.0  # parked, never retried, let go at continuation_ttl
    assert gone["age_ms"] < 60_000.0


async def refused(http: aiohttp.ClientSession, url: str, ident: int) -> tuple[int, str | None]:
    """One call that would park, from a client address whose slots are taken: status, Retry-After."""
    params = modern_params(ASK)
    body = {"jsonrpc": "2.0", "id": ident, "method": "tools/call", "params": params}
    auth = {"Authorization": f"Bearer {secrets.token_hex(8)}"}
    async with http.post(url, json=body, headers=modern_headers("tools/call", params, auth)) as resp:
        await resp.read()
        return resp.status, resp.headers.get("Retry-After")


async def test_calls_refused_a_parking_slot_are_told_when_to_retry_and_logged_at_most_once_a_second(
    upstream: PeerServer,
) -> None:
    args = ("--max-continuations-per-client", "1", "--continuation-ttl", "30")
    async with own_proxy(upstream.url, *args) as proxy, aiohttp.ClientSession() as http:
        url = proxy.endpoint()
        parking = time.monotonic()
        status, parked = await park(http, url, 1)
        assert status == 200, parked
        await asyncio.sleep(2.0)  # the slot held now frees 2 s sooner than the whole TTL
        began = time.monotonic()
        answers = await asyncio.gather(*(refused(http, url, 10 + n) for n in range(6)))
        took = time.monotonic() - began
        since_parking = time.monotonic() - parking
        await proxy.process.logged("bridge_continuations_full")
        lines = [line for line in proxy.lines() if line.get("event") == "bridge_continuations_full"]

    for status, retry in answers:
        assert status == 503
        assert retry is not None
        # when the slot held now is let go at the latest: counted from its parking, not the whole TTL
        assert 30 - since_parking <= int(retry) <= 28
    assert 1 <= len(lines) <= 1 + int(took), lines
