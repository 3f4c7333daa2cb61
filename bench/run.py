"""The benchmark: our proxy's cost side by side with direct, mitmdump and nginx, on loopback.

    python bench/run.py --quick --runs 2 --out bench/results     # about 7 minutes
    python bench/run.py --full --runs 2 --out bench/results      # about 17 minutes

Layout (fixed, and written into the results): the load generators (wrk, bench/sse_client.py) and
this harness run on CPU 0 (`taskset -c 0`); every upstream and every proxy runs on CPU 1 (`taskset -c
1`). Each run starts every process on 127.0.0.1 free ports, runs every workload against every path,
and stops every process (SIGTERM to its process group, SIGKILL after a bound), on failure and Ctrl-C
too. Results: `<out>/results.json` (every number) and `<out>/results.md` (tables, one cell per
metric holding run 1 / run 2 side by side, then the issue's targets, met or missed, per run).

Paths: direct (client -> upstream); ours with logging (JSON to a file) and JSONL capture on; ours
with logging off (log level error, no capture); `mitmdump --mode reverse:URL -q` with
bench/mitm_stream.py (streams SSE); nginx (`proxy_buffering off`, upstream keep-alive, access log
off: the near-limit reference). Upstreams: bench/upstream_fast.py for every path workload; the SDK
peers of tests/peers (legacy-inflight, modern-mrtr) for the bridge round trips.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import platform
import resource
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import report  # bench/ is not a package: report.py sits beside this file

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
PY = sys.executable
LUA = BENCH / "wrk_tools_call.lua"
CLIENT = BENCH / "sse_client.py"
LOADGEN_CPU = 0
SERVER_CPU = 1
PATHS = (
    "direct",
    "ours-default",
    "ours-otel",
    "ours-default-off",
    "ours",
    "ours-live",
    "ours-quiet",
    "bare-aiohttp",
    "mitmdump",
    "nginx",
)
OURS_PATHS = {
    # name: (admin API on, JSON log lines and a JSONL capture written to files, log level error)
    "ours-default": (True, False, False),
    "ours-otel": (True, False, False),
    "ours-default-off": (False, False, False),
    "ours": (False, True, False),
    "ours-live": (True, True, False),
    "ours-quiet": (False, False, True),
}
"""Our proxy's configurations. `ours-default` is `mcp-proxy --upstream URL` as users get it (admin API
on, info-level JSON log lines on stderr, no capture); the issue's figures are judged on it.
`ours-otel` is `ours-default` plus `--otlp-endpoint` to `bench/otlp_sink.py` (a collector that reads
and discards), on the load generators' CPU as a collector on another machine would be."""
PROXY_ROOT = Path(os.environ.get("BENCH_PROXY_ROOT", REPO))
"""Where `python -m proxy.cli` runs from: set BENCH_PROXY_ROOT to a checkout of another version to compare."""


@dataclass(frozen=True)
class Profile:
    """How much of each workload one run does (bounded in requests and in time)."""

    name: str
    wrk_seconds: int
    warmup_seconds: int
    sse_calls: int
    big1m_calls: int
    big10m_calls: int
    elicit_rounds: int
    bridge_rounds: int
    idle_streams: int
    idle_wrk_seconds: int
    interleave_rounds: int
    interleave_seconds: int


QUICK = Profile("quick", 5, 1, 200, 10, 5, 200, 40, 1000, 3, 6, 2)
FULL = Profile("full", 10, 2, 500, 30, 10, 500, 150, 1000, 5, 10, 3)
SMOKE = Profile("smoke", 1, 1, 20, 2, 1, 20, 5, 100, 1, 1, 1)
"""Only checks that the harness works end to end; its numbers mean nothing."""


# -- processes ---------------------------------------------------------------------------------


class Child:
    """One started process (own process group), its log file and its pinned CPU."""

    def __init__(self, name: str, proc: subprocess.Popen[bytes], log: Path) -> None:
        self.name = name
        self.proc = proc
        self.log = log

    @property
    def pid(self) -> int:
        return self.proc.pid

    def pids(self) -> list[int]:
        """Every live process of this child's group (nginx: master and worker)."""
        found = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            with contextlib.suppress(OSError, IndexError, ValueError):
                stat = Path(f"/proc/{entry}/stat").read_text()
                fields = stat[stat.rindex(")") + 2 :].split()
                if int(fields[2]) == self.pid:  # pgrp
                    found.append(int(entry))
        return found or [self.pid]

    def tail(self, lines: int = 20) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        return ""


