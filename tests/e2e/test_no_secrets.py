"""No secret in any output: distinct secrets planted everywhere a client or the configuration can put one.

Every credential-like header name the defaults cover (by name and by pattern), credential-like query
parameters, the upstream URL's query, a `requestState` in a body, the session ids the server or the
bridge mints, and the client's token and query key where the server echoes them (a result, a log
notification, an error message): none of them may appear in clear in the log, the capture (raw bytes
and read back), the live bus a TUI or the admin feed reads, the admin API's every path, or what the
TUI renders. Run with the built-in lists and with a user-modified list (the user's own names and
patterns added).
"""

from __future__ import annotations

import asyncio
import base64
import json
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from proxy.flows.events import ChainOpened, FlowEvent, MessageRecorded
from proxy.record.capture import read_capture
from proxy.runtime import Proxy
from tests.peers.runner import PeerServer
from tests.sidecar import ProxyProcess, clean_env, settings_env
from tests.transport.helpers import CLIENT_ACCEPT, bounded, captured_logs, client_session, rpc, wait_until
from ui.render import full_json, message_header

pytestmark = pytest.mark.e2e

DEFAULT_NAMES = (
    "Authorization",
    "Proxy-Authorization",
    "Cookie",
    "X-Api-Key",
    "Api-Key",
    "X-Auth-Token",
)
PATTERN_NAMES = (
    "X-Auth",
    "X-Refresh-Token",
    "X-Client-Secret",
    "X-Access-Key",
    "X-Credentials",
    "X-Session-Ref",
    "X-Password",
    "X-Db-Passwd",
    "X-Cookie-Jar",
)
QUERY_NAMES = ("access_token", "api_key", "client_secret", "sessionid", "password")
USER_NAMES = ("X-Tenant",)
"""Added by the user's list (redact_headers), with the pattern `private` (redact_header_patterns)."""


def planted() -> dict[str, str]:
    """A distinct secret per place, each unmistakable in any output."""
    return {
        place: f"SECRET{secrets.token_hex(8)}"
        for place in [
            *DEFAULT_NAMES,
            *PATTERN_NAMES,
            *USER_NAMES,
            "X-Private-Id",
            *(f"?{q}" for q in QUERY_NAMES),
            "upstream?",
            "requestState",
            "body api_token",
        ]
    }


def headers_of(secret: dict[str, str], *, user_list: bool) -> dict[str, str]:
    names = [*DEFAULT_NAMES, *PATTERN_NAMES, *((*USER_NAMES, "X-Private-Id") if user_list else ())]
    out = {name: secret[name] for name in names}
    out["Authorization"] = f"Bearer {secret['Authorization']}"
    out["Cookie"] = f"sid={secret['Cookie']}"
    return out


async def post(
    http: aiohttp.ClientSession, url: str, body: bytes, headers: dict[str, str]
) -> aiohttp.ClientResponse:
    async with http.post(url, data=body, headers={**CLIENT_ACCEPT, **headers}) as response:
        await bounded(response.read(), what="the answer through the proxy")
        return response


async def traffic(proxy: Proxy, secret: dict[str, str], *, user_list: bool) -> list[str]:
    """A legacy session through the proxy carrying every planted secret; returns the minted session ids."""
    query = "&".join(f"{q}={secret['?' + q]}" for q in QUERY_NAMES) + "&trace=on"
    url = f"{proxy.endpoint()}?{query}"
    headers = headers_of(secret, user_list=user_list)
    async with client_session() as http:
        init = rpc(
            "initialize",
            1,
            protocolVersion="2025-11-25",
            capabilities={},
            clientInfo={"name": "secrets-test", "version": "1"},
        )
        first = await post(http, url, init, headers)
        assert first.status == 200
        session = first.headers["Mcp-Session-Id"]
        headers["Mcp-Session-Id"] = session
        done = await post(http, url, rpc("notifications/initialized", None), headers)
        assert done.status == 202
        call = rpc(
            "tools/call",
            2,
            name="echo",
            arguments={"text": "hello", **({"api_token": secret["body api_token"]} if user_list else {})},
            _meta={"requestState": secret["requestState"]},
        )
        answered = await post(http, url, call, headers)
        assert answered.status == 200
        # The server echoes what it was sent: the client's own token and query key come back in a
        # result, a log notification and an error message, where no name says it is a credential.
        token, key = secret["Authorization"], secret["?api_key"]
        echo = rpc("tools/call", 3, name="echo", arguments={"text": f"my token is {token}, my key {key}"})
        unknown = rpc("tools/call", 4, name=f"tool-{token}", arguments={})
        for body in (echo, unknown):
            assert (await post(http, url, body, headers)).status == 200
        if user_list:  # a body cut short is recorded as text: its secret member is masked there too
            broken = b'{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"api_token":"%s",' % (
                secret["body api_token"].encode()
            )
            assert (await post(http, url, broken, headers)).status in (400, 200)
    return [session]


