"""The admin API in-process: chains and their filters, one chain, continuations, readiness while draining,
JSON errors, and the metrics that need a bridge or a bound. A real SDK server sits behind the proxy.

The live feed has its own module (test_admin_feed.py); the process-level checks (health, readiness
following the upstream, token, signals) are in tests/test_sidecar.py.
"""

from __future__ import annotations

import asyncio
import errno
import json
import socket
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import mcp_types as types
import pytest
from mcp import Client

from proxy.config import Settings
from proxy.flows.events import ChainSummary, Channel, Direction, MessageRecord, Mode, Side
from proxy.flows.observations import ExchangeClosed, ExchangeOpened, LegMessageSeen, MessageSeen, Observation
from proxy.runtime import Proxy
from proxy.transport.admin import AdminListenError
from proxy.transport.admin_export import PIECE
from proxy.transport.bridge import BridgeDriver
from proxy.transport.metrics import MAX_METHOD_LABELS, ProxyMetrics
from proxy.wire.jsonrpc import classify_value, error_response, request
from tests.e2e.modern_raw import modern_call, modern_headers, modern_params
from tests.peers.runner import PeerServer
from tests.peers.scenarios import client_for, run_scenario
from tests.sidecar import metric
from tests.transport.helpers import WAIT, captured_logs

pytestmark = pytest.mark.e2e


@asynccontextmanager
async def admin_proxy(upstream: str, **overrides: Any) -> AsyncIterator[Proxy]:
    """A proxy with its admin API on a free loopback port; always stopped."""
    settings = Settings(upstream=upstream, listen="127.0.0.1:0", admin="127.0.0.1:0", **overrides)
    proxy = Proxy(settings)
    await proxy.start()
    try:
        yield proxy
    finally:
        await proxy.stop()


async def get(proxy: Proxy, path: str, *, method: str = "GET") -> tuple[int, Any]:
    assert proxy.admin_url is not None
    async with aiohttp.ClientSession() as http, http.request(method, proxy.admin_url + path) as resp:
        assert resp.content_type == "application/json", resp.content_type
        return resp.status, await resp.json()


async def ok(proxy: Proxy, path: str) -> Any:
    status, body = await get(proxy, path)
    assert status == 200, body
    return body


async def scrape(proxy: Proxy) -> str:
    assert proxy.admin_url is not None
    async with aiohttp.ClientSession() as http, http.get(proxy.admin_url + "/metrics") as resp:
        return await resp.text()


async def wait_until_metric(proxy: Proxy, name: str, value: float, **labels: str) -> str:
    """Scrape until the metric has `value` (the metrics task reads the bus a moment later); the text."""
    deadline = time.monotonic() + WAIT
    while True:
        text = await scrape(proxy)
        if metric(text, name, **labels) == value:
            return text
        if time.monotonic() > deadline:
            raise AssertionError(f"{name}{labels} never reached {value}:\n{text}")
        await asyncio.sleep(0.02)


def bare_metrics(proxy: Proxy | None = None) -> ProxyMetrics:
    """A metrics registry over a proxy that never starts (`proxy`, or a default one), fed by hand."""
    if proxy is None:
        proxy = Proxy(Settings(upstream="http://127.0.0.1:9/mcp", listen="127.0.0.1:0", admin="127.0.0.1:0"))
    sink = proxy.observations
    return ProxyMetrics(
        proxy.store,
        proxy.bus,
        open_streams=lambda: 0,
        open_exchanges=lambda: 0,
        info=proxy.info,
        continuations=lambda: 0,
        feed_clients=lambda: 0,
        draining=lambda: False,
        observations_dropped=lambda: sink.dropped,
    )


# -- chains -------------------------------------------------------------------------------------------