class Processes:
    """Every process the harness started; `stop_all` ends them whatever happened."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.children: list[Child] = []

    def start(
        self, name: str, argv: list[str], *, cpu: int | None, stdin: bool = False, cwd: Path = REPO
    ) -> Child:
        log = self.tmp / f"{name}.log"
        pinned = (["taskset", "-c", str(cpu)] if cpu is not None else []) + argv
        proc = subprocess.Popen(
            pinned,
            cwd=cwd,
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=log.open("wb"),
            start_new_session=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        child = Child(name, proc, log)
        self.children.append(child)
        return child

    def stop(self, child: Child, grace: float = 10.0) -> None:
        if child in self.children:
            self.children.remove(child)
        proc = child.proc
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=grace)
        with contextlib.suppress(ProcessLookupError):  # leftovers of the group (nginx workers)
            os.killpg(proc.pid, signal.SIGKILL)
        for stream in (proc.stdin, proc.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()

    def stop_all(self) -> None:
        for child in reversed(list(self.children)):
            with contextlib.suppress(Exception):
                self.stop(child, grace=5.0)


def read_line(child: Child, timeout: float) -> str:
    """The child's next stdout line, waiting at most `timeout` seconds."""
    assert child.proc.stdout is not None
    deadline = time.monotonic() + timeout
    buf = b""
    fd = child.proc.stdout.fileno()
    while not buf.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0:
            raise RuntimeError(f"{child.name}: no output line within {timeout}s\n{child.tail()}")
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            byte = os.read(fd, 1)
            if not byte:
                raise RuntimeError(f"{child.name} exited (rc={child.proc.poll()})\n{child.tail()}")
            buf += byte
    return buf.decode().strip()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_port(port: int, child: Child, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if child.proc.poll() is not None:
            raise RuntimeError(f"{child.name} exited (rc={child.proc.returncode})\n{child.tail()}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            return
        time.sleep(0.05)
    raise RuntimeError(f"{child.name}: port {port} not accepting after {timeout}s\n{child.tail()}")


# -- measuring a process -----------------------------------------------------------------------

CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError, IndexError, ValueError):
            stat = Path(f"/proc/{pid}/stat").read_text()
            fields = stat[stat.rindex(")") + 2 :].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / CLK_TCK


def memory_kib(pids: list[int]) -> tuple[int, int]:
    """(VmRSS, VmHWM) summed over `pids`, in KiB."""
    rss = hwm = 0
    for pid in pids:
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    rss += int(line.split()[1])
                elif line.startswith("VmHWM:"):
                    hwm += int(line.split()[1])
    return rss, hwm


def reset_peak(pids: list[int]) -> bool:
    """Reset VmHWM to the current RSS (Linux clear_refs 5), so the next peak is this workload's."""
    ok = True
    for pid in pids:
        try:
            Path(f"/proc/{pid}/clear_refs").write_text("5")
        except OSError:
            ok = False
    return ok


class Meter:
    """CPU seconds, RSS before/after and peak RSS of a path's processes over one workload."""

    def __init__(self, child: Child | None) -> None:
        self.pids = child.pids() if child is not None else []
        self._stop = threading.Event()
        self._sampled = 0
        self.result: dict[str, Any] = {}

    def _sample(self) -> None:
        while not self._stop.wait(0.005):
            self._sampled = max(self._sampled, memory_kib(self.pids)[0])

    @contextlib.contextmanager
    def measure(self) -> Iterator[dict[str, Any]]:
        if not self.pids:
            yield self.result
            return
        rss0, _ = memory_kib(self.pids)
        exact = reset_peak(self.pids)
        self._sampled = rss0
        thread = threading.Thread(target=self._sample, name="rss-sampler", daemon=True)
        cpu0 = cpu_seconds(self.pids)
        thread.start()
        try:
            yield self.result
        finally:
            self._stop.set()
            thread.join()
            cpu1 = cpu_seconds(self.pids)
            rss1, hwm = memory_kib(self.pids)
            peak = max(self._sampled, hwm if exact else 0)
            self.result.update(
                cpu_s=round(cpu1 - cpu0, 3),
                rss_before_mib=round(rss0 / 1024, 2),
                rss_after_mib=round(rss1 / 1024, 2),
                peak_rss_mib=round(peak / 1024, 2),
                rss_growth_mib=round((peak - rss0) / 1024, 2),
            )


def per_thousand(cpu_s: float | None, count: int | None) -> float | None:
    if cpu_s is None or not count:
        return None
    return round(cpu_s / count * 1000, 4)


# -- load generators ---------------------------------------------------------------------------


def run_wrk(url: str, conns: int, seconds: int, tool: str = "small") -> dict[str, Any]:
    argv = ["taskset", "-c", str(LOADGEN_CPU), "wrk", "-t1", f"-c{conns}", f"-d{seconds}s", "--timeout", "5s"]
    argv += ["--latency", "-s", str(LUA), url, "--", tool]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 60, check=False)
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith("BENCH ")), None)
    if line is None:
        raise RuntimeError(f"wrk printed no result (rc={out.returncode}): {out.stderr[-500:]}")
    raw = json.loads(line[6:])
    seconds_run = raw["duration_us"] / 1e6
    errors = sum(raw[k] for k in ("connect_errors", "read_errors", "write_errors", "timeouts"))
    return {
        "requests": raw["requests"],
        "rps": round(raw["requests"] / seconds_run, 1),
        "p50": raw["p50_us"] / 1000,
        "p95": raw["p95_us"] / 1000,
        "p99": raw["p99_us"] / 1000,
        "mean": round(raw["mean_us"] / 1000, 4),
        "max": raw["max_us"] / 1000,
        "errors": errors,
        "non_2xx": raw["status_errors"],
    }


