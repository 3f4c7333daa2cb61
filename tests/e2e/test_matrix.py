"""Every client against every server, through ``mcp-proxy`` run as users run it, and directly.

Rows are clients, each a subprocess in its own environment (`tests.peers.clients`): the Python SDK
client in legacy and in 2026-07-28 mode, the TypeScript SDK v1 client (legacy) and the TypeScript
SDK v2 client pinned to 2026-07-28. Columns are servers, each a subprocess in its own environment: a
legacy-only and a 2026-07-28-only Python SDK server on uvicorn's h11 parser (what ``pip install mcp``
gives), and the TypeScript SDK v2 server (2026-07-28 only). Where the eras differ the proxy bridges
(both directions); where they match it passes through. One more column runs the legacy Python server
on httptools, uvicorn's other parser, with the two Python clients: the parser is the server's, so the
client does not matter there.

The proxy is the ``mcp-proxy`` command (`tests.sidecar.ProxyProcess`) with default settings but for
its listen and admin addresses (127.0.0.1:0): one proxy and one server per column, one client process
per cell running all its scenarios, so the module costs a few process starts per cell. Each scenario's
result must equal `expected_result`, the same for every cell. The direct cells (client and server of
one era, no proxy) prove the peers themselves are sound, so a failure through the proxy is the proxy's.

Scenarios: every one of `tests.peers.scenarios` except ``logging``, whose opt-in differs by era and SDK
(a legacy client sends ``logging/setLevel``, a 2026-07-28 client a per-request ``_meta`` level), so it
has no single expected result across the matrix; the bridge tests cover it.

A Markdown table of the matrix is written to ``<pytest basetemp>/matrix-report.md`` and printed at the
end of the module.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Final, Literal

import pytest

from tests.e2e.reports import publish_report
from tests.peers.clients import CLIENTS, ClientKind, ClientRun, run_client
from tests.peers.runner import NodeServer, PeerServer, ServedPeer
from tests.peers.scenarios import TOOL_CALLS, expected_result
from tests.sidecar import ProxyProcess, clean_env, settings_env

pytestmark = pytest.mark.e2e

SCENARIOS: Final = [*TOOL_CALLS, "progress", "list_tools", "prompts", "resources"]
"""Every scenario but `logging`: a legacy client opts in with logging/setLevel, a 2026-07-28 one per
request, so no one expected result holds across the matrix."""


@dataclass(frozen=True)
class Server:
    """One column: a server, the era it speaks, how to start it."""

    label: str
    era: Literal["legacy", "2026-07-28"]
    start: Callable[[], ServedPeer]


SERVERS: Final[dict[str, Server]] = {
    "py-legacy": Server("legacy-only Python SDK (h11)", "legacy", lambda: PeerServer("legacy-inflight")),
    "py-2026": Server("2026-07-28-only Python SDK (h11)", "2026-07-28", lambda: PeerServer("modern-mrtr")),
    "ts-v2": Server("TS SDK v2 server (2026-07-28 only)", "2026-07-28", lambda: NodeServer("ts-v2")),
    "py-legacy-httptools": Server(
        "legacy-only Python SDK (httptools)",
        "legacy",
        lambda: PeerServer("legacy-inflight", http="httptools"),
    ),
}
ROWS: Final[list[ClientKind]] = ["python-legacy", "python-2026", "ts-v1", "ts-v2"]
HTTPTOOLS_ROWS: Final[list[ClientKind]] = ["python-legacy", "python-2026"]

PROXY_CELLS: Final = [
    (client, server)
    for server in SERVERS
    for client in (HTTPTOOLS_ROWS if server == "py-legacy-httptools" else ROWS)
]
DIRECT_CELLS: Final = [
    (client, server)
    for server in SERVERS
    if server != "py-legacy-httptools"
    for client in ROWS
    if CLIENTS[client].mode == SERVERS[server].era
]


class Columns:
    """Servers and their proxies, started on first use and all stopped at the end of the module."""

    def __init__(self, stack: contextlib.ExitStack) -> None:
        self._stack = stack
        self._servers: dict[str, ServedPeer] = {}
        self._proxies: dict[str, ProxyProcess] = {}

    def server(self, name: str) -> ServedPeer:
        if name not in self._servers:
            self._servers[name] = self._stack.enter_context(SERVERS[name].start())
        return self._servers[name]

    def proxy(self, name: str) -> ProxyProcess:
        if name not in self._proxies:
            env = clean_env(**settings_env(upstream=self.server(name).url))
            self._proxies[name] = self._stack.enter_context(ProxyProcess(env))
        return self._proxies[name]


@pytest.fixture(scope="module")
def columns() -> Iterator[Columns]:
    with contextlib.ExitStack() as stack:
        yield Columns(stack)


@dataclass
class Report:
    """Each cell's run, for the table printed at the end of the module."""

    runs: dict[tuple[str, ClientKind, str], ClientRun] = field(default_factory=dict)

    def cell(self, path: str, client: ClientKind, server: str) -> str:
        run = self.runs.get((path, client, server))
        if run is None:
            return "-"
        failed = [name for name in SCENARIOS if mismatch(run, name)]
        passed = f"{len(SCENARIOS) - len(failed)}/{len(SCENARIOS)}"
        head = f"{passed}" if not failed else f"**FAIL {passed}**: {', '.join(failed)}"
        return f"{head} ({run.seconds:.1f}s)"

    def markdown(self) -> str:
        lines = [
            "# Client x server matrix",
            "",
            f"Scenarios per cell: {', '.join(SCENARIOS)}.",
            "Each cell: through `mcp-proxy` / direct (no proxy; only where the eras match).",
            "",
            "| client \\ server | " + " | ".join(s.label for s in SERVERS.values()) + " |",
            "|---|" + "---|" * len(SERVERS),
        ]
        for client in ROWS:
            cells = [
                f"proxy: {self.cell('proxy', client, s)}<br>direct: {self.cell('direct', client, s)}"
                for s in SERVERS
            ]
            lines.append(f"| {CLIENTS[client].label} | " + " | ".join(cells) + " |")
        return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def report(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Report]:
    """Collects every cell; at module end writes and prints the Markdown table."""
    collected = Report()
    yield collected
    if not collected.runs:
        return
    text = collected.markdown()
    publish_report(request, tmp_path_factory, "matrix", text)


