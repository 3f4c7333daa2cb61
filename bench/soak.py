"""The soak: mixed MCP traffic through `mcp-proxy` for N minutes, then capture completeness and resources.

    python bench/soak.py --minutes 30 --name soak-30min       # the full run (about 31 minutes)
    python bench/soak.py --minutes 2 --name soak-2min         # a quick one

Two proxies run as users run them (`python -m proxy.cli`, JSON log to a file, JSONL capture, admin API
on so chains are built live): one in front of the SDK's legacy in-flight server, one in front of its
2026-07-28 MRTR server (the peers of `tests/peers`, each in its own environment). SDK clients of both
eras (`mcp.Client`, legacy and 2026-07-28) call through both, so every path is exercised at once:
pass-through legacy, pass-through 2026-07-28, legacy client -> 2026-07-28 server, 2026-07-28 client ->
legacy server. Each worker loops over a mix of scenarios:

- `echo`: a call whose argument is a marker, echoed in the result (and in a log line to legacy clients);
- `progress`: a call streaming progress notifications (SSE), counted in the call's chain;
- `elicit`: a call that asks the user's name, answered with a marker the result then greets
  (in-flight on the legacy server, `input_required` rounds on the modern one, bridged across);
- `cancel`: a streaming call cancelled after its first progress notification;
- `vanish`: a client that disappears (connections closed) while the server waits for its answer;
- each client opens its session (legacy clients hold the GET stream open) and closes it after a few calls.

Every message a client saw that carries a marker is counted as it arrives. At the end the proxies are
stopped (SIGTERM: captures flushed) and `proxy.record.completeness.check_capture` counts each marker in
the client-facing records of each capture: completeness is the share of markers found exactly as many
times as the clients saw them. RSS, open descriptors and the proxy's own gauges (open exchanges and
streams, parked continuations, stored chains; the proxy exposes no task count) are sampled every
`--sample-seconds` (default 60); the slope is a least-squares fit over the samples after the first.
Results: `<out>/<name>/soak.json` and `soak.md`. Every wait is bounded; every process is stopped.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import random
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent))

import httpx2  # noqa: E402  (after the path set-up: bench/ is not a package)
import mcp_types as types  # noqa: E402
from mcp import Client  # noqa: E402
from mcp.client.session import ClientRequestContext  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402
from run import PROXY_ROOT, Processes, free_port, memory_kib, wait_port  # noqa: E402

from proxy.flows.events import MessageRecorded  # noqa: E402
from proxy.record.completeness import Expected, capture_files, check_capture, read_events  # noqa: E402
from tests.peers.runner import PeerServer  # noqa: E402

PY = sys.executable
LEGACY = "legacy"
MODERN = "2026-07-28"
SCENARIOS = ("echo", "echo", "progress", "elicit", "elicit", "cancel", "vanish")
CALLS_PER_CLIENT = 5
CALL_TIMEOUT = 20.0
"""Seconds any one client operation may take before it counts as a failure (never waited on longer)."""
SETTLE_SECONDS = 3.0


# -- what the clients saw ------------------------------------------------------------------------------


@dataclass
class Seen:
    """Marker counts per direction as the clients saw them, and what happened to each scenario."""

    counts: Counter[tuple[str, str]] = field(default_factory=Counter)
    labels: dict[str, str] = field(default_factory=dict)
    outcomes: Counter[str] = field(default_factory=Counter)
    errors: list[str] = field(default_factory=list)
    progress: dict[str, int] = field(default_factory=dict)
    """Progress notifications a client got for a call, by the call's marker."""

    def saw(self, marker: str, direction: str, label: str, times: int = 1) -> None:
        self.counts[(marker, direction)] += times
        self.labels[marker] = label


_serial = iter(range(1, 1 << 62))


def marker(path: str, kind: str) -> str:
    return f"sk-{path}-{next(_serial)}-{kind}"


@dataclass
class Holder:
    """What a client's callbacks answer next, and what they saw."""

    name: str = "octocat"
    logs: list[str] = field(default_factory=list)
    asked: asyncio.Event = field(default_factory=asyncio.Event)
    hang: bool = False


