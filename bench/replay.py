"""Replaying the demo's capture: how long `mcp-proxy replay --all` takes and how much memory it holds.

    .venv/bin/python bench/replay.py --copies 40 --out bench/results/replay

1. Records the demo's capture: the demo's SDK clients of both eras through real proxies in front of
   the demo's 2026-07-28 and 2025-era servers, the four combinations in one file
   (`tests.record.captures.record_demo`).
2. Makes a bigger one of it: `--copies` copies of its observation lines with fresh ids
   (`tests.record.captures.replicate`), to show that memory does not grow with the capture.
3. Starts the demo's two servers as processes of their own (`tests.e2e.replay_peers`) and runs
   `mcp-proxy replay CAPTURE --all --upstream URL --json` as a user would (a subprocess reporting its
   own peak RSS), for each capture against each server: wall and CPU seconds, peak RSS, chains per
   second, the outcome counts and the exit status.

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

_CHILD = (
    "import sys\n"
    "from proxy.cli import main\n"
    "code = main(sys.argv[1:])\n"
    "peak = [l for l in open('/proc/self/status') if l.startswith('VmHWM:')]\n"
    "print(peak[0].strip() if peak else 'VmHWM: 0 kB', file=sys.stderr)\n"
    "raise SystemExit(code)\n"
)
"""`mcp-proxy replay` in a child that reports its own peak RSS (VmHWM)."""


def record(directory: Path, copies: int) -> tuple[Path, Path]:
    """The demo's capture, and `copies` copies of it in one file."""
    from proxy import logs
    from proxy.demo.run import _quiet_logging
    from tests.record.captures import record_demo, replicate

    logs.configure(quiet=True)
    _quiet_logging()
    seed = record_demo(directory)
    return seed, replicate(seed, directory / "big.jsonl", copies)


def run_replay(capture: Path, upstream: str) -> dict[str, Any]:
    """`mcp-proxy replay CAPTURE --all --upstream URL --json` in a child: times, peak RSS, outcome."""
    command = [
        sys.executable,
        "-c",
        _CHILD,
        "replay",
        str(capture),
        "--all",
        "--upstream",
        upstream,
        "--json",
    ]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(command, cwd=REPO, capture_output=True, check=False)
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    lines = done.stderr.decode().strip().splitlines()
    peak_kib = int(lines[-1].split()[1]) if lines and lines[-1].startswith("VmHWM:") else 0
    try:
        document = json.loads(done.stdout)
    except ValueError:
        document = {"summary": {}, "chains": []}
    chains = len(document["chains"])
    return {
        "seconds": round(seconds, 3),
        "cpu_seconds": round((after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime), 3),
        "peak_rss_mib": round(peak_kib / 1024, 1),
        "chains": chains,
        "chains_per_s": round(chains / seconds, 1) if seconds else 0.0,
        "summary": document["summary"],
        "exit": done.returncode,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--copies", type=int, default=40)
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "replay")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    from tests.e2e.replay_peers import DemoPeer

    results: dict[str, Any] = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "load": os.getloadavg()},
        "runs": [],
    }
    with tempfile.TemporaryDirectory(prefix="replay-bench-") as tmp:
        seed, big = record(Path(tmp), args.copies)
        results["captures"] = {
            "demo": {"bytes": seed.stat().st_size},
            f"demo x{args.copies}": {"bytes": big.stat().st_size},
        }
        with DemoPeer("legacy") as legacy, DemoPeer("modern") as modern:
            for name, capture in (("demo", seed), (f"demo x{args.copies}", big)):
                for era, peer in (("legacy", legacy), ("modern", modern)):
                    run = run_replay(capture, peer.url)
                    results["runs"].append({"capture": name, "server": era, **run})
    (args.out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    (args.out / "results.md").write_text(report(results))
    print(report(results))
    return 0


def report(results: dict[str, Any]) -> str:
    """The results as a Markdown table."""
    machine = results["machine"]
    rows = [
        "# Replaying the demo's capture (`mcp-proxy replay --all`)",
        "",
        f"Machine: {machine['cpus']} CPUs, Python {machine['python']}, "
        f"load {', '.join(f'{x:.2f}' for x in machine['load'])} at start. Captures: "
        + ", ".join(f"{name} {c['bytes'] / 1024:.0f} KiB" for name, c in results["captures"].items())
        + ".",
        "",
        "| capture | server | chains | seconds | chains/s | CPU seconds | peak RSS MiB | outcome | exit |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results["runs"]:
        outcome = ", ".join(f"{v} {k}" for k, v in r["summary"].items() if v)
        rows.append(
            f"| {r['capture']} | {r['server']} | {r['chains']} | {r['seconds']} | {r['chains_per_s']} | "
            f"{r['cpu_seconds']} | {r['peak_rss_mib']} | {outcome} | {r['exit']} |"
        )
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
