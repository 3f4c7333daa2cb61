"""Profile our proxy on the small-JSON concurrency-16 path: py-spy samples it while wrk drives it.

    python bench/profile.py [--seconds 10] [--path ours-default|ours|ours-live|...] [--alone] [--out DIR]

Same layout as bench/run.py (wrk and py-spy on CPU 0, upstream and proxy on CPU 1). Writes py-spy's
collapsed stacks (`profile.txt`, for flamegraph tools or speedscope) and prints the functions with
the most samples, by own time and including callees.
"""

from __future__ import annotations

import argparse
import collections
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import run as bench  # bench/ is not a package: run.py sits beside this file


def _frame(text: str) -> str:
    """`name (file:line)` -> `name (file)`; a frame without a file (a native one) as it is."""
    name, sep, where = text.rpartition(" (")
    return f"{name} ({where.split(':')[0]})" if sep else text


def top(collapsed: Path, limit: int) -> str:
    """Own-time and inclusive sample counts per function from py-spy's collapsed stacks."""
    own: collections.Counter[str] = collections.Counter()
    total: collections.Counter[str] = collections.Counter()
    samples = 0
    for line in collapsed.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue  # a frame name with a line break in it splits its stack over two lines
        count = int(count_text)
        samples += count
        frames = [_frame(f) for f in stack.split(";")]
        own[frames[-1]] += count
        for frame in set(frames):
            total[frame] += count
    lines = [f"{samples} samples", "", "own time:"]
    lines += [f"  {100 * n / samples:5.1f}%  {name}" for name, n in own.most_common(limit)]
    lines += ["", "including callees:"]
    lines += [f"  {100 * n / samples:5.1f}%  {name}" for name, n in total.most_common(limit)]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--conns", type=int, default=16)
    parser.add_argument(
        "--path",
        default="ours-default",
        choices=(*bench.OURS_PATHS, "bare-aiohttp"),
        help="which proxy to profile",
    )
    parser.add_argument("--rate", type=int, default=500, help="py-spy samples per second")
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument(
        "--alone",
        action="store_true",
        help="run the upstream beside wrk, so the proxy's CPU runs the proxy alone and no sample is "
        "the proxy waiting while the upstream it just woke holds the CPU",
    )
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "mcp-profile")
    args = parser.parse_args()
    pyspy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    args.out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="mcp-profile-"))
    procs = bench.Processes(tmp)
    try:
        if args.alone:
            bench.SERVER_CPU, upstream_cpu = bench.LOADGEN_CPU, bench.SERVER_CPU
        _up, upstream = bench.start_upstream(
            procs, [bench.PY, str(bench.BENCH / "upstream_fast.py")], "upstream"
        )
        if args.alone:
            bench.SERVER_CPU = upstream_cpu
        path = bench.start_path(procs, args.path, upstream, tmp, "profile")
        assert path.child is not None
        bench.run_wrk(path.url, args.conns, 2)  # warm-up
        collapsed = args.out / "profile.txt"
        spy = procs.start(
            "py-spy",
            [
                *(pyspy, "record", "--pid", str(path.child.pid), "--rate", str(args.rate), "--format", "raw"),
                *("--output", str(collapsed), "--duration", str(args.seconds), "--nonblocking"),
            ],
            cpu=bench.LOADGEN_CPU,
        )
        result = bench.run_wrk(path.url, args.conns, args.seconds)
        spy.proc.wait(timeout=args.seconds + 60)
        print(f"wrk under py-spy: {result['rps']} req/s, p50 {result['p50']} ms, p99 {result['p99']} ms")
        print(top(collapsed, args.top))
        print(f"\ncollapsed stacks: {collapsed}")
    finally:
        procs.stop_all()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
