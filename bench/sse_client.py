"""The benchmark's asyncio client (aiohttp): the workloads wrk cannot drive, each event timestamped.

Subcommands (each prints one JSON object on stdout; every wait is bounded):

- `sse URL --n N`: sequential SSE `tools/call`s (`sse` tool); time to the first event and to the result.
- `big URL --tool big1m|big10m --n N`: sequential calls with a large JSON result; time to the last byte.
- `legacy URL --tool T --n N`: a legacy (2025-11-25) client: `initialize`, then N calls of tool T;
  every in-flight `elicitation/create` on the call's SSE stream is answered with a POST. One round
  trip = the call until its result, answers included.
- `modern URL --tool T --n N`: a 2026-07-28 client: N calls of tool T, each `input_required` answered
  with a retry carrying `inputResponses` and the echoed `requestState`, until the result.
- `paired URL --era E --base URL2 --base-era E2 --tool T --n N`: N rounds of tool T on URL (a client of
  era E) each paired with one on URL2 (era E2), run in alternation; prints both series and the
  median of the per-pair differences (`added`), which a drift of the machine's speed cannot move.
- `idle URL --count C`: opens C legacy GET streams, prints `OPEN <opened> <failed>`, holds them until
  a line (or EOF) arrives on stdin or `--hold` seconds pass, closes them and prints the JSON summary.

Run pinned to the load-generator core by bench/run.py. Importing `proxy.framing.sse` only for its SSE
decoder (the same for every path measured).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import threading
import time
from typing import Any

import aiohttp
import orjson

from proxy.framing.sse import SseDecoder, SseEvent

LEGACY_VERSION = "2025-11-25"
MODERN_VERSION = "2026-07-28"
CAPABILITIES: dict[str, Any] = {"elicitation": {"form": {}, "url": {}}, "sampling": {}, "roots": {}}
CLIENT_INFO = {"name": "bench-client", "version": "1"}
NAME = "octocat"
BASE_HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
FAST_SESSION = "bench-upstream-session"
"""Session id sent by the calls that skip the handshake (the fast upstream accepts any)."""


def stats_ms(samples: list[float]) -> dict[str, Any]:
    """Count, mean and percentiles of latencies given in seconds, reported in milliseconds."""
    if not samples:
        return {"n": 0}
    ordered = sorted(samples)

    def pct(p: float) -> float:
        index = min(len(ordered) - 1, max(0, round(p / 100 * len(ordered) + 0.5) - 1))
        return round(ordered[index] * 1000, 4)

    return {
        "n": len(ordered),
        "mean": round(statistics.fmean(ordered) * 1000, 4),
        "p50": pct(50),
        "p95": pct(95),
        "p99": pct(99),
        "max": round(ordered[-1] * 1000, 4),
    }


def legacy_headers(session: str | None) -> dict[str, str]:
    headers = {**BASE_HEADERS, "MCP-Protocol-Version": LEGACY_VERSION}
    if session is not None:
        headers["Mcp-Session-Id"] = session
    return headers


def call_body(ident: int | str, tool: str, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    params: dict[str, Any] = {"name": tool, "arguments": {}, **(extra or {})}
    return {"jsonrpc": "2.0", "id": ident, "method": "tools/call", "params": params}


async def events(resp: aiohttp.ClientResponse) -> Any:
    """Yield each SSE event's JSON payload as it arrives."""
    decoder = SseDecoder()
    async for chunk in resp.content.iter_any():
        for item in decoder.feed(chunk):
            if isinstance(item, SseEvent) and item.has_data:
                yield orjson.loads(item.data)


async def json_or_sse(resp: aiohttp.ClientResponse, ident: Any) -> dict[str, Any]:
    """The JSON-RPC response to `ident`, from a JSON body or the SSE stream."""
    if resp.headers.get("Content-Type", "").startswith("text/event-stream"):
        found: dict[str, Any] | None = None
        async for msg in events(resp):  # read to the end, as a client does: the connection is reused
            if msg.get("id") == ident and ("result" in msg or "error" in msg):
                found = dict(msg)
        if found is None:
            raise RuntimeError("SSE stream ended without the response")
        return found
    return dict(orjson.loads(await resp.read()))


# -- workloads ---------------------------------------------------------------------------------


