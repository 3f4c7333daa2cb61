"""The aiohttp entry of proxied requests, and the routing every client request goes through.

Connections the lean front (`front.py`) handed to aiohttp's server land in `handle`: a request that
belongs to a bridge goes to its `BridgeDriver`, any other passes through the same `PassthroughRelay`
the lean front uses, through `AiohttpSide`.
"""

from __future__ import annotations

import asyncio
import functools

from aiohttp import HttpVersion11, web

from proxy import SERVER_SOFTWARE
from proxy.framing.classify import Limits, Rejection, Route, classify
from proxy.framing.status import gateway_error
from proxy.framing.target import TargetProblem, check_target, refuse_target
from proxy.transport.bridge import BridgeDriver
from proxy.transport.client_side import AiohttpSide
from proxy.transport.relay import PassthroughRelay
from proxy.transport.state import STATE, ProxyState


async def read_bounded(request: web.Request, limit: int) -> bytes:
    """Read the request body, stopping one byte past `limit` (the caller answers 413 then)."""
    declared = request.content_length
    if declared is not None and declared > limit:
        return await request.content.read(limit + 1)
    chunks: list[bytes] = []
    size = 0
    while size <= limit:
        chunk = await request.content.readany()
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


async def handle(request: web.Request) -> web.StreamResponse:
    """aiohttp handler for every proxied path and method (connections the lean front handed over)."""
    state = request.app[STATE]
    settings = state.settings
    exchange = state.next_exchange()
    try:
        async with asyncio.timeout(settings.body_read_timeout):
            raw = await read_bounded(request, settings.max_body_bytes)
    except TimeoutError:
        return await body_timed_out(request, settings.body_read_timeout)
    side = AiohttpSide(request)
    checked = check_target(
        request.raw_path, len(request.headers.getall("Host", ())), http10=request.version < HttpVersion11
    )
    if isinstance(checked, TargetProblem):
        await PassthroughRelay(state, side, exchange).run(
            refuse_target(checked, request.method, raw), received=len(raw)
        )
        return side.final()
    if checked.host is not None:
        # An absolute-form target names the host the client meant; its `Host` field is ignored.
        side.headers = tuple((k, checked.host if k.lower() == "host" else v) for k, v in side.headers)
    outcome = classify_request(state, request.method, request.rel_url.raw_path, side.headers, raw)
    bridge = await bridge_for(state, outcome)
    if bridge is not None:
        assert isinstance(outcome, Route)
        return await bridge.serve(request, exchange, outcome)
    await PassthroughRelay(state, side, exchange).run(outcome, received=len(raw))
    return side.final()


async def body_timed_out(request: web.Request, seconds: float) -> web.StreamResponse:
    """408 for a body that did not arrive in time; the connection closes once the answer is out.

    Closed here, not left to aiohttp: it would linger reading the rest of the body for up to ten
    seconds, which is the wait this deadline ends.
    """
    _, body = gateway_error(
        408,
        None,
        f"request body not received within {seconds} s (body_read_timeout)",
        {"limit": seconds, "setting": "body_read_timeout"},
    )
    response = web.json_response(body, status=408, headers={"Server": SERVER_SOFTWARE})
    response.force_close()
    await response.prepare(request)
    await response.write_eof()
    request.protocol.force_close()  # the transport closes after what was written has gone out
    return response


def classify_request(
    state: ProxyState, method: str, path: str, headers: tuple[tuple[str, str], ...], raw: bytes
) -> Route | Rejection:
    """Route or refuse one client request (the path as sent, percent-encoded)."""
    settings = state.settings
    limits = _limits(settings.max_batch_messages, settings.max_json_depth, settings.max_method_length)
    return classify(method, path, headers, raw, max_body=settings.max_body_bytes, limits=limits)


@functools.lru_cache(maxsize=8)
def _limits(max_batch: int, max_depth: int, max_method: int) -> Limits:
    """One Limits per configuration, not one per request (a frozen dataclass costs a microsecond)."""
    return Limits(max_batch, max_depth, max_method)


async def bridge_for(state: ProxyState, outcome: Route | Rejection) -> BridgeDriver | None:
    """The bridge that serves this request, or None when it passes through (probes first if due)."""
    router = state.router
    if router is None or not isinstance(outcome, Route):
        return None
    if router.needs_probe():
        await router.ensure_probed(outcome.headers)
    return router.bridge_for(outcome)