async def test_api_chains_filters_by_method_status_mode_and_text_newest_last_with_a_limit(
    legacy_server: PeerServer,
) -> None:
    async with admin_proxy(legacy_server.url) as proxy:
        async with client_for(proxy.endpoint(), "legacy") as client:
            await client.call_tool("echo", {"text": "first"})
            await client.call_tool("fail", {})
            await client.call_tool("add", {"a": 1, "b": 2})

        calls = await ok(proxy, "/api/chains?method=tools/call")
        assert [c["name"] for c in calls] == ["echo", "fail", "add"]
        assert {c["status"] for c in calls} == {"ok", "error"}
        assert [c["name"] for c in await ok(proxy, "/api/chains?method=tools/call&limit=1")] == ["add"]
        assert len(await ok(proxy, "/api/chains?method=tools/call&limit=999999")) == 3
        assert [c["name"] for c in await ok(proxy, "/api/chains?status=error")] == ["fail"]
        assert [c["name"] for c in await ok(proxy, "/api/chains?status=error,ok&q=tool:ECHO")] == ["echo"]
        # q is the TUI filter's language: free text and body: search the messages too
        assert [c["name"] for c in await ok(proxy, "/api/chains?q=body:first")] == ["echo"]
        assert [c["name"] for c in await ok(proxy, "/api/chains?q=first")] == ["echo"]
        texts = [c.get("name") for c in await ok(proxy, "/api/chains?q=ECHO")]
        assert "echo" in texts
        assert "fail" not in texts
        assert [c["name"] for c in await ok(proxy, "/api/chains?q=tool:*a* -status:error")] == ["add"]
        both = await ok(proxy, "/api/chains?method=initialize&method=tools/call")
        assert [c["method"] for c in both] == ["initialize", "tools/call", "tools/call", "tools/call"]
        assert await ok(proxy, "/api/chains?mode=legacy_to_mrtr") == []
        everything = await ok(proxy, "/api/chains")
        assert len(everything) == len(proxy.chains())
        assert [c["id"] for c in everything] == [chain.summary.id for chain in proxy.chains()]


@pytest.mark.parametrize(
    ("query", "named"),
    [
        (
            "status=finished",
            "status must be one of cancelled, error, incomplete, ok, parked, pending, waiting_client",
        ),
        ("mode=sideways", "mode must be one of legacy_to_mrtr"),
        ("limit=0", "limit must be an integer of at least 1, got 0"),
        ("limit=many", "limit must be an integer of at least 1, got 'many'"),
        ("q=tol:echo", "q: unknown field 'tol' (known: method, tool,"),
    ],
)
async def test_api_chains_answers_400_naming_a_bad_parameter(
    legacy_server: PeerServer, query: str, named: str
) -> None:
    async with admin_proxy(legacy_server.url) as proxy:
        status, body = await get(proxy, f"/api/chains?{query}")
    assert status == 400
    assert body["error"] == "bad_request"
    assert named in body["message"]


@pytest.mark.parametrize("path", ["/api/chains", "/api/export.har", "/api/export.json", "/api/export.ndjson"])
async def test_a_misspelled_filter_name_is_400_naming_it_and_the_known_names_not_ignored(
    legacy_server: PeerServer, path: str
) -> None:
    async with admin_proxy(legacy_server.url) as proxy:
        async with client_for(proxy.endpoint(), "legacy") as client:
            await client.call_tool("echo", {"text": "first"})
        status, body = await get(proxy, f"{path}?stauts=error&limit=5")
        every_name = "status=ok&method=tools/call&mode=passthrough&q=tool:echo&limit=5"
        async with aiohttp.ClientSession() as http, http.get(f"{proxy.admin_url}{path}?{every_name}") as resp:
            known_status = resp.status

    assert status == 400
    assert body == {
        "error": "bad_request",
        "message": "unknown parameter 'stauts' (did you mean status?); "
        "this endpoint takes limit, method, mode, q, status",
    }
    assert known_status == 200