def run_client(procs: Processes, args: list[str], limit: float = 300.0) -> dict[str, Any]:
    child = procs.start("client", [PY, str(CLIENT), *args, "--limit", str(limit)], cpu=LOADGEN_CPU)
    try:
        out, _ = child.proc.communicate(timeout=limit + 30)
    finally:
        procs.stop(child)
    lines = out.decode().strip().splitlines()
    if not lines:
        raise RuntimeError(f"client printed nothing\n{child.tail()}")
    result: dict[str, Any] = json.loads(lines[-1])
    return result


# -- paths -------------------------------------------------------------------------------------


@dataclass
class Path_:
    """A started path: the URL clients use and the process that is measured (None for direct)."""

    name: str
    url: str
    child: Child | None


def ours_argv(
    upstream: str,
    port: int,
    tmp: Path,
    *,
    logged: bool,
    tag: str,
    live: bool = False,
    quiet: bool = False,
) -> list[str]:
    """`live`: the admin API on (its metrics count every observation); off, nothing watches.

    `logged`: JSON log lines to a file and a JSONL capture; `quiet`: log level error. Neither: the
    default logging (info-level lines on stderr, which the harness writes to a file).
    """
    argv = [PY, "-m", "proxy.cli", "--upstream", upstream, "--listen", f"127.0.0.1:{port}"]
    argv += ["--admin", f"127.0.0.1:{free_port()}"] if live else ["--no-admin-enabled"]
    if logged:
        argv += ["--log-format", "json", "--log-file", str(tmp / f"{tag}.log.jsonl")]
        argv += ["--capture", str(tmp / f"{tag}.capture.jsonl")]
    elif quiet:
        argv += ["--log-level", "error"]
    return argv


NGINX_CONF = """
worker_processes 1;
user root;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log warn;
worker_rlimit_nofile 65536;
events {{ worker_connections 16384; }}
http {{
    access_log off;
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    upstream mcp {{ server 127.0.0.1:{up}; keepalive 256; }}
    server {{
        listen 127.0.0.1:{port} backlog=4096;
        client_max_body_size 64m;
        location / {{
            proxy_pass http://mcp;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host 127.0.0.1:{up};
            proxy_buffering off;
            proxy_request_buffering off;
            proxy_read_timeout 3600s;
            proxy_send_timeout 3600s;
        }}
    }}
}}
"""


def mitmdump_binary() -> str | None:
    local = Path(__file__).resolve().parent.parent / ".cache" / "bench-venv" / "bin" / "mitmdump"
    candidates = [os.environ.get("BENCH_MITMDUMP"), str(local), shutil.which("mitmdump")]
    return next((c for c in candidates if c and Path(c).exists()), None)


