"""Log messages a legacy server sends on its session's GET stream, through the modern->legacy bridge.

The TypeScript SDK 1.x's example server (`simpleStreamableHttp.js`) logs from its `multi-greet` tool
with `server.sendLoggingMessage(params, extra.sessionId)`, which names no request, so the messages
go on the session's GET stream while the call runs (one `debug`, then two `info`, a second apart).
A legacy client at level `info` gets the `info` ones; a 2026-07-28 client that asks for `info` on
the call must get those that reach the proxy before the call's answer, filed in the call's chain. The
last one is sent right before the answer, on the other stream, and may reach the proxy (or a legacy
client) after it: the streams are not ordered, and a 2026-07-28 response ends with its answer. Real
peers: the SDK 1.32 example under the loopback preload, the Python SDK 2.3 client in both eras, and
the `mcp-proxy` command.

A 2026-07-28 client that sends no `server/discover` opens the upstream session with its first call,
and the session's GET stream is opened for that call: what the stream carries that the call does not
take (the `debug` line, a log after the answer) is still the stream's own, in its `GET stream` chain,
live and read back from the capture alike.

Such a log goes to a call only on a session that carries one principal's calls: the proxies here
run with `anonymous_upstream_sessions = per_connection` (the clients send no `Authorization`), save
the one showing that the shared anonymous session gives none to any call.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import anyio
import pytest

from tests.peers.runner import NodeServer
from tests.peers.scenarios import CallbackLog, client_for, normalize_tool_result
from tests.sidecar import ProxyProcess, admin_json, clean_env, run_mcp_proxy, settings_env

pytestmark = pytest.mark.e2e

FIRST: Final = "info:Sending first greeting to Bob"
"""Logged a second before the answer: it reaches the proxy while the call is in flight."""
LAST: Final = "info:Sending second greeting to Bob"
"""Logged just before the answer, on another stream: it may reach the proxy after the answer, when
the call is over and no call takes it."""

OWN_SESSIONS: Final = {"anonymous_upstream_sessions": "per_connection"}
"""Each client connection its own upstream session: a GET-stream log can only be its own calls'."""


@pytest.fixture(scope="module")
def example_server() -> Iterator[NodeServer]:
    with NodeServer("ts-v1-example") as server:
        yield server


async def _greet(url: str, mode: str) -> tuple[dict[str, Any], list[str]]:
    """`greet` (which opens the session and logs nothing), then `multi-greet` at log level `info`:
    the latter's result and the log lines the client got."""
    log = CallbackLog()
    async with client_for(url, mode, log=log, log_level="info", read_timeout=10.0) as client:
        with anyio.fail_after(15):
            await client.call_tool("greet", {"name": "Ada"})
            result = normalize_tool_result(await client.call_tool("multi-greet", {"name": "Bob"}))
    return result, list(log.logs)


async def test_a_modern_client_gets_the_get_stream_logs_of_its_call_as_a_legacy_client_does(
    example_server: NodeServer,
) -> None:
    direct = await _greet(example_server.url, "legacy")
    assert direct[0] == {"content": ["Good morning, Bob!"], "isError": False}
    assert direct[1] in ([FIRST], [FIRST, LAST])  # direct, too, the last one may come after the answer
    with ProxyProcess(clean_env(**settings_env(upstream=example_server.url, **OWN_SESSIONS))) as proxy:
        result, logs = await _greet(proxy.endpoint(), "2026-07-28")
        exported = await admin_json(proxy.admin + "/api/export.json")
    assert result == direct[0]
    assert logs in ([FIRST], [FIRST, LAST])  # never the debug line it did not ask for
    greet = next(chain for chain in exported["chains"] if chain["chain"].get("name") == "multi-greet")
    assert greet["chain"]["mode"] == "mrtr_to_legacy"
    taken = _logs(greet, "upstream", "to_client")
    assert taken == [line.replace(":", "|", 1) for line in logs]  # filed in the call's chain
    assert _logs(greet, "client", "to_client") == taken  # and streamed to its client
    others = [_logs(chain, "upstream", "to_client") for chain in exported["chains"] if chain is not greet]
    late = [LAST.replace(":", "|", 1)] if logs == [FIRST] else []  # after the answer: nobody's
    left = sorted(line for lines in others for line in lines)
    assert left == sorted(["debug|Starting multi-greet for Bob", *late])  # below the level: nobody's


async def test_the_get_stream_opened_for_a_first_call_keeps_what_that_call_did_not_take(
    example_server: NodeServer, tmp_path: Path
) -> None:
    capture = tmp_path / "run.jsonl"
    log = CallbackLog()
    env = clean_env(**settings_env(upstream=example_server.url, capture=capture, **OWN_SESSIONS))
    with ProxyProcess(env) as proxy:
        async with client_for(proxy.endpoint(), "2026-07-28", log=log, log_level="info") as client:
            with anyio.fail_after(15):
                first = normalize_tool_result(await client.call_tool("multi-greet", {"name": "Bob"}))
                await client.call_tool("greet", {"name": "Ada"})
        live = await admin_json(proxy.admin + "/api/export.json")
    assert first == {"content": ["Good morning, Bob!"], "isError": False}
    assert log.logs in ([FIRST], [FIRST, LAST])
    done = run_mcp_proxy("export", "--json", "-", str(capture))
    assert done.returncode == 0, done.stderr
    for exported in (live, json.loads(done.stdout)):
        greet = next(c for c in exported["chains"] if c["chain"].get("name") == "multi-greet")
        upstream = [m.get("method") for m in greet["messages"] if m["side"] == "upstream"]
        assert "initialize" in upstream  # the call opened the session, and its GET stream with it
        taken = _logs(greet, "upstream", "to_client")
        assert taken == [line.replace(":", "|", 1) for line in log.logs]
        (stream,) = [c for c in exported["chains"] if c["chain"]["method"] == "GET stream"]
        assert stream["chain"]["mode"] == "mrtr_to_legacy"
        late = [LAST.replace(":", "|", 1)] if log.logs == [FIRST] else []
        assert _logs(stream, "upstream", "to_client") == ["debug|Starting multi-greet for Bob", *late]


async def test_on_the_shared_anonymous_session_a_modern_client_gets_no_get_stream_log(
    example_server: NodeServer,
) -> None:
    """Anonymous clients share that session (the default), and a log that arrives after its call's
    answer could be given to another client's call: so none is given, and each stays on the stream."""
    with ProxyProcess(clean_env(**settings_env(upstream=example_server.url))) as proxy:
        result, logs = await _greet(proxy.endpoint(), "2026-07-28")
        exported = await admin_json(proxy.admin + "/api/export.json")
    assert result == {"content": ["Good morning, Bob!"], "isError": False}
    assert logs == []
    (stream,) = [c for c in exported["chains"] if c["chain"]["method"] == "GET stream"]
    assert _logs(stream, "upstream", "to_client") == [
        "debug|Starting multi-greet for Bob",
        FIRST.replace(":", "|", 1),
        LAST.replace(":", "|", 1),
    ]


def _logs(chain: dict[str, Any], side: str, direction: str) -> list[str]:
    """`level|data` of the log messages a chain holds on one side, in one direction."""
    return [
        f"{message['body']['params']['level']}|{message['body']['params']['data']}"
        for message in chain["messages"]
        if message["side"] == side
        and message["direction"] == direction
        and message.get("method") == "notifications/message"
    ]