@pytest.mark.parametrize(
    ("path", "sent", "message"),
    [
        (
            "/api/feed",
            "histroy=0",
            "unknown parameter 'histroy' (did you mean history?); this endpoint takes history",
        ),
        (
            "/api/intercepts/wait",
            "timeout=0&afer=h1",
            "unknown parameter 'afer' (did you mean after?); this endpoint takes after, timeout",
        ),
    ],
)
async def test_the_feed_and_the_long_poll_refuse_a_misspelled_parameter_as_the_chains_do(
    legacy_server: PeerServer, path: str, sent: str, message: str
) -> None:
    """Ignored, `histroy=0` would replay 200 chains and `afer=` would answer what was held long ago."""
    async with admin_proxy(legacy_server.url) as proxy:
        status, body = await get(proxy, f"{path}?{sent}")
        wait_status, _held = await get(proxy, "/api/intercepts/wait?after=h3-9f2c41ab&timeout=0")

    assert (status, body) == (400, {"error": "bad_request", "message": message})
    assert wait_status == 200


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("/api/intercepts/wait?after=&timeout=0", "after is a held message's id such as h3-9f2c41ab, got ''"),
        ("/api/intercepts/wait?timeout=", "timeout is seconds from 0 to 60, got ''"),
        ("/api/feed?history=", "history must be an integer of at least 0, got ''"),
        ("/api/chains?limit=", "limit must be an integer of at least 1, got ''"),
        ("/api/export.json?status=", "status given without a value"),
    ],
)
async def test_a_parameter_given_empty_is_400_naming_it_not_read_as_absent(
    legacy_server: PeerServer, path: str, message: str
) -> None:
    """A script building `after=$LAST` from an unset variable would otherwise get what was held long ago."""
    async with admin_proxy(legacy_server.url) as proxy:
        status, body = await get(proxy, path)

    assert (status, body["error"]) == (400, "bad_request"), body
    assert message in body["message"]


async def test_an_endpoint_that_takes_no_parameters_refuses_any_and_leaves_everything_as_it_was(
    legacy_server: PeerServer,
) -> None:
    """Ignored, `DELETE /api/faults?id=f1` would take every rule out of force and answer 200; the
    probes alone answer whatever query they are sent."""
    async with admin_proxy(legacy_server.url) as proxy:
        assert proxy.faults is not None
        proxy.faults.add_texts(["tool:a => drop", "tool:b => drop"])
        refused = {
            f"{method} {path}": await get(proxy, path, method=method)
            for method, path in (
                ("DELETE", "/api/faults?id=f1"),
                ("DELETE", "/api/intercepts?rule=i1"),
                ("GET", "/metrics?name[]=mcp_proxy_info"),
                ("GET", "/api/chains/c1?messages=5"),
                ("GET", "/api/continuations?all=1"),
                ("GET", "/api/faults?id=f1"),
                ("GET", "/api/intercepts?held=1"),
            )
        }
        rules = [rule["id"] for rule in (await ok(proxy, "/api/faults"))["rules"]]
        probes = [(await get(proxy, f"{path}?probe=1"))[0] for path in ("/healthz", "/readyz")]

    expected = {
        "error": "bad_request",
        "message": "unknown parameter 'NAME'; this endpoint takes no parameters",
    }
    for asked, (status, body) in refused.items():
        name = asked.partition("?")[2].partition("=")[0]
        assert (status, body) == (400, {**expected, "message": expected["message"].replace("NAME", name)}), (
            asked
        )
    assert rules == ["f1", "f2"]
    assert probes == [200, 200]


@pytest.mark.parametrize(
    ("path", "sent", "named"),
    [
        ("/api/intercepts/wait", "timeout=0&timeout=1", "timeout"),
        ("/api/intercepts/wait", "after=h1&timeout=0&after=h9", "after"),
        ("/api/chains", "limit=1&limit=2", "limit"),
        ("/api/export.json", "limit=1&status=ok&limit=2", "limit"),
        ("/api/feed", "history=0&history=1", "history"),
    ],
)
async def test_a_parameter_read_once_given_twice_is_400_naming_it_while_a_filter_may_repeat(
    legacy_server: PeerServer, path: str, sent: str, named: str
) -> None:
    """Read once, one of the two values would be dropped without a word."""
    async with admin_proxy(legacy_server.url) as proxy:
        status, body = await get(proxy, f"{path}?{sent}")
        filters_status, _ = await get(proxy, "/api/chains?method=initialize&method=tools/call&q=a&q=b")

    assert (status, body["error"]) == (400, "bad_request"), body
    assert body["message"] == f"parameter {named!r} given more than once; give each once"
    assert filters_status == 200