def start_path(procs: Processes, name: str, upstream: str, tmp: Path, tag: str) -> Path_:
    if name == "direct":
        return Path_(name, upstream, None)
    port = free_port()
    origin = upstream.rsplit("/", 1)[0]
    if name in OURS_PATHS:
        live, logged, quiet = OURS_PATHS[name]
        argv = ours_argv(upstream, port, tmp, logged=logged, tag=f"{tag}-{name}", live=live, quiet=quiet)
        if name == "ours-otel":
            sink_port = free_port()
            sink_argv = [PY, str(BENCH / "otlp_sink.py"), "--port", str(sink_port)]
            sink = procs.start(f"{tag}-otlp-sink", sink_argv, cpu=LOADGEN_CPU)
            wait_port(sink_port, sink)
            argv += ["--otlp-endpoint", f"http://127.0.0.1:{sink_port}"]
        child = procs.start(f"{tag}-{name}", argv, cpu=SERVER_CPU, cwd=PROXY_ROOT)
    elif name == "bare-aiohttp":
        argv = [PY, str(BENCH / "bare_proxy.py"), "--upstream", upstream, "--listen", f"127.0.0.1:{port}"]
        child = procs.start(f"{tag}-bare", argv, cpu=SERVER_CPU)
    elif name == "mitmdump":
        binary = mitmdump_binary()
        if binary is None:
            raise RuntimeError("mitmdump not found (pip install mitmproxy, or set BENCH_MITMDUMP)")
        argv = [
            binary,
            "--mode",
            f"reverse:{origin}/",
            "--listen-host",
            "127.0.0.1",
            "--listen-port",
            str(port),
        ]
        argv += ["-q", "-s", str(BENCH / "mitm_stream.py")]
        child = procs.start(f"{tag}-mitmdump", argv, cpu=SERVER_CPU)
    elif name == "nginx":
        conf_dir = tmp / f"{tag}-nginx"
        conf_dir.mkdir(exist_ok=True)
        up_port = int(origin.rsplit(":", 1)[1])
        (conf_dir / "nginx.conf").write_text(NGINX_CONF.format(tmp=conf_dir, up=up_port, port=port))
        nginx = shutil.which("nginx") or "/usr/sbin/nginx"
        argv = [
            nginx,
            "-p",
            str(conf_dir),
            "-e",
            str(conf_dir / "error.log"),
            "-c",
            str(conf_dir / "nginx.conf"),
        ]
        child = procs.start(f"{tag}-nginx", [*argv, "-g", "daemon off;"], cpu=SERVER_CPU)
    else:
        raise ValueError(name)
    wait_port(port, child)
    url = f"http://127.0.0.1:{port}/mcp"
    smoke(url, child)
    return Path_(name, url, child)


def smoke(url: str, child: Child, timeout: float = 30.0) -> None:
    """One small call must succeed through the path before it is measured."""
    import urllib.request

    body = b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"small","arguments":{}}}'
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2025-11-25",
        "Mcp-Session-Id": "bench-upstream-session",
    }
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            req = urllib.request.Request(url, data=body, headers=headers, method="POST")
            with urllib.request.urlopen(req, timeout=5) as resp:
                if resp.status == 200 and b'"result"' in resp.read():
                    return
        except OSError as exc:
            last = exc
        time.sleep(0.1)
    raise RuntimeError(f"{child.name}: smoke call failed: {last}\n{child.tail()}")


def start_upstream(procs: Processes, argv: list[str], name: str) -> tuple[Child, str]:
    child = procs.start(name, argv, cpu=SERVER_CPU)
    line = read_line(child, 60)
    if not line.startswith("READY "):
        raise RuntimeError(f"{name}: unexpected first line {line!r}\n{child.tail()}")
    return child, f"http://127.0.0.1:{line.split()[1]}/mcp"


# -- workloads ---------------------------------------------------------------------------------


def guarded(fn: Callable[[], dict[str, Any]], what: str) -> dict[str, Any]:
    """Run one workload; a failure is recorded (and printed) instead of ending the run."""
    try:
        return fn()
    except (
        RuntimeError,
        OSError,
        ValueError,
        KeyError,
        subprocess.SubprocessError,
        json.JSONDecodeError,
    ) as exc:
        print(f"  ! {what}: {exc}", flush=True)
        return {"error": str(exc)[:2000]}


def wrk_workload(path: Path_, conns: int, seconds: int) -> dict[str, Any]:
    meter = Meter(path.child)
    with meter.measure() as m:
        result = run_wrk(path.url, conns, seconds)
    result.update(m)
    result["cpu_per_1k"] = per_thousand(m.get("cpu_s"), result["requests"])
    return result


def client_workload(procs: Processes, path: Path_, args: list[str], calls: int) -> dict[str, Any]:
    meter = Meter(path.child)
    with meter.measure() as m:
        result = run_client(procs, [args[0], path.url, *args[1:]])
    if "error" in result and len(result) == 1:
        raise RuntimeError(result["error"])
    result.update(m)
    result["cpu_per_1k"] = per_thousand(m.get("cpu_s"), calls)
    return result


