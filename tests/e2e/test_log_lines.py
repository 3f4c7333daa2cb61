"""The round-trip log a person reads on a terminal: one compact line per exchange, named for what it carried.

A real SDK client and server on either side of the proxy, the `mcp-proxy` command, whose log is
rendered as on a terminal (`--log-format console`) or as JSON and read back from its stderr as text.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import Iterator
from typing import Any

import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.session import ClientRequestContext
from mcp.client.streamable_http import streamable_http_client

from tests.e2e.commanded import Commanded, command_env
from tests.e2e.legacy_raw import HEADERS, initialize, session_headers
from tests.peers.clients import run_client, run_plan
from tests.peers.runner import NodeServer, PeerServer, free_port
from tests.sidecar import ProxyProcess, clean_env, settings_env, until

pytestmark = pytest.mark.asyncio

LINE = re.compile(r"^\d\d:\d\d:\d\d\.\d{3} x\d+ ")
"""A compact round-trip line: time of day to the millisecond, then the exchange."""


STRUCTURED = re.compile(r"^\S+ \[\w+\s*\] (\w+)\s+(.*)$")
"""A console line that is not a round-trip: timestamp, [level], event, then key=value pairs."""


class ConsoleProxy(ProxyProcess):
    """`mcp-proxy --log-format console`: its `listening` line (and any other) read from the console
    rendering, so the start waits on it as on the JSON one."""

    def events(self) -> list[dict[str, Any]]:
        out = []
        for line in list(self.lines):
            if (match := STRUCTURED.match(line.rstrip("\n"))) is not None:
                pairs = dict(re.findall(r"(\w+)=(\S+)", match[2]))
                out.append({"event": match[1], **pairs})
        return out


class Renderings:
    """The module's `mcp-proxy` runs, one per log format and upstream, started on first use and all
    stopped at the end of the module (a start costs a process; the tests read only their own lines)."""

    def __init__(self, stack: contextlib.ExitStack) -> None:
        self._stack = stack
        self._running: dict[tuple[str, str], Commanded] = {}

    async def proxy(self, fmt: str, upstream: str) -> Commanded:
        if (fmt, upstream) not in self._running:
            kind = ConsoleProxy if fmt == "console" else ProxyProcess
            process = kind(command_env(upstream), "--log-format", fmt)
            await asyncio.to_thread(process.start)
            self._stack.callback(process.stop)
            self._running[fmt, upstream] = Commanded(process)
        return self._running[fmt, upstream]


@pytest.fixture(scope="module")
def renderings() -> Iterator[Renderings]:
    with contextlib.ExitStack() as stack:
        yield Renderings(stack)


async def logged_run(
    renderings: Renderings, fmt: str, upstream: str, client: str = "python-legacy"
) -> list[str]:
    """Run the `ask_name` scenario through the proxy with its log rendered as `fmt`; the lines it
    logged meanwhile, every exchange's included (`settled`)."""
    proxy = await renderings.proxy(fmt, upstream)
    mark = len(proxy.process.lines)
    run = await asyncio.to_thread(run_client, client, proxy.endpoint(), ["ask_name"])  # type: ignore[arg-type]
    assert run.lines["ask_name"]["result"]["content"] == ["Hello, octocat!"], run.lines
    await proxy.settled()
    return [line.rstrip("\n") for line in proxy.process.lines[mark:]]


async def test_a_terminal_gets_one_short_line_per_exchange_naming_what_it_carried(
    legacy_server: PeerServer,
    renderings: Renderings,
) -> None:
    lines = await logged_run(renderings, "console", legacy_server.url)
    exchanges = [line for line in lines if LINE.match(line)]
    text = "\n".join(exchanges)
    assert any(" POST initialize #1 -> 200 " in line for line in exchanges), text
    call = next(line for line in exchanges if " POST tools/call ask_name #" in line)
    assert re.search(r"-> 200 sse \d+ B 2 messages \d+\.\d ms$", call), call
    # The POST that answers the server's question is named for it, not for the call it belongs to.
    answer = next(line for line in exchanges if "result of elicitation/create" in line)
    assert "tools/call" not in answer, answer
    assert " -> 202 " in answer, answer
    # Streams that end the way streams end say nothing of how; no line carries the session.
    assert any(re.search(r" GET stream -> 200 sse ", line) for line in exchanges), text
    assert any(" DELETE session -> " in line for line in exchanges), text
    for noise in ("client_disconnected", "!!", "session=", "outcome="):
        assert noise not in text, text
    assert max(len(line) for line in exchanges) < 120, text