async def test_api_chain_by_id_gives_headline_messages_and_how_many_it_no_longer_holds(
    legacy_server: PeerServer,
) -> None:
    async with admin_proxy(legacy_server.url, max_messages_per_chain=3) as proxy:
        async with client_for(proxy.endpoint(), "legacy") as client:
            await client.call_tool("slow_progress", {"steps": 5}, progress_callback=_ignore_progress)
        (call,) = await ok(proxy, "/api/chains?q=tool:slow_progress")

        detail = await ok(proxy, f"/api/chains/{call['id']}")

        assert detail["chain"] == call
        assert [m["seq"] for m in detail["messages"]] == [
            call["messages"] - 2,
            call["messages"] - 1,
            call["messages"],
        ]
        assert detail["dropped_messages"] == call["messages"] - 3
        assert detail["messages"][-1]["kind"] == "result"
        status, missing = await get(proxy, "/api/chains/c999999")
        assert status == 404
        assert missing == {"error": "not_found", "message": "no chain 'c999999' in the store"}


async def _ignore_progress(progress: float, total: float | None, message: str | None) -> None:
    return None


# -- continuations -------------------------------------------------------------------------------------


class ParkingEngine:
    """Stands in for the modern-client -> legacy-server bridge engine: only the two admin hooks."""

    def handle(self, event: object) -> list[Any]:
        return []

    client_sessions: frozenset[str] = frozenset()

    def joins(self, leg: str, msg: object) -> str | None:
        return None

    def undelivered(self, leg: str, msg: object) -> str | None:
        return None

    def table_sizes(self) -> dict[str, int]:
        return {"continuations": 2, "legs": 2}

    def continuations_view(self, now: float | None = None) -> list[dict[str, Any]]:
        return [
            {"chain_id": "c7", "principal": "alice", "age_ms": 1200.0, "pending_keys": ["name"]},
            {"chain_id": "c9", "principal": "bob", "age_ms": 15.5, "pending_keys": ["llm", "color"]},
        ]


class _Watched(deque[MessageRecord]):
    """A chain's messages that call `on_read` each time something reads them through."""

    def __init__(self, records: deque[MessageRecord], on_read: Callable[[], None]) -> None:
        super().__init__(records, maxlen=records.maxlen)
        self.on_read = on_read

    def __iter__(self) -> Iterator[MessageRecord]:
        self.on_read()
        return super().__iter__()


@pytest.mark.parametrize("path", ["/api/export.har", "/api/export.json", "/api/export.ndjson"])
async def test_an_export_of_many_chains_lets_the_loop_run_other_work_before_it_ends(
    legacy_server: PeerServer, path: str
) -> None:
    """The loop that serves the exports serves the MCP traffic: a callback scheduled as the export
    reads its first chain runs before it reads its last one, so calls in flight are not held up."""
    async with admin_proxy(legacy_server.url) as proxy:
        async with client_for(proxy.endpoint(), "legacy") as client:
            for n in range(3 * PIECE):
                await client.call_tool("echo", {"text": str(n)})
        await ok(proxy, "/api/chains")  # builds the chains
        chains = list(proxy.store)
        loop = asyncio.get_running_loop()
        ran: list[bool] = []
        ran_by_the_last_read: list[bool] = []
        chains[0].messages = _Watched(chains[0].messages, lambda: loop.call_soon(ran.append, True))
        chains[-1].messages = _Watched(chains[-1].messages, lambda: ran_by_the_last_read.append(bool(ran)))

        assert proxy.admin_url is not None
        async with aiohttp.ClientSession() as http, http.get(proxy.admin_url + path) as resp:
            assert resp.status == 200
            body = await resp.read()

    assert ran_by_the_last_read == [True]
    whole = (
        [json.loads(line) for line in body.splitlines()] if path.endswith("ndjson") else [json.loads(body)]
    )
    assert len(whole) == (len(chains) if path.endswith("ndjson") else 1)