def idle_workload(procs: Processes, path: Path_, profile: Profile) -> dict[str, Any]:
    """Calls at concurrency 16 without, with, and again without `idle_streams` GET streams held open.

    "without" is the mean of the runs before and after: on this machine a path's rate drifts by 15%
    from one 10 s run to the next, and a single run before would compare the streams with the drift.
    """
    before = run_wrk(path.url, 16, profile.idle_wrk_seconds)
    out: dict[str, Any] = {"without_before": before}
    pids = path.child.pids() if path.child else []
    rss0 = memory_kib(pids)[0] if pids else 0
    limit = 240.0
    args = [PY, str(CLIENT), "idle", path.url, "--count", str(profile.idle_streams), "--hold", "200"]
    holder = procs.start("idle-client", [*args, "--limit", str(limit)], cpu=LOADGEN_CPU, stdin=True)
    try:
        line = read_line(holder, 120)
        _, opened, failed = line.split()
        time.sleep(1.0)  # let the proxy settle after the burst of opens
        rss1 = memory_kib(pids)[0] if pids else 0
        run_wrk(path.url, 16, 1)  # warm-up, as "without" was: one-off costs of the opens land here
        out["with"] = run_wrk(path.url, 16, profile.idle_wrk_seconds)
        rss2 = memory_kib(pids)[0] if pids else 0
        assert holder.proc.stdin is not None
        holder.proc.stdin.write(b"\n")
        holder.proc.stdin.flush()
        summary = read_line(holder, 60)
    finally:
        procs.stop(holder)
    time.sleep(1.0)  # the streams' connections close
    after = run_wrk(path.url, 16, profile.idle_wrk_seconds)
    out["without_after"] = after
    out["without"] = {k: round((before[k] + after[k]) / 2, 4) for k in ("rps", "p50", "p95", "p99")}
    out["client"] = json.loads(summary)
    out["opened"], out["failed"] = int(opened), int(failed)
    if pids:
        out["rss_before_mib"] = round(rss0 / 1024, 2)
        out["rss_with_streams_mib"] = round(max(rss1, rss2) / 1024, 2)
        out["rss_growth_mib"] = round((max(rss1, rss2) - rss0) / 1024, 2)
        out["kib_per_stream"] = round((max(rss1, rss2) - rss0) / max(1, int(opened)), 1)
    return out


def run_path_workloads(procs: Processes, path: Path_, profile: Profile) -> dict[str, Any]:
    results: dict[str, Any] = {}
    run_wrk(path.url, 16, profile.warmup_seconds)  # warm-up: connection pools, caches
    for conns in (1, 16, 64):
        label = f"json_c{conns}"
        print(f"  {path.name}: small JSON tools/call, concurrency {conns}", flush=True)
        results[label] = guarded(lambda c=conns: wrk_workload(path, c, profile.wrk_seconds), label)
    print(f"  {path.name}: SSE call", flush=True)
    n = profile.sse_calls
    results["sse"] = guarded(
        lambda: client_workload(procs, path, ["sse", "--n", str(n), "--warmup", "10"], n), "sse"
    )
    # 10 MiB first: its RSS growth is then not hidden by heap the 1 MiB parse already grew.
    for tool, n_big in (("big10m", profile.big10m_calls), ("big1m", profile.big1m_calls)):
        print(f"  {path.name}: {tool} result", flush=True)
        args = ["big", "--tool", tool, "--n", str(n_big), "--warmup", "1"]
        results[tool] = guarded(lambda a=args, k=n_big: client_workload(procs, path, a, k), tool)
    print(f"  {path.name}: legacy elicitation round trip", flush=True)
    n = profile.elicit_rounds
    args = ["legacy", "--tool", "elicit", "--n", str(n), "--warmup", "10"]
    results["elicit"] = guarded(lambda: client_workload(procs, path, args, n), "elicit")
    print(f"  {path.name}: {profile.idle_streams} idle GET streams", flush=True)
    results["idle"] = guarded(lambda: idle_workload(procs, path, profile), "idle")
    return results


def run_interleaved(
    procs: Processes, tmp: Path, profile: Profile, paths: list[str], upstream: str, tag: str
) -> dict[str, Any]:
    """Concurrency 16 on every path in turn: short rounds, each path once a round, order rotated.

    Why: this machine's speed drifts by tens of percent within minutes, so two paths measured a
    minute apart (as the per-path workloads are) compare the drift as much as the paths. Here every
    round measures all paths within seconds of each other and gives one ratio per pair; the median of
    those ratios holds still where one run per path swings. All paths stay started (idle while
    another is measured), on the same core as before.
    """
    started: dict[str, Path_] = {}
    try:
        for name in paths:
            try:
                started[name] = start_path(procs, name, upstream, tmp, f"{tag}-il")
            except RuntimeError as exc:
                print(f"  ! {name} did not start: {exc}", flush=True)
        for path in started.values():
            run_wrk(path.url, 16, profile.warmup_seconds)
        order = list(started)
        rps: dict[str, list[float]] = {name: [] for name in order}
        for turn in range(profile.interleave_rounds):
            shift = turn % len(order) if order else 0
            for name in order[shift:] + order[:shift]:
                rps[name].append(run_wrk(started[name].url, 16, profile.interleave_seconds)["rps"])
        return {"rounds": profile.interleave_rounds, "seconds": profile.interleave_seconds, "rps": rps}
    finally:
        for path in started.values():
            if path.child is not None:
                procs.stop(path.child)


