"""`/api/faults`: refused beyond loopback without a token, guarded by the token like the rest."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from proxy.config import Settings
from proxy.runtime import Proxy
from proxy.transport.admin_faults import FaultRoutes
from proxy.transport.fault_control import FaultControl

pytestmark = pytest.mark.asyncio


@asynccontextmanager
async def fault_api(listens_on: str, *, has_token: bool) -> AsyncIterator[tuple[str, FaultControl]]:
    """The fault routes alone, served on loopback, told the admin API listens on `listens_on`."""
    proxy = Proxy(Settings(upstream="http://127.0.0.1:9/mcp", listen="127.0.0.1:0", admin_enabled=False))
    control = proxy.faults
    app = web.Application()
    FaultRoutes(control, has_token=has_token, host=lambda: listens_on).add(app)
    server = TestServer(app, host="127.0.0.1", port=0)
    await server.start_server()
    try:
        yield str(server.make_url("/api/faults")), control
    finally:
        await server.close()


async def call(method: str, url: str, body: Any = None, token: str | None = None) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with aiohttp.ClientSession() as http, http.request(method, url, json=body, headers=headers) as resp:
        return resp.status, await resp.json()


async def test_beyond_loopback_without_a_token_every_fault_path_is_refused_naming_the_fix() -> None:
    async with fault_api("192.0.2.10", has_token=False) as (url, control):
        for method, body in (("GET", None), ("POST", {"rule": "* => drop"}), ("DELETE", None)):
            status, answer = await call(method, url, body)
            assert status == 403, (method, answer)
            assert "--admin-token" in answer["message"]
            assert "192.0.2.10" in answer["message"]
        assert len(control.gate) == 0
        assert control.relays.gate is None


async def test_beyond_loopback_with_a_token_and_on_loopback_without_one_rules_are_taken() -> None:
    for host, has_token in (("192.0.2.10", True), ("127.0.0.1", False), ("::1", False)):
        async with fault_api(host, has_token=has_token) as (url, control):
            status, answer = await call("POST", url, {"rules": ["tool:a => drop", "tool:b => delay=5ms"]})
            assert status == 201, answer
            assert [rule["id"] for rule in answer["rules"]] == ["f1", "f2"]
            assert control.relays.gate is control.gate


async def test_a_bad_body_or_rule_adds_nothing_and_says_what_to_send() -> None:
    async with fault_api("127.0.0.1", has_token=False) as (url, control):
        bodies: list[Any] = [
            {"rule": 3},
            {"rules": []},
            ["* => drop"],
            {"rule": "tool:a => drop", "rules": ["tool:b => drop"]},  # one would be ignored
            {"rules": ["* => drop", "* => nope"]},
        ]
        for body in bodies:
            status, answer = await call("POST", url, body)
            assert status == 400, answer
        assert "unknown action 'nope'" in answer["message"]
        assert len(control.gate) == 0  # all or none


async def test_a_body_key_the_endpoint_does_not_take_is_refused_naming_it_and_adds_nothing() -> None:
    async with fault_api("127.0.0.1", has_token=False) as (url, control):
        status, answer = await call("POST", url, {"rule": "tool:a => drop", "cont": 1})
        assert (status, answer["error"]) == (400, "bad_request"), answer
        assert "POST /api/faults takes no key 'cont'; it takes rule, rules" in answer["message"]
        status, answer = await call("POST", url, {"ruels": ["tool:a => drop"]})
        assert "takes no key 'ruels' (did you mean rules?)" in answer["message"], answer
        assert len(control.gate) == 0


async def test_with_a_token_the_admin_guard_asks_for_it_first() -> None:
    settings = Settings(
        upstream="http://127.0.0.1:9/mcp", listen="127.0.0.1:0", admin="127.0.0.1:0", admin_token="t0ken-abc"
    )
    proxy = Proxy(settings)
    await proxy.start()
    try:
        assert proxy.admin_url is not None
        url = proxy.admin_url + "/api/faults"
        status, _ = await call("POST", url, {"rule": "* => drop"})
        assert status == 401
        status, answer = await call("POST", url, {"rule": "* => drop"}, token="t0ken-abc")
        assert status == 201, answer
        status, answer = await call("DELETE", url, token="t0ken-abc")
        assert (status, answer) == (200, {"removed": 1})
        assert proxy.relays.gate is None
    finally:
        await proxy.stop()