async def test_api_continuations_lists_what_the_mrtr_to_legacy_bridge_has_parked(
    legacy_server: PeerServer,
) -> None:
    async with admin_proxy(legacy_server.url) as proxy:
        assert await ok(proxy, "/api/continuations") == []  # nothing parked (or no such bridge yet)
        proxy.router.bridges[Mode.MRTR_TO_LEGACY] = BridgeDriver(
            ParkingEngine(),
            mode=Mode.MRTR_TO_LEGACY,
            upstream=proxy.upstream,
            pool=lambda: proxy.pool,
            observer=proxy.observations,
        )

        keyed = [
            {**item, "principal": proxy.redactor.fingerprint(item["principal"])}
            for item in ParkingEngine().continuations_view()
        ]
        assert await ok(proxy, "/api/continuations") == keyed
        assert "alice" not in repr(keyed)
        assert metric(await scrape(proxy), "mcp_proxy_parked_continuations") == 2


async def test_api_continuations_and_the_gauge_show_a_call_the_real_bridge_parked(
    legacy_server: PeerServer,
) -> None:
    async with admin_proxy(legacy_server.url) as proxy, aiohttp.ClientSession() as http:
        status, answer = await modern_call(
            http, proxy.endpoint(), "tools/call", {"name": "ask_name", "arguments": {}}, ident=1
        )
        assert status == 200
        assert answer["result"]["resultType"] == "input_required"

        (parked,) = await ok(proxy, "/api/continuations")
        text = await wait_until_metric(proxy, "mcp_proxy_parked_continuations", 1)
        chains = await ok(proxy, "/api/chains")

    assert (parked["method"], parked["name"]) == ("tools/call", "ask_name")
    listed = chains if isinstance(chains, list) else chains["chains"]
    assert [c["id"] for c in listed if c.get("name") == "ask_name"] == [parked["chain"]]
    assert parked["age_ms"] >= 0
    assert answer["result"]["requestState"] not in str(parked)  # the sealed state is never shown
    assert metric(text, "mcp_proxy_chains_total", method="tools/call", mode="mrtr_to_legacy") == 1


# -- readiness, errors, switches -----------------------------------------------------------------------


async def test_readyz_answers_503_draining_once_a_drain_has_begun(legacy_server: PeerServer) -> None:
    async with admin_proxy(legacy_server.url) as proxy:
        assert (await get(proxy, "/readyz"))[0] == 200
        proxy.draining = True

        status, body = await get(proxy, "/readyz")

        assert status == 503
        assert body["reason"] == "draining: the proxy is shutting down"
        assert metric(await scrape(proxy), "mcp_proxy_draining") == 1
        assert (await get(proxy, "/healthz"))[0] == 200


async def test_unknown_paths_and_methods_get_json_errors(legacy_server: PeerServer) -> None:
    async with admin_proxy(legacy_server.url) as proxy:
        assert await get(proxy, "/admin") == (404, {"error": "not_found", "message": "GET /admin: Not Found"})
        status, body = await get(proxy, "/healthz", method="POST")
    assert status == 405
    assert body["error"] == "method_not_allowed"


async def test_a_url_longer_than_aiohttp_reads_is_a_json_400_logged_and_counted_without_its_query(
    legacy_server: PeerServer,
) -> None:
    """aiohttp's parser refuses such a request before any handler: its own answer is plain text quoting
    the URL's start, with a traceback in the log."""
    secret = "SECRET-in-a-long-query-0815"
    async with admin_proxy(legacy_server.url) as proxy:
        with captured_logs() as logs:
            for length in (9000, 70_000):
                status, body = await get(proxy, f"/api/chains?token={secret}&q={'a' * length}")
                assert status == 400
                assert body == {
                    "error": "bad_request",
                    "message": "the request line (its URL) or a header line is longer than the 8190 bytes "
                    "the admin API reads: send fewer or shorter query parameters",
                }
        counted = metric(await scrape(proxy), "mcp_proxy_admin_refused_total", why="unreadable")
        still = await ok(proxy, "/api/chains")

    (line,) = [e for e in logs if e["event"] == "admin_refused"]  # the second, within the second, counted
    assert (line["log_level"], line["status"], line["why"]) == ("warning", 400, "unreadable")
    assert secret not in str(logs)
    assert counted == 2
    assert still == []


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A loopback port this test holds bound and listening."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