# -- bridges -----------------------------------------------------------------------------------


def mrtr_to_legacy_available() -> bool:
    """The modern -> legacy bridge exists only once its engine is written and wired into the runtime."""
    if importlib.util.find_spec("proxy.engine.modern_client.engine") is None:
        return False
    return any("MRTR_TO_LEGACY" in path.read_text() for path in (REPO / "proxy").glob("runtime*.py"))


LOOPBACK_ROUTES = ("127.0.0.1", "127.0.0.0/8")
"""The local-table routes loopback traffic to 127.0.0.1 takes (the most specific one decides)."""


@contextlib.contextmanager
def loopback_quickack() -> Iterator[str]:
    """Loopback TCP acknowledges every segment at once while the block runs; restored after.

    Why: the SDK peers (uvicorn) write an SSE head and its first event in two writes without
    TCP_NODELAY, so on a reused connection the event waits for the head's ACK, which the reader's
    kernel delays by 40 ms. Every SDK round trip then takes 44 or 88 ms in steps of the 4 ms kernel
    tick, and a bridge's real cost (well under a millisecond to a few) vanishes in that
    quantization. The route metric `quickack` turns delayed ACKs off for loopback, for every path
    alike (direct included), so what differs between paths is what the proxies do. Needs root and
    `ip`; without them the rounds run as they are and the results say so. Yields what happened.
    """
    ip = shutil.which("ip")
    if ip is None:
        yield "off (no ip command)"
        return
    saved: list[list[str]] = []
    state = "on (route metric quickack 1 on 127.0.0.1 and 127.0.0.0/8)"
    try:
        for route in LOOPBACK_ROUTES:
            shown = subprocess.run(
                [ip, "route", "show", "table", "local", "exact", route],
                capture_output=True,
                text=True,
                check=False,
            ).stdout.split()
            if not shown or "quickack" in shown:
                continue
            changed = subprocess.run(
                [ip, "route", "change", "table", "local", *shown, "quickack", "1"],
                capture_output=True,
                text=True,
                check=False,
            )
            if changed.returncode != 0:
                state = f"off ({changed.stderr.strip() or 'ip route change failed'})"
                break
            saved.append(shown)
        yield state
    finally:
        for shown in saved:
            restore = [ip, "route", "change", "table", "local", *shown]
            subprocess.run(restore, capture_output=True, check=False)


def run_bridges(procs: Processes, tmp: Path, profile: Profile, tag: str) -> dict[str, Any]:
    """Each bridge's full round trip (`ask_name`, one elicitation) against the same-era native path."""
    legacy_peer, legacy_url = start_upstream(
        procs, [PY, "-m", "tests.peers.serve", "legacy-inflight"], "peer-legacy"
    )
    modern_peer, modern_url = start_upstream(
        procs, [PY, "-m", "tests.peers.serve", "modern-mrtr"], "peer-modern"
    )
    started = []
    try:
        to_modern = start_bridge_proxy(procs, modern_url, tmp, f"{tag}-to-modern")
        to_legacy = start_bridge_proxy(procs, legacy_url, tmp, f"{tag}-to-legacy")
        # The same bridge with no round window: what the proxy itself adds to a round, apart from
        # the wait (the default millisecond) for more requests the server sends together.
        to_legacy_now = start_bridge_proxy(
            procs, legacy_url, tmp, f"{tag}-to-legacy-w0", ("--round-window", "0")
        )
        started = [to_modern, to_legacy, to_legacy_now]
        n, warm = str(profile.bridge_rounds), "5"

        def rounds(era: str, path: Path_) -> dict[str, Any]:
            result = client_workload(
                procs, path, [era, "--tool", "ask_name", "--n", n, "--warmup", warm], int(n)
            )
            if result.get("errors") or result.get("texts") != ["Hello, octocat!"]:
                raise RuntimeError(f"round trip failed: {result.get('error') or result.get('texts')}")
            return result

        def paired(era: str, bridged: Path_, base_era: str, base: Path_) -> dict[str, Any]:
            args = ["--era", era, "--base", base.url, "--base-era", base_era]
            result = run_client(procs, ["paired", bridged.url, *args, "--n", n, "--warmup", warm])
            if result.get("errors") or result.get("texts") != ["Hello, octocat!"]:
                raise RuntimeError(f"paired rounds failed: {result.get('error') or result.get('texts')}")
            return result

        out: dict[str, Any] = {"legacy_to_modern": {}, "modern_to_legacy": {}}
        with loopback_quickack() as quickack:
            out["quickack"] = quickack
            _bridge_rounds(out, rounds, legacy_url, modern_url, to_legacy, to_modern, to_legacy_now)
            if mrtr_to_legacy_available():
                print("  bridges: a legacy server's two concurrent requests, in one round or two", flush=True)
                out["modern_to_legacy"]["two_at_once"] = guarded(
                    lambda: _whole_rounds(procs, n, warm, to_legacy, to_legacy_now), "m2l two at once"
                )
            # Each bridged round paired with a server-era native one through the same proxy, the two
            # in alternation: the difference a slow minute cannot move.
            print("  bridges: each bridged round paired with a server-era native round via ours", flush=True)
            out["legacy_to_modern"]["paired"] = guarded(
                lambda: paired("legacy", to_modern, "modern", to_modern), "l2m paired"
            )
            if mrtr_to_legacy_available():
                out["modern_to_legacy"]["paired"] = guarded(
                    lambda: paired("modern", to_legacy, "legacy", to_legacy), "m2l paired"
                )
        return out
    finally:
        for path in started:
            if path.child is not None:
                procs.stop(path.child)
        procs.stop(modern_peer)
        procs.stop(legacy_peer)