async def test_json_lines_keep_every_field_and_name_the_message_too(
    legacy_server: PeerServer,
    renderings: Renderings,
) -> None:
    lines = await logged_run(renderings, "json", legacy_server.url)
    entries = [json.loads(line) for line in lines]
    rounds = [e for e in entries if e["event"] == "exchange"]
    answer = next(e for e in rounds if e["carried"] == "result of elicitation/create (accept)")
    assert answer["method"] is None
    assert answer["http_method"] == "POST"
    call = next(e for e in rounds if e["carried"] == "tools/call ask_name")
    wanted = {"session", "status", "content_type", "bytes_in", "bytes_out", "duration_ms", "outcome", "ids"}
    assert wanted <= call.keys()
    assert call["trouble"] is None
    stream = next(e for e in rounds if e["carried"] == "GET stream")
    assert stream["trouble"] is None  # however it ended: the client closed it, or the session went


async def test_a_bridged_call_shows_its_rounds_in_a_line_each(
    modern_server: PeerServer,
    renderings: Renderings,
) -> None:
    lines = await logged_run(renderings, "console", modern_server.url)
    rounds = [line for line in lines if LINE.match(line) and " round " in line]
    assert len(rounds) >= 2, lines
    assert re.search(
        r" round 1 tools/call ask_name: input_required, asks \S+ \(elicitation/create", rounds[0]
    )
    assert rounds[0].endswith("[legacy_to_mrtr]"), rounds[0]
    assert " round 2 tools/call ask_name: complete " in rounds[1] + " ", rounds[1]


async def test_both_bridges_number_a_calls_rounds_alike_from_round_1(
    modern_server: PeerServer,
    legacy_server: PeerServer,
    renderings: Renderings,
) -> None:
    def rounds(lines: list[str]) -> list[str]:
        found = [
            re.search(r" round (\d+) tools/call ask_name: (\w+)", line) for line in lines if LINE.match(line)
        ]
        return [f"{m[1]} {m[2]}" for m in found if m]

    to_mrtr = await logged_run(renderings, "console", modern_server.url)
    to_legacy = await logged_run(renderings, "console", legacy_server.url, "python-2026")

    assert any("[mrtr_to_legacy]" in line for line in to_legacy), to_legacy
    assert rounds(to_mrtr) == ["1 input_required", "2 complete"], to_mrtr
    assert rounds(to_legacy) == rounds(to_mrtr), to_legacy
    resumed = [line for line in to_legacy if LINE.match(line) and " resumed by #" in line]
    assert resumed, to_legacy
    assert all(" round 2 resumed by #" in line for line in resumed), resumed


