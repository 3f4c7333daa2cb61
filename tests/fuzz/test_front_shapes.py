"""The issue's shapes, each with the exact answer it must get, on a proxy run as users run it.

The fuzz targets hold every input to the general invariants; here each named attack gets its own
verdict: the status (and where there is one, the JSON-RPC error with the request's id), what reached
the upstream (nothing, or exactly one origin-form request without the attacker's fields), and that
the proxy stays well: another client is served right after (`check` does all of this first).
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from pathlib import Path

import orjson
import pytest

from tests.fuzz.front import check, legacy_request, shape_chunks
from tests.fuzz.live import LiveProxy
from tests.fuzz.raw import Outcome, exchange, parse_responses

pytestmark = pytest.mark.e2e


def sent(live: LiveProxy, shape: str) -> tuple[Outcome, list[bytes]]:
    """Run a shape through `check`; the outcome and the heads the upstream got for it."""
    before = len(live.upstream.heads)
    out = check(live, shape_chunks(live, shape))
    return out, [h.raw for h in live.upstream.heads[before:] if not h.values("X-Canary")]


@pytest.mark.parametrize(
    ("shape", "status"),
    [
        ("cl+te", 400),
        ("duplicate-cl", 400),
        ("obs-fold", 400),
        ("bare-lf", 400),
        ("chunk-size-overflow", 400),
        ("chunk-size-negative", 400),
        ("oversize-head", 431),
        ("crlf-in-method", 400),
        ("missing-host", 400),
        ("duplicate-host", 400),
        ("dot-segments", 400),
        ("chunk-extensions-past-the-limit", 413),
    ],
)
def test_a_malformed_or_ambiguous_request_is_refused_and_nothing_reaches_the_upstream(
    passthrough: LiveProxy, shape: str, status: int
) -> None:
    out, heads = sent(passthrough, shape)

    assert [r.status for r in out.final] == [status], out
    assert heads == []


def test_trailer_fields_never_reach_the_upstream_as_headers(passthrough: LiveProxy) -> None:
    out, heads = sent(passthrough, "trailer")

    assert [r.status for r in out.final] == [200]
    assert len(heads) == 1
    assert b"X-Tr" not in heads[0]


def test_expect_100_continue_with_a_body_over_the_limit_is_answered_413_at_once(
    passthrough: LiveProxy,
) -> None:
    started = time.monotonic()
    out = exchange(
        passthrough.address, shape_chunks(passthrough, "expect-over-limit"), expect=1, deadline=3.0
    )

    assert [r.status for r in out.responses] == [413], out
    assert time.monotonic() - started < 2.0
    assert "max_body_bytes" in out.responses[0].body.decode()


def test_an_absolute_form_target_is_served_with_its_authority_as_host(passthrough: LiveProxy) -> None:
    out, heads = sent(passthrough, "absolute-form")

    assert [r.status for r in out.final] == [200], out
    assert len(heads) == 1
    assert heads[0].startswith(b"POST /mcp HTTP/1.1\r\n"), heads[0][:80]


def test_json_nested_a_thousand_deep_is_relayed_or_refused_with_its_id(passthrough: LiveProxy) -> None:
    out, _ = sent(passthrough, "deep-json")

    (answer,) = out.final
    assert (answer.header("content-type") or "").startswith("application/json"), answer
    assert orjson.loads(answer.body)["id"] == 5


def test_pipelined_requests_split_at_every_byte_and_three_deep_are_all_answered(
    passthrough: LiveProxy,
) -> None:
    assert [r.status for r in sent(passthrough, "split-at-every-byte")[0].final] == [200]
    assert [r.status for r in sent(passthrough, "pipelined")[0].final] == [200, 200, 200]


# -- through the legacy -> 2026-07-28 bridge ------------------------------------------------------------


def bridged_call(session: str, method: str, ident: int | str = 9) -> bytes:
    body = {"jsonrpc": "2.0", "id": ident, "method": method, "params": {"name": "echo", "arguments": {}}}
    return orjson.dumps(body)


@pytest.mark.parametrize(
    "method",
    [
        "tools/call\r\nX-Injected: 1",
        "tools/call\r\nContent-Length: 0\r\n\r\nPOST /mcp HTTP/1.1\r\nHost: x\r\nX-Smuggled: 1\r\n\r\n",
        "tools/call\n",
        "tools/\x00call",
        "tools/\u0131call",
        "tools/é",
    ],
    ids=["crlf-header", "crlf-request", "lf", "nul", "non-latin-1", "latin-1"],
)
def test_a_method_that_cannot_be_a_header_is_refused_32600_with_its_id_in_the_bridge(
    bridged: tuple[LiveProxy, str], method: str
) -> None:
    live, session = bridged
    before = len(live.upstream.heads)
    body = bridged_call(session, method)

    out = check(live, [legacy_request(live, body, [("Mcp-Session-Id", session)])], session)

    (answer,) = out.final
    assert answer.status == 400, answer
    error = orjson.loads(answer.body)
    assert error["id"] == 9
    assert error["error"]["code"] == -32600
    assert "method" in error["error"]["message"]
    heads = [h.raw for h in live.upstream.heads[before:] if not h.values("X-Canary")]
    assert not [h for h in heads if b"X-Injected" in h or b"X-Smuggled" in h or b"Content-Length: 0" in h]


def test_the_same_method_is_refused_32600_in_pass_through(passthrough: LiveProxy) -> None:
    out = check(passthrough, [legacy_request(passthrough, bridged_call("", "tools/call\r\nX-Injected: 1"))])

    (answer,) = out.final
    assert answer.status == 400
    assert orjson.loads(answer.body)["error"]["code"] == -32600


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not Path("/proc/self/fd").exists(), reason="counts descriptors in /proc")
def test_many_unsendable_methods_leave_descriptors_and_pool_connections_flat(
    bridged: tuple[LiveProxy, str],
) -> None:
    live, session = bridged
    pool = live.proxy.pool
    assert pool is not None
    check(
        live,
        [legacy_request(live, bridged_call(session, "tools/call"), [("Mcp-Session-Id", session)])],
        session,
    )
    fds, connections = open_fds(), pool.open_connections

    for i in range(300):
        body = bridged_call(session, f"tools/\u0131call-{i}", i)
        out = exchange(live.address, [legacy_request(live, body, [("Mcp-Session-Id", session)])], expect=1)
        assert out.final, f"request {i} got no answer"

    assert pool.open_connections <= connections + 1
    assert open_fds() <= fds + 5
    check(
        live,
        [legacy_request(live, bridged_call(session, "tools/call"), [("Mcp-Session-Id", session)])],
        session,
    )


def test_a_pipelined_request_split_behind_a_bridged_one_is_answered(bridged: tuple[LiveProxy, str]) -> None:
    live, session = bridged
    one = legacy_request(live, bridged_call(session, "tools/call", 1), [("Mcp-Session-Id", session)])
    two = legacy_request(live, bridged_call(session, "tools/call", 2), [("Mcp-Session-Id", session)])
    before = len(live.upstream.heads)

    with socket.create_connection(live.address, timeout=10) as sock:
        sock.sendall(one + two[:30])  # the first request and the start of the second, in one read
        # The proxy has read the split bytes once the first request is upstream; a proxy that holds
        # it until the second one is whole sends nothing yet, so the wait is short and bounded.
        deadline = time.monotonic() + 1
        while len(live.upstream.heads) == before and time.monotonic() < deadline:
            time.sleep(0.01)
        with contextlib.suppress(OSError):
            sock.sendall(two[30:])
        data = b""
        answers: list[int] = []
        while len(answers) < 2 and time.monotonic() < deadline + 10:
            try:
                chunk = sock.recv(65536)
            except OSError:
                break
            if not chunk:
                break
            data += chunk
            answers = [
                orjson.loads(r.body)["id"] for r in parse_responses(data)[0] if r.body.startswith(b"{")
            ]

    assert answers == [1, 2]
    check(
        live,
        [legacy_request(live, bridged_call(session, "tools/call", 3), [("Mcp-Session-Id", session)])],
        session,
    )
