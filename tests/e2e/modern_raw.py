"""A raw 2026-07-28 client for tests that must craft what no SDK client sends (tampered or replayed state).

It speaks the wire directly: the `_meta` envelope, the `Mcp-*` headers, JSON or SSE answers.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp

from proxy.framing.sse import SseDecoder, SseEvent

CAPABILITIES: dict[str, Any] = {"elicitation": {"form": {}, "url": {}}, "sampling": {}, "roots": {}}
"""What the raw client declares: everything the test servers may ask for."""


def modern_params(params: dict[str, Any], capabilities: dict[str, Any] | None = None) -> dict[str, Any]:
    """`params` with the required per-request `_meta` envelope added."""
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": CAPABILITIES if capabilities is None else capabilities,
        "io.modelcontextprotocol/clientInfo": {"name": "raw-test-client", "version": "1"},
    }
    return {**params, "_meta": {**params.get("_meta", {}), **meta}}


def modern_headers(
    method: str, params: dict[str, Any], extra: dict[str, str] | None = None
) -> dict[str, str]:
    """The headers a 2026-07-28 client must send with this request."""
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": method,
    }
    name = params.get("name") if method in ("tools/call", "prompts/get") else params.get("uri")
    if isinstance(name, str):
        headers["Mcp-Name"] = name
    return {**headers, **(extra or {})}


async def modern_call(
    http: aiohttp.ClientSession,
    url: str,
    method: str,
    params: dict[str, Any],
    *,
    ident: int | str,
    headers: dict[str, str] | None = None,
    capabilities: dict[str, Any] | None = None,
) -> tuple[int, dict[str, Any]]:
    """Send one 2026-07-28 request; returns the HTTP status and the JSON-RPC response (JSON or last SSE)."""
    full = modern_params(params, capabilities)
    body = {"jsonrpc": "2.0", "id": ident, "method": method, "params": full}
    async with http.post(url, json=body, headers=modern_headers(method, full, headers)) as resp:
        if resp.headers.get("Content-Type", "").startswith("text/event-stream"):
            return resp.status, await _last_response(resp)
        return resp.status, await resp.json(content_type=None)


async def modern_messages(
    http: aiohttp.ClientSession, url: str, method: str, params: dict[str, Any], *, ident: int | str
) -> AsyncIterator[dict[str, Any]]:
    """Send one 2026-07-28 request; yield each message of its response as it arrives (the JSON body,
    or every SSE event's: notifications and questions first, the response last)."""
    full = modern_params(params)
    body = {"jsonrpc": "2.0", "id": ident, "method": method, "params": full}
    async with http.post(url, json=body, headers=modern_headers(method, full)) as resp:
        if not resp.headers.get("Content-Type", "").startswith("text/event-stream"):
            yield await resp.json(content_type=None)
            return
        async for value in _sse_messages(resp):
            yield value


async def _last_response(resp: aiohttp.ClientResponse) -> dict[str, Any]:
    last: dict[str, Any] = {}
    async for value in _sse_messages(resp):
        if "result" in value or "error" in value:
            last = value
    return last


async def _sse_messages(resp: aiohttp.ClientResponse) -> AsyncIterator[dict[str, Any]]:
    decoder = SseDecoder()
    async for chunk in resp.content.iter_any():
        for item in decoder.feed(chunk):
            if isinstance(item, SseEvent) and item.has_data:
                yield json.loads(item.data)
