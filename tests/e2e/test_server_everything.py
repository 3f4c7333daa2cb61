"""@modelcontextprotocol/server-everything, the reference legacy server, behind ``mcp-proxy``.

server-everything (Streamable HTTP mode, from the repository's own ``.cache/node``, under the loopback
preload) is a legacy-era server built on the TypeScript SDK v1 with sessions, a GET stream, and tools
that ask the client in flight (elicitation, URL elicitation, sampling) or report progress. One proxy
(the ``mcp-proxy`` command, default settings) sits in front of it:

- pass-through: legacy clients (Python SDK, TypeScript SDK v1) list the tools and call every one;
- the modern->legacy bridge: 2026-07-28 clients (Python SDK, TypeScript SDK v2 pinned) do the same,
  except ``get-roots-list``: server-everything learns the client's roots from a ``roots/list`` it
  sends on the session's GET stream right after ``notifications/initialized``, outside any call, and
  asks again there when it has none. A 2026-07-28 client has no such stream and answers only the
  requests embedded in a result of its own call, so the plan leaves that tool out; the bridge asks
  it as part of the call in flight on the session when the server asks again during the call, which
  the roots tests at the end check (clients without credentials share one upstream session by
  default, `anonymous_upstream_sessions = "shared"`, and get one per connection with
  `per_connection`).

Each client runs the whole plan on one connection (`tests.peers.clients.run_plan`), answering
elicitation and sampling with the fixed answers of the test clients. Its results through the proxy
must equal what the same client library gets from the server directly in the legacy era (the Python
SDK in legacy mode, the TypeScript SDK v1, the TypeScript SDK v2 in legacy mode), once session ids,
elicitation ids and clock times are masked and content is reduced to what a user sees. Errors compare
by JSON-RPC code.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from collections.abc import Iterator
from typing import Any, Final

import httpx
import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.session import ClientRequestContext
from mcp.client.streamable_http import streamable_http_client

from proxy.engine.modern_client.sessions import ORPHAN_WHY
from tests.peers.clients import ClientKind, ClientRun, run_plan
from tests.peers.runner import NodeServer
from tests.sidecar import ProxyProcess, clean_env, settings_env

pytestmark = pytest.mark.e2e

CALLS: Final[list[tuple[str, str, dict[str, Any]]]] = [
    ("echo", "echo", {"message": "hello"}),
    ("get-annotated-message", "get-annotated-message", {"messageType": "error", "includeImage": True}),
    ("get-env", "get-env", {}),
    ("get-resource-links", "get-resource-links", {"count": 3}),
    ("get-resource-reference", "get-resource-reference", {"resourceType": "Text", "resourceId": 1}),
    ("get-structured-content", "get-structured-content", {"location": "Chicago"}),
    ("get-sum", "get-sum", {"a": 2, "b": 3}),
    ("get-tiny-image", "get-tiny-image", {}),
    (
        "gzip-file-as-resource",
        "gzip-file-as-resource",
        # A data: URL, so the server fetches nothing from the network.
        {"name": "hello.txt.gz", "data": "data:text/plain;base64,aGVsbG8gd29ybGQ=", "outputType": "resource"},
    ),
    # Each toggle twice: on, then off again, so the server sends nothing on its own afterwards.
    ("toggle-simulated-logging:on", "toggle-simulated-logging", {}),
    ("toggle-simulated-logging:off", "toggle-simulated-logging", {}),
    ("toggle-subscriber-updates:on", "toggle-subscriber-updates", {}),
    ("toggle-subscriber-updates:off", "toggle-subscriber-updates", {}),
    ("trigger-long-running-operation", "trigger-long-running-operation", {"duration": 0.3, "steps": 3}),
    ("get-roots-list", "get-roots-list", {}),
    ("trigger-elicitation-request", "trigger-elicitation-request", {}),
    (
        "trigger-url-elicitation",
        "trigger-url-elicitation",
        {"url": "https://example.com/consent", "message": "Open it"},
    ),
    (
        "trigger-sampling-request",
        "trigger-sampling-request",
        {"prompt": "Capital of France?", "maxTokens": 50},
    ),
    # Declares taskSupport "required": a plain call is refused; the refusal must look the same.
    ("simulate-research-query", "simulate-research-query", {"topic": "otters"}),
]
WITH_PROGRESS: Final = {"trigger-long-running-operation"}
OUTSIDE_A_CALL: Final = {"get-roots-list"}
"""Tools that need a server request outside any call (see the module docstring): not bridged."""

LISTED: Final = sorted({tool for _, tool, _ in CALLS})
"""The tools server-everything lists to a client declaring elicitation (form, url), sampling, roots;
the async ``*-async`` tools need a ``tasks`` client capability, which no test client declares."""

DIRECT_BASELINE: Final[dict[ClientKind, ClientKind]] = {
    "python-legacy": "python-legacy",
    "ts-v1": "ts-v1",
    "python-2026": "python-legacy",
    "ts-v2": "ts-v2-legacy",
}
"""Each client's direct legacy run: the same client library, so client-side habits cancel out."""