async def run_sse(http: aiohttp.ClientSession, url: str, n: int, warmup: int) -> dict[str, Any]:
    head: list[float] = []
    first: list[float] = []
    done: list[float] = []
    errors = 0
    for i in range(-warmup, n):
        ident = i + warmup + 1
        body = orjson.dumps(call_body(ident, "sse", {"_meta": {"progressToken": ident}}))
        start = time.perf_counter()
        got_first: float | None = None
        try:
            async with http.post(url, data=body, headers=legacy_headers(FAST_SESSION)) as resp:
                got_head = time.perf_counter() - start
                got_result: float | None = None
                async for msg in events(resp):  # to the end of the stream, so the connection is reused
                    now = time.perf_counter()
                    if got_first is None:
                        got_first = now - start
                    if msg.get("id") == ident:
                        got_result = now - start
            if got_result is None or got_first is None:
                errors += 1
            elif i >= 0:
                head.append(got_head)
                first.append(got_first)
                done.append(got_result)
        except aiohttp.ClientError:
            errors += 1
    return {
        "head": stats_ms(head),
        "first_event": stats_ms(first),
        "result": stats_ms(done),
        "errors": errors,
    }


async def run_big(http: aiohttp.ClientSession, url: str, tool: str, n: int, warmup: int) -> dict[str, Any]:
    times: list[float] = []
    sizes: set[int] = set()
    errors = 0
    for i in range(-warmup, n):
        body = orjson.dumps(call_body(i + warmup + 1, tool))
        start = time.perf_counter()
        try:
            async with http.post(url, data=body, headers=legacy_headers(FAST_SESSION)) as resp:
                size = 0
                async for chunk in resp.content.iter_any():
                    size += len(chunk)
                if resp.status != 200:
                    errors += 1
                    continue
            if i >= 0:
                times.append(time.perf_counter() - start)
            sizes.add(size)
        except aiohttp.ClientError:
            errors += 1
    return {"latency": stats_ms(times), "bytes": sorted(sizes), "errors": errors}


def answer_for(request: dict[str, Any]) -> dict[str, Any]:
    """The client's fixed answer to a server request (elicitation: accept with a name)."""
    method = request.get("method")
    if method == "elicitation/create":
        return {"action": "accept", "content": {"name": NAME}}
    if method == "roots/list":
        return {"roots": [{"uri": "file:///bench", "name": "bench"}]}
    if method == "sampling/createMessage":
        return {"role": "assistant", "content": {"type": "text", "text": "Paris"}, "model": "m"}
    return {}


async def legacy_handshake(http: aiohttp.ClientSession, url: str) -> str | None:
    params = {"protocolVersion": LEGACY_VERSION, "capabilities": CAPABILITIES, "clientInfo": CLIENT_INFO}
    body = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params}
    async with http.post(url, data=orjson.dumps(body), headers=BASE_HEADERS) as resp:
        session = resp.headers.get("Mcp-Session-Id")
        reply = await json_or_sse(resp, 0)
        if "result" not in reply:
            raise RuntimeError(f"initialize failed: {reply}")
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    async with http.post(url, data=orjson.dumps(note), headers=legacy_headers(session)) as resp:
        await resp.read()
    return session


async def legacy_round(
    http: aiohttp.ClientSession, url: str, session: str | None, ident: int, tool: str
) -> str:
    """One legacy call: answer each in-flight request by POST, return the result's first text."""
    headers = legacy_headers(session)
    async with http.post(url, data=orjson.dumps(call_body(ident, tool)), headers=headers) as resp:
        if not resp.headers.get("Content-Type", "").startswith("text/event-stream"):
            return _text(orjson.loads(await resp.read()))
        text: str | None = None
        async for msg in events(resp):  # to the end of the stream, so the connection is reused
            if "method" in msg and "id" in msg:
                answer = {"jsonrpc": "2.0", "id": msg["id"], "result": answer_for(msg)}
                async with http.post(url, data=orjson.dumps(answer), headers=headers) as posted:
                    await posted.read()
                    if posted.status != 202:
                        raise RuntimeError(f"answer POST got HTTP {posted.status}")
            elif msg.get("id") == ident:
                text = _text(msg)
    if text is None:
        raise RuntimeError("call stream ended without a result")
    return text


def modern_request(ident: int, tool: str, extra: dict[str, Any]) -> tuple[bytes, dict[str, str]]:
    meta = {
        "io.modelcontextprotocol/protocolVersion": MODERN_VERSION,
        "io.modelcontextprotocol/clientCapabilities": CAPABILITIES,
        "io.modelcontextprotocol/clientInfo": CLIENT_INFO,
    }
    body = call_body(ident, tool, {"_meta": meta, **extra})
    headers = {
        **BASE_HEADERS,
        "MCP-Protocol-Version": MODERN_VERSION,
        "Mcp-Method": "tools/call",
        "Mcp-Name": tool,
    }
    return orjson.dumps(body), headers


