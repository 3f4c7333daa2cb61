"""Bytes the real `mcp-proxy` cannot read as HTTP/1.1 leave a trace: a warning naming the client and
the cause, and a count per cause in `/metrics`.

The most common one is a client given `https://` for the proxy's plain-HTTP port: `curl` reports only
a TLS error, so the proxy's line must say what happened and what to change. The others (a malformed
head, one too large, `CONNECT`, another HTTP version) are sent as raw bytes, and their answers read
off the wire.
"""

from __future__ import annotations

import asyncio
import subprocess
from urllib.parse import urlsplit

import pytest

from tests.e2e.commanded import Commanded, ProxyFleet
from tests.peers.runner import PeerServer
from tests.sidecar import until

pytestmark = pytest.mark.e2e

WAIT = 20.0

TLS_CLIENT_HELLO_START = b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"
"""The first bytes of a TLS 1.2/1.3 ClientHello: a handshake record, then the hello's own header."""

BARE_LF = b"POST /mcp HTTP/1.1\r\nHost: x\r\nX-A: 1\nB: 2\r\nContent-Length: 2\r\n\r\n{}"
UNREADABLE = [
    ("head_too_large", b"GET /mcp HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 200_000 + b"\r\n\r\n", 431),
    ("not_implemented", b"CONNECT evil.example:443 HTTP/1.1\r\nHost: evil.example:443\r\n\r\n", 501),
    ("http_version", b"POST /mcp HTTP/2.0\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}", 505),
]


def _unreadable(proxy: Commanded, cause: str) -> list[dict[str, object]]:
    return [
        e for e in proxy.lines() if e.get("event") == "client_request_unreadable" and e.get("cause") == cause
    ]


async def _refused(proxy: Commanded, raw: bytes) -> tuple[bytes, str]:
    """What the proxy answers to `raw` until it closes the connection, and the client's address."""
    listen = urlsplit(proxy.endpoint())
    reader, writer = await asyncio.wait_for(asyncio.open_connection(listen.hostname, listen.port), WAIT)
    try:
        host, port = writer.get_extra_info("sockname")[:2]
        writer.write(raw)
        return await asyncio.wait_for(reader.read(), WAIT), f"{host}:{port}"
    finally:
        writer.close()


async def test_curl_given_https_for_the_plain_port_leaves_a_warning_saying_so_and_a_count(
    fleet: ProxyFleet, legacy_server: PeerServer
) -> None:
    proxy = await fleet.at(legacy_server)
    https = proxy.endpoint().replace("http://", "https://", 1)
    done = await asyncio.to_thread(
        subprocess.run, ["curl", "-sk", "--max-time", "10", https], capture_output=True, timeout=WAIT
    )
    assert done.returncode == 35, done  # curl's "TLS connect error": all the user sees
    await until(lambda: bool(_unreadable(proxy, "tls_handshake")), what="the TLS warning", seconds=WAIT)
    (line,) = _unreadable(proxy, "tls_handshake")
    assert line["level"] == "warning"
    assert line["status"] == 400
    assert str(line["peer"]).startswith("127.0.0.1:")
    assert "spoke TLS to this plain-HTTP port" in str(line["hint"])
    assert "http://" in str(line["hint"])
    assert await proxy.counted('mcp_proxy_client_requests_unreadable_total{cause="tls_handshake"}') == 1

    # What curl got, read off the wire: a plain-HTTP 400, then the close.
    answer, _peer = await _refused(proxy, TLS_CLIENT_HELLO_START + b" the rest of a hello")
    assert answer.startswith(b"HTTP/1.1 400 Bad Request\r\n"), answer
    assert b"\r\nConnection: close\r\n" in answer.partition(b"\r\n\r\n")[0], answer
    assert await proxy.counted('mcp_proxy_client_requests_unreadable_total{cause="tls_handshake"}') == 2


@pytest.mark.parametrize(("cause", "raw", "status"), UNREADABLE, ids=[c for c, _, _ in UNREADABLE])
async def test_an_unreadable_request_leaves_a_warning_and_a_count_by_cause(
    fleet: ProxyFleet, legacy_server: PeerServer, cause: str, raw: bytes, status: int
) -> None:
    proxy = await fleet.at(legacy_server)
    answer, peer = await _refused(proxy, raw)
    assert answer.startswith(b"HTTP/1.1 %d " % status), answer
    await until(lambda: bool(_unreadable(proxy, cause)), what=f"the {cause} warning", seconds=WAIT)
    (line,) = _unreadable(proxy, cause)
    assert (line["level"], line["status"], line["peer"]) == ("warning", status, peer)
    assert "hint" not in line  # the TLS hint is for TLS only
    assert await proxy.counted(f'mcp_proxy_client_requests_unreadable_total{{cause="{cause}"}}') == 1


async def test_a_flood_of_malformed_requests_is_one_warning_and_every_one_is_counted(
    fleet: ProxyFleet, legacy_server: PeerServer
) -> None:
    proxy = await fleet.at(legacy_server)
    for _ in range(5):
        answer, _peer = await _refused(proxy, BARE_LF)
        assert answer.startswith(b"HTTP/1.1 400 Bad Request\r\n"), answer
    sample = 'mcp_proxy_client_requests_unreadable_total{cause="malformed"}'
    assert await proxy.counted(sample) == 5
    await proxy.settled()  # every line before the barrier's is read
    lines = _unreadable(proxy, "malformed")
    assert len(lines) == 1, lines
    assert "also_unlogged" not in lines[0]
    assert str(lines[0]["reason"]).startswith("malformed HTTP request")
