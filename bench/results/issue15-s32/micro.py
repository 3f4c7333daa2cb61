"""Sink-level micro benchmark: feed synthetic small-exchange batches to a started Proxy's sink."""
import asyncio, sys, time, os, gc
import orjson
from proxy.config import Settings
from proxy.logs import configure
from proxy.runtime import Proxy
try:
    from proxy.runtime_tuning import tune_gc
except ImportError:  # a tree whose runtime module still holds the process tuning
    from proxy.runtime import tune_gc
from proxy.flows.events import Channel, Direction, Mode, Side
from proxy.flows.observations import ExchangeOpened, MessageSeen, ResponseHeadSeen, ExchangeClosed
from proxy.wire.jsonrpc import parse_body
from proxy.wire.joined_headers import recorded

admin = sys.argv[1] == "on"
WHOLE = os.environ.get("WHOLE", "1") == "1"
n = int(sys.argv[2]) if len(sys.argv) > 2 else 20000
parts = set(sys.argv[3].split(",")) if len(sys.argv) > 3 else set()

REQ = b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"small","arguments":{"text":"hello"}}}'
RES = b'{"jsonrpc":"2.0","id":%d,"result":{"content":[{"type":"text","text":"ok: the canned answer of the benchmark upstream"}],"isError":false}}'
HEAD = [("Host","127.0.0.1:8080"),("Content-Type","application/json"),("Accept","application/json, text/event-stream"),("MCP-Protocol-Version","2025-11-25"),("Mcp-Session-Id","bench-upstream-session"),("Content-Length","100")]
RHEAD = [("Content-Type","application/json"),("Content-Length","130"),("Date","Tue, 01 Dec 2026 23:40:05 GMT"),("Server","Python/3.11 aiohttp/3.14.5")]

async def main():
    import tempfile, pathlib
    configure(level="error", fmt="json", file=pathlib.Path(tempfile.mkdtemp())/"l")
    s = Settings(upstream="http://127.0.0.1:9/mcp", listen="127.0.0.1:0", admin="127.0.0.1:0", admin_enabled=admin, upstream_era="legacy")
    p = Proxy(s, keep_chains=admin)
    tune_gc()
    await p.start()
    sink = p.observations
    now = sink.now
    import inspect
    vouch = "exchange" in inspect.signature(sink.emit_all).parameters
    def emit_all(batch):
        sink.emit_all(batch, exchange=batch[0].exchange) if vouch else sink.emit_all(batch)
    def close(obs, before):
        return sink.close(obs, before, whole=True) if vouch else sink.close(obs, before)
    def one(i):
        ex = f"e{i}"
        req = REQ % i
        body = parse_body(req)
        emit_all(batch=[ExchangeOpened(now(), ex, "POST", "/mcp", recorded(HEAD), "bench-upstream-session", "2025-11-25", "2025-11-25", Mode.PASSTHROUGH, len(req), "http", "http", "k1"),
                       MessageSeen(now(), ex, body.messages[0], len(req), Direction.TO_SERVER, Channel.POST)])
        res = RES % i
        rb = parse_body(res)
        close(ExchangeClosed(now(), ex, None), before=[ResponseHeadSeen(now(), ex, 200, "application/json", recorded(RHEAD)),
                      MessageSeen(now(), ex, rb.messages[0], len(res), Direction.TO_CLIENT, Channel.JSON, Side.BOTH, None)])
    for i in range(3000):
        one(i)
    gc.collect()
    if os.environ.get("GO"):
        print("ready", flush=True)
        while not os.path.exists(os.environ["GO"]):
            await asyncio.sleep(0.05)
    t = time.process_time()
    for i in range(3000, 3000 + n):
        one(i)
    t = time.process_time() - t
    print(f"admin {sys.argv[1]}: {t/n*1e6:.2f} us per exchange", flush=True)
    if os.environ.get("STOP"):
        print("measured", flush=True)
        while not os.path.exists(os.environ["STOP"]):
            await asyncio.sleep(0.05)
    await p.stop()

import uvloop
uvloop.run(main())