async def admin_outputs(proxy: Proxy) -> str:
    """Every admin path's answer, the live feed's history included."""
    assert proxy.admin_url is not None
    out: list[str] = []
    async with aiohttp.ClientSession() as http:
        for path in ("/healthz", "/readyz", "/metrics", "/api/chains?limit=500", "/api/continuations"):
            async with http.get(proxy.admin_url + path) as resp:
                out.append(await resp.text())
        chains = json.loads(out[3])
        for item in chains.get("chains", chains) if isinstance(chains, dict) else chains:
            async with http.get(f"{proxy.admin_url}/api/chains/{item['id']}") as resp:
                out.append(await resp.text())
        async with http.get(proxy.admin_url + "/api/feed?history=500") as resp:
            feed = b""
            while feed.count(b'"type":"chain_changed"') < len(proxy.chains()):
                feed += await asyncio.wait_for(resp.content.readany(), 5)
            out.append(feed.decode())
    return "\n".join(out)


def rendered(events: list[FlowEvent]) -> str:
    """What the TUI shows of each message: its header lines and its body."""
    summaries = {e.chain.id: e.chain for e in events if isinstance(e, ChainOpened)}
    lines: list[str] = []
    for event in events:
        if isinstance(event, MessageRecorded) and event.chain_id in summaries:
            lines += [f"{k}: {v}" for k, v in message_header(event.message, summaries[event.chain_id])]
            lines.append(full_json(event.message.body))
    return "\n".join(lines)


@pytest.mark.parametrize("lists", ["built-in", "user-modified"])
@pytest.mark.parametrize("server", ["passthrough", "legacy-to-mrtr"])
async def test_no_planted_secret_reaches_any_output(
    legacy_server: PeerServer,
    modern_server: PeerServer,
    proxy_for: Callable[..., Any],
    tmp_path: Path,
    lists: str,
    server: str,
) -> None:
    user_list = lists == "user-modified"
    secret = planted()
    upstream = legacy_server if server == "passthrough" else modern_server
    extra = (
        {
            "redact_headers": ["x-tenant"],
            "redact_header_patterns": ["private"],
            "redact_body_keys": ["API_Token"],
        }
        if user_list
        else {}
    )
    capture = tmp_path / "capture.jsonl"
    with captured_logs() as logs:
        async with proxy_for(
            f"{upstream.url}?api_key={secret['upstream?']}", capture=capture, **extra
        ) as proxy:
            feed = proxy.bus.subscribe("tui")
            sessions = await traffic(proxy, secret, user_list=user_list)
            await wait_until(lambda: proxy.observations.open_exchanges == 0, what="the exchanges to close")
            admin = await admin_outputs(proxy)
            live: list[FlowEvent] = []
            while (event := feed.get_nowait()) is not None:
                live.append(event)
            feed.close()
    read_back = list(read_capture(capture))
    outputs = {
        "log": json.dumps(logs, default=str),
        "capture": capture.read_text(encoding="utf-8"),
        "capture read back": "\n".join(e.model_dump_json() for e in read_back),
        "live feed": "\n".join(e.model_dump_json() for e in live),
        "admin API": admin,
        "TUI": rendered(live) + rendered(read_back),
    }
    assert len(read_back) > 5
    assert "hello" in outputs["capture read back"], "the capture holds the call"
    assert admin.count('"name":"echo"') >= 2, "the admin API shows the call (list, chain, feed)"
    assert any(entry["event"] == "exchange" for entry in logs), "the round-trip lines were logged"
    assert "my token is <redacted len=" in outputs["capture read back"], "the echo was recorded, masked"
    assert ", my key <redacted len=" in outputs["capture read back"], "the query key echoed, masked"
    assert "Unknown tool: tool-<redacted len=" in admin, "the server's error echoing the token, masked"
    wanted = {**secret, **{f"session {n}": s for n, s in enumerate(sessions)}}
    if not user_list:
        del wanted["X-Tenant"], wanted["X-Private-Id"], wanted["body api_token"]
    leaks = sorted(
        (where, place) for place, value in wanted.items() for where, text in outputs.items() if value in text
    )
    seen = [(w, p, outputs[w][max(0, outputs[w].index(wanted[p]) - 200) :][:260]) for w, p in leaks]
    assert leaks == [], seen