@contextlib.asynccontextmanager
async def sdk_client(url: str, mode: str, holder: Holder) -> AsyncIterator[Client]:
    """A connected SDK client whose elicitation answers `holder.name` (or hangs when told to)."""

    async def elicitation(
        context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult | types.ErrorData:
        holder.asked.set()
        if holder.hang:
            await asyncio.Event().wait()  # the user walked away: the client vanishes meanwhile
        return types.ElicitResult(action="accept", content={"name": holder.name})

    async def logging(params: types.LoggingMessageNotificationParams) -> None:
        holder.logs.append(str(params.data))

    async with httpx2.AsyncClient(timeout=httpx2.Timeout(30.0, read=60.0)) as http:
        transport = streamable_http_client(url, http_client=http)
        client = Client(
            transport,
            mode=mode,  # type: ignore[arg-type]
            cache=None,
            read_timeout_seconds=CALL_TIMEOUT,
            elicitation_callback=elicitation,
            logging_callback=logging,
        )
        async with client:
            yield client


def text_of(result: types.CallToolResult) -> str:
    return " ".join(getattr(block, "text", "") for block in result.content)


# -- scenarios -----------------------------------------------------------------------------------------


async def echo(client: Client, holder: Holder, path: str, mode: str, seen: Seen) -> None:
    mark = marker(path, "echo")
    holder.logs.clear()
    result = await client.call_tool("echo", {"text": mark})
    assert text_of(result) == mark, text_of(result)
    seen.saw(mark, "to_server", f"{path} echo call")
    logs = sum(1 for line in holder.logs if mark in line)
    seen.saw(mark, "to_client", f"{path} echo result and {logs} log lines", 1 + logs)


async def progress(client: Client, holder: Holder, path: str, mode: str, seen: Seen) -> None:
    mark = marker(path, "call")
    count = 0

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        nonlocal count
        count += 1

    result = await client.call_tool("slow_progress", {"steps": 3, "tag": mark}, progress_callback=on_progress)
    assert text_of(result) == "done 3", text_of(result)
    seen.saw(mark, "to_server", f"{path} progress call")
    # The SDK makes the request id the progress token, which is no marker: the notifications are
    # counted in the chain of the call instead (`progress_by_chain`).
    seen.progress[mark] = count


async def elicit(client: Client, holder: Holder, path: str, mode: str, seen: Seen) -> None:
    mark, name = marker(path, "call"), marker(path, "name")
    holder.name = name
    result = await client.call_tool("ask_name", {"tag": mark})
    assert text_of(result) == f"Hello, {name}!", text_of(result)
    # A 2026-07-28 client sends the call again with the answer (one input_required round).
    seen.saw(mark, "to_server", f"{path} elicit call", 2 if mode == MODERN else 1)
    seen.saw(name, "to_server", f"{path} elicit answer")
    seen.saw(name, "to_client", f"{path} elicit result")


async def cancel(client: Client, holder: Holder, path: str, mode: str, seen: Seen) -> None:
    mark = marker(path, "call")
    first = asyncio.Event()

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        first.set()

    call = asyncio.get_running_loop().create_task(
        client.call_tool("slow_progress", {"steps": 200, "tag": mark}, progress_callback=on_progress)
    )
    try:
        await asyncio.wait_for(first.wait(), CALL_TIMEOUT)
    finally:
        call.cancel()
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(call, CALL_TIMEOUT)
    seen.saw(mark, "to_server", f"{path} cancelled call")


async def vanish(url: str, path: str, mode: str, seen: Seen) -> None:
    """A client of its own that disappears while the server waits for its answer."""
    mark = marker(path, "call")
    holder = Holder(hang=True)

    async def run() -> None:
        async with sdk_client(url, mode, holder) as client:
            await client.call_tool("ask_name", {"tag": mark})

    task = asyncio.get_running_loop().create_task(run())
    try:
        await asyncio.wait_for(holder.asked.wait(), CALL_TIMEOUT)
    finally:
        task.cancel()
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(task, CALL_TIMEOUT)
    seen.saw(mark, "to_server", f"{path} call of a vanished client")


CALLS = {"echo": echo, "progress": progress, "elicit": elicit, "cancel": cancel}


async def worker(index: int, routes: list[tuple[str, str, str]], until: float, seen: Seen) -> None:
    """Open a client on one of the routes, run a few scenarios, close it; again until the time is up."""
    rng = random.Random(index)
    while time.monotonic() < until:
        path, url, mode = rng.choice(routes)
        try:
            if rng.choice(SCENARIOS) == "vanish":
                await vanish(url, path, mode, seen)
                seen.outcomes[f"{path} vanish"] += 1
                continue
            holder = Holder()
            async with sdk_client(url, mode, holder) as client:
                for _ in range(CALLS_PER_CLIENT):
                    kind = rng.choice([s for s in SCENARIOS if s != "vanish"])
                    await asyncio.wait_for(CALLS[kind](client, holder, path, mode, seen), CALL_TIMEOUT)
                    seen.outcomes[f"{path} {kind}"] += 1
                    if time.monotonic() >= until:
                        break
        except Exception as exc:  # a failed scenario is counted and shown, the soak goes on
            seen.outcomes[f"{path} failed"] += 1
            if len(seen.errors) < 50:
                seen.errors.append(f"{path}: {type(exc).__name__}: {str(exc)[:300]}")


# -- the proxies and what they use ----------------------------------------------------------------------


@dataclass
class RunningProxy:
    name: str
    url: str
    admin: str
    capture: Path
    pid: int


def start_proxy(procs: Processes, name: str, upstream: str, tmp: Path, extra: list[str]) -> RunningProxy:
    port, admin = free_port(), free_port()
    capture = tmp / f"{name}.capture.jsonl"
    argv = [PY, "-m", "proxy.cli", "--upstream", upstream, "--listen", f"127.0.0.1:{port}"]
    argv += ["--admin", f"127.0.0.1:{admin}", "--log-format", "json", "--log-file", str(tmp / f"{name}.log")]
    argv += ["--capture", str(capture), *extra]
    child = procs.start(name, argv, cpu=None, cwd=PROXY_ROOT)
    wait_port(port, child)
    wait_port(admin, child)
    return RunningProxy(name, f"http://127.0.0.1:{port}/mcp", f"http://127.0.0.1:{admin}", capture, child.pid)


GAUGES = (
    "mcp_proxy_open_exchanges",
    "mcp_proxy_open_streams",
    "mcp_proxy_parked_continuations",
    "mcp_proxy_chains_stored",
    "mcp_proxy_chains_evicted",
)


def sample(proxy: RunningProxy, started: float) -> dict[str, Any]:
    rss, _ = memory_kib([proxy.pid])
    try:
        fds = len(os.listdir(f"/proc/{proxy.pid}/fd"))
    except OSError:
        fds = -1
    gauges: dict[str, float] = {}
    with (
        contextlib.suppress(OSError, ValueError),
        urllib.request.urlopen(proxy.admin + "/metrics", timeout=5) as resp,
    ):
        for line in resp.read().decode().splitlines():
            name, _, value = line.partition(" ")
            name = name.removesuffix("_total")  # counters are exposed with the suffix
            if name in GAUGES:
                gauges[name.removeprefix("mcp_proxy_")] = float(value)
    return {"minute": round((time.monotonic() - started) / 60, 2), "rss_kib": rss, "fds": fds, **gauges}


def slope(samples: list[dict[str, Any]], key: str) -> float | None:
    """Least-squares change of `key` per minute over the samples after the first (warm-up)."""
    points = [(s["minute"], s[key]) for s in samples[1:] if key in s]
    if len(points) < 2:
        return None
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    var = sum((x - mx) ** 2 for x, _ in points)
    return round(sum((x - mx) * (y - my) for x, y in points) / var, 3) if var else None


async def sampler(
    proxies: list[RunningProxy], started: float, every: float, until: float, out: dict[str, Any]
) -> None:
    """A sample of each proxy now, every `every` seconds, and when the traffic stops."""
    while True:
        for proxy in proxies:
            out[proxy.name].append(await asyncio.to_thread(sample, proxy, started))
        left = until - time.monotonic()
        if left <= 0:
            return
        await asyncio.sleep(min(every, left))


# -- one run -------------------------------------------------------------------------------------------


def progress_by_chain(capture: Path, calls: set[str]) -> dict[str, int]:
    """Client-facing progress notifications in the chain of each call (by the call's marker)."""
    chain_of: dict[str, str] = {}
    progress: Counter[str] = Counter()
    for event in read_events(capture_files(capture)):
        if not isinstance(event, MessageRecorded) or event.message.side.value not in ("both", "client"):
            continue
        msg = event.message
        if msg.direction.value == "to_server" and msg.method == "tools/call":
            tag = ((msg.body or {}).get("params") or {}).get("arguments", {}).get("tag")
            if tag in calls:
                chain_of.setdefault(tag, event.chain_id)
        elif msg.method == "notifications/progress" and msg.direction.value == "to_client":
            progress[event.chain_id] += 1
    return {call: progress[chain] for call, chain in chain_of.items()}


def completeness(proxy: RunningProxy, seen: Seen) -> dict[str, Any]:
    """Each marker of this proxy's routes, counted in its capture against what the clients saw."""
    wanted = {(m, d): n for (m, d), n in seen.counts.items() if m.startswith(f"sk-{proxy.name}-")}
    expected = [Expected(m, d, seen.labels[m]) for (m, d) in wanted]  # type: ignore[arg-type]
    report = check_capture(proxy.capture, expected)
    found: dict[tuple[str, str], int] = {(e.marker, e.direction): 0 for e in report.missing}
    found.update({(e.marker, e.direction): n for e, n in report.duplicated})
    exact, wrong = 0, []
    for key, want in wanted.items():
        got = found.get(key, 1)
        if got == want:
            exact += 1
        elif len(wrong) < 20:
            wrong.append(
                {
                    "marker": key[0],
                    "direction": key[1],
                    "clients_saw": want,
                    "capture_has": got,
                    "label": seen.labels[key[0]],
                }
            )
    calls = {m for m in seen.progress if m.startswith(f"sk-{proxy.name}-")}
    in_chains = progress_by_chain(proxy.capture, calls)
    for call in sorted(calls):
        want, got = seen.progress[call], in_chains.get(call, 0)
        if got == want:
            exact += 1
        elif len(wrong) < 20:
            wrong.append(
                {
                    "marker": call,
                    "direction": "to_client",
                    "clients_saw": want,
                    "capture_has": got,
                    "label": f"progress notifications in the chain of {call}",
                }
            )
    total = len(wanted) + len(calls)
    return {
        "markers": total,
        "exact": exact,
        "completeness_pct": round(100.0 * exact / total, 3) if total else 100.0,
        "mismatches": total - exact,
        "mismatch_sample": wrong,
        "messages_seen": sum(wanted.values()) + sum(seen.progress[c] for c in calls),
        "records": report.records,
        "chains": report.chains,
        "unfinished_chains": len(report.unfinished_chains),
        "repeated_records": report.repeated_records,
        "corrupt_lines": report.corrupt_lines,
        "truncated": report.truncated,
    }


async def traffic(
    proxies: dict[str, RunningProxy], args: argparse.Namespace
) -> tuple[Seen, dict[str, Any], float]:
    legacy_side, modern_side = proxies["a"], proxies["b"]
    # Route names start with the proxy's name, so each capture is checked for its own markers.
    routes = [
        ("a-legacy", legacy_side.url, LEGACY),  # pass-through, legacy
        ("a-modern", legacy_side.url, MODERN),  # 2026-07-28 client -> legacy server (bridge)
        ("b-modern", modern_side.url, MODERN),  # pass-through, 2026-07-28
        ("b-legacy", modern_side.url, LEGACY),  # legacy client -> 2026-07-28 server (bridge)
    ]
    seen = Seen()
    samples: dict[str, Any] = {p.name: [] for p in proxies.values()}
    started = time.monotonic()
    until = started + args.minutes * 60
    workers = [worker(i, routes, until, seen) for i in range(args.clients)]
    await asyncio.gather(
        sampler(list(proxies.values()), started, args.sample_seconds, until, samples), *workers
    )
    return seen, samples, (time.monotonic() - started) / 60


def summarize(
    name: str,
    args: argparse.Namespace,
    seen: Seen,
    samples: dict[str, Any],
    minutes: float,
    checks: dict[str, Any],
) -> dict[str, Any]:
    return {
        "name": name,
        "minutes": round(minutes, 2),
        "clients": args.clients,
        "max_chains": args.max_chains or "default",
        "sample_seconds": args.sample_seconds,
        "scenarios": dict(sorted(seen.outcomes.items())),
        "errors_sample": seen.errors[:20],
        "completeness": checks,
        "samples": samples,
        "slopes_per_minute": {
            proxy: {
                key: slope(rows, key)
                for key in ("rss_kib", "fds", "open_exchanges", "open_streams", "parked_continuations")
            }
            for proxy, rows in samples.items()
        },
        "tasks": "not exposed by the proxy (no task gauge in /metrics or the admin API); "
        "open exchanges and streams stand in",
        "proxies": {
            "a": "in front of the SDK legacy in-flight server",
            "b": "in front of the SDK 2026-07-28 MRTR server",
        },
    }


def _row(*cells: Any) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def markdown(result: dict[str, Any]) -> str:
    """The results as tables: completeness per proxy, samples and slopes, the scenarios run."""
    title = f"{result['minutes']} minutes, {result['clients']} concurrent clients"
    lines = [f"# Soak `{result['name']}`: {title}, max_chains {result['max_chains']}", ""]
    lines += [f"Proxy a: {result['proxies']['a']}; proxy b: {result['proxies']['b']}.", ""]
    head = ("proxy", "markers", "exact", "completeness", "messages seen", "records", "chains")
    head += ("unfinished chains", "repeated records", "corrupt lines")
    lines += ["## Capture completeness", "", _row(*head), _row(*["---"] * len(head))]
    for proxy, c in result["completeness"].items():
        lines.append(
            _row(
                proxy, c["markers"], c["exact"], f"{c['completeness_pct']}%", c["messages_seen"], c["records"]
            )[:-2]
            + " "
            + _row(c["chains"], c["unfinished_chains"], c["repeated_records"], c["corrupt_lines"])
        )
    for proxy, c in result["completeness"].items():
        for row in c["mismatch_sample"][:10]:
            saw, has = row["clients_saw"], row["capture_has"]
            lines.append(
                f"- {proxy}: `{row['marker']}` {row['direction']}: clients saw {saw}, capture has {has}"
            )
    lines += ["", f"## Resources (sampled every {result['sample_seconds']} s)", ""]
    cols = (
        "minute",
        "RSS MiB",
        "fds",
        "open exchanges",
        "open streams",
        "parked",
        "chains stored",
        "evicted",
    )
    for proxy, rows in result["samples"].items():
        lines += [f"Proxy {proxy}:", "", _row(*cols), _row(*["---"] * len(cols))]
        for r in rows:
            gauges = [r.get(k, "-") for k in ("open_exchanges", "open_streams", "parked_continuations")]
            gauges += [r.get(k, "-") for k in ("chains_stored", "chains_evicted")]
            lines.append(_row(r["minute"], f"{r['rss_kib'] / 1024:.1f}", r["fds"], *gauges))
        s = result["slopes_per_minute"][proxy]
        lines += [
            "",
            f"Slope per minute after the first sample: RSS {s['rss_kib']} KiB, fds {s['fds']}, "
            f"open exchanges {s['open_exchanges']}, open streams {s['open_streams']}, "
            f"parked continuations {s['parked_continuations']}.",
            "",
        ]
    lines += [
        f"Tasks: {result['tasks']}.",
        "",
        "## Scenarios run",
        "",
        "| route and scenario | count |",
        "|---|---|",
    ]
    lines += [_row(k, v) for k, v in result["scenarios"].items()]
    if result["errors_sample"]:
        lines += ["", "Errors (sample):", ""] + [f"- `{e}`" for e in result["errors_sample"]]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--minutes", type=float, default=30.0, help="how long traffic runs (default 30)")
    parser.add_argument("--clients", type=int, default=8, help="concurrent client workers (default 8)")
    parser.add_argument(
        "--sample-seconds", type=float, default=60.0, help="seconds between samples (default 60)"
    )
    parser.add_argument("--name", default=None, help="results directory name (default soak-<minutes>min)")
    parser.add_argument("--out", type=Path, default=BENCH / "results")
    parser.add_argument(
        "--max-chains",
        type=int,
        default=0,
        help="the proxies' ring buffer (default: theirs); small puts the ring under pressure",
    )
    parser.add_argument("--keep-tmp", action="store_true", help="keep the proxies' logs and captures")
    args = parser.parse_args(argv)
    name = args.name or f"soak-{args.minutes:g}min"
    extra = ["--max-chains", str(args.max_chains)] if args.max_chains else []
    logging.getLogger("mcp").setLevel(logging.CRITICAL)  # a vanished client's SDK complains on stderr
    tmp = Path(tempfile.mkdtemp(prefix="mcp-soak-"))
    procs = Processes(tmp)
    peers = [PeerServer("legacy-inflight"), PeerServer("modern-mrtr")]
    try:
        for peer in peers:
            peer.start()
        proxies = {
            "a": start_proxy(procs, "a", peers[0].url, tmp, extra),
            "b": start_proxy(procs, "b", peers[1].url, tmp, extra),
        }
        print(
            f"soak {name}: {args.minutes} min, {args.clients} clients; logs and captures in {tmp}", flush=True
        )
        seen, samples, minutes = asyncio.run(traffic(proxies, args))
        time.sleep(SETTLE_SECONDS)  # the last answers' records reach the capture (flushed on a short timer)
        for child in list(procs.children):
            procs.stop(child)  # SIGTERM: the proxy drains and closes its capture
        checks = {p.name: completeness(p, seen) for p in proxies.values()}
    finally:
        procs.stop_all()
        for peer in peers:
            with contextlib.suppress(Exception):
                peer.cleanup()
    result = summarize(name, args, seen, samples, minutes, checks)
    out = args.out / name
    out.mkdir(parents=True, exist_ok=True)
    (out / "soak.json").write_text(json.dumps(result, indent=2) + "\n")
    (out / "soak.md").write_text(markdown(result))
    print(markdown(result))
    if not args.keep_tmp:
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
    ok = all(c["mismatches"] == 0 and not c["corrupt_lines"] for c in checks.values())
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
