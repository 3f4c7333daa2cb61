"""The admin API refuses what a web page in the user's browser can send: a cross-site POST (a foreign
`Origin`, a body that is not JSON) and a read through DNS rebinding (a `Host` that is not loopback).

Each request is sent as a browser would send it, header for header, to a running proxy's admin API.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import pytest

from proxy.config import Settings
from proxy.runtime import Proxy

pytestmark = pytest.mark.asyncio

TOKEN = "guard-test-token-0123"


@asynccontextmanager
async def running(**overrides: Any) -> AsyncIterator[tuple[Proxy, str]]:
    """A proxy whose admin API listens on a free loopback port, with its port; always stopped."""
    proxy = Proxy(
        Settings(upstream="http://127.0.0.1:9/mcp", listen="127.0.0.1:0", admin="127.0.0.1:0", **overrides)
    )
    await proxy.start()
    try:
        assert proxy.admin_url is not None
        yield proxy, proxy.admin_url
    finally:
        await proxy.stop()


async def send(
    method: str, url: str, headers: dict[str, str] | None = None, data: bytes | None = None
) -> tuple[int, Any]:
    """One request with exactly these headers (aiohttp adds Host only when it is not given)."""
    async with (
        aiohttp.ClientSession(skip_auto_headers=("Content-Type",)) as http,
        http.request(method, url, headers=headers or {}, data=data) as resp,
    ):
        return resp.status, await resp.json(content_type=None)


async def test_a_cross_site_text_plain_post_from_a_web_page_adds_no_rule() -> None:
    async with running() as (proxy, url):
        port = url.rsplit(":", 1)[1]
        page = {"Origin": "http://evil.example", "Content-Type": "text/plain;charset=UTF-8"}
        for path, body in (
            ("/api/faults", b'{"rule": "method:tools/call => error=-32603:csrf"}'),
            ("/api/intercepts", b'{"rule": "method:tools/call"}'),
        ):
            status, answer = await send("POST", url + path, page, body)
            assert (status, answer["error"]) == (403, "forbidden"), answer
            assert "Origin 'http://evil.example'" in answer["message"]
            assert f"http://127.0.0.1:{port}" in answer["message"]
            # Without Origin (a page whose browser leaves it out), text/plain is still no JSON.
            status, answer = await send("POST", url + path, {"Content-Type": "text/plain"}, body)
            assert (status, answer["error"]) == (415, "unsupported_media_type"), answer
            assert "Content-Type: application/json" in answer["message"]
            status, answer = await send("POST", url + path, None, body)  # none at all
            assert status == 415, answer
        assert len(proxy.faults.gate) == 0
        assert proxy.intercepts.listing()["rules"] == []


async def test_the_same_post_as_json_from_the_admin_apis_own_origin_is_taken() -> None:
    async with running() as (_proxy, url):
        port = url.rsplit(":", 1)[1]
        own = {"Content-Type": "application/json", "Origin": f"http://127.0.0.1:{port}"}
        status, answer = await send("POST", url + "/api/faults", own, b'{"rule": "tool:a => drop"}')
        assert status == 201, answer
        status, answer = await send("DELETE", url + "/api/faults/f1")  # no body: no Content-Type needed
        assert (status, answer) == (200, {"removed": 1})


async def test_a_rebound_name_reads_nothing_without_a_token_and_loopback_names_read_everything() -> None:
    async with running() as (_proxy, url):
        port = url.rsplit(":", 1)[1]
        for path in ("/api/chains", "/api/feed?history=0", "/api/intercepts", "/metrics", "/nowhere"):
            status, answer = await send("GET", url + path, {"Host": f"rebind.evil.example:{port}"})
            assert (status, answer["error"]) == (403, "forbidden"), (path, answer)
            assert "Host 'rebind.evil.example:" in answer["message"]
            assert "--admin-token" in answer["message"]
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"LOCALHOST:{port}", "127.0.0.1"):
            status, answer = await send("GET", url + "/api/chains", {"Host": host})
            assert (status, answer) == (200, []), host
        status, answer = await send(
            "GET", url + "/api/chains", {"Origin": "http://rebind.evil.example:" + port}
        )
        assert status == 403, answer  # a page's fetch names its origin even when Host is loopback


async def test_with_a_token_any_host_is_served_but_a_foreign_origin_is_still_refused() -> None:
    async with running(admin_token=TOKEN) as (_proxy, url):
        bearer = {"Authorization": f"Bearer {TOKEN}"}
        status, answer = await send("GET", url + "/api/chains", {**bearer, "Host": "sidecar:9901"})
        assert (status, answer) == (200, [])
        status, answer = await send("GET", url + "/api/chains", {**bearer, "Origin": "https://evil.example"})
        assert status == 403, answer


async def test_probes_are_answered_whatever_host_or_origin_they_name() -> None:
    async with running() as (_proxy, url):
        foreign = {"Host": "10.1.2.3:9901", "Origin": "http://evil.example"}
        status, answer = await send("GET", url + "/healthz", foreign)
        assert (status, answer) == (200, {"status": "ok"})


async def test_a_method_the_path_does_not_take_is_405_naming_the_allowed_ones_before_any_content_type() -> (
    None
):
    """What to fix first is the method: a `POST /metrics` with JSON would be refused all the same."""
    async with running() as (_proxy, url):
        wrong_method = {}
        for path in ("/metrics", "/api/chains", "/api/faults/f1"):
            async with (
                aiohttp.ClientSession(skip_auto_headers=("Content-Type",)) as http,
                http.post(url + path, data=b"x") as resp,
            ):
                wrong_method[path] = (resp.status, resp.headers.get("Allow"), (await resp.json())["error"])
        unknown = await send("POST", url + "/nowhere", {"Content-Type": "text/plain"}, b"x")

    assert wrong_method == {
        "/metrics": (405, "GET,HEAD", "method_not_allowed"),
        "/api/chains": (405, "GET,HEAD", "method_not_allowed"),
        "/api/faults/f1": (405, "DELETE", "method_not_allowed"),
    }
    assert (unknown[0], unknown[1]["error"]) == (404, "not_found")
