"""The proxy's own CPU per small `tools/call`, measured in one process without sockets or a kernel.

    python bench/inproc.py [--requests 20000] [--clients 1] [--admin on|off] [--log info|error] [--sse]
                           [--otlp URL] [--profile OUT.prof]

The loopback benchmark (`bench/run.py`) measures what users get, but on a 2-core machine its numbers
move by a third between two runs, which hides a change worth 10%. This drives a real `Proxy` (default
settings, uvloop) through in-memory transports instead: client connections that send the next
request as soon as a response arrives, and an upstream that answers each request it is written with
the benchmark upstream's canned bytes on the next loop turn. Nothing else runs, so the CPU seconds it
reports are the proxy's Python work per request, repeatable to a few percent; syscalls, the kernel's
loopback and the upstream's own work are left out (`bench/run.py` has them).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import uvloop

# This file's folder comes first on sys.path, and its profile.py would shadow the one cProfile imports.
# BENCH_PROXY_ROOT: measure the proxy of another checkout (as bench/run.py does).
sys.path[0] = os.environ.get("BENCH_PROXY_ROOT") or str(Path(__file__).resolve().parent.parent)

from proxy.config import Settings  # noqa: E402
from proxy.logs import configure  # noqa: E402
from proxy.runtime import Proxy  # noqa: E402
from proxy.transport.front import FrontConnection  # noqa: E402

try:
    from proxy.runtime_tuning import tune_gc
except ImportError:  # a BENCH_PROXY_ROOT checkout whose runtime module still holds the process tuning
    from proxy.runtime import tune_gc  # type: ignore[attr-defined,no-redef]

BODY = (
    b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"small","arguments":{"text":"hello"}}}'
)
REQUEST_HEAD = (
    b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nContent-Type: application/json\r\n"
    b"Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2025-11-25\r\n"
    b"Mcp-Session-Id: bench-upstream-session\r\nContent-Length: %d\r\n\r\n"
)
RESULT = (
    b'{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"ok: the canned answer of '
    b'the benchmark upstream"}],"isError":false}}'
)
RESPONSE_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
    b"Date: Tue, 01 Dec 2026 23:40:05 GMT\r\nServer: Python/3.11 aiohttp/3.14.5\r\n\r\n"
)
SSE_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
    b"Transfer-Encoding: chunked\r\nDate: Tue, 01 Dec 2026 23:40:05 GMT\r\n"
    b"Server: Python/3.11 aiohttp/3.14.5\r\n\r\n"
)
PROGRESS = (
    b'{"jsonrpc":"2.0","method":"notifications/progress",'
    b'"params":{"progressToken":%s,"progress":1,"total":2}}'
)
LAST_CHUNK = b"0\r\n\r\n"
_ID = re.compile(rb'"id":(\d+)')


def _spans_of(proxy: Proxy) -> Any:
    """The proxy's span sender, if any: on `proxy.tracing` now, on the proxy itself in older checkouts."""
    tracing = getattr(proxy, "tracing", None)
    if tracing is not None:
        return tracing._spans
    return getattr(proxy, "_spans", None)


def sse_chunk(message: bytes) -> bytes:
    """One SSE event carrying `message`, as one chunk of a chunked body (how aiohttp streams it)."""
    event = b"event: message\r\ndata: " + message + b"\r\n\r\n"
    return b"%x\r\n%s\r\n" % (len(event), event)


class _Transport:
    """Enough of an asyncio transport for the proxy's protocols; `on_write` sees every write."""

    def __init__(self, on_write: Any) -> None:
        self.on_write = on_write
        self.closing = False

    def write(self, data: bytes) -> None:
        self.on_write(bytes(data))

    def writelines(self, chunks: Any) -> None:
        self.on_write(b"".join(chunks))

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    abort = close

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 40000) if name in ("peername", "sockname") else default

    def get_write_buffer_size(self) -> int:
        return 0

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def is_reading(self) -> bool:
        return True

    def can_write_eof(self) -> bool:
        return False