def _bridge_rounds(
    out: dict[str, Any],
    rounds: Callable[[str, Path_], dict[str, Any]],
    legacy_url: str,
    modern_url: str,
    to_legacy: Path_,
    to_modern: Path_,
    to_legacy_now: Path_,
) -> None:
    """The six round-trip series: each client era direct, via ours natively, and bridged."""
    l2m, m2l = out["legacy_to_modern"], out["modern_to_legacy"]
    print(
        "  bridges: legacy client (native direct, native via ours, bridged to a modern server)",
        flush=True,
    )
    l2m["native_direct"] = guarded(lambda: rounds("legacy", Path_("direct", legacy_url, None)), "l2m direct")
    l2m["native_ours"] = guarded(lambda: rounds("legacy", to_legacy), "l2m native")
    l2m["bridged"] = guarded(lambda: rounds("legacy", to_modern), "l2m bridged")
    print(
        "  bridges: modern client (native direct, native via ours, bridged to a legacy server)",
        flush=True,
    )
    m2l["native_direct"] = guarded(lambda: rounds("modern", Path_("direct", modern_url, None)), "m2l direct")
    m2l["native_ours"] = guarded(lambda: rounds("modern", to_modern), "m2l native")
    if mrtr_to_legacy_available():
        m2l["bridged"] = guarded(lambda: rounds("modern", to_legacy), "m2l bridged")
        m2l["bridged_window_0"] = guarded(lambda: rounds("modern", to_legacy_now), "m2l bridged, window 0")
    else:
        m2l["bridged"] = {"na": "n/a (not available)"}


def _whole_rounds(
    procs: Processes, n: str, warm: str, to_legacy: Path_, to_legacy_now: Path_
) -> dict[str, Any]:
    """How often the bridge asks a legacy server's two concurrent requests (`ask_two_at_once`) in one
    round, with the default round window and with none: the window's worth, read off real runs."""
    out: dict[str, Any] = {}
    for label, path in (("default", to_legacy), ("window_0", to_legacy_now)):
        args = ["modern", path.url, "--tool", "ask_two_at_once", "--n", n, "--warmup", warm]
        result = run_client(procs, args)
        if result.get("errors"):
            raise RuntimeError(f"ask_two_at_once failed: {result.get('error')}")
        asks = result.get("first_round_asks") or {}
        out[label] = {"calls": int(n), "whole": int(asks.get("2", 0)), "first_round_asks": asks}
    return out


def start_bridge_proxy(
    procs: Processes, upstream: str, tmp: Path, tag: str, extra: tuple[str, ...] = ()
) -> Path_:
    port = free_port()
    argv = [*ours_argv(upstream, port, tmp, logged=True, tag=tag), *extra]
    child = procs.start(tag, argv, cpu=SERVER_CPU, cwd=PROXY_ROOT)
    wait_port(port, child)
    return Path_("ours", f"http://127.0.0.1:{port}/mcp", child)


# -- one run -----------------------------------------------------------------------------------


