"""A JSON answer the upstream cuts mid-body reaches the client as the same cut, rules or no rules.

A fake upstream on raw sockets (no real MCP server hangs up halfway through its answer on demand)
answers the call with a JSON body that it cuts: a `Content-Length` it never fills, or a chunked body
it never ends. The real `mcp-proxy` command relays it twice, once with no fault rule and once with a
rule that could pick the call but never fires (`p` as small as it goes), which sends the exchange
through the gated relay. Both must give the client the same bytes (the server's head and the part
that came, then the close) and record the exchange as `upstream_cut` in the log line, the chain and
the HAR, never as the proxy's own failure.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_head_then_close import is_call, post_raw
from tests.sidecar import ProxyProcess, admin_get, admin_json, clean_env, run_mcp_proxy, settings_env
from tests.transport.helpers import raw_fake_upstream, read_request, rpc

pytestmark = pytest.mark.e2e

CALL = rpc("tools/call", 7, name="cut", arguments={})
ANSWER = json.dumps({"jsonrpc": "2.0", "id": 7, "result": {"content": [{"type": "text", "text": "y" * 150}]}})
PART = ANSWER.encode()[:40]
"""What of the answer the fake sends before it closes."""

NEVER_FIRES = "method:tools/call => delay=1ms p=0.000001"


def cutting(chunked: bool) -> Any:
    """A fake upstream's script: the call's JSON answer starts, then the connection closes."""

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if await read_request(reader) is None:
            return
        if chunked:
            head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
            writer.write(head.encode() + f"{len(PART):x}\r\n".encode() + PART + b"\r\n")
        else:
            head = (
                f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(ANSWER)}\r\n\r\n"
            )
            writer.write(head.encode() + PART)
        await writer.drain()

    return script


async def relayed(tmp_path: Path, chunked: bool, rules: tuple[str, ...]) -> dict[str, Any]:
    """What the client got, and what the log line, the chain and the exported HAR say of the call."""
    capture = tmp_path / f"capture-{len(rules)}.jsonl"
    args = [arg for rule in rules for arg in ("--fault", rule)]
    async with raw_fake_upstream(cutting(chunked)) as fake:
        upstream = f"http://127.0.0.1:{fake.port}/mcp"
        env = clean_env(**settings_env(upstream=upstream, upstream_era="legacy", capture=capture))
        with ProxyProcess(env, *args) as proxy:
            answered = await post_raw(int(proxy.listen.rsplit(":", 1)[1]), CALL)
            events = proxy.wait_events(lambda lines: any(is_call(e) for e in lines))
            chains = await admin_json(proxy.admin + "/api/chains")
            status, _, live = await admin_get(proxy.admin + "/api/export.har")
            assert status == 200
            assert proxy.stop() == 0
    har_file = tmp_path / f"capture-{len(rules)}.har"
    done = run_mcp_proxy("export", "--har", str(har_file), str(capture))
    assert done.returncode == 0, done.stderr
    (line,) = [e for e in events if is_call(e)]
    (chain,) = [c for c in chains if c["method"] == "tools/call"]
    statuses = []
    for har in (json.loads(live), json.loads(har_file.read_bytes())):
        (entry,) = [
            e
            for e in har["log"]["entries"]
            if any(m.get("method") == "tools/call" for m in e["_mcp"]["messages"])
        ]
        statuses.append(entry["response"]["status"])
    return {
        "answered": answered,
        "failed": [e for e in events if e.get("event") == "front_exchange_failed"],
        "outcome": line.get("outcome"),
        "chain": (chain["status"], chain.get("error")),
        "har": statuses,
    }


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
async def test_a_json_answer_cut_mid_body_is_relayed_as_a_cut_whether_or_not_a_rule_could_pick_it(
    tmp_path: Path, chunked: bool
) -> None:
    plain = await relayed(tmp_path, chunked, ())
    gated = await relayed(tmp_path, chunked, (NEVER_FIRES,))

    for seen in (plain, gated):
        head, _, body = seen["answered"].partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 "), seen["answered"]
        assert PART in body
        assert not body.endswith(b"0\r\n\r\n")  # a chunked body is cut, never ended as if whole
        assert seen["failed"] == []
        assert seen["outcome"] == "upstream_cut"
        assert seen["chain"] == ("error", "upstream_cut")
        assert seen["har"] == [200, 200]
    assert body_of(gated["answered"]) == body_of(plain["answered"])


def body_of(answered: bytes) -> bytes:
    """The bytes after the head of what the client got."""
    return answered.partition(b"\r\n\r\n")[2]
