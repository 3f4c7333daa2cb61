"""The era probe: ask the upstream once which protocol eras it accepts (see engine/select.py)."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
from multidict import CIMultiDict

from proxy.engine.select import (
    UNKNOWN_ERAS,
    UpstreamEras,
    legacy_accepted,
    legacy_probe,
    modern_accepted,
    modern_probe,
)
from proxy.framing.http import Upstream, is_sse
from proxy.framing.sse import SseDecoder, SseEvent
from proxy.wire.headers import SESSION_ID
from proxy.wire.jsonrpc import Message, dumps, parse_body, parse_text

_PROBE_BODY_LIMIT = 1024 * 1024


async def _post(
    http: aiohttp.ClientSession,
    upstream: Upstream,
    headers: tuple[tuple[str, str], ...],
    body: dict[str, Any],
) -> tuple[int, list[Message], str | None]:
    hdrs = CIMultiDict(headers)
    hdrs["Host"] = upstream.host_header
    async with http.post(upstream.origin + upstream.base_path, data=dumps(body), headers=hdrs) as resp:
        session = resp.headers.get(SESSION_ID)
        if is_sse(resp.headers.get("content-type")):
            return resp.status, await _first_sse_messages(resp), session
        raw = await resp.content.read(_PROBE_BODY_LIMIT)
        return resp.status, list(parse_body(raw).messages), session


async def _first_sse_messages(resp: aiohttp.ClientResponse) -> list[Message]:
    """Read SSE events until the first JSON-RPC response (the probe needs nothing more)."""
    decoder = SseDecoder()
    found: list[Message] = []
    async for chunk in resp.content.iter_any():
        for item in decoder.feed(chunk):
            if isinstance(item, SseEvent) and item.carries_message:
                msg = parse_text(item.data)
                found.append(msg)
                if msg.is_response:
                    return found
    return found


async def probe_upstream(http: aiohttp.ClientSession, upstream: Upstream, limit_s: float) -> UpstreamEras:
    """Which eras the upstream accepts; UNKNOWN when it cannot be reached (the caller probes again later)."""
    try:
        async with asyncio.timeout(limit_s):
            status, messages, _ = await _post(http, upstream, *modern_probe())
            modern = modern_accepted(status, messages)
            status, messages, session = await _post(http, upstream, *legacy_probe())
            legacy = legacy_accepted(status, messages)
            if session:
                await _delete_session(http, upstream, session)
    except (aiohttp.ClientError, TimeoutError):
        return UNKNOWN_ERAS
    return UpstreamEras(legacy=legacy, modern=modern)


async def _delete_session(http: aiohttp.ClientSession, upstream: Upstream, session: str) -> None:
    headers = {SESSION_ID: session, "Host": upstream.host_header}
    async with http.delete(upstream.origin + upstream.base_path, headers=headers):
        pass