def plan(*, bridged: bool) -> list[dict[str, Any]]:
    steps: list[dict[str, Any]] = [{"id": "list_tools", "op": "list_tools"}]
    for step_id, tool, arguments in CALLS:
        if bridged and tool in OUTSIDE_A_CALL:
            continue
        step = {"id": step_id, "op": "call", "tool": tool, "arguments": arguments}
        steps.append(step | {"progress": True} if step_id in WITH_PROGRESS else step)
    return steps


# --------------------------------------------------------------------------------------------
# Normalization: what a user sees, with the values that differ on every run masked.
# --------------------------------------------------------------------------------------------

_MASKS: Final = [
    (re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"), "<uuid>"),
    (re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z"), "<timestamp>"),
    (re.compile(r"\b\d{1,2}:\d{2}:\d{2}\s?[AP]M\b"), "<clock>"),
]


def mask(text: str) -> str:
    for pattern, replacement in _MASKS:
        text = pattern.sub(replacement, text)
    return text


def _digest(data: str) -> str:
    return hashlib.sha256(data.encode()).hexdigest()[:16]


def normalize_block(block: dict[str, Any]) -> dict[str, Any]:
    """One content block: type, user-visible fields, binary data as a digest."""
    kind = block.get("type")
    out: dict[str, Any] = {"type": kind}
    if "annotations" in block:
        out["annotations"] = block["annotations"]
    if kind == "text":
        out["text"] = mask(block["text"])
    elif kind in ("image", "audio"):
        out |= {"mimeType": block.get("mimeType"), "data": _digest(block.get("data", ""))}
    elif kind == "resource_link":
        out |= {key: block.get(key) for key in ("uri", "name", "mimeType", "description")}
    elif kind == "resource":
        resource = block["resource"]
        body = {"text": mask(resource["text"])} if "text" in resource else {"blob": _digest(resource["blob"])}
        out |= {"uri": resource.get("uri"), "mimeType": resource.get("mimeType"), **body}
    return out


def normalize_line(line: dict[str, Any]) -> dict[str, Any]:
    """A step's outcome: the result (or the error's code), callbacks, progress values."""
    out: dict[str, Any] = {"callbacks": line["callbacks"], "progress": [float(p) for p in line["progress"]]}
    if "error" in line:
        out["error"] = line["error"]["code"]
        return out
    result = line["result"]
    if isinstance(result, list):  # list_tools
        out["result"] = result
        return out
    out["result"] = {
        "content": [normalize_block(block) for block in result.get("content", [])],
        "isError": bool(result.get("isError", False)),
    }
    if result.get("structuredContent") is not None:
        out["result"]["structuredContent"] = result["structuredContent"]
    return out


def normalized(run: ClientRun) -> dict[str, dict[str, Any]]:
    return {step_id: normalize_line(line) for step_id, line in run.lines.items()}


def differences(got: dict[str, Any], want: dict[str, Any]) -> str:
    lines = []
    for step_id in sorted(set(got) | set(want)):
        if got.get(step_id) != want.get(step_id):
            lines.append(f"{step_id}:\n    via proxy {json.dumps(got.get(step_id), sort_keys=True)}")
            lines.append(f"    direct    {json.dumps(want.get(step_id), sort_keys=True)}")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# Fixtures: one server, one proxy, each client library's direct run once.
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def everything() -> Iterator[NodeServer]:
    with NodeServer("everything") as server:
        yield server


@pytest.fixture(scope="module")
def proxy(everything: NodeServer) -> Iterator[ProxyProcess]:
    with ProxyProcess(clean_env(**settings_env(upstream=everything.url))) as process:
        yield process


@pytest.fixture(scope="module")
def direct(everything: NodeServer) -> dict[ClientKind, ClientRun]:
    """Each baseline client's direct run, made on first use."""
    return {}


def direct_run(runs: dict[ClientKind, ClientRun], kind: ClientKind, url: str) -> ClientRun:
    if kind not in runs:
        runs[kind] = run_plan(kind, url, plan(bridged=False))
    return runs[kind]


def _logs(proxy: ProxyProcess, everything: NodeServer) -> str:
    proxy_tail, server_tail = proxy.stderr()[-3000:], everything.stderr_text()[-2000:]
    return f"--- mcp-proxy stderr ---\n{proxy_tail}\n--- server stderr ---\n{server_tail}"


# --------------------------------------------------------------------------------------------
# Tests.
# --------------------------------------------------------------------------------------------


def test_the_plan_calls_every_tool_the_server_lists_and_each_call_does_its_job(
    everything: NodeServer, direct: dict[ClientKind, ClientRun]
) -> None:
    run = direct_run(direct, "python-legacy", everything.url)
    lines = normalized(run)
    assert lines["list_tools"]["result"] == LISTED, run.stderr
    assert not [step for step, line in lines.items() if "error" in line], run.lines
    assert lines["trigger-elicitation-request"]["callbacks"] == [
        "elicitation:Please provide inputs for the following fields:"
    ]
    assert "- Name: octocat" in lines["trigger-elicitation-request"]["result"]["content"][1]["text"]
    assert lines["trigger-url-elicitation"]["callbacks"] == ["elicitation-url:https://example.com/consent"]
    assert '"text": "Paris"' in lines["trigger-sampling-request"]["result"]["content"][0]["text"]
    assert lines["trigger-long-running-operation"]["progress"] == [1.0, 2.0, 3.0]
    assert "proj" in lines["get-roots-list"]["result"]["content"][0]["text"]
    assert lines["toggle-simulated-logging:off"]["result"]["content"][0]["text"].startswith("Stopped")
    assert lines["simulate-research-query"]["result"]["isError"] is True


@pytest.mark.parametrize("client", ["python-legacy", "ts-v1"])
def test_a_legacy_client_through_the_proxy_gets_what_it_gets_directly(
    client: ClientKind, everything: NodeServer, proxy: ProxyProcess, direct: dict[ClientKind, ClientRun]
) -> None:
    want = normalized(direct_run(direct, DIRECT_BASELINE[client], everything.url))
    got = normalized(run_plan(client, proxy.endpoint(), plan(bridged=False)))
    assert got == want, f"{client} via pass-through:\n{differences(got, want)}\n{_logs(proxy, everything)}"


@pytest.mark.parametrize("client", ["python-2026", "ts-v2"])
def test_a_2026_client_through_the_bridge_gets_what_a_legacy_client_gets_directly(
    client: ClientKind, everything: NodeServer, proxy: ProxyProcess, direct: dict[ClientKind, ClientRun]
) -> None:
    baseline = normalized(direct_run(direct, DIRECT_BASELINE[client], everything.url))
    want = {step: line for step, line in baseline.items() if step not in OUTSIDE_A_CALL}
    got = normalized(run_plan(client, proxy.endpoint(), plan(bridged=True)))
    assert got == want, f"{client} via the bridge:\n{differences(got, want)}\n{_logs(proxy, everything)}"


PAGE: Final = "http://localhost:6274"
"""A browser page's origin (the MCP Inspector's web UI serves from it)."""


def _modern_call(tool: str, arguments: dict[str, Any]) -> tuple[dict[str, str], dict[str, Any]]:
    """Headers and body of a 2026-07-28 `tools/call` a browser page sends (with its `Origin`)."""
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "page", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}},
    }
    headers = {
        "Origin": PAGE,
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": "tools/call",
        "Mcp-Name": tool,
    }
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": tool, "arguments": arguments, "_meta": meta},
    }
    return headers, body