async def modern_round(
    http: aiohttp.ClientSession,
    url: str,
    ident: int,
    tool: str,
    rounds: int = 10,
    first_asks: list[int] | None = None,
) -> str:
    """One 2026-07-28 call, driven through its `input_required` rounds; returns the result's first text.

    `first_asks` gets how many requests the first round asked (a server's concurrent requests split
    over two rounds when the bridge's round window closed between them).
    """
    extra: dict[str, Any] = {}
    for step in range(rounds):
        rid = ident * 100 + step
        body, headers = modern_request(rid, tool, extra)
        async with http.post(url, data=body, headers=headers) as resp:
            reply = await json_or_sse(resp, rid)
        result = reply.get("result")
        if not isinstance(result, dict):
            raise RuntimeError(f"call failed: {reply}")
        if result.get("resultType") != "input_required":
            return _text(reply)
        requests = result.get("inputRequests") or {}
        if step == 0 and first_asks is not None:
            first_asks.append(len(requests))
        extra = {"inputResponses": {key: answer_for(req) for key, req in requests.items()}}
        if "requestState" in result:
            extra["requestState"] = result["requestState"]
    raise RuntimeError("too many rounds")


def _text(reply: dict[str, Any]) -> str:
    result = reply.get("result")
    if not isinstance(result, dict):
        raise RuntimeError(f"no result: {reply}")
    content = result.get("content") or [{}]
    return str(content[0].get("text"))


async def run_rounds(
    http: aiohttp.ClientSession, url: str, era: str, tool: str, n: int, warmup: int
) -> dict[str, Any]:
    times: list[float] = []
    texts: set[str] = set()
    errors: list[str] = []
    first_asks: list[int] = []
    session = await legacy_handshake(http, url) if era == "legacy" else None
    for i in range(-warmup, n):  # negative indexes warm up (connections, caches) and are not timed
        start = time.perf_counter()
        try:
            if era == "legacy":
                text = await legacy_round(http, url, session, i + warmup + 1, tool)
            else:
                counted = first_asks if i >= 0 else None
                text = await modern_round(http, url, i + warmup + 1, tool, first_asks=counted)
        except (aiohttp.ClientError, RuntimeError, ValueError) as exc:
            errors.append(str(exc)[:200])
            if len(errors) >= 3:
                break
            continue
        if i >= 0:
            times.append(time.perf_counter() - start)
        texts.add(text)
    asks = {str(k): first_asks.count(k) for k in sorted(set(first_asks))}
    return {
        "latency": stats_ms(times),
        "texts": sorted(texts),
        "errors": len(errors),
        "error": errors[:1],
        "first_round_asks": asks,
    }


async def _one_round(
    http: aiohttp.ClientSession, url: str, era: str, session: str | None, ident: int, tool: str
) -> str:
    if era == "legacy":
        return await legacy_round(http, url, session, ident, tool)
    return await modern_round(http, url, ident, tool)


async def run_paired(
    http: aiohttp.ClientSession,
    url: str,
    era: str,
    base: str,
    base_era: str,
    tool: str,
    n: int,
    warmup: int,
) -> dict[str, Any]:
    """Rounds on `url` and on `base` in alternation (which goes first alternates too): each pair's
    difference is what `url` adds to `base` in the same moment, so a drift of the machine's speed
    over the run, which moves two series measured one after the other apart, cancels out."""
    sessions = {
        side: await legacy_handshake(http, side_url) if side_era == "legacy" else None
        for side, side_url, side_era in (("main", url, era), ("base", base, base_era))
    }
    sides = {"main": (url, era), "base": (base, base_era)}
    times: dict[str, list[float]] = {"main": [], "base": []}
    added: list[float] = []
    texts: set[str] = set()
    errors: list[str] = []
    for i in range(-warmup, n):
        took: dict[str, float] = {}
        for side in ("main", "base") if i % 2 == 0 else ("base", "main"):
            side_url, side_era = sides[side]
            start = time.perf_counter()
            try:
                text = await _one_round(http, side_url, side_era, sessions[side], 2 * (i + warmup) + 1, tool)
            except (aiohttp.ClientError, RuntimeError, ValueError) as exc:
                errors.append(f"{side}: {str(exc)[:200]}")
                break
            took[side] = time.perf_counter() - start
            texts.add(text)
        if len(errors) >= 3:
            break
        if i >= 0 and len(took) == 2:
            for side, seconds in took.items():
                times[side].append(seconds)
            added.append(took["main"] - took["base"])
    result: dict[str, Any] = {
        "latency": stats_ms(times["main"]),
        "base": stats_ms(times["base"]),
        "texts": sorted(texts),
        "errors": len(errors),
        "error": errors[:1],
    }
    if added:  # differences may be negative: their percentiles, not stats_ms's latency rounding
        ordered = sorted(added)
        result["added"] = {
            "n": len(ordered),
            "p50": round(statistics.median(ordered) * 1000, 4),
            "mean": round(statistics.fmean(ordered) * 1000, 4),
        }
    return result


