"""The demo's conductor: start both servers and a proxy before each, run the four client x server
combinations, print what happened, and stop everything it started.

Everything runs in this process and event loop on loopback ports the OS picks: the two SDK servers
(uvicorn, signal handling left to us), two `proxy.runtime.Proxy` instances, and the scripted SDK
clients. With `--tui` the TUI shows both proxies' chains live while the clients run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import logging
import socket
import sys
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Final, TextIO

import uvicorn

from proxy.config import Settings
from proxy.demo.clients import SCRIPT, CallOutcome, run_client
from proxy.demo.servers import build_app
from proxy.flows.events import Mode
from proxy.runtime import Proxy

ERA_WORD: Final = {"legacy": "legacy", "modern": "2026-07-28"}
MODE_WORD: Final = {
    Mode.PASSTHROUGH.value: "pass-through",
    Mode.LEGACY_TO_MRTR.value: "legacy→mrtr bridge",
    Mode.MRTR_TO_LEGACY.value: "mrtr→legacy bridge",
    Mode.LOCAL.value: "answered by proxy",
}
COMBINATIONS: Final[list[tuple[str, str, Mode]]] = [
    ("legacy", "legacy", Mode.PASSTHROUGH),
    ("modern", "modern", Mode.PASSTHROUGH),
    ("legacy", "modern", Mode.LEGACY_TO_MRTR),
    ("modern", "legacy", Mode.MRTR_TO_LEGACY),
]
"""(client era, server era, the mode the proxy must pick) for each run."""

START_TIMEOUT: Final = 15.0


@dataclass(slots=True)
class ComboResult:
    """How one client x server combination went."""

    client: str
    server: str
    expected_mode: str
    modes: list[str] = field(default_factory=list)
    calls: list[CallOutcome] = field(default_factory=list)
    unavailable: str | None = None

    @property
    def label(self) -> str:
        """'legacy client → 2026-07-28 server'."""
        return f"{ERA_WORD[self.client]} client → {ERA_WORD[self.server]} server"

    @property
    def ok(self) -> bool:
        """Every call gave its expected result, through the mode this combination needs."""
        return (
            self.unavailable is None
            and len(self.calls) == len(SCRIPT)
            and all(c.ok for c in self.calls)
            and self.modes == [self.expected_mode]
        )

    def as_json(self) -> dict[str, Any]:
        """Plain data for `--json`."""
        data = asdict(self)
        data.update(label=self.label, ok=self.ok)
        return data


class _Server(uvicorn.Server):
    """uvicorn without its own signal handlers: the demo (or the TUI) owns Ctrl+C."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.ready = asyncio.Event()

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        """Start as uvicorn does, then say so (uvicorn itself offers no event to wait on)."""
        await super().startup(sockets=sockets)
        self.ready.set()


async def _start_server(group: asyncio.TaskGroup, era: str) -> tuple[_Server, str]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        build_app(era), log_config=None, access_log=False, lifespan="on", timeout_graceful_shutdown=1
    )
    server = _Server(config)
    group.create_task(server.serve(sockets=[sock]), name=f"demo-server-{era}")
    async with asyncio.timeout(START_TIMEOUT):
        await server.ready.wait()
    return server, f"http://127.0.0.1:{port}/mcp"


def _modes(proxy: Proxy, client_era: str) -> list[str]:
    return sorted(
        {
            c.summary.mode.value
            for c in proxy.chains()
            if c.summary.method == "tools/call" and c.summary.client_era == client_era
        }
    )


async def drive(proxies: dict[str, Proxy], out: TextIO) -> list[ComboResult]:
    """Run every combination in turn, printing one line each as it finishes."""
    results: list[ComboResult] = []
    for client, server, mode in COMBINATIONS:
        proxy = proxies[server]
        result = ComboResult(client, server, mode.value)
        if mode is not Mode.PASSTHROUGH and mode not in proxy.router.bridges:
            result.unavailable = f"this proxy has no {mode.value} bridge yet"
        else:
            result.calls = await run_client(proxy.endpoint(), client)
            result.modes = _modes(proxy, client)
        results.append(result)
        print(f"  {result.label:<40} {_outcome(result)}", file=out, flush=True)
    return results


def _outcome(result: ComboResult) -> str:
    if result.unavailable:
        return f"unavailable: {result.unavailable}"
    good = sum(1 for c in result.calls if c.ok)
    modes = ", ".join(MODE_WORD.get(m, m) for m in result.modes) or "no chain"
    return f"{modes:<20} {good}/{len(SCRIPT)} calls ok" + ("" if result.ok else "  ✗")