@pytest.mark.parametrize(
    ("tool", "arguments", "result_type"),
    [("get-sum", {"a": 1, "b": 2}, "complete"), ("trigger-elicitation-request", {}, "input_required")],
)
def test_a_browser_page_may_read_the_bridges_answers_as_the_server_lets_it_read_its_own(
    everything: NodeServer, proxy: ProxyProcess, tool: str, arguments: dict[str, Any], result_type: str
) -> None:
    """The bridge answers in the server's place: the server's CORS answer to the page's origin comes
    with it, or a browser sends the request (the preflight passes through) and hides the answer."""
    direct = httpx.post(
        everything.url,
        json={"jsonrpc": "2.0", "id": 0, "method": "ping"},
        headers={
            "Origin": PAGE,
            "Accept": "application/json, text/event-stream",
            "Content-Type": "application/json",
        },
    )
    allowed = direct.headers.get("access-control-allow-origin")
    assert allowed, direct.headers  # the server's own policy for the page

    headers, body = _modern_call(tool, arguments)
    bridged = httpx.post(proxy.endpoint(), json=body, headers=headers, timeout=20)

    assert bridged.status_code == 200, bridged.text
    assert bridged.json()["result"]["resultType"] == result_type
    assert bridged.headers.get("access-control-allow-origin") == allowed
    assert bridged.headers.get("access-control-expose-headers") == direct.headers.get(
        "access-control-expose-headers"
    )