async def wait_for_stdin_line(limit: float) -> None:
    """Return once a line (or EOF) arrives on stdin, or after `limit` seconds (a daemon thread reads)."""
    loop = asyncio.get_running_loop()
    arrived = asyncio.Event()

    def read() -> None:
        sys.stdin.readline()
        with contextlib.suppress(RuntimeError):  # the loop may have closed already
            loop.call_soon_threadsafe(arrived.set)

    threading.Thread(target=read, name="stdin", daemon=True).start()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(arrived.wait(), limit)


async def run_idle(url: str, count: int, hold: float) -> dict[str, Any]:
    connector = aiohttp.TCPConnector(limit=0, force_close=True)
    http = aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=None, connect=10))
    opened: list[aiohttp.ClientResponse] = []
    failed = 0
    gate = asyncio.Semaphore(64)
    headers = {
        "Accept": "text/event-stream",
        "MCP-Protocol-Version": LEGACY_VERSION,
        "Mcp-Session-Id": FAST_SESSION,
    }

    async def open_one() -> None:
        nonlocal failed
        async with gate:
            try:
                resp = await http.get(url, headers=headers)
                await asyncio.wait_for(resp.content.readany(), 10)  # the upstream's first comment
                opened.append(resp)
            except (aiohttp.ClientError, TimeoutError, OSError):
                failed += 1

    start = time.perf_counter()
    try:
        await asyncio.gather(*(open_one() for _ in range(count)))
        took = time.perf_counter() - start
        sys.stdout.write(f"OPEN {len(opened)} {failed}\n")
        sys.stdout.flush()
        await wait_for_stdin_line(hold)
        alive = sum(1 for resp in opened if not resp.content.at_eof())
    finally:
        for resp in opened:
            resp.close()
        await http.close()
    return {"opened": len(opened), "failed": failed, "open_s": round(took, 3), "alive_at_close": alive}


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    if args.cmd == "idle":
        return await run_idle(args.url, args.count, args.hold)
    connector = aiohttp.TCPConnector(limit=100)
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as http:
        if args.cmd == "sse":
            return await run_sse(http, args.url, args.n, args.warmup)
        if args.cmd == "big":
            return await run_big(http, args.url, args.tool, args.n, args.warmup)
        if args.cmd == "paired":
            return await run_paired(
                http, args.url, args.era, args.base, args.base_era, args.tool, args.n, args.warmup
            )
        return await run_rounds(http, args.url, args.cmd, args.tool, args.n, args.warmup)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    for name in ("sse", "big", "legacy", "modern", "idle", "paired"):
        p = sub.add_parser(name)
        p.add_argument("url")
        p.add_argument("--n", type=int, default=50)
        if name == "paired":
            p.add_argument("--era", choices=("legacy", "modern"), required=True)
            p.add_argument("--base", required=True, help="the URL each round is paired with")
            p.add_argument("--base-era", choices=("legacy", "modern"), required=True)
        default_tool = {"big": "big1m", "legacy": "ask_name", "modern": "ask_name", "paired": "ask_name"}.get(
            name, "sse"
        )
        p.add_argument("--tool", default=default_tool)
        p.add_argument("--warmup", type=int, default=0, help="untimed calls first")
        p.add_argument("--count", type=int, default=1000)
        p.add_argument("--hold", type=float, default=120.0, help="idle: longest time streams are held")
        p.add_argument("--limit", type=float, default=300.0, help="seconds the whole command may take")
    args = parser.parse_args()
    try:
        result = asyncio.run(asyncio.wait_for(main_async(args), args.limit))
    except TimeoutError:
        result = {"error": f"timed out after {args.limit}s"}
    sys.stdout.write(orjson.dumps(result).decode() + "\n")


if __name__ == "__main__":
    main()