async def test_an_admin_address_the_user_left_alone_moves_to_a_free_port_when_taken_and_says_so(
    legacy_server: PeerServer, busy_port: int
) -> None:
    wanted = f"127.0.0.1:{busy_port}"
    settings = Settings(upstream=legacy_server.url, listen="127.0.0.1:0", admin=wanted)
    proxy = Proxy(settings, admin_fallback=True)
    with captured_logs() as logs:
        await proxy.start()
    try:
        assert proxy.admin_url is not None
        assert proxy.admin_url.startswith("http://127.0.0.1:")
        assert proxy.admin_url != f"http://{wanted}"
        assert await ok(proxy, "/healthz") == {"status": "ok"}
    finally:
        await proxy.stop()

    (moved,) = [line for line in logs if line["event"] == "admin_port_taken"]
    (listening,) = [line for line in logs if line["event"] == "listening"]
    assert (moved["log_level"], moved["wanted"], moved["admin"]) == ("warning", wanted, listening["admin"])


async def test_an_admin_address_the_user_set_fails_when_taken_naming_admin(
    legacy_server: PeerServer, busy_port: int
) -> None:
    settings = Settings(upstream=legacy_server.url, listen="127.0.0.1:0", admin=f"127.0.0.1:{busy_port}")
    proxy = Proxy(settings)  # admin_fallback is off unless the CLI saw the address left at its default

    with pytest.raises(AdminListenError) as caught:
        await proxy.start()

    assert (caught.value.setting, caught.value.errno) == ("admin", errno.EADDRINUSE)
    assert proxy.admin is None  # start() cleaned up after itself


async def test_with_a_token_healthz_and_readyz_answer_without_it_and_the_rest_still_wants_it(
    legacy_server: PeerServer,
) -> None:
    async with admin_proxy(legacy_server.url, admin_token="in-process-token") as proxy:
        paths = ("/healthz", "/readyz", "/metrics", "/api/chains")
        answers = {path: (await get(proxy, path))[0] for path in paths}
        wrong_method = await get(proxy, "/healthz", method="POST")

    assert answers == {"/healthz": 200, "/readyz": 200, "/metrics": 401, "/api/chains": 401}
    assert wrong_method[0] == 401  # only a probe's GET or HEAD goes without the token


async def test_admin_disabled_binds_no_admin_listener(legacy_server: PeerServer) -> None:
    async with admin_proxy(legacy_server.url, admin_enabled=False) as proxy:
        assert proxy.admin is None
        assert proxy.admin_url is None
        assert "metrics" not in {sub.name for sub in proxy.bus.subscribers}


# -- metrics ----------------------------------------------------------------------------------------------


async def test_bridged_rounds_count_every_round_of_the_chains_a_bridge_carried(
    modern_server: PeerServer,
) -> None:
    async with admin_proxy(modern_server.url) as proxy:
        result = await run_scenario(proxy.endpoint(), "legacy", "ask_twice")
        assert result["result"]["content"] == ["name=octocat color=green"]
        bridged = [c.summary for c in proxy.chains() if c.summary.mode is Mode.LEGACY_TO_MRTR]
        (call,) = [s for s in bridged if s.name == "ask_twice"]
        assert call.rounds == 3
        text = await wait_until_metric(
            proxy, "mcp_proxy_bridged_rounds_total", sum(s.rounds for s in bridged), mode="legacy_to_mrtr"
        )
    assert metric(text, "mcp_proxy_chains_total", method="tools/call", mode="legacy_to_mrtr") == 1
    assert metric(text, "mcp_proxy_requests_total", method="tools/call", client_era="legacy") == 1


async def test_two_proxies_in_one_process_keep_separate_metrics(legacy_server: PeerServer) -> None:
    async with admin_proxy(legacy_server.url) as busy, admin_proxy(legacy_server.url) as idle:
        async with client_for(busy.endpoint(), "legacy") as client:
            await client.call_tool("echo", {"text": "only here"})

        await wait_until_metric(busy, "mcp_proxy_chains_total", 1, method="tools/call")
        assert metric(await scrape(idle), "mcp_proxy_chains_total") == 0