async def test_dropping_a_built_in_entry_is_warned_at_start_naming_it_and_then_shows_it(
    legacy_server: PeerServer, proxy_for: Callable[..., Any]
) -> None:
    with captured_logs() as logs:
        async with proxy_for(legacy_server.url, unredact_headers=["mcp-session-id", "session"]) as proxy:
            feed = proxy.bus.subscribe("tui")
            sessions = await traffic(proxy, planted(), user_list=False)
            live = []
            while (event := feed.get_nowait()) is not None:
                live.append(event)
            feed.close()
    (warning,) = [entry for entry in logs if entry["event"] == "redaction_defaults_dropped"]
    assert warning["log_level"] == "warning"
    assert warning["entries"] == ["mcp-session-id", "session"]
    assert "in clear" in warning["hint"]
    assert "still masked" not in warning["hint"]  # the session pattern went with the name
    assert sessions[0] in "\n".join(e.model_dump_json() for e in live), "the user asked to see it"


async def test_dropping_a_built_in_entry_is_warned_at_start_whatever_the_log_level(
    legacy_server: PeerServer,
) -> None:
    """A quiet sidecar (`--log-level error`) still hears that redaction was weakened, and only that."""
    env = clean_env(**settings_env(upstream=legacy_server.url))
    proxy = ProxyProcess(env, "--log-level", "error", "--unredact-headers", "mcp-session-id")
    await asyncio.to_thread(proxy.start, "redaction_defaults_dropped")
    code = await asyncio.to_thread(proxy.stop)

    (warning,) = [line for line in proxy.events() if line["event"] == "redaction_defaults_dropped"]
    assert (warning["level"], warning["entries"]) == ("warning", ["mcp-session-id"])
    assert [line["event"] for line in proxy.events()] == ["redaction_defaults_dropped"]
    assert code == 0


async def test_a_dropped_name_a_pattern_still_masks_is_said_to_stay_masked(
    legacy_server: PeerServer, proxy_for: Callable[..., Any]
) -> None:
    with captured_logs() as logs:
        async with proxy_for(legacy_server.url, unredact_headers=["x-api-key"]):
            pass
    (warning,) = [entry for entry in logs if entry["event"] == "redaction_defaults_dropped"]
    assert warning["hint"].endswith(
        "still masked by a pattern (drop the pattern too to read them): x-api-key by 'key'"
    )


async def test_a_basic_credential_echoed_decoded_reaches_no_output(
    legacy_server: PeerServer, proxy_for: Callable[..., Any], tmp_path: Path
) -> None:
    """A server that echoes a Basic credential decoded (`alice:<password>`, or the password alone in
    an error) shows it masked everywhere, as it shows the base64 form it was sent in."""
    password = f"BASIC{secrets.token_hex(8)}"
    encoded = base64.b64encode(f"alice:{password}".encode()).decode()
    headers = {"Authorization": f"Basic {encoded}"}
    capture = tmp_path / "capture.jsonl"
    with captured_logs() as logs:
        async with proxy_for(legacy_server.url, capture=capture) as proxy, client_session() as http:
            url = proxy.endpoint()
            info = {"name": "basic-test", "version": "1"}
            init = rpc("initialize", 1, protocolVersion="2025-11-25", capabilities={}, clientInfo=info)
            first = await post(http, url, init, headers)
            headers["Mcp-Session-Id"] = first.headers["Mcp-Session-Id"]
            assert (await post(http, url, rpc("notifications/initialized", None), headers)).status == 202
            for n, text in enumerate((f"decoded: alice:{password}", f"wrong password {password}"), start=2):
                echo = rpc("tools/call", n, name="echo", arguments={"text": text})
                assert (await post(http, url, echo, headers)).status == 200
            await wait_until(lambda: proxy.observations.open_exchanges == 0, what="the exchanges to close")
            admin = await admin_outputs(proxy)
    read_back = list(read_capture(capture))
    outputs = {
        "log": json.dumps(logs, default=str),
        "capture": capture.read_text(encoding="utf-8"),
        "admin API": admin,
        "TUI": rendered(read_back),
    }
    assert "wrong password <redacted len=" in outputs["capture"], "the echo was recorded, masked"
    assert "decoded: <redacted len=" in outputs["admin API"]
    leaks = [where for where, text in outputs.items() if password in text]
    assert leaks == [], [outputs[w][max(0, outputs[w].index(password) - 200) :][:300] for w in leaks]
