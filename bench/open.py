"""Opening a big capture in the TUI: how soon the first screen shows, when every chain is reachable, memory.

    .venv/bin/python bench/open.py --size-mib 100 --out bench/results/open

1. Records a seed capture of real traffic and replicates it to `--size-mib` MiB with fresh ids, as
   `bench/export.py` does.
2. Runs the TUI headless (`ProxyTui(CaptureFeed(FILE))` under Textual's test driver, 120x40) in a child
   process, as `mcp-proxy tui --open FILE` builds it, and notes: when the chain list first shows rows
   (the first screen), when the index is in and a filter for the file's oldest chain (`id:r1`) finds it
   (every chain reachable by the filter), how long a `body:` filter takes to search every chain's
   bodies (read back from the capture), the TUI process's peak RSS and the index process's.

Writes `results.json` and `results.md` to `--out`. Run it on a quiet machine; `nice` it beside others.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

BODY_QUERY = "body:paris"
"""A filter only the bodies answer (the seed's sampling answer says Paris): every chain's are searched."""

TARGET_FIRST_S = 2.0
TARGET_ALL_S = 15.0
TARGET_RSS_MIB = 200.0
BOUND_S = 300.0


async def _measure(path: Path) -> dict[str, Any]:
    from ui.app import ProxyTui
    from ui.feeds import CaptureFeed
    from ui.messages import FilterChanged
    from ui.model import CAPTURE_CHAINS
    from ui.widgets.chain_table import ChainTable

    started = time.perf_counter()
    app = ProxyTui(CaptureFeed(path), max_chains=CAPTURE_CHAINS)
    out: dict[str, Any] = {}
    async with app.run_test(size=(120, 40)) as pilot:
        table = app.main.query_one(ChainTable)
        while table.row_count == 0:
            await pilot.pause(0.01)
            if time.perf_counter() - started > BOUND_S:
                raise TimeoutError("no first screen")
        out["first_screen_s"] = round(time.perf_counter() - started, 3)
        out["first_screen_rows"] = table.row_count
        while app.feed_status is None or app.feed_status.state not in ("ended", "failed"):
            await pilot.pause(0.05)
            if time.perf_counter() - started > BOUND_S:
                raise TimeoutError("the index never came")
        app.main.post_message(FilterChanged("id:r1"))
        while not (table.row_count == 1 and table.selected_key and table.selected_key.startswith("r1@")):
            await pilot.pause(0.01)
            if time.perf_counter() - started > BOUND_S:
                raise TimeoutError("the filter never reached r1")
        out["all_reachable_s"] = round(time.perf_counter() - started, 3)
        out["chains"] = len(app.model.chains)
        out["feed_status"] = f"{app.feed_status.state}: {app.feed_status.detail}"
        entry = app.model.get(table.selected_key)
        out["oldest_chain_messages"] = len(entry.messages) if entry else 0
        searching = time.perf_counter()
        app.main.post_message(FilterChanged(BODY_QUERY))
        while app.main.query_.text != BODY_QUERY or app.main.filter_.searching:
            await pilot.pause(0.05)
            if time.perf_counter() - started > BOUND_S:
                raise TimeoutError("the body search never ended")
        out["body_search_s"] = round(time.perf_counter() - searching, 3)
        out["body_search_read"] = app.main.filter_.to_search
        out["body_search_rows"] = table.row_count
    return out


def child(path: Path) -> None:
    """Run in the measured process: the TUI headless on `path`; prints its results as JSON."""
    import asyncio

    out = asyncio.run(_measure(path))
    status = Path("/proc/self/status").read_text().splitlines()
    peak = [line for line in status if line.startswith("VmHWM:")]
    out["tui_peak_rss_mib"] = round(int(peak[0].split()[1]) / 1024, 1) if peak else None
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    own = resource.getrusage(resource.RUSAGE_SELF)
    out["index_peak_rss_mib"] = round(children.ru_maxrss / 1024, 1)
    # CPU seconds say what the wall clock cannot on a shared machine: the work each process did.
    out["tui_cpu_s"] = round(own.ru_utime + own.ru_stime, 2)
    out["index_cpu_s"] = round(children.ru_utime + children.ru_stime, 2)
    print(json.dumps(out))


def measure(path: Path) -> dict[str, Any]:
    """The TUI on `path` in a child process: its results."""
    done = subprocess.run(
        [sys.executable, __file__, "--child", str(path)], cwd=REPO, capture_output=True, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(done.stderr.decode()[-2000:])
    result: dict[str, Any] = json.loads(done.stdout.decode().strip().splitlines()[-1])
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mib", type=float, default=100.0)
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "open")
    parser.add_argument("--capture", type=Path, help="measure this capture instead of recording one")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        child(args.child)
        return 0
    from export import record_seed, replicate

    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="open-bench-") as tmp:
        work = Path(tmp)
        capture = args.capture
        copies = 0
        if capture is None:
            capture = work / "big.jsonl"
            _size, copies = replicate(record_seed(work), capture, int(args.size_mib * 1024 * 1024))
        size = capture.stat().st_size
        results = {
            "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "load": os.getloadavg()},
            "capture": {"bytes": size, "mib": round(size / 2**20, 1), "copies": copies},
            "run": measure(capture),
        }
    (args.out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    (args.out / "results.md").write_text(report(results))
    print(report(results))
    return 0


def report(results: dict[str, Any]) -> str:
    """The results as a Markdown table, with the figures of the issue beside them."""
    cap, run = results["capture"], results["run"]
    rows = [
        f"# `tui --open` of a {cap['mib']} MiB capture ({run['chains']} chains)",
        "",
        f"Machine: {results['machine']['cpus']} CPUs, Python {results['machine']['python']}, "
        f"load {', '.join(f'{x:.2f}' for x in results['machine']['load'])} at start.",
        "",
        "| figure | measured | target | met |",
        "|---|---|---|---|",
        f"| first screen (rows shown) | {run['first_screen_s']} s ({run['first_screen_rows']} chains) | "
        f"<= {TARGET_FIRST_S:g} s | {'yes' if run['first_screen_s'] <= TARGET_FIRST_S else 'no'} |",
        f"| every chain reachable by the filter (`id:r1` found) | {run['all_reachable_s']} s | "
        f"<= {TARGET_ALL_S:g} s | {'yes' if run['all_reachable_s'] <= TARGET_ALL_S else 'no'} |",
        f"| `{BODY_QUERY}` searched in every chain's bodies | {run.get('body_search_s')} s "
        f"({run.get('body_search_read')} chains read, {run.get('body_search_rows')} shown) | | |",
        f"| TUI peak RSS | {run['tui_peak_rss_mib']} MiB | < {TARGET_RSS_MIB:g} MiB | "
        f"{'yes' if run['tui_peak_rss_mib'] < TARGET_RSS_MIB else 'no'} |",
        f"| index process peak RSS | {run['index_peak_rss_mib']} MiB | | |",
        f"| CPU seconds: TUI process, index process | {run.get('tui_cpu_s')} s, "
        f"{run.get('index_cpu_s')} s | | |",
        "",
        f"End status: {run['feed_status']}",
    ]
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