@pytest.mark.parametrize("fmt", ["console", "json"])
async def test_a_question_waiting_on_the_client_is_logged_while_it_waits(
    legacy_server: PeerServer, renderings: Renderings, fmt: str
) -> None:
    # The client holds its answer until the proxy has logged the question: the line must come while
    # the call still waits, not with the call's own line when it closes.
    proxy = await renderings.proxy(fmt, legacy_server.url)
    mark = len(proxy.process.lines)
    seen: list[str] = []

    def asked() -> list[str]:
        return [line for line in proxy.process.lines[mark:] if "elicitation/create" in line]

    async def elicitation(
        context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult | types.ErrorData:
        await until(lambda: bool(asked()), what="the question's log line", seconds=10)
        seen.extend(line.rstrip("\n") for line in proxy.process.lines[mark:])
        return types.ElicitResult(action="accept", content={"name": "octocat"})

    async with httpx2.AsyncClient(timeout=httpx2.Timeout(30.0)) as http:
        transport = streamable_http_client(proxy.endpoint(), http_client=http)
        async with Client(transport, mode="legacy", cache=None, elicitation_callback=elicitation) as client:
            result = await client.call_tool("ask_name", {})
    assert [block.text for block in result.content] == ["Hello, octocat!"]  # type: ignore[union-attr]

    waiting = [line for line in seen if "elicitation/create" in line]
    assert len(waiting) == 1, seen
    assert not any("tools/call ask_name" in line and "-> 200" in line for line in seen), seen
    if fmt == "console":
        assert re.search(
            r"^\d\d:\d\d:\d\d\.\d{3} x\d+ tools/call ask_name #\S+ <- asks elicitation/create #\S+, "
            r"waiting on the client$",
            waiting[0],
        ), waiting[0]
    else:
        line = json.loads(waiting[0])
        assert (line["event"], line["carried"], line["asks"], line["how"], line["mode"]) == (
            "server_asked",
            "tools/call ask_name",
            "elicitation/create",
            "in flight",
            "passthrough",
        )
        assert len(line["ids"]) == 1  # the call's own id, beside the question's (`asked`)
        assert line["session"].startswith("<redacted"), line


async def test_an_input_required_answer_in_passthrough_says_what_the_call_waits_for(
    modern_server: PeerServer, renderings: Renderings
) -> None:
    lines = await logged_run(renderings, "json", modern_server.url, "python-2026")
    entries = [json.loads(line) for line in lines]
    asked = [e for e in entries if e["event"] == "server_asked"]
    assert [(e["carried"], e["asks"], e["how"], e["mode"]) for e in asked] == [
        ("tools/call ask_name", "elicitation/create", "input_required", "passthrough")
    ], entries
    call = next(e for e in entries if e["event"] == "exchange" and e["exchange"] == asked[0]["exchange"])
    assert call["ids"] == asked[0]["ids"]


HOSTILE_TOOL = "evil\x1b]0;TITLE\x07\x1b[2J\r\u202eX\x9b1m"
HOSTILE_ID = "7\nforged line\x1b[31m"


async def test_a_clients_control_characters_are_shown_escaped_never_sent_to_the_terminal(
    legacy_server: PeerServer, renderings: Renderings
) -> None:
    proxy = await renderings.proxy("console", legacy_server.url)
    mark = len(proxy.process.lines)
    call = {"jsonrpc": "2.0", "id": HOSTILE_ID, "method": "tools/call", "params": {"name": HOSTILE_TOOL}}
    async with httpx2.AsyncClient(timeout=httpx2.Timeout(30.0)) as http:
        opened = await http.post(proxy.endpoint(), json=initialize(version="2025-11-25"), headers=HEADERS)
        session = session_headers(opened.headers["mcp-session-id"], "2025-11-25")
        await http.post(
            proxy.endpoint(), json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=session
        )
        await http.post(proxy.endpoint(), json=call, headers=session)
    await proxy.settled()
    lines = [line.rstrip("\n") for line in proxy.process.lines[mark:]]

    shown = [line for line in lines if " tools/call " in line]
    assert len(shown) == 1, lines
    assert (
        " POST tools/call evil\\x1b]0;TITLE\\x07\\x1b[2J\\r\\u202eX\\x9b1m #7\\nforged line\\x1b[31m -> 200 "
    ) in shown[0], shown[0]
    assert not [line for line in lines if "forged line" in line and line is not shown[0]], lines
    for line in lines:
        assert not any(char in line for char in "\x1b\x07\r\x9b\u202e"), line


@pytest.mark.parametrize(
    "client",
    [
        pytest.param("python-legacy", id="legacy-client-passthrough"),
        pytest.param("python-2026", id="2026-client-bridged"),
    ],
)
async def test_a_cancelled_call_reads_cancelled_on_a_terminal_not_as_a_success_or_a_failure(
    legacy_server: PeerServer, renderings: Renderings, client: str
) -> None:
    """A call the client gives up on says so on its line (`cancelled`, after the duration): read in
    pass-through it would otherwise look like a success, and bridged for a 2026-07-28 client (which
    cancels by closing its stream, so it gets no response at all) like a failure."""
    proxy = await renderings.proxy("console", legacy_server.url)
    mark = len(proxy.process.lines)
    plan = [
        {
            "id": "cancel",
            "op": "call",
            "tool": "slow_progress",
            "arguments": {"steps": 300},
            "cancelAfterMs": 300,
        },
        {"id": "settle", "op": "sleep", "ms": 300},
    ]
    run = await asyncio.to_thread(run_plan, client, proxy.endpoint(), plan)  # type: ignore[arg-type]
    assert run.lines["cancel"].get("result") == "cancelled", run.lines

    def logged() -> list[str]:
        return [line for line in proxy.process.lines[mark:] if " tools/call slow_progress #" in line]

    await until(lambda: bool(logged()), what="the cancelled call's line", seconds=10)
    (line,) = logged()
    assert re.search(r"\d ms( \[\w+\])? cancelled$", line.rstrip("\n")), line
    assert "!!" not in line, line


async def test_at_log_level_warning_a_failed_exchange_keeps_its_line_and_a_good_one_does_not(
    legacy_server: PeerServer,
) -> None:
    """A deployment that logs at `warning` to cut per-request noise still reads every failed
    exchange (here the server's 404 to a session it does not know), at `warning`, with what it
    carried; the exchanges that went well leave nothing. The proxy logs no `listening` line at that
    level, so it is told its port and reached when it answers."""
    port = free_port()
    env = clean_env(**settings_env(upstream=legacy_server.url, listen=f"127.0.0.1:{port}"))
    process = ProxyProcess(env, "--log-level", "warning", "--no-admin-enabled")
    url = f"http://127.0.0.1:{port}/mcp"

    async def traffic() -> None:
        async with httpx2.AsyncClient(timeout=10.0) as http:
            for _ in range(400):  # bounded: the proxy listens within seconds
                with contextlib.suppress(httpx2.TransportError):
                    opened = await http.post(url, json=initialize(), headers=HEADERS)
                    break
                await asyncio.sleep(0.05)
            assert opened.status_code == 200, opened.text
            unknown = session_headers("0123456789abcdef0123456789abcdef")
            body = {
                "jsonrpc": "2.0",
                "id": 7,
                "method": "tools/call",
                "params": {"name": "add", "arguments": {}},
            }
            refused = await http.post(url, json=body, headers=unknown)
            assert refused.status_code == 404, refused.text

    try:  # the start waits (bounded) for the line the failed exchange leaves
        await asyncio.gather(asyncio.to_thread(process.start, "exchange"), traffic())
    finally:
        await asyncio.to_thread(process.stop)
    lines = [e for e in process.events() if e.get("event") == "exchange"]
    assert len(lines) == 1, lines
    (line,) = lines
    assert (line["level"], line["carried"], line["status"]) == ("warning", "tools/call add", 404), line
    assert line["trouble"] == "HTTP 404", line


async def test_a_huge_tool_name_and_id_make_a_short_line_that_says_how_long_they_were(
    legacy_server: PeerServer, renderings: Renderings
) -> None:
    """Tool names and string ids are the client's to choose: the line shows their start and their
    length, so one request cannot write a line a log shipper splits or drops."""
    proxy = await renderings.proxy("json", legacy_server.url)
    url = proxy.endpoint()
    name, ident = "n" * 100_000, "i" * 5_000
    async with httpx2.AsyncClient(timeout=20.0) as http:
        opened = await http.post(url, json=initialize(), headers=HEADERS)
        session = opened.headers["mcp-session-id"]
        body = {
            "jsonrpc": "2.0",
            "id": ident,
            "method": "tools/call",
            "params": {"name": name, "arguments": {}},
        }
        answered = await http.post(url, json=body, headers=session_headers(session))
        assert answered.status_code == 200, answered.text
    await proxy.settled()
    raw = [line for line in proxy.process.lines if '"tools/call' in line and '"exchange"' in line]
    (text,) = [line for line in raw if "100000 chars" in line]
    assert len(text) < 2_000, len(text)
    line = json.loads(text)
    assert line["name"] == "n" * 256 + "… (100000 chars)", line["name"][-40:]
    assert line["carried"] == f"tools/call {line['name']}"
    assert line["ids"] == ["i" * 256 + "… (5000 chars)"]


@pytest.fixture(scope="module")
def everything() -> Iterator[NodeServer]:
    with NodeServer("everything") as server:
        yield server


async def test_a_batch_is_named_a_batch_with_every_message_it_carried(
    everything: NodeServer, renderings: Renderings
) -> None:
    """A 2025-03-26 client's JSON-RPC batch is one exchange: its line says it is a batch, how many
    messages it held and what they were (compact on a terminal, each named in JSON), not only its
    first request, which would read as one `tools/call` that somehow had two ids."""
    version = "2025-03-26"
    call = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": "get-sum", "arguments": {"a": 1, "b": 2}},
    }
    listed = {"jsonrpc": "2.0", "id": 3, "method": "tools/list"}
    changed = {"jsonrpc": "2.0", "method": "notifications/roots/list_changed"}
    lines: dict[str, list[str]] = {}
    for fmt in ("json", "console"):
        proxy = await renderings.proxy(fmt, everything.url)
        mark = len(proxy.process.lines)
        async with httpx2.AsyncClient(timeout=20.0) as http:
            opened = await http.post(proxy.endpoint(), json=initialize(version=version), headers=HEADERS)
            headers = session_headers(opened.headers["mcp-session-id"], version)
            await http.post(
                proxy.endpoint(),
                json={"jsonrpc": "2.0", "method": "notifications/initialized"},
                headers=headers,
            )
            answered = await http.post(
                proxy.endpoint(), content=json.dumps([call, listed, changed]), headers=headers
            )
            assert answered.status_code == 200, answered.text
            await http.post(proxy.endpoint(), content=json.dumps([changed, changed]), headers=headers)
        await proxy.settled()
        lines[fmt] = [line.rstrip("\n") for line in proxy.process.lines[mark:] if "batch of" in line]
    shown = "batch of 3: tools/call get-sum, tools/list, notifications/roots/list_changed"
    first, second = (json.loads(line) for line in lines["json"])
    assert (first["carried"], first["ids"], first["method"]) == (shown, [2, 3], "tools/call"), first
    assert first["batch"] == ["tools/call get-sum", "tools/list", "notifications/roots/list_changed"], first
    assert (
        second["carried"] == "batch of 2: notifications/roots/list_changed, notifications/roots/list_changed"
    )
    assert second["batch"] == ["notifications/roots/list_changed"] * 2, second
    terminal_first, terminal_second = lines["console"]
    assert f" POST {shown} #2 #3 -> 200 " in terminal_first, terminal_first
    assert " -> 202" in terminal_second, terminal_second