def mismatch(run: ClientRun, scenario: str) -> str:
    """Why `scenario`'s line differs from the expected result, or empty when it matches."""
    got, want = run.lines[scenario], expected_result(scenario)
    if got == want:
        return ""
    got_text, want_text = json.dumps(got, sort_keys=True), json.dumps(want, sort_keys=True)
    return f"{scenario}:\n    got      {got_text}\n    expected {want_text}"


def failure_text(run: ClientRun, where: str, logs: dict[str, str]) -> str:
    problems = [text for name in SCENARIOS if (text := mismatch(run, name))]
    lines = [f"{run.kind} {where}: {len(problems)} of {len(SCENARIOS)} scenarios wrong", *problems]
    if run.failure:
        lines.append(f"client process: {run.failure}\n{run.stderr[-2000:]}")
    for name, text in logs.items():
        lines.append(f"--- {name} (tail) ---\n{text[-3000:]}")
    return "\n".join(lines)


def _id(cell: tuple[str, str]) -> str:
    return f"{cell[0]}-{cell[1]}"


CELL_TIMEOUT: Final = 150
"""Seconds a cell may take: the client's own bound (45 s) plus, for a column's first cell, starting its
server and proxy, each with a bounded readiness wait of its own; under a loaded CI machine the suite's
60 s default has been too tight for that sum."""


@pytest.mark.timeout(CELL_TIMEOUT)
@pytest.mark.parametrize(("client", "server"), PROXY_CELLS, ids=[_id(c) for c in PROXY_CELLS])
def test_cell_through_the_proxy_command_gives_the_expected_results(
    client: ClientKind, server: str, columns: Columns, report: Report
) -> None:
    proxy = columns.proxy(server)
    run = run_client(client, proxy.endpoint(), SCENARIOS)
    report.runs["proxy", client, server] = run
    logs = {"mcp-proxy stderr": proxy.stderr(), "server stderr": columns.server(server).stderr_text()}
    assert not any(mismatch(run, name) for name in SCENARIOS), failure_text(
        run, f"via proxy to {server}", logs
    )


@pytest.mark.timeout(CELL_TIMEOUT)
@pytest.mark.parametrize(("client", "server"), DIRECT_CELLS, ids=[_id(c) for c in DIRECT_CELLS])
def test_cell_direct_gives_the_expected_results(
    client: ClientKind, server: str, columns: Columns, report: Report
) -> None:
    peer = columns.server(server)
    run = run_client(client, peer.url, SCENARIOS)
    report.runs["direct", client, server] = run
    logs = {"server stderr": peer.stderr_text()}
    assert not any(mismatch(run, name) for name in SCENARIOS), failure_text(run, f"direct to {server}", logs)


def test_every_cell_of_the_issue_is_in_the_matrix() -> None:
    """The figure asked for: four clients x three servers through the proxy, none left out."""
    assert {(c, s) for c, s in PROXY_CELLS if s != "py-legacy-httptools"} == {
        (c, s) for c in ROWS for s in ("py-legacy", "py-2026", "ts-v2")
    }
