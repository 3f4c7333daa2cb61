"""Exporting a big capture: how fast `mcp-proxy export` reads it and how much memory it grows by.

    .venv/bin/python bench/export.py --size-mib 100 --out bench/results/export

1. Records a seed capture of real traffic: the demo's SDK clients of both eras through real proxies
   in front of the demo's 2026-07-28 and 2025-era servers (pass-through and both bridges: SSE
   streams, nested requests, MRTR rounds, upstream legs, continuations).
2. Replicates the seed's observation lines with fresh exchange, leg, continuation and upstream
   session ids (and times moved on by each copy's span) until the capture holds `--size-mib` MiB.
3. Runs `mcp-proxy export --har|--json|--ndjson` on it as a user would (a subprocess), and on the
   seed alone for the baseline: throughput is capture bytes over wall time, and RSS growth is the
   export's peak RSS less the peak RSS of the same command exporting the seed (interpreter, imports).
   CPU seconds (the child's user + system time) are reported too: on a machine others share, wall
   time measures them as much as the export.

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

TARGET_MIB_PER_S = 50.0
TARGET_RSS_GROWTH_MIB = 64.0


def record_seed(directory: Path) -> Path:
    """One seed capture of the demo's traffic (`tests.record.captures.record_demo`), logging quiet."""
    from proxy import logs
    from proxy.demo.run import _quiet_logging
    from tests.record.captures import record_demo

    logs.configure(quiet=True)
    _quiet_logging()
    return record_demo(directory)


def replicate(seed: Path, target: Path, size: int) -> tuple[int, int]:
    """Copies of the seed's observation lines, with fresh ids and later times, to about `size` bytes;
    returns the capture's bytes and the number of copies."""
    from proxy.record.observations import OBS_PREFIX
    from tests.record.captures import replicate as copy_seed

    per_copy = sum(
        len(line) for line in seed.read_bytes().splitlines(keepends=True) if line.startswith(OBS_PREFIX)
    )
    copies = max(1, -(-size // per_copy))
    copy_seed(seed, target, copies)
    return target.stat().st_size, copies


_CHILD = (
    "import sys\n"
    "from proxy.cli import main\n"
    "code = main(sys.argv[1:])\n"
    "peak = [l for l in open('/proc/self/status') if l.startswith('VmHWM:')]\n"
    "print(peak[0].strip() if peak else 'VmHWM: 0 kB', file=sys.stderr)\n"
    "raise SystemExit(code)\n"
)
"""`mcp-proxy export` in a child that reports its own peak RSS (VmHWM: since its exec, unlike ru_maxrss)."""


def run_export(fmt: str, capture: Path, out: Path) -> dict[str, Any]:
    """`mcp-proxy export --FMT OUT CAPTURE` in a child: wall seconds, peak RSS, exit status."""
    command = [sys.executable, "-c", _CHILD, "export", f"--{fmt}", str(out), str(capture)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    lines = done.stderr.decode().strip().splitlines()
    peak_kib = int(lines[-1].split()[1]) if lines and lines[-1].startswith("VmHWM:") else 0
    return {
        "seconds": round(seconds, 3),
        "cpu_seconds": round(cpu, 3),
        "peak_rss_mib": round(peak_kib / 1024, 1),
        "exit": done.returncode,
        "stderr": lines[-2:-1],
        "out_bytes": out.stat().st_size if out.exists() else 0,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mib", type=float, default=100.0)
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "export")
    parser.add_argument("--formats", default="har,json,ndjson")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="export-bench-") as tmp:
        work = Path(tmp)
        seed = record_seed(work)
        capture = work / "big.jsonl"
        size, copies = replicate(seed, capture, int(args.size_mib * 1024 * 1024))
        results: dict[str, Any] = {
            "machine": {
                "cpus": os.cpu_count(),
                "python": platform.python_version(),
                "load": os.getloadavg(),
            },
            "capture": {
                "bytes": size,
                "mib": round(size / 2**20, 1),
                "seed_bytes": seed.stat().st_size,
                "copies": copies,
            },
            "formats": {},
        }
        for fmt in args.formats.split(","):
            base = run_export(fmt, seed, work / f"seed.{fmt}")
            big = run_export(fmt, capture, work / f"big.{fmt}")
            (work / f"big.{fmt}").unlink(missing_ok=True)
            results["formats"][fmt] = {
                "baseline": base,
                "run": big,
                "mib_per_s": round(size / 2**20 / big["seconds"], 1),
                "mib_per_cpu_s": round(size / 2**20 / big["cpu_seconds"], 1),
                "rss_growth_mib": round(big["peak_rss_mib"] - base["peak_rss_mib"], 1),
            }
    (args.out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    (args.out / "results.md").write_text(report(results))
    print(report(results))
    return 0


def report(results: dict[str, Any]) -> str:
    """The results as a Markdown table, with the figures of the issue beside them."""
    cap = results["capture"]
    rows = [
        f"# Exporting a {cap['mib']} MiB capture ({cap['copies']} copies of a recorded seed)",
        "",
        f"Machine: {results['machine']['cpus']} CPUs, Python {results['machine']['python']}, "
        f"load {', '.join(f'{x:.2f}' for x in results['machine']['load'])} at start.",
        "",
        f"| format | seconds | MiB/s (target >= {TARGET_MIB_PER_S:.0f}) | CPU seconds | MiB per CPU second | "
        f"peak RSS MiB | RSS growth MiB (target < {TARGET_RSS_GROWTH_MIB:.0f}) | output MiB | exit |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for fmt, r in results["formats"].items():
        run = r["run"]
        rows.append(
            f"| {fmt} | {run['seconds']} | {r['mib_per_s']} | {run['cpu_seconds']} | {r['mib_per_cpu_s']} | "
            f"{run['peak_rss_mib']} | "
            f"{r['rss_growth_mib']} | {run['out_bytes'] / 2**20:.1f} | {run['exit']} |"
        )
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
