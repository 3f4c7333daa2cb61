"""The `mcp-proxy` command as the e2e tests drive it: rules, decisions and every mark read through the
admin API (with its token) and the JSON log, as a user or a script would.

Starting the command costs a process and its imports, so a module's tests share one per upstream
(`ProxyFleet`, the `fleet` module fixture of tests/e2e/conftest.py): each test begins with `begin()`,
which takes every rule out of force through the admin API and marks where its own chains, log lines
and counters start, so what a test reads is what its own traffic did. A test whose settings differ
from the defaults (a seed, a bound, a signal that ends the process) starts its own with `own_proxy`.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator, Mapping
from typing import Any

import aiohttp

from tests.peers.runner import PeerServer
from tests.sidecar import ProxyProcess, clean_env, settings_env, until

TOKEN = "e2e-admin-token-not-a-secret"
"""The admin token of the tests' proxies (loopback only): every admin request below carries it."""

WAIT = 20.0
"""Seconds any wait below gives the proxy."""

BARRIER_RULE = "method:e2e/log-barrier => delay=1ms"
"""A fault rule no message matches: added and removed to learn that the log has caught up."""


def command_env(upstream: str, **settings: object) -> dict[str, str]:
    """The environment a user running `mcp-proxy` beside `upstream` sets: JSON logs, free loopback
    ports, the admin token; every other setting its default unless given."""
    return clean_env(**settings_env(upstream=upstream, admin_token=TOKEN, **settings))


class Commanded:
    """One running `mcp-proxy`, seen from outside: its MCP endpoint, admin API and stderr log."""

    def __init__(self, process: ProxyProcess) -> None:
        self.process = process
        self.admin_url = process.admin
        self._seen: set[str] = set()
        self._event_mark = 0
        self._counters: dict[str, float] = {}

    def endpoint(self) -> str:
        return self.process.endpoint()

    def http(self) -> aiohttp.ClientSession:
        """A session whose requests carry the admin token, as a script's would."""
        return aiohttp.ClientSession(
            headers={"Authorization": f"Bearer {TOKEN}"}, timeout=aiohttp.ClientTimeout(total=WAIT + 40)
        )

    async def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """One admin request: its status and decoded JSON answer."""
        async with self.http() as http, http.request(method, self.admin_url + path, json=body) as resp:
            text = await resp.text()
            return resp.status, (await resp.json()) if text else None

    # -- a test's start -----------------------------------------------------------------------------

    async def begin(self) -> Commanded:
        """No rule in force (a rule an earlier test left would act on this one's traffic); marked."""
        for path in ("/api/intercepts", "/api/faults"):
            status, answer = await self.call("DELETE", path)
            assert status == 200, answer
        return await self.mark()

    async def mark(self) -> Commanded:
        """A test's chains, log lines and counters count from here."""
        self._seen = {chain["id"] for chain in await self._all_chains()}
        self._event_mark = len(self.process.events())
        self._counters = counters(await self.metrics())
        return self

    async def add_faults(self, *rules: str) -> list[str]:
        """Put fault rules in force (`POST /api/faults`); their ids."""
        status, answer = await self.call("POST", "/api/faults", {"rules": list(rules)})
        assert status == 201, answer
        return [rule["id"] for rule in answer["rules"]]

    async def add_intercept(self, rule: str) -> str:
        """Put an intercept rule in force (`POST /api/intercepts`); its id."""
        status, answer = await self.call("POST", "/api/intercepts", {"rule": rule})
        assert status == 201, answer
        return str(answer["id"])

    # -- what the test's traffic did ----------------------------------------------------------------

    async def _all_chains(self) -> list[dict[str, Any]]:
        status, found = await self.call("GET", "/api/chains?limit=100000")
        assert status == 200, found
        assert isinstance(found, list)
        return found

    async def chains(self) -> list[dict[str, Any]]:
        """The chains this test's traffic made (`GET /api/chains`, less those there at `begin`)."""
        return [chain for chain in await self._all_chains() if chain["id"] not in self._seen]

    async def notes(self) -> list[str]:
        return [note for chain in await self.chains() for note in chain.get("notes", [])]

    async def messages(self, chain_id: str) -> list[dict[str, Any]]:
        """The records of one chain, in order (`GET /api/chains/{id}`)."""
        status, found = await self.call("GET", f"/api/chains/{chain_id}")
        assert status == 200, found
        messages: list[dict[str, Any]] = found["messages"]
        return messages

    async def har_entries(self) -> list[dict[str, Any]]:
        """The running proxy's HAR entries (`GET /api/export.har`)."""
        status, found = await self.call("GET", "/api/export.har?limit=100000")
        assert status == 200, found
        entries: list[dict[str, Any]] = found["log"]["entries"]
        return entries

    async def metrics(self) -> str:
        async with self.http() as http, http.get(self.admin_url + "/metrics") as resp:
            assert resp.status == 200
            return await resp.text()

    async def counted(self, sample: str) -> float:
        """How much the /metrics sample (`name{labels}`) grew since `begin`."""
        now = counters(await self.metrics())
        return now.get(sample, 0.0) - self._counters.get(sample, 0.0)

    def lines(self) -> list[dict[str, Any]]:
        """The JSON log lines written since `begin`."""
        return self.process.events()[self._event_mark :]

    async def settled(self) -> None:
        """Every exchange closed (`mcp_proxy_open_exchanges` 0) and its log line read.

        The exchange line is written as the exchange closes; a rule added and removed afterwards
        logs a line behind it, so once that one is read every line before it is too.
        """
        await self.no_exchange_open()
        (barrier,) = await self.add_faults(BARRIER_RULE)
        status, _ = await self.call("DELETE", f"/api/faults/{barrier}")
        assert status == 200

        def removed() -> bool:
            return any(
                e.get("event") == "fault_rule_removed" and e.get("rule") == barrier for e in self.lines()
            )

        await until(removed, what=f"the log line of fault rule {barrier}'s removal", seconds=WAIT)

    async def no_exchange_open(self) -> None:
        """Wait (bounded) for /metrics to show no client exchange in flight."""
        async with asyncio.timeout(WAIT):
            while True:
                if counters(await self.metrics()).get("mcp_proxy_open_exchanges") == 0.0:
                    return
                await asyncio.sleep(0.02)