def secret_root(who: str) -> str:
    return f"file:///home/{who}/secret-project"


async def roots_the_server_used(url: str, who: str) -> list[str]:
    """A 2026-07-28 SDK client without credentials whose roots are `who`'s own calls `get-roots-list`
    (its own connections, as a separate program's): the root URIs the server answers with."""

    async def roots(context: ClientRequestContext) -> types.ListRootsResult:
        return types.ListRootsResult(roots=[types.Root(uri=secret_root(who), name=who)])

    async with httpx2.AsyncClient(timeout=20.0) as http:
        transport = streamable_http_client(url, http_client=http)
        async with Client(transport, mode="2026-07-28", cache=None, list_roots_callback=roots) as client:
            result = await client.call_tool("get-roots-list", {})
    text = "\n".join(block.text for block in result.content if isinstance(block, types.TextContent))
    return re.findall(r"file://\S+", text)


def orphans_closed(proxy: ProxyProcess) -> int:
    return sum(
        1
        for line in proxy.events()
        if line.get("event") == "upstream_session_closed" and line.get("why") == ORPHAN_WHY
    )


@pytest.fixture(scope="module")
def per_connection(everything: NodeServer) -> Iterator[ProxyProcess]:
    env = settings_env(upstream=everything.url, anonymous_upstream_sessions="per_connection")
    with ProxyProcess(clean_env(**env)) as process:
        yield process


async def test_anonymous_2026_clients_each_get_their_own_roots_never_another_clients(
    everything: NodeServer, per_connection: ProxyProcess
) -> None:
    """server-everything keeps the roots it asked a session for: with `per_connection`, bridged
    clients without credentials get sessions of their own connections, so each sees its own roots,
    as it would direct, and each session is deleted upstream once its client has gone."""
    proxy = per_connection
    before = orphans_closed(proxy)

    alice = await roots_the_server_used(proxy.endpoint(), "alice")
    bob = await roots_the_server_used(proxy.endpoint(), "bob")
    carol, dave = await asyncio.gather(
        roots_the_server_used(proxy.endpoint(), "carol"), roots_the_server_used(proxy.endpoint(), "dave")
    )

    assert (alice, bob, carol, dave) == (
        [secret_root("alice")],
        [secret_root("bob")],
        [secret_root("carol")],
        [secret_root("dave")],
    ), _logs(proxy, everything)
    events = proxy.wait_events(lambda _lines: orphans_closed(proxy) >= before + 4)
    assert orphans_closed(proxy) >= before + 4, [
        e for e in events if "upstream_session" in str(e.get("event"))
    ]


async def toggled(client: Client) -> str:
    result = await client.call_tool("toggle-simulated-logging", {})
    return "\n".join(block.text for block in result.content if isinstance(block, types.TextContent))


async def test_by_default_anonymous_connections_share_one_upstream_session_and_a_warning_says_so_once(
    everything: NodeServer,
) -> None:
    """One developer's 2026-07-28 client keeps the server's session state whatever connections its
    calls take: with the default (`shared`), a toggle turned on from one connection is turned off from
    another, on the one upstream session; the first time two open connections use it, one warning
    names `anonymous_upstream_sessions`, and no later request repeats it."""
    with ProxyProcess(clean_env(**settings_env(upstream=everything.url))) as proxy:
        async with (
            httpx2.AsyncClient(timeout=20.0) as first_http,
            httpx2.AsyncClient(timeout=20.0) as second_http,
        ):
            first_transport = streamable_http_client(proxy.endpoint(), http_client=first_http)
            second_transport = streamable_http_client(proxy.endpoint(), http_client=second_http)
            async with (
                Client(first_transport, mode="2026-07-28", cache=None) as first,
                Client(second_transport, mode="2026-07-28", cache=None) as second,
            ):
                on = await toggled(first)
                off = await toggled(second)
                again = [await toggled(first), await toggled(second)]
        events = proxy.wait_events(lambda lines: any(e.get("event") == "upstream_initialized" for e in lines))
        warnings = [e for e in events if e.get("event") == "anonymous_upstream_session_shared"]
        opened = [e for e in events if e.get("event") == "upstream_initialized"]

    assert on.startswith("Started"), (on, _logs(proxy, everything))
    assert off.startswith("Stopped"), (off, _logs(proxy, everything))
    assert [text.split()[0] for text in again] == ["Started", "Stopped"]
    assert len(opened) == 1, opened
    assert len(warnings) == 1, warnings
    assert warnings[0]["level"] == "warning"
    assert "anonymous_upstream_sessions = per_connection" in warnings[0]["hint"]