def test_the_method_label_takes_a_bounded_number_of_names_then_other() -> None:
    metrics = bare_metrics()

    assert metrics.method_label("tools/call") == "tools/call"
    assert metrics.method_label("x" * 65) == "other"
    assert metrics.method_label('evil"} 1\n') == "other"
    names = [metrics.method_label(f"custom/m{i}") for i in range(MAX_METHOD_LABELS + 10)]
    assert names.count("other") == 10  # the protocol's own names take none of the places
    # ...so names a client invents never push the methods every client sends into `other`
    for method in ("tools/call", "prompts/list", "completion/complete", "notifications/initialized"):
        assert metrics.method_label(method) == method
    # the proxy's own labels are never a client's: its method of the same text is `other`
    for own in ("(http)", "(response)", "none", "GET stream", "DELETE session"):
        assert metrics.method_label(own) == "other"


def test_rounds_of_pass_through_operations_are_not_counted_as_bridged_and_an_end_counts_once() -> None:
    metrics = bare_metrics()

    def count(obs: Observation) -> None:
        metrics.counting.observe_all((obs,))

    call = classify_value(request(1, "tools/call", {"name": "ask", "arguments": {}}))
    failed = classify_value(error_response(1, -32000, "no"))
    to_server, to_client = Direction.TO_SERVER, Direction.TO_CLIENT
    for ex, mode in (("b", Mode.LEGACY_TO_MRTR), ("p", Mode.PASSTHROUGH)):
        count(ExchangeOpened(10.0, ex, "POST", "/mcp", {}, None, "legacy", "modern", mode))
        count(MessageSeen(10.0, ex, call, 10, to_server, Channel.POST, Side.CLIENT))
        for n in range(3):  # three upstream rounds of the same call
            upstream = classify_value(request(f"u{n}", "tools/call", {"name": "ask"}))
            count(LegMessageSeen(10.0, f"{ex}-{n}", ex, upstream, 10, to_server, Channel.POST))
        count(MessageSeen(10.25, ex, failed, 10, to_client, Channel.JSON, Side.CLIENT))
        count(ExchangeClosed(10.25, ex))
        count(ExchangeClosed(10.5, ex))  # a repeat changes nothing

    text = metrics.render().decode()
    assert metric(text, "mcp_proxy_bridged_rounds_total", mode="legacy_to_mrtr") == 3
    assert metric(text, "mcp_proxy_bridged_rounds_total", mode="passthrough") == 0
    assert metric(text, "mcp_proxy_errors_total", method="tools/call", mode="legacy_to_mrtr") == 1
    assert metric(text, "mcp_proxy_upstream_latency_seconds_count", mode="legacy_to_mrtr") == 1
    assert metric(text, "mcp_proxy_upstream_latency_seconds_sum", mode="legacy_to_mrtr") == 0.25
    assert metric(text, "mcp_proxy_chains_total", method="tools/call", mode="passthrough") == 1
    assert metric(text, "mcp_proxy_requests_total", method="tools/call", client_era="legacy") == 2


def test_open_chains_the_ring_let_go_are_a_gauge_and_those_let_go_past_the_bound_a_counter() -> None:
    proxy = Proxy(
        Settings(
            upstream="http://127.0.0.1:9/mcp",
            listen="127.0.0.1:0",
            admin="127.0.0.1:0",
            max_chains=1,
            max_unfinished_chains=2,
        )
    )
    metrics = bare_metrics(proxy)
    for n in range(5):  # each new chain pushes the open one before it out of the ring
        proxy.store.open(ChainSummary(id=f"c{n}", started=0.0, mode=Mode.PASSTHROUGH, jsonrpc_id=n))

    text = metrics.render().decode()
    assert metric(text, "mcp_proxy_chains_evicted_total") == 4
    assert metric(text, "mcp_proxy_chains_held") == 2
    assert metric(text, "mcp_proxy_chains_abandoned_total") == 2