class _Loop(uvloop.Loop):  # type: ignore[misc]
    """uvloop, with upstream connections answered in memory by the benchmark upstream's bytes."""

    sse = False
    """Answer as the benchmark upstream's `sse` tool does: the head, a progress event, then the result
    event and the body's end, each on a loop turn of its own (three reads for the proxy)."""

    async def create_connection(self, factory: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
        proto = factory()

        def answer(data: bytes) -> None:
            found = _ID.search(data)
            ident = found.group(1) if found else b"1"
            result = RESULT % ident
            if not self.sse:
                self.call_soon(proto.data_received, RESPONSE_HEAD % len(result) + result)
                return
            self.call_soon(proto.data_received, SSE_HEAD)
            self.call_soon(lambda: self.call_soon(proto.data_received, sse_chunk(PROGRESS % ident)))
            last = sse_chunk(result) + LAST_CHUNK
            self.call_soon(lambda: self.call_soon(lambda: self.call_soon(proto.data_received, last)))

        transport = _Transport(answer)
        proto.connection_made(transport)
        return transport, proto


def _dial_in_memory() -> None:
    """Upstream connections reach the loop's in-memory answer: a checkout whose pool dials through
    `proxy.transport.dialing.connect` (a real socket first, its addresses raced) is pointed back at the
    loop's `create_connection`, which this benchmark answers."""
    from proxy.transport import upstream_pool

    if not hasattr(upstream_pool, "connect"):
        return

    async def connect(factory: Any, host: str, port: int, *, tls: Any = None) -> tuple[Any, Any]:
        return await asyncio.get_running_loop().create_connection(factory, host, port)

    upstream_pool.connect = connect  # type: ignore[attr-defined]


def _optional(**settings: Any) -> dict[str, Any]:
    """The settings given a value (None: the setting's default, or one the checkout measured lacks)."""
    return {name: value for name, value in settings.items() if value is not None}


async def drive(args: argparse.Namespace) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="mcp-inproc-"))
    configure(level=args.log, fmt="json", file=tmp / "log.jsonl")
    settings = Settings(
        upstream="http://127.0.0.1:9/mcp",
        listen="127.0.0.1:0",
        admin="127.0.0.1:0",
        admin_enabled=args.admin == "on",
        upstream_era="legacy",
        otlp_endpoint=args.otlp,
        faults=args.fault or [],
        intercepts=args.intercept or [],
        **_optional(unwatched_history_rate=args.unwatched_history_rate),
    )
    _dial_in_memory()
    proxy = Proxy(settings, keep_chains=settings.admin_enabled)  # as `mcp-proxy` builds it
    tune_gc()  # as `mcp-proxy` does before it serves
    await proxy.start()
    front = proxy._front
    assert front is not None
    done = asyncio.get_running_loop().create_future()
    state = {"sent": 0, "answered": 0}
    total = args.requests

    def client() -> None:
        conn = FrontConnection(front)
        buffer = bytearray()

        def send() -> None:
            state["sent"] += 1
            body = BODY % state["sent"]
            conn.data_received(REQUEST_HEAD % len(body) + body)

        end = LAST_CHUNK if args.sse else b"}}"

        def received(data: bytes) -> None:
            buffer.extend(data)
            if not buffer.endswith(end):
                return
            if b" 200 " not in buffer[:16]:
                done.set_exception(RuntimeError(bytes(buffer[:300]).decode("latin-1")))
                return
            buffer.clear()
            state["answered"] += 1
            if state["answered"] >= total:
                if not done.done():
                    done.set_result(None)
            elif state["sent"] < total:
                asyncio.get_running_loop().call_soon(send)

        conn.connection_made(_Transport(received))
        send()

    if args.start_after is not None:  # a tool outside (callgrind_control -i on) starts measuring first
        print("ready", flush=True)
        while not args.start_after.exists():  # noqa: ASYNC110 (another process makes the file)
            await asyncio.sleep(0.05)
    gc.collect()
    import cProfile  # here, after sys.path is set: it imports `profile`

    profiler = cProfile.Profile() if args.profile else None
    cpu, wall = time.process_time(), time.perf_counter()
    if profiler is not None:
        profiler.enable()
    for _ in range(args.clients):
        client()
    await done
    spans = _spans_of(proxy)
    if spans is not None:  # what waits for the exporter's next batch is part of the cost
        spans.flush()
    if profiler is not None:
        profiler.disable()
        profiler.dump_stats(args.profile)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    if args.stop_after is not None:  # the tool outside stops measuring before the proxy's own stop
        print("measured", flush=True)
        while not args.stop_after.exists():  # noqa: ASYNC110 (another process makes the file)
            await asyncio.sleep(0.05)
    await proxy.stop()
    print(
        f"{total} {'SSE ' if args.sse else ''}requests, {args.clients} client(s), admin {args.admin}, "
        f"log {args.log}, "
        f"otlp {'on' if args.otlp else 'off'}: "
        f"{cpu / total * 1e6:.1f} us CPU per request ({wall / total * 1e6:.1f} us wall)"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=20000)
    parser.add_argument("--clients", type=int, default=1)
    parser.add_argument("--admin", choices=("on", "off"), default="on")
    parser.add_argument("--log", choices=("info", "error"), default="info")
    parser.add_argument("--profile", type=Path, help="write cProfile stats of the measured part here")
    parser.add_argument(
        "--otlp", metavar="URL", help="export spans to this collector (bench/otlp_sink.py discards them)"
    )
    parser.add_argument(
        "--fault",
        action="append",
        metavar="RULE",
        help="a fault rule in force (repeatable), say one that matches nothing, to measure the gate's cost",
    )
    parser.add_argument(
        "--unwatched-history-rate",
        type=int,
        help="the setting of that name (default: its default); under valgrind, which runs the proxy about "
        "fifty times slower, divide the rate to compare with a run at full speed",
    )
    parser.add_argument(
        "--intercept",
        action="append",
        metavar="RULE",
        help="an intercept rule in force (repeatable), say one that matches nothing, to measure its cost",
    )
    parser.add_argument(
        "--start-after",
        type=Path,
        help="print `ready` and wait for this file before the measured part (for callgrind: see "
        "bench/instructions.sh)",
    )
    parser.add_argument(
        "--stop-after",
        type=Path,
        help="once the requests are answered, print `measured` and wait for this file before the proxy "
        "stops (for callgrind: see bench/instructions.sh)",
    )
    parser.add_argument(
        "--sse",
        action="store_true",
        help="each call answered as an SSE stream (head, a progress event, the result) in three reads",
    )
    args = parser.parse_args()
    _Loop.sse = args.sse
    with asyncio.Runner(loop_factory=_Loop) as runner:
        runner.run(drive(args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
