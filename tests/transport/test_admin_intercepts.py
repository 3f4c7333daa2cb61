"""`/api/intercepts` and the held desk behind it: token rules, decisions refused, the long poll."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from proxy.config import Settings
from proxy.engine.gate.messages import seen
from proxy.runtime import Proxy
from proxy.transport.admin_intercepts import InterceptRoutes
from proxy.transport.intercept_desk import Decision, InterceptError
from proxy.wire.jsonrpc import classify_value

pytestmark = pytest.mark.asyncio


def bare_proxy(**settings: Any) -> Proxy:
    values = {"upstream": "http://127.0.0.1:9/mcp", "listen": "127.0.0.1:0", "admin_enabled": False}
    return Proxy(Settings(**{**values, **settings}))


@asynccontextmanager
async def intercept_api(listens_on: str, *, has_token: bool) -> AsyncIterator[tuple[str, Proxy]]:
    """The intercept routes alone, served on loopback, told the admin API listens on `listens_on`."""
    proxy = bare_proxy()
    app = web.Application()
    InterceptRoutes(proxy.intercepts, has_token=has_token, host=lambda: listens_on).add(app)
    server = TestServer(app, host="127.0.0.1", port=0)
    await server.start_server()
    try:
        yield str(server.make_url("/api/intercepts")), proxy
    finally:
        await server.close()


async def call(method: str, url: str, body: Any = None) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as http, http.request(method, url, json=body) as resp:
        return resp.status, await resp.json()


async def test_beyond_loopback_without_a_token_every_intercept_path_is_refused_naming_the_fix() -> None:
    async with intercept_api("192.0.2.10", has_token=False) as (url, proxy):
        for method, path, body in (
            ("GET", "", None),
            ("POST", "", {"rule": "*"}),
            ("DELETE", "", None),
            ("DELETE", "/i1", None),
            ("GET", "/wait?timeout=0", None),
            ("POST", "/held/h1", {"decision": "forward"}),
        ):
            status, answer = await call(method, url + path, body)
            assert status == 403, (method, path, answer)
            assert "--admin-token" in answer["message"]
            assert "intercepts are refused" in answer["message"]
        assert proxy.relays.gate is None


async def test_every_rules_timeout_is_listed_as_seconds_with_a_fraction() -> None:
    """A typed client reads `timeout_s` as a float whichever way the rule got its timeout."""
    async with intercept_api("127.0.0.1", has_token=False) as (url, _proxy):
        for body in ({"rule": "tool:a timeout=1s"}, {"rule": "tool:b"}, {"rule": "tool:c", "timeout": 2}):
            status, _answer = await call("POST", url, body)
            assert status == 201
        async with aiohttp.ClientSession() as http, http.get(url) as resp:
            text = await resp.text()
    assert re.findall(r'"timeout_s":([^,}]*)', text) == ["1.0", "60.0", "2.0"], text


async def test_with_a_token_or_on_loopback_rules_are_taken_and_bad_ones_refused() -> None:
    for host, has_token in (("192.0.2.10", True), ("127.0.0.1", False)):
        async with intercept_api(host, has_token=has_token) as (url, proxy):
            status, answer = await call("POST", url, {"rule": "tool:a", "timeout": 5})
            assert (status, answer["id"], answer["timeout_s"]) == (201, "i1", 5.0), answer
            assert proxy.relays.gate is proxy.faults.gate
            status, answer = await call("POST", url, {"rule": "tool:a timeout=later"})
            assert status == 400
            assert "timeout is a duration" in answer["message"]
            status, answer = await call("POST", url, ["tool:a"])
            assert status == 400
            status, answer = await call("POST", url, {"rule": "tool:b", "timeout": True})
            assert (status, answer["error"]) == (400, "bad_request"), answer
            assert "got True" in answer["message"]
            status, answer = await call("GET", url + "/wait?timeout=61")
            assert status == 400
            status, answer = await call("DELETE", url)
            assert answer == {"removed": 1, "released": 0}
            assert proxy.relays.gate is None


def held_call(proxy: Proxy, body: dict[str, Any], direction: str = "client") -> Any:
    """Hold `body` at the desk as the relay would; the task awaiting its decision."""
    msg = classify_value(body)
    judged = seen(msg, direction, era="legacy", session=None, asked={}, masks=proxy.redactor)
    fault = proxy.faults.gate.decide(judged)
    assert fault is not None
    side = "upstream" if direction == "client" else "client"
    return asyncio.get_running_loop().create_task(proxy.desk.hold(fault, "x1", msg, judged, side=side))


async def test_the_desk_refuses_what_cannot_apply_and_the_long_poll_wakes_on_a_new_hold() -> None:
    proxy = bare_proxy(intercepts=["*"], intercept_max_held=2)
    control = proxy.intercepts
    waiting = asyncio.get_running_loop().create_task(control.wait(None, 5))
    answer = held_call(proxy, {"jsonrpc": "2.0", "id": 4, "result": {"ok": True}})  # a client's answer
    woke = await asyncio.wait_for(waiting, 5)
    (held,) = woke["held"]
    first = held["id"]
    assert (held["kind"], held["direction"]) == ("response", "client")
    with pytest.raises(InterceptError) as caught:
        control.decide(first, {"decision": "answer", "result": {}})
    assert caught.value.status == 409
    assert "client's answer to the server's request" in caught.value.message
    note = held_call(proxy, {"jsonrpc": "2.0", "method": "notifications/progress", "params": {}})
    third = held_call(proxy, {"jsonrpc": "2.0", "id": 9, "method": "ping"})
    assert await asyncio.wait_for(third, 5) == Decision("forward", by="none")  # not held: 2 already are
    (newer,) = (await control.wait(first, 0))["held"]
    assert newer["kind"] == "notification"
    assert (await control.wait("h1", 0))["held"] == [newer]  # `after` needs only the number
    with pytest.raises(InterceptError) as caught:
        control.decide("h9", {"decision": "drop"})
    assert caught.value.status == 404
    assert f"held now: {first}, {newer['id']}" in caught.value.message
    assert control.decide(newer["id"], {"decision": "drop"}) == {"id": newer["id"], "decision": "drop"}
    assert (await asyncio.wait_for(note, 5)).verb == "drop"
    proxy.desk.drain()
    assert await asyncio.wait_for(answer, 5) == Decision("forward", by="drain")
    assert proxy.desk.released == {"drop": 1, "forward": 1}
    assert proxy.desk.held_total == 2


async def test_a_held_messages_id_cannot_be_guessed_from_its_number() -> None:
    async with intercept_api("127.0.0.1", has_token=False) as (url, proxy):
        status, _ = await call("POST", url, {"rule": "method:ping"})
        assert status == 201
        ping = held_call(proxy, {"jsonrpc": "2.0", "id": 1, "method": "ping"})
        status, answer = await call("GET", url + "/wait?timeout=5")
        (held,) = answer["held"]
        number, _, key = held["id"].partition("-")
        assert number == "h1"
        assert re.fullmatch(r"[0-9a-f]{8}", key), held["id"]
        status, answer = await call("POST", url + "/held/h1", {"decision": "drop"})  # a blind guess
        assert (status, answer["error"]) == (404, "not_found"), answer
        assert not ping.done()
        status, answer = await call("POST", url + f"/held/{held['id']}", {"decision": "drop"})
        assert (status, answer) == (200, {"id": held["id"], "decision": "drop"})
        assert (await asyncio.wait_for(ping, 5)).verb == "drop"
        other = held_call(proxy, {"jsonrpc": "2.0", "id": 2, "method": "ping"})
        (second,) = (await call("GET", url + f"/wait?timeout=5&after={held['id']}"))[1]["held"]
        assert second["id"].startswith("h2-")
        assert second["id"][3:] != key
        proxy.desk.drain()
        await asyncio.wait_for(other, 5)


async def test_a_decision_with_a_key_its_verb_does_not_take_is_refused_and_the_message_stays_held() -> None:
    proxy = bare_proxy(intercepts=["method:ping"])
    control = proxy.intercepts
    ping = held_call(proxy, {"jsonrpc": "2.0", "id": 1, "method": "ping"})
    (held,) = (await control.wait(None, 5))["held"]
    refusals = [
        (
            {"decision": "forward", "mesage": {}},
            "decision forward takes no key 'mesage' (did you mean message?)",
        ),
        (
            {"decision": "forward", "result": {}},
            "decision forward takes no key 'result'; it takes by, decision, message",
        ),
        ({"decision": "drop", "result": {}}, "decision drop takes no key 'result'; it takes by, decision"),
        ({"decision": "drop", "message": {}}, "decision drop takes no key 'message'"),
        (
            {"decision": "answer", "reslt": {}},
            "decision answer takes no key 'reslt' (did you mean result?)",
        ),
        ({"decision": "foward"}, "got 'foward' (did you mean forward?)"),
        ({"desicion": "forward"}, "got None; a decision takes no key 'desicion' (did you mean decision?)"),
    ]
    for body, reason in refusals:
        with pytest.raises(InterceptError) as caught:
            control.decide(held["id"], body)
        assert caught.value.status == 400, body
        assert reason in caught.value.message, (body, caught.value.message)
    assert [h["id"] for h in control.listing()["held"]] == [held["id"]]
    assert not ping.done()
    assert proxy.desk.released == {}
    assert control.decide(held["id"], {"decision": "drop", "by": "tui"})["decision"] == "drop"
    assert (await asyncio.wait_for(ping, 5)).verb == "drop"


async def test_a_new_rules_body_with_a_key_it_does_not_take_is_refused_and_adds_no_rule() -> None:
    async with intercept_api("127.0.0.1", has_token=False) as (url, proxy):
        status, answer = await call("POST", url, {"rule": "tool:x", "timout": "5s"})
        assert (status, answer["error"]) == (400, "bad_request"), answer
        assert answer["message"] == (
            "POST /api/intercepts takes no key 'timout' (did you mean timeout?); it takes rule, timeout"
        )
        assert proxy.relays.gate is None
        assert proxy.intercepts.listing()["rules"] == []