def run_once(
    procs: Processes, tmp: Path, profile: Profile, index: int, paths: list[str], bridges: bool
) -> dict[str, Any]:
    tag = f"run{index}"
    up_child, upstream = start_upstream(
        procs, [PY, str(BENCH / "upstream_fast.py"), "--port", "0"], f"{tag}-upstream"
    )
    run: dict[str, Any] = {"paths": {}, "started": time.strftime("%Y-%m-%dT%H:%M:%S")}
    try:
        for name in paths:
            print(f"run {index}: path {name}", flush=True)
            try:
                path = start_path(procs, name, upstream, tmp, tag)
            except RuntimeError as exc:
                print(f"  ! {name} did not start: {exc}", flush=True)
                run["paths"][name] = {"error": f"did not start: {str(exc)[:1000]}"}
                continue
            try:
                run["paths"][name] = run_path_workloads(procs, path, profile)
            finally:
                if path.child is not None:
                    procs.stop(path.child)
        print(f"run {index}: small JSON tools/call, concurrency 16, paths interleaved", flush=True)
        run["interleaved_c16"] = guarded(
            lambda: run_interleaved(procs, tmp, profile, paths, upstream, tag), "interleaved c=16"
        )
    finally:
        procs.stop(up_child)
    if bridges:
        print(f"run {index}: bridges", flush=True)
        try:
            run["bridges"] = run_bridges(procs, tmp, profile, tag)
        except RuntimeError as exc:
            print(f"  ! bridges: {exc}", flush=True)
            run["bridges"] = {"error": str(exc)[:2000]}
    return run


def tool_versions() -> dict[str, str]:
    def first_line(argv: list[str]) -> str:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
            text = (out.stdout or out.stderr).strip().splitlines()
            return text[0] if text else "?"
        return "not found"

    import aiohttp

    from proxy import __version__

    mitm = mitmdump_binary()
    cpu = "?"
    with contextlib.suppress(OSError):
        cpu = next(
            (
                ln.split(":", 1)[1].strip()
                for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if "model name" in ln
            ),
            "?",
        )
    return {
        "mcp-debug-proxy": __version__,
        "python": platform.python_version(),
        "aiohttp": aiohttp.__version__,
        "uvloop": "installed" if importlib.util.find_spec("uvloop") else "not installed",
        "wrk": first_line(["wrk", "-v"]),
        "nginx": first_line([shutil.which("nginx") or "/usr/sbin/nginx", "-v"]),
        "mitmdump": first_line([mitm, "--version"]) if mitm else "not found",
        "cpu": cpu,
        "cores": str(os.cpu_count()),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="short workloads (default)")
    mode.add_argument("--full", action="store_true", help="longer workloads, for the final numbers")
    mode.add_argument("--smoke", action="store_true", help="tiny workloads: checks the harness only")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--out", type=Path, default=BENCH / "results")
    parser.add_argument(
        "--paths", default=",".join(PATHS), help=f"comma-separated subset of {','.join(PATHS)}"
    )
    parser.add_argument("--no-bridges", action="store_true", help="skip the bridge round trips")
    parser.add_argument("--keep-tmp", action="store_true", help="keep logs and captures (printed path)")
    args = parser.parse_args()
    profile = FULL if args.full else SMOKE if args.smoke else QUICK
    paths = [p for p in args.paths.split(",") if p]
    unknown = set(paths) - set(PATHS)
    if unknown:
        parser.error(f"unknown paths: {sorted(unknown)}")
    if shutil.which("wrk") is None:
        parser.error("wrk not found (apt-get install wrk)")

    global LOADGEN_CPU, SERVER_CPU
    if (os.cpu_count() or 1) < 2:
        print("warning: one CPU only; load generator and servers share it", file=sys.stderr)
        SERVER_CPU = 0
    os.sched_setaffinity(0, {LOADGEN_CPU})  # this harness and its sampler beside the load generator
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # 1,000 streams need ~3,000 descriptors

    def terminate(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, terminate)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # even when started with SIGINT ignored
    tmp = Path(tempfile.mkdtemp(prefix="mcp-bench-"))
    procs = Processes(tmp)
    meta = {
        "profile": asdict(profile),
        "layout": f"load generators and harness on CPU {LOADGEN_CPU} (taskset -c {LOADGEN_CPU}); "
        f"upstreams and proxies on CPU {SERVER_CPU} (taskset -c {SERVER_CPU})",
        "paths": {p: report.PATH_LABELS[p] for p in paths},
        "versions": tool_versions(),
        "nofile_limit": hard,
        "mrtr_to_legacy": "available" if mrtr_to_legacy_available() else "n/a (not available)",
    }
    results: dict[str, Any] = {"meta": meta, "runs": []}
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    try:
        for index in range(1, args.runs + 1):
            results["runs"].append(run_once(procs, tmp, profile, index, paths, not args.no_bridges))
            results["targets"] = report.targets(results)
            report.write(results, args.out)
    except KeyboardInterrupt:
        print("interrupted: stopping every process", file=sys.stderr)
        return 130
    finally:
        procs.stop_all()
        if args.keep_tmp:
            print(f"logs and captures kept in {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    meta["elapsed_s"] = round(time.monotonic() - started, 1)
    results["targets"] = report.targets(results)
    report.write(results, args.out)
    print(report.markdown(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
