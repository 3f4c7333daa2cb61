"""The lean front's bounds, spoken to over raw sockets: read deadlines, the connection cap, pipelined bytes,
trailers and chunk extensions, `Expect` over the limit, `Host` and request-target checks, and failures
logged with their exception.

Each test is one attack from the hardening review, written as a client would send it, with a second
client served alongside where the point is that others are not hurt.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import time
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
import structlog
from aiohttp import web

from proxy import logs, runtime, runtime_tuning
from proxy.transport import front
from proxy.transport.front import MAX_HEAD_BYTES
from tests.transport.helpers import (
    RELAY_ONLY,
    WAIT,
    bounded,
    captured_logs,
    client_session,
    drained,
    fake_upstream,
    hold,
    rpc,
    wait_until,
)
from tests.transport.test_front import (
    closed,
    connection,
    fake_upstream_that_answers_by_method,
    parse_head,
    read_response,
    refused,
    request_bytes,
    still_serves,
)

SHORT = 0.5
"""A read deadline short enough for a test, long enough that a loaded machine meets it."""


def chunked(*parts: bytes, trailers: bytes = b"") -> bytes:
    return b"".join(b"%x\r\n%b\r\n" % (len(p), p) for p in parts) + b"0\r\n" + trailers + b"\r\n"


def chunked_head(path: str = "/mcp", extra: str = "") -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: proxy.test\r\nContent-Type: application/json\r\n"
        f"Accept: application/json, text/event-stream\r\nTransfer-Encoding: chunked\r\n{extra}\r\n"
    ).encode()


async def closed_after(reader: asyncio.StreamReader) -> tuple[bytes, float]:
    """Everything the proxy sends until it closes, and how long that took."""
    started = time.monotonic()
    rest: bytes = await bounded(reader.read(), what="the proxy to close the connection")
    return rest, time.monotonic() - started


# --- read deadlines -----------------------------------------------------------------------------------


async def test_a_head_that_stops_half_way_gets_408_naming_the_setting_and_is_closed(proxy_for):
    async with (
        fake_upstream(fake_upstream_that_answers_by_method) as fake,
        proxy_for(fake.url, **RELAY_ONLY, head_read_timeout=SHORT) as proxy,
        connection(proxy) as (reader, writer),
    ):
        writer.write(b"POST /mcp HTTP/1.1\r\nHost: proxy.test\r\nContent-Le")
        answer, took = await closed_after(reader)
        head, _, body = answer.partition(b"\r\n\r\n")
        assert parse_head(head)[0] == 408
        assert b"head_read_timeout" in body
        assert SHORT <= took < SHORT + 2 * front.SWEEP_MAX
        assert fake.seen == []
        await still_serves(proxy)


async def test_a_408_to_a_slow_client_is_logged_naming_its_address_and_the_timeout_and_counted(proxy_for):
    admin = {"admin_enabled": True, "admin": "127.0.0.1:0"}
    with captured_logs() as logged:
        async with (
            fake_upstream(fake_upstream_that_answers_by_method) as fake,
            proxy_for(
                fake.url, **RELAY_ONLY, **admin, head_read_timeout=SHORT, body_read_timeout=SHORT
            ) as proxy,
        ):
            peers = []
            for half in (
                b"POST /mcp HTTP/1.1\r\nHost: proxy.test\r\nContent-Le",
                request_bytes(rpc("ping", 7))[:-3],
            ):
                async with connection(proxy) as (reader, writer):
                    host, port = writer.get_extra_info("sockname")[:2]
                    peers.append(f"{host}:{port}")
                    writer.write(half)
                    answer, _took = await closed_after(reader)
                    assert parse_head(answer.partition(b"\r\n\r\n")[0])[0] == 408
            async with client_session() as http, http.get(f"{proxy.admin_url}/metrics") as resp:
                metrics = await resp.text()

    warnings = [e for e in logged if e["event"] == "client_timeout"]
    assert [(e["log_level"], e["peer"], e["status"], e["setting"], e["seconds"]) for e in warnings] == [
        ("warning", peers[0], 408, "head_read_timeout", SHORT),
        ("warning", peers[1], 408, "body_read_timeout", SHORT),
    ]
    assert 'mcp_proxy_client_timeouts_total{setting="head_read_timeout"} 1.0' in metrics
    assert 'mcp_proxy_client_timeouts_total{setting="body_read_timeout"} 1.0' in metrics


async def test_a_flood_of_slow_clients_logs_one_line_a_second_and_counts_every_one(proxy_for, monkeypatch):
    monkeypatch.setattr(front, "TIMEOUT_LOG_EVERY", SHORT / 2)  # a second wave, SHORT later, logs again
    admin = {"admin_enabled": True, "admin": "127.0.0.1:0"}
    half = b"POST /mcp HTTP/1.1\r\nHost: proxy.test\r\nContent-Le"

    async def slow_client(proxy: Any) -> None:
        async with connection(proxy) as (reader, writer):
            writer.write(half)
            answer, _took = await closed_after(reader)
            assert parse_head(answer.partition(b"\r\n\r\n")[0])[0] == 408

    with captured_logs() as logged:
        async with (
            fake_upstream(fake_upstream_that_answers_by_method) as fake,
            proxy_for(fake.url, **RELAY_ONLY, **admin, head_read_timeout=SHORT) as proxy,
        ):
            await asyncio.gather(*(slow_client(proxy) for _ in range(20)))
            await asyncio.gather(*(slow_client(proxy) for _ in range(5)))
            async with client_session() as http, http.get(f"{proxy.admin_url}/metrics") as resp:
                metrics = await resp.text()

    warnings = [e for e in logged if e["event"] == "client_timeout"]
    assert len(warnings) == 2, warnings  # one per wave, not one per client
    assert "also_unlogged" not in warnings[0]
    assert warnings[1]["also_unlogged"] == 19  # the first wave's others, told with the next line
    assert 'mcp_proxy_client_timeouts_total{setting="head_read_timeout"} 25.0' in metrics


async def test_a_connection_that_never_sends_a_byte_is_closed_after_the_head_read_timeout(proxy_for):
    async with (
        fake_upstream(fake_upstream_that_answers_by_method) as fake,
        proxy_for(fake.url, **RELAY_ONLY, head_read_timeout=SHORT, keepalive_timeout=60.0) as proxy,
        connection(proxy) as (reader, _writer),
    ):
        answer, took = await closed_after(reader)
        assert answer == b""
        assert SHORT <= took < SHORT + 2 * front.SWEEP_MAX


async def test_a_body_that_never_comes_gets_408_with_the_request_id_and_is_closed(proxy_for):
    async with (
        fake_upstream(fake_upstream_that_answers_by_method) as fake,
        proxy_for(fake.url, **RELAY_ONLY, body_read_timeout=SHORT) as proxy,
        connection(proxy) as (reader, writer),
    ):
        body = rpc("tools/call", 31, name="echo")
        writer.write(request_bytes(body)[:-5])  # the head and all but the last bytes of the body
        answer, took = await closed_after(reader)
        head, _, rest = answer.partition(b"\r\n\r\n")
        status, headers = parse_head(head)
        assert (status, dict(headers)["Connection"]) == (408, "close")
        error = json.loads(rest)
        assert error["id"] == 31
        assert error["error"]["data"] == {"limit": SHORT, "setting": "body_read_timeout"}
        assert SHORT <= took < SHORT + 2 * front.SWEEP_MAX
        assert fake.seen == []
        await still_serves(proxy)


async def test_an_idle_keep_alive_connection_is_closed_after_the_keepalive_timeout(proxy_for):
    async with (
        fake_upstream(fake_upstream_that_answers_by_method) as fake,
        proxy_for(fake.url, **RELAY_ONLY, keepalive_timeout=SHORT, head_read_timeout=30.0) as proxy,
        connection(proxy) as (reader, writer),
    ):
        writer.write(request_bytes(rpc("ping", 1)))
        assert (await read_response(reader)).json()["id"] == 1
        answer, took = await closed_after(reader)
        assert answer == b""  # an idle connection is closed without a word, as any server does
        assert SHORT <= took < SHORT + 2 * front.SWEEP_MAX


async def test_a_request_served_longer_than_every_read_deadline_is_answered(proxy_for):
    may_answer = asyncio.Event()

    async def slow(request: web.Request) -> web.StreamResponse:
        message = json.loads(await request.read())
        await hold(may_answer)
        return web.json_response({"jsonrpc": "2.0", "id": message["id"], "result": {}})

    short = {"head_read_timeout": 0.2, "body_read_timeout": 0.2, "keepalive_timeout": 0.2}
    async with (
        fake_upstream(slow) as fake,
        proxy_for(fake.url, **RELAY_ONLY, **short) as proxy,
        connection(proxy) as (reader, writer),
    ):
        writer.write(request_bytes(rpc("tools/call", 5, name="slow")))
        await wait_until(lambda: len(fake.seen) == 1, what="the request to reach the upstream")
        waited = time.monotonic()
        await wait_until(lambda: time.monotonic() - waited > 1.0, what="every deadline to pass")
        may_answer.set()
        assert (await read_response(reader)).json()["id"] == 5


# --- the connection cap -------------------------------------------------------------------------------


async def test_past_the_connection_cap_a_client_gets_503_with_retry_after_and_the_admin_api_answers(
    proxy_for,
):
    with captured_logs() as logs:
        await _past_the_cap(proxy_for)
    (refused,) = [entry for entry in logs if entry["event"] == "client_connections_refused"]
    assert (refused["limit"], refused["how"]) == (2, "503")


async def _past_the_cap(proxy_for):
    async with (
        fake_upstream(fake_upstream_that_answers_by_method) as fake,
        proxy_for(
            fake.url, **RELAY_ONLY, max_client_connections=2, admin_enabled=True, admin="127.0.0.1:0"
        ) as proxy,
        connection(proxy) as (reader1, writer1),
        connection(proxy) as (_reader2, _writer2),
    ):
        await wait_until(
            lambda: proxy._front is not None and len(proxy._front.connections) == 2, what="2 open"
        )
        async with connection(proxy) as (reader3, writer3):
            writer3.write(request_bytes(rpc("ping", 3)))
            response = await read_response(reader3)
            assert response.status == 503
            assert response.header("retry-after") == "1"
            assert response.header("connection") == "close"
            error = response.json()
            assert "max_client_connections" in error["error"]["message"]
            assert error["error"]["data"] == {"limit": 2, "setting": "max_client_connections"}
            assert await closed(reader3)
        # the clients already connected are served, and so is the admin API
        writer1.write(request_bytes(rpc("ping", 1)))
        assert (await read_response(reader1)).json()["id"] == 1
        async with client_session() as http, http.get(f"{proxy.admin_url}/healthz") as health:
            assert health.status == 200
        async with client_session() as http, http.get(f"{proxy.admin_url}/metrics") as scraped:
            metrics = await scraped.text()
        assert [json.loads(s.body)["id"] for s in fake.seen] == [1]
        assert 'mcp_proxy_client_connections_refused_total{how="answered"} 1.0' in metrics
        assert "mcp_proxy_client_connections 2.0" in metrics
    # one of the two left: a new client is served again
    async with (
        fake_upstream(fake_upstream_that_answers_by_method) as fake,
        proxy_for(fake.url, **RELAY_ONLY, max_client_connections=1) as proxy,
    ):
        async with connection(proxy) as (reader, writer):
            writer.write(request_bytes(rpc("ping", 1)))
            assert (await read_response(reader)).status == 200
        await wait_until(lambda: proxy._front is not None and not proxy._front.connections, what="a close")
        await still_serves(proxy)


# --- pipelining: bytes, not only requests -------------------------------------------------------------


async def test_pipelined_requests_behind_a_slow_one_are_held_up_to_the_byte_bound(proxy_for):
    may_answer = asyncio.Event()
    most_held = 0

    async def first_slow(request: web.Request) -> web.StreamResponse:
        message = json.loads(await request.read())
        if message["id"] == 0:
            await hold(may_answer)
        return web.json_response({"jsonrpc": "2.0", "id": message["id"], "result": {}})

    bound = 64 * 1024
    big = "x" * (16 * 1024)
    count = 40  # 40 x 16 KiB = 640 KiB queued behind the first, ten times the bound
    async with (
        fake_upstream(first_slow) as fake,
        proxy_for(fake.url, **RELAY_ONLY, max_pipelined_bytes=bound) as proxy,
        connection(proxy) as (reader, writer),
    ):
        writer.write(request_bytes(rpc("tools/call", 0, name="slow")))
        await wait_until(lambda: len(fake.seen) == 1, what="the slow request to reach the upstream")
        data = b"".join(request_bytes(rpc("tools/call", n, name="echo", text=big)) for n in range(1, count))
        writer.write(data)

        def held() -> int:
            nonlocal most_held
            assert proxy._front is not None
            size = sum(len(b"".join(r.body)) for c in proxy._front.connections for r in c.queue)
            most_held = max(most_held, size)
            return size

        await wait_until(lambda: held() > bound, what="the queue to fill past its bound")
        # reading has paused, so the queue cannot grow however long the slow one takes
        assert proxy._front is not None
        await wait_until(
            lambda: all(c._reading_paused for c in proxy._front.connections), what="reading to pause"
        )
        held()
        assert most_held <= bound + 64 * 1024 + 17 * 1024  # the bound, one read's worth and one request
        may_answer.set()
        answers = [(await read_response(reader)).json()["id"] for _ in range(count)]
        assert answers == list(range(count))


# --- chunked bodies: trailers and extensions ----------------------------------------------------------


async def test_trailer_fields_never_reach_the_upstream_as_headers(proxy_for):
    async with (
        fake_upstream(fake_upstream_that_answers_by_method) as fake,
        proxy_for(fake.url, **RELAY_ONLY) as proxy,
        connection(proxy) as (reader, writer),
    ):
        body = rpc("tools/list", 8)
        trailers = b"Authorization: Bearer smuggled\r\nX-Smuggled: 1\r\n"
        writer.write(
            chunked_head(extra="Trailer: X-Smuggled\r\n") + chunked(body[:10], body[10:], trailers=trailers)
        )
        response = await read_response(reader)
        assert response.json() == {"jsonrpc": "2.0", "id": 8, "result": {"method": "tools/list"}}
        (seen,) = fake.seen
        assert seen.body == body
        assert "x-smuggled" not in seen.names()
        assert "authorization" not in seen.names()


async def test_trailers_count_toward_the_head_limit(proxy_for):
    async with (
        fake_upstream(fake_upstream_that_answers_by_method) as fake,
        proxy_for(fake.url, **RELAY_ONLY) as proxy,
    ):
        trailers = b"".join(b"X-T%d: %s\r\n" % (n, b"a" * 4000) for n in range(20))  # 80 KB of trailers
        answer = await refused(proxy, chunked_head() + chunked(rpc("ping", 1), trailers=trailers))
        head, _, body = answer.partition(b"\r\n\r\n")
        assert parse_head(head)[0] == 431
        assert str(MAX_HEAD_BYTES).encode() in body
        assert fake.seen == []
        await still_serves(proxy)


async def test_chunk_extensions_count_toward_the_body_limit(proxy_for):
    async with (
        fake_upstream(fake_upstream_that_answers_by_method) as fake,
        proxy_for(fake.url, **RELAY_ONLY, max_body_bytes=4096) as proxy,
    ):
        # One-byte chunks, each with a 4 KiB extension: a tiny payload carried by megabytes of framing.
        body = b'{"jsonrpc":"2.0","id":12,"method":"ping"}'
        padded = b"".join(b"1;ext=%s\r\n%b\r\n" % (b"e" * 4096, body[i : i + 1]) for i in range(len(body)))
        answer = await refused(
            proxy, chunked_head() + padded, then=b"1;x=" + b"e" * 8192 + b"\r\na\r\n", up_to=4 << 20
        )
        head, _, rest = answer.partition(b"\r\n\r\n")
        assert parse_head(head)[0] == 413
        assert json.loads(rest)["error"]["data"] == {"limit": 4096, "setting": "max_body_bytes"}
        assert fake.seen == []
        await still_serves(proxy)


@pytest.mark.parametrize("split", [0, 4000, 700], ids=["one-write", "split-in-the-extension", "split-early"])
async def test_a_whole_request_padded_past_the_limit_by_one_extension_gets_413_however_it_is_split(
    proxy_for, split: int
):
    async with (
        fake_upstream(fake_upstream_that_answers_by_method) as fake,
        proxy_for(fake.url, **RELAY_ONLY, max_body_bytes=4096) as proxy,
    ):
        body = b'{"jsonrpc":"2.0","id":13,"method":"ping"}'
        head = chunked_head()
        data = head + b"%x;ext=%s\r\n%b\r\n0\r\n\r\n" % (len(body), b"e" * 4200, body)
        first, rest = (data, b"") if not split else (data[: len(head) + split], data[len(head) + split :])
        async with connection(proxy) as (reader, writer):
            writer.write(first)
            if rest:  # the proxy reads the head and part of the body in one read, the end in another
                await wait_until(lambda: begun_body(proxy), what="the proxy to read the first part")
                writer.write(rest)
            response = await read_response(reader)
        assert response.status == 413
        assert response.json()["error"]["data"] == {"limit": 4096, "setting": "max_body_bytes"}
        assert fake.seen == []
        await still_serves(proxy)


def begun_body(proxy: Any) -> bool:
    """A client connection on the lean front is reading a request whose head has ended."""
    front = proxy._front
    return front is not None and any(c.current is not None and c.current.method for c in front.connections)


async def test_expect_100_continue_with_an_over_limit_length_gets_413_at_once(proxy_for):
    async with (
        fake_upstream(fake_upstream_that_answers_by_method) as fake,
        proxy_for(fake.url, **RELAY_ONLY, max_body_bytes=1024) as proxy,
        connection(proxy) as (reader, writer),
    ):
        writer.write(
            request_bytes(headers=(("Expect", "100-continue"), ("Content-Length", "2048")), length=False)
        )
        response = await read_response(reader)  # no body was sent: the answer cannot wait for one
        assert response.status == 413
        assert response.header("connection") == "close"
        assert response.json()["error"]["data"] == {"limit": 1024, "setting": "max_body_bytes"}
        assert await closed(reader)
        assert fake.seen == []


# --- Host and the request target ----------------------------------------------------------------------


async def refused_400(proxy: Any, data: bytes) -> dict[str, Any]:
    async with connection(proxy) as (reader, writer):
        writer.write(data)
        response = await read_response(reader)
    assert response.status == 400
    message: dict[str, Any] = response.json()
    return message


async def test_a_duplicate_or_missing_host_gets_400_naming_host_with_the_id(proxy_for):
    async with (
        fake_upstream(fake_upstream_that_answers_by_method) as fake,
        proxy_for(fake.url, **RELAY_ONLY) as proxy,
    ):
        twice = request_bytes(rpc("tools/list", 21), headers=(("Host", "other.test"),))
        error = await refused_400(proxy, twice)
        assert (error["id"], error["error"]["data"]) == (21, {"field": "Host"})
        missing = request_bytes(rpc("tools/list", 22)).replace(b"Host: proxy.test\r\n", b"")
        error = await refused_400(proxy, missing)
        assert (error["id"], error["error"]["data"]) == (22, {"field": "Host"})
        assert fake.seen == []
        # HTTP/1.0 had no Host: such a client is served
        async with connection(proxy) as (reader, writer):
            writer.write(
                request_bytes(rpc("tools/list", 23), version="1.0").replace(b"Host: proxy.test\r\n", b"")
            )
            assert (await read_response(reader)).json()["id"] == 23
        await wait_until(lambda: drained(proxy), what="the exchanges to close")


async def test_a_request_line_naming_another_http_version_gets_505_and_nothing_goes_upstream(proxy_for):
    async with (
        fake_upstream(fake_upstream_that_answers_by_method) as fake,
        proxy_for(fake.url, **RELAY_ONLY) as proxy,
    ):
        answer = await refused(proxy, request_bytes(rpc("ping", 24), version="2.0"))
        head, _, body = answer.partition(b"\r\n\r\n")
        assert parse_head(head)[0] == 505, answer
        assert b"HTTP/2.0" in body
        for version in ("0.9", "1.2", "3.0"):  # refused by llhttp (400) or by the proxy (505)
            answer = await refused(proxy, request_bytes(rpc("ping", 24), version=version))
            assert parse_head(answer.partition(b"\r\n\r\n")[0])[0] in (400, 505), answer
        assert fake.seen == []
        await still_serves(proxy)


async def test_dot_segments_in_the_path_get_400_and_nothing_goes_upstream(proxy_for):
    async with (
        fake_upstream(fake_upstream_that_answers_by_method) as fake,
        proxy_for(fake.url, **RELAY_ONLY) as proxy,
    ):
        for path in ("/mcp/../admin", "/%2e%2e/etc/passwd", "/./mcp"):
            error = await refused_400(proxy, request_bytes(rpc("tools/list", 24), path=path))
            assert error["error"]["data"] == {"field": "request target"}
            assert error["id"] == 24
        assert fake.seen == []
        await still_serves(proxy)


async def test_a_fragment_in_the_target_gets_400_is_logged_as_refused_and_nothing_goes_upstream(proxy_for):
    with captured_logs() as logged:
        async with (
            fake_upstream(fake_upstream_that_answers_by_method) as fake,
            proxy_for(fake.url, **RELAY_ONLY) as proxy,
        ):
            for ident, path in enumerate(("/mcp#x", "/mcp?tenant=a#frag"), start=26):
                error = await refused_400(proxy, request_bytes(rpc("tools/list", ident), path=path))
                assert error["error"]["data"] == {"field": "request target"}
                assert "fragment" in error["error"]["message"]
                assert error["id"] == ident
            assert fake.seen == []
            await still_serves(proxy)
            await wait_until(lambda: drained(proxy), what="the exchanges to close")
    lines = [e for e in logged if e.get("status") == 400]
    assert len(lines) == 2, logged
    assert all(e["trouble"] == "bad request target" for e in lines), lines


async def test_an_absolute_form_target_is_sent_upstream_in_origin_form(proxy_for):
    async with (
        fake_upstream(fake_upstream_that_answers_by_method) as fake,
        proxy_for(fake.url, **RELAY_ONLY) as proxy,
        connection(proxy) as (reader, writer),
    ):
        target = f"http://127.0.0.1:{proxy.port}/mcp?tenant=a"  # the Host field says proxy.test
        writer.write(request_bytes(rpc("tools/list", 25), path=target))
        assert (await read_response(reader)).json()["id"] == 25
        (seen,) = fake.seen
        assert seen.path_qs == "/mcp?tenant=a"
        await wait_until(lambda: drained(proxy), what="the exchange to close")
        (chain,) = list(proxy.chains())
        assert chain.messages[0].http is not None
        assert chain.messages[0].http.path == "/mcp?tenant=a"
        assert chain.messages[0].http.headers["Host"] == f"127.0.0.1:{proxy.port}"


# --- failures are logged with their exception ---------------------------------------------------------


async def test_a_front_failure_is_logged_with_its_traceback_in_json(proxy_for, monkeypatch, tmp_path: Path):
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("planted failure")

    monkeypatch.setattr(front, "classify_request", broken)
    saved = structlog.get_config()
    log_file = tmp_path / "proxy.log"
    opened = logs.configure(fmt="json", file=log_file)
    try:
        async with (
            fake_upstream(fake_upstream_that_answers_by_method) as fake,
            proxy_for(fake.url, **RELAY_ONLY) as proxy,
            connection(proxy) as (reader, writer),
        ):
            writer.write(request_bytes(rpc("ping", 1)))
            assert (await read_response(reader)).status == 500
            assert await closed(reader)
    finally:
        structlog.configure(**saved)
        assert opened is not None
        opened.close()
    lines = [json.loads(line) for line in log_file.read_text().splitlines()]
    (failed,) = [line for line in lines if line["event"] == "front_exchange_failed"]
    assert "RuntimeError: planted failure" in failed["exception"]
    assert "Traceback" in failed["exception"]


@pytest.mark.parametrize("fmt", ["json", "console"])
async def test_a_front_failure_quoting_a_clients_token_logs_its_traceback_with_the_token_masked(
    proxy_for, monkeypatch, tmp_path: Path, fmt: str
):
    token = "front-failure-token-4417abcdef"
    bearer = (("Authorization", f"Bearer {token}"),)

    def broken(settings: Any, method: str, path: str, headers: Any, raw: bytes) -> Any:
        sent = {name.lower(): value for name, value in headers}
        raise ValueError(f"could not parse {sent['authorization']!r}")

    saved = structlog.get_config()
    log_file = tmp_path / "proxy.log"
    opened = logs.configure(fmt=fmt, file=log_file)
    try:
        async with (
            fake_upstream(fake_upstream_that_answers_by_method) as fake,
            proxy_for(fake.url, **RELAY_ONLY, capture=tmp_path / "run.jsonl") as proxy,
            connection(proxy) as (reader, writer),
        ):
            writer.write(request_bytes(rpc("ping", 1), headers=bearer))  # recorded: the token is learned
            assert (await read_response(reader)).status == 200
            monkeypatch.setattr(front, "classify_request", broken)
            writer.write(request_bytes(rpc("ping", 2), headers=bearer))
            assert (await read_response(reader)).status == 500
            assert await closed(reader)
    finally:
        structlog.configure(**saved)
        assert opened is not None
        opened.close()
    text = log_file.read_text()
    assert "front_exchange_failed" in text
    assert "ValueError: could not parse 'Bearer <redacted len=" in text
    assert token not in text


def test_the_open_file_limit_is_raised_to_fit_the_connection_cap_or_a_warning_names_the_setting(
    monkeypatch,
) -> None:
    limits = {"soft": 1024, "hard": 4096}
    monkeypatch.setattr(runtime_tuning.resource, "getrlimit", lambda _which: (limits["soft"], limits["hard"]))

    def setrlimit(_which: int, values: tuple[int, int]) -> None:
        limits["soft"] = values[0]

    monkeypatch.setattr(runtime_tuning.resource, "setrlimit", setrlimit)
    with captured_logs() as seen:
        assert runtime_tuning.fit_descriptor_limit(1000) == 2 * 1000 + runtime_tuning.DESCRIPTORS_SPARE
        # upstream connections held past their clients' requests (parked calls, sessions' streams)
        assert (
            runtime_tuning.fit_descriptor_limit(1000, 1400)
            == 2 * 1000 + 1400 + runtime_tuning.DESCRIPTORS_SPARE
        )
    assert seen == []
    with captured_logs() as seen:
        assert runtime_tuning.fit_descriptor_limit(4096) == 4096  # the hard limit: as far as it goes
    (warning,) = seen
    assert warning["event"] == "descriptor_limit_low"
    assert "max_client_connections (4096)" in warning["hint"]


async def test_the_proxy_fits_its_open_file_limit_to_the_upstream_connections_its_bridges_may_hold(
    proxy_for, monkeypatch
) -> None:
    asked: list[tuple[int, int]] = []
    monkeypatch.setattr(runtime, "fit_descriptor_limit", lambda *args: asked.append(args) or 1 << 20)
    async with proxy_for(
        "http://127.0.0.1:9/mcp", max_client_connections=100, max_continuations=30, max_upstream_sessions=7
    ):
        pass
    assert asked == [(100, 37)]


async def test_a_refused_client_that_never_leaves_is_cut_after_a_moment(proxy_for) -> None:
    async with (
        fake_upstream(fake_upstream_that_answers_by_method) as fake,
        proxy_for(fake.url, **RELAY_ONLY, max_client_connections=1) as proxy,
        connection(proxy) as (_reader, _writer),
    ):
        await wait_until(
            lambda: proxy._front is not None and len(proxy._front.connections) == 1, what="1 open"
        )
        async with connection(proxy) as (reader, _writer2):
            response = await read_response(reader)  # answered before it sends anything
            assert response.status == 503
            assert await closed(reader)  # the proxy shut its side; this client keeps its own open
            assert proxy._front is not None
            assert len(proxy._front.refusing) == 1
            await wait_until(
                lambda: proxy._front is not None and not proxy._front.refusing,
                what="the refused connection to be cut",
                seconds=front.LINGER + 2.0,
            )


def padded_call(size: int) -> bytes:
    """A `tools/call` of exactly `size` bytes, padded by one long string argument."""
    body = b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":{"pad":"'
    return body + b"x" * (size - len(body) - 4) + b'"}}}'


class _SwallowingUpstream:
    """An upstream that reads every byte sent to it and keeps none, answering nothing: a request
    stays in flight, and what memory it takes is the proxy's."""

    def __init__(self, wanted: int) -> None:
        self.wanted = wanted
        self.received = 0
        self.got_all = asyncio.Event()
        self.server: asyncio.Server | None = None

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._swallow, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/mcp"

    async def _swallow(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while chunk := await reader.read(65536):
            self.received += len(chunk)
            if self.received >= self.wanted:
                self.got_all.set()
        writer.close()


async def test_a_big_body_in_flight_is_held_as_read_and_as_parsed_and_in_no_other_copy(
    proxy_for,
) -> None:
    size = 4 * 1024 * 1024
    body = padded_call(size)
    upstream = _SwallowingUpstream(size)
    url = await upstream.start()
    try:
        async with proxy_for(url, **RELAY_ONLY, upstream_timeout=60) as proxy:
            _, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
            head = (
                f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                f"Accept: application/json, text/event-stream\r\nContent-Length: {len(body)}\r\n\r\n"
            ).encode()
            tracemalloc.start()
            try:
                before = tracemalloc.get_traced_memory()[0]
                writer.write(head)
                for start in range(0, len(body), 16384):  # read by the proxy in many pieces
                    writer.write(body[start : start + 16384])
                    await writer.drain()
                await asyncio.wait_for(upstream.got_all.wait(), WAIT)
                held = tracemalloc.get_traced_memory()[0] - before
            finally:
                tracemalloc.stop()
            writer.close()
    finally:
        assert upstream.server is not None
        upstream.server.close()
    # The body as read and as parsed: two copies, not also its pieces or a copy framed for the upstream.
    assert held < 2.5 * size, f"{held / size:.2f} copies of the body held"


class _AnsweringUpstream:
    """An upstream that reads each request's body without keeping it and answers every request with
    one small JSON result: what memory a big request takes afterwards is the proxy's."""

    ANSWER = b'{"jsonrpc":"2.0","id":1,"result":{}}'

    def __init__(self) -> None:
        self.server: asyncio.Server | None = None

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/mcp"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            with contextlib.suppress(asyncio.IncompleteReadError):  # the proxy closed its connection
                await self._answer_each(reader, writer)
        finally:
            writer.close()

    async def _answer_each(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while head := await reader.readuntil(b"\r\n\r\n"):
            length = next(
                int(line.split(b":", 1)[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            )
            while length:
                length -= len(await reader.read(min(length, 65536)))
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%b"
                % (len(self.ANSWER), self.ANSWER)
            )
            await writer.drain()


async def test_a_big_body_is_let_go_once_answered_while_its_connection_stays_open_once_it_closes_and_when_cut(
    proxy_for,
) -> None:
    size = 4 * 1024 * 1024
    body = padded_call(size)
    sent = request_bytes(body)
    upstream = _AnsweringUpstream()
    url = await upstream.start()
    # Without the cyclic collector, as between its rare runs: nothing may wait for it to free a body.
    gc.disable()
    tracemalloc.start()
    try:
        async with proxy_for(url, **RELAY_ONLY) as proxy:
            before = tracemalloc.get_traced_memory()[0]
            async with connection(proxy) as (reader, writer):
                writer.write(sent)
                assert (await read_response(reader)).status == 200
                await wait_until(  # the proxy's side of the exchange ends after the client's
                    lambda: (
                        proxy._front is not None
                        and proxy.in_flight() == 0
                        and all(c.idle for c in proxy._front.connections)
                    ),
                    what="the proxy to finish the exchange",
                )
                # Its observations wait, within their own bound, for someone to read the chains: read them.
                proxy.observations.build()
                while_open = tracemalloc.get_traced_memory()[0] - before
            await wait_until(
                lambda: proxy._front is not None and not proxy._front.connections,
                what="the proxy to see the connection closed",
            )
            after_close = tracemalloc.get_traced_memory()[0] - before
            async with connection(proxy) as (reader, writer):  # half a body, and the client leaves
                writer.write(sent[: len(sent) // 2])
                await writer.drain()
                await wait_until(
                    lambda: (
                        proxy._front is not None
                        and any(
                            c.current is not None and c.current.size > size / 4
                            for c in proxy._front.connections
                        )
                    ),
                    what="the proxy to read half the body",
                )
            await wait_until(
                lambda: proxy._front is not None and not proxy._front.connections,
                what="the proxy to see the connection closed",
            )
            after_cut = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
        gc.enable()
        assert upstream.server is not None
        upstream.server.close()
        await upstream.server.wait_closed()
        gc.collect()  # what became garbage meanwhile goes now, in this test, not in another's
    assert while_open < size / 4, f"{while_open / size:.2f} bodies held by an idle keep-alive connection"
    assert after_close < size / 4, f"{after_close / size:.2f} bodies held after the connection closed"
    assert after_cut < size / 4, f"{after_cut / size:.2f} bodies held after a client left mid-body"