def summary(results: Sequence[ComboResult]) -> str:
    """The table printed at the end: combination, mode, calls ok/failed, then each failure."""
    lines = [f"{'combination':<40} {'mode':<20} calls", "-" * 72]
    for r in results:
        if r.unavailable:
            lines.append(f"{r.label:<40} {MODE_WORD[r.expected_mode]:<20} unavailable")
            continue
        good = sum(1 for c in r.calls if c.ok)
        modes = ", ".join(MODE_WORD.get(m, m) for m in r.modes) or "(no chain)"
        lines.append(f"{r.label:<40} {modes:<20} {good} ok, {len(r.calls) - good} failed")
    for r in results:
        if r.unavailable:
            lines.append(f"\n{r.label}: {r.unavailable}")
        for call in r.calls:
            if not call.ok:
                lines.append(f"\n{r.label}: {call.label} ({call.tool}) failed: {call.detail}")
        if not r.unavailable and r.calls and r.modes != [r.expected_mode]:
            lines.append(f"\n{r.label}: expected {MODE_WORD[r.expected_mode]}, the proxy chose {r.modes}")
    verdict = "all combinations succeeded" if results and all(r.ok for r in results) else "NOT all succeeded"
    lines.append(f"\n{sum(r.ok for r in results)}/{len(COMBINATIONS)} combinations ok: {verdict}")
    return "\n".join(lines)


async def run_demo(*, tui: bool = False, out: TextIO = sys.stdout) -> list[ComboResult]:
    """Start servers and proxies, run the combinations (under the TUI if asked), stop everything."""
    async with asyncio.TaskGroup() as group:
        servers: dict[str, _Server] = {}
        try:
            proxies: dict[str, Proxy] = {}
            for era in ("legacy", "modern"):
                servers[era], url = await _start_server(group, era)
                proxies[era] = Proxy(Settings(upstream=url, listen="127.0.0.1:0", admin_enabled=False))
            feeds = (
                {era: proxy.bus.subscribe(f"demo-tui-{era}") for era, proxy in proxies.items()} if tui else {}
            )
            try:
                for proxy in proxies.values():
                    await proxy.start()
                _introduce(proxies, out)
                if tui:
                    return await _under_tui(proxies, feeds)
                return await drive(proxies, out)
            finally:
                for proxy in proxies.values():
                    await proxy.stop()
        finally:
            for server in servers.values():
                server.should_exit = True


def _introduce(proxies: dict[str, Proxy], out: TextIO) -> None:
    print("mcp-proxy demo: two bundled MCP servers on loopback, a proxy in front of each", file=out)
    for era, proxy in proxies.items():
        upstream = proxy.settings.upstream
        print(f"  {ERA_WORD[era]:<11} server {upstream}  ←  proxy {proxy.endpoint()}", file=out)
    print(file=out, flush=True)


async def _under_tui(proxies: dict[str, Proxy], feeds: dict[str, Any]) -> list[ComboResult]:
    from ui.app import ProxyTui
    from ui.feeds import BusFeed, MergedFeed

    merged = MergedFeed(
        [
            BusFeed(feeds["legacy"], "legacy server's proxy", prefix="L:"),
            BusFeed(feeds["modern"], "2026-07-28 server's proxy", prefix="M:"),
        ]
    )
    app = ProxyTui(merged, no_desk="the demo's proxies take no fault or intercept rules")
    results: list[ComboResult] = []

    async def tour() -> None:
        results.extend(await drive(proxies, io.StringIO()))
        app.announce(finished_notice(results))

    async with asyncio.TaskGroup() as group:
        touring = group.create_task(tour(), name="demo-tour")
        await app.run_async()
        touring.cancel()
    return results


def finished_notice(results: list[ComboResult]) -> str:
    """The line the TUI keeps in its status bar once the tour is over (a toast would cover the bar)."""
    good = sum(r.ok for r in results)
    return f"demo finished: {good}/{len(COMBINATIONS)} combinations ok — q quits"


def _quiet_logging() -> None:
    """Server and SDK log records go nowhere: the demo prints its own lines (or the TUI owns the screen)."""
    root = logging.getLogger()
    root.addHandler(logging.NullHandler())
    for name in ("uvicorn", "uvicorn.error", "mcp", "httpx", "httpx2"):
        logging.getLogger(name).setLevel(logging.CRITICAL + 10)


def main(argv: Sequence[str] | None = None) -> int:
    """`mcp-proxy demo [--tui] [--json]`: 0 when every combination succeeded."""
    parser = argparse.ArgumentParser(prog="mcp-proxy demo", description=__doc__)
    parser.add_argument("--tui", action="store_true", help="show the chains live in the TUI")
    parser.add_argument("--json", action="store_true", help="print the results as JSON instead of a table")
    args = parser.parse_args(argv)
    from proxy import logs

    logs.configure(quiet=True)
    _quiet_logging()
    out = io.StringIO() if args.json else sys.stdout
    results = asyncio.run(run_demo(tui=args.tui, out=out))
    if args.json:
        print(json.dumps([r.as_json() for r in results], indent=2))
    else:
        print("\n" + summary(results))
    return 0 if len(results) == len(COMBINATIONS) and all(r.ok for r in results) else 1