async def test_a_batch_of_256_long_named_calls_makes_a_line_of_a_few_kb_that_counts_what_it_leaves_out(
    everything: NodeServer, renderings: Renderings
) -> None:
    """However a batch is built (as many messages as `max_batch_messages` lets in, each with a long
    name and a long string id), its line names and lists what fits a few KB and counts the rest, in
    either format: a log shipper cutting lines at 16 KiB never gets one whole message of it."""
    version = "2025-03-26"
    calls = [
        {
            "jsonrpc": "2.0",
            "id": f"{n:03d}-" + "i" * 400,
            "method": "tools/call",
            "params": {"name": f"{n:03d}-" + "n" * 1_000, "arguments": {}},
        }
        for n in range(256)
    ]
    lines: dict[str, list[str]] = {}
    for fmt in ("json", "console"):
        proxy = await renderings.proxy(fmt, everything.url)
        mark = len(proxy.process.lines)
        async with httpx2.AsyncClient(timeout=20.0) as http:
            opened = await http.post(proxy.endpoint(), json=initialize(version=version), headers=HEADERS)
            headers = session_headers(opened.headers["mcp-session-id"], version)
            answered = await http.post(proxy.endpoint(), content=json.dumps(calls), headers=headers)
            # The server takes batches of 100 at most: its refusal is relayed, the batch told as it went.
            assert answered.status_code == 400, answered.text
        await proxy.settled()
        lines[fmt] = [line.rstrip("\n") for line in proxy.process.lines[mark:] if "batch of 256" in line]
    (text,) = lines["json"]
    (terminal,) = lines["console"]
    assert len(text.encode()) < 6_000, len(text.encode())
    assert len(terminal.encode()) < 4_000, len(terminal.encode())
    line = json.loads(text)
    named, more = line["batch"][:-1], line["batch"][-1]
    assert named[0] == f"tools/call 000-{'n' * 252}… (1004 chars)", named[0]
    assert more == f"+{256 - len(named)} more", line["batch"]
    assert line["ids"][0] == f"000-{'i' * 252}… (404 chars)", line["ids"][0]
    assert len(line["ids"]) + line["ids_more"] == 256, line
    assert line["carried"].startswith("batch of 256: tools/call 000-"), line["carried"]
    assert f" +{line['ids_more']} more -> 400 " in terminal, terminal