SAMPLE = re.compile(r"^([a-zA-Z_:][\w:]*(?:\{[^}]*\})?) (\S+)$")


def counters(text: str) -> dict[str, float]:
    """The samples of a Prometheus text exposition, by `name{labels}`."""
    found: dict[str, float] = {}
    for line in text.splitlines():
        if (match := SAMPLE.match(line)) is not None:
            found[match.group(1)] = float(match.group(2))
    return found


class ProxyFleet:
    """The module's `mcp-proxy` runs with default settings, one per upstream, started on first use."""

    def __init__(self, stack: contextlib.ExitStack) -> None:
        self._stack = stack
        self._running: dict[str, Commanded] = {}

    async def at(self, upstream: PeerServer) -> Commanded:
        """The shared proxy in front of `upstream`, with no rule in force and fresh marks."""
        if upstream.url not in self._running:
            process = ProxyProcess(command_env(upstream.url))
            await asyncio.to_thread(process.start)
            self._stack.callback(process.stop)
            self._running[upstream.url] = Commanded(process)
        return await self._running[upstream.url].begin()


@contextlib.asynccontextmanager
async def own_proxy(
    upstream: str, *args: str, env: Mapping[str, str] | None = None
) -> AsyncIterator[Commanded]:
    """An `mcp-proxy` of this test's own (flags `args`, settings `env`), stopped when it ends."""
    process = ProxyProcess({**command_env(upstream), **(env or {})}, *args)
    await asyncio.to_thread(process.start)
    try:
        yield await Commanded(process).mark()
    finally:
        await asyncio.to_thread(process.stop)
