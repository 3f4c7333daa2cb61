"""A bare aiohttp streaming reverse proxy (no parsing, logging or chains): the floor our proxy builds on.

    python bench/bare_proxy.py --upstream http://127.0.0.1:PORT/mcp --listen 127.0.0.1:PORT

Relays method, path, headers (hop-by-hop dropped, Host rewritten) and body, streams the response back
chunk by chunk. Used by bench/run.py as the `bare-aiohttp` path, so the table shows how much of our
cost is aiohttp itself and how much is observation.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import aiohttp
from aiohttp import web
from multidict import CIMultiDict
from yarl import URL

HOP = frozenset(
    {"connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade", "host"}
)
CLIENT: web.AppKey[aiohttp.ClientSession] = web.AppKey("client", aiohttp.ClientSession)


def build_app(upstream: str) -> web.Application:
    parts = urlsplit(upstream)
    origin = f"{parts.scheme}://{parts.netloc}"

    async def client_ctx(app: web.Application) -> AsyncIterator[None]:
        connector = aiohttp.TCPConnector(limit=2048, limit_per_host=0)
        app[CLIENT] = aiohttp.ClientSession(
            connector=connector,
            auto_decompress=False,
            skip_auto_headers=("User-Agent", "Accept-Encoding", "Accept", "Content-Type"),
            cookie_jar=aiohttp.DummyCookieJar(),
            timeout=aiohttp.ClientTimeout(total=None, connect=5),
        )
        yield
        await app[CLIENT].close()

    async def handle(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        headers = CIMultiDict((k, v) for k, v in request.headers.items() if k.lower() not in HOP)
        headers["Host"] = parts.netloc
        url = URL(origin + request.rel_url.raw_path_qs, encoded=True)
        async with request.app[CLIENT].request(
            request.method, url, headers=headers, data=body or None, allow_redirects=False
        ) as up:
            response = web.StreamResponse(status=up.status, reason=up.reason)
            for name, value in up.headers.items():
                if name.lower() not in HOP and name.lower() != "content-length":
                    response.headers.add(name, value)
            if up.content_length is not None and "text/event-stream" not in up.headers.get(
                "Content-Type", ""
            ):
                response.content_length = up.content_length
            await response.prepare(request)
            async for chunk in up.content.iter_any():
                await response.write(chunk)
            await response.write_eof()
            return response

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.cleanup_ctx.append(client_ctx)
    app.router.add_route("*", "/{tail:.*}", handle)
    return app


async def serve(upstream: str, listen: str) -> None:
    host, port = listen.rsplit(":", 1)
    runner = web.AppRunner(build_app(upstream), access_log=None, handler_cancellation=True)
    await runner.setup()
    await web.TCPSite(runner, host, int(port), backlog=4096).start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--listen", required=True)
    parser.add_argument("--uvloop", action="store_true")
    args = parser.parse_args()
    if args.uvloop:
        import uvloop

        uvloop.run(serve(args.upstream, args.listen))
    else:
        asyncio.run(serve(args.upstream, args.listen))


if __name__ == "__main__":
    main()