def test_the_chain_stores_estimated_memory_is_a_gauge_that_falls_when_chains_go() -> None:
    proxy = Proxy(
        Settings(upstream="http://127.0.0.1:9/mcp", listen="127.0.0.1:0", admin="127.0.0.1:0", max_chains=1)
    )
    metrics = bare_metrics(proxy)
    rows = [{"a": n} for n in range(2000)]
    message = MessageRecord(
        seq=1,
        ts=0.0,
        side=Side.BOTH,
        direction=Direction.TO_SERVER,
        channel=Channel.POST,
        exchange="x",
        kind="request",
        body=rows,
        size=len(json.dumps(rows, separators=(",", ":"))),
    )
    chain = proxy.store.open(ChainSummary(id="c1", started=0.0, ended=1.0))
    proxy.store.add(chain, message)

    weighed = metric(metrics.render().decode(), "mcp_proxy_chain_store_bytes")
    assert weighed == proxy.store.weight > 10 * message.size  # the decoded rows, not their text

    proxy.store.open(ChainSummary(id="c2", started=1.0))  # the ring's one place goes to the new chain
    assert metric(metrics.render().decode(), "mcp_proxy_chain_store_bytes") == 0


async def test_a_bridged_call_answered_as_a_stream_counts_as_an_open_stream(
    legacy_server: PeerServer,
) -> None:
    """A 2026-07-28 client's call on a legacy server streams its progress through the bridge."""
    params = modern_params(
        {"name": "slow_progress", "arguments": {"steps": 300}, "_meta": {"progressToken": "p"}}
    )
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}).encode()
    headers = "".join(f"{k}: {v}\r\n" for k, v in modern_headers("tools/call", params).items())
    async with admin_proxy(legacy_server.url) as proxy:
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
        try:
            path = proxy.endpoint()[len(proxy.url) :]
            head = f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{headers}Content-Length: {len(body)}\r\n\r\n"
            writer.write(head.encode() + body)
            seen = b""
            while b"notifications/progress" not in seen:
                chunk = await asyncio.wait_for(reader.read(65536), WAIT)
                assert chunk, "the stream ended before its first progress event"
                seen += chunk
            assert metric(await scrape(proxy), "mcp_proxy_open_streams") == 1
        finally:
            writer.close()
        await wait_until_metric(proxy, "mcp_proxy_open_streams", 0)


async def test_observations_dropped_before_anyone_built_them_are_counted() -> None:
    """While nobody watches, the queue keeps ten observations per stored chain, and says what it lost."""
    proxy = Proxy(
        Settings(upstream="http://127.0.0.1:9/mcp", listen="127.0.0.1:0", admin="127.0.0.1:0", max_chains=1)
    )
    metrics = bare_metrics(proxy)
    sink = proxy.observations
    for n in range(20):  # two observations each: forty, against a queue of ten
        sink.emit(ExchangeOpened(float(n), f"x{n}", "POST", "/mcp", {}, None))
        sink.close(ExchangeClosed(float(n), f"x{n}"))

    assert sink.dropped == 30
    assert metric(metrics.render().decode(), "mcp_proxy_observations_dropped_total") == 30


@pytest.mark.parametrize(("kind", "mode"), [("legacy-inflight", "legacy"), ("modern-mrtr", "2026-07-28")])
async def test_a_call_waiting_on_the_client_shows_in_the_waiting_gauge_until_it_is_answered(
    peer_factory: Any, kind: str, mode: str
) -> None:
    # In flight (a legacy server's question on the call's stream) or between an input_required
    # answer and its retry (2026-07-28): the client holds its answer until the gauge says it waits.
    server = peer_factory(kind)
    seen: list[float] = []

    async with admin_proxy(server.url) as proxy:

        async def elicitation(context: Any, params: Any) -> Any:
            text = await wait_until_metric(proxy, "mcp_proxy_waiting_on_client", 1.0)
            seen.append(metric(text, "mcp_proxy_waiting_on_client"))
            return types.ElicitResult(action="accept", content={"name": "octocat"})

        async with Client(proxy.endpoint(), mode=mode, elicitation_callback=elicitation) as client:
            result = await client.call_tool("ask_name", {})
        assert [block.text for block in result.content] == ["Hello, octocat!"]  # type: ignore[union-attr]
        await wait_until_metric(proxy, "mcp_proxy_waiting_on_client", 0.0)
    assert seen == [1.0]
