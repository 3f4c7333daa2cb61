"""The replay's HTTP side: one JSON-RPC message POSTed, the messages of its response read as they come.

A response is one JSON body or an SSE stream (read with the proxy's own decoder, `proxy.framing.sse`);
the caller sees the messages one by one, so it can answer a server's in-flight question while the
stream that asked it is still open. Every request is bounded by the replay's timeout.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Final

import aiohttp

from proxy.framing.sse import SseDecoder, SseEvent

MAX_BODY: Final = 16 * 1024 * 1024
"""Largest JSON response body read (a bigger one is reported, not read)."""


SHOWN_BODY: Final = 80
"""Characters of a response body that is not JSON (or of a refusal) quoted in the report: enough to
recognise an HTML page."""

MASKED_OPENING: Final = 4096
"""Bytes of a body masked before its quote is cut from them: a secret the server echoes that starts
inside the quote ends inside these (a credential is far shorter), so the mask sees it whole and no
piece of it is left in clear by the cut."""

OPENING_WAIT: Final = 2.0
"""Seconds a refusal's body is read for its quote, at most: a body that stays open is quoted as far
as it came."""

Mask = Callable[[str], str]
"""Masks the secrets a text holds (the replay's proxy's redactor, which learned the credentials sent)."""


def _no_mask(text: str) -> str:
    return text


def masked_opening(body: bytes, mask: Mask) -> tuple[str, bool]:
    """The opening of a body to quote, masked before it is cut, and whether more followed it."""
    text = mask(body[:MASKED_OPENING].decode("utf-8", "replace")).strip()
    more = len(text) > SHOWN_BODY or len(body) > MASKED_OPENING
    return text[:SHOWN_BODY].rstrip(), more


def plainly(exc: aiohttp.ClientError) -> str:
    """What an HTTP client error means for the request, in the report's words (the library's own
    wording names its internals: payload, transfer encoding, connector)."""
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return "the connection closed before an answer"
    if isinstance(exc, aiohttp.ClientPayloadError):
        return "the response body broke off before its end"
    if isinstance(exc, aiohttp.ClientConnectorError):
        return f"cannot connect: {exc.os_error.strerror or exc.os_error}"
    return str(exc) or type(exc).__name__


class ReplayHttpError(Exception):
    """A request of the replay that got no usable answer (the text says what happened)."""


@dataclass
class Reply:
    """One response: its status and headers, and its messages to read in order."""

    status: int
    headers: Mapping[str, str]
    _response: aiohttp.ClientResponse
    _mask: Mask = _no_mask

    async def opening(self) -> str:
        """The body's opening as text, masked (`SHOWN_BODY` characters, `...` when there is more),
        for a report that quotes what a server said when it refused a request (it may echo the
        credential it refused); empty for an empty body."""
        body = b""
        content = self._response.content
        try:
            async with asyncio.timeout(OPENING_WAIT):
                while len(body) <= MASKED_OPENING and (
                    chunk := await content.read(MASKED_OPENING + 1 - len(body))
                ):
                    body += chunk
        except TimeoutError:
            pass  # quoted as far as it came
        shown, more = masked_opening(body, self._mask)
        return shown + ("..." if more else "")

    async def messages(self) -> AsyncIterator[dict[str, Any]]:
        """The JSON-RPC messages of the body (none for a 202 or an empty body)."""
        kind = self._response.headers.get("Content-Type", "").split(";")[0].strip().lower()
        if kind == "text/event-stream":
            decoder = SseDecoder()
            async for chunk in self._response.content.iter_any():
                for item in decoder.feed(chunk):
                    message = _event_message(item)
                    if message is not None:
                        yield message
            for item in decoder.close():
                message = _event_message(item)
                if message is not None:
                    yield message
            return
        body = await self._response.content.read(MAX_BODY + 1)
        if len(body) > MAX_BODY:
            raise ReplayHttpError(f"a response body past {MAX_BODY} bytes")
        promised = self._response.content_length
        if promised is not None and len(body) < promised:
            raise ReplayHttpError(
                f"HTTP {self.status}: the response body broke off after {len(body)} of {promised} bytes"
            )
        if not body.strip():
            return
        try:
            value = json.loads(body)
        except ValueError as exc:
            shown, more = masked_opening(body, self._mask)
            cut = "..." if more else ""
            raise ReplayHttpError(
                f"HTTP {self.status} answered {kind or 'a body of no content type'} ({len(body)} bytes), "
                f"not JSON-RPC: {shown!r}{cut}"
            ) from exc
        for message in value if isinstance(value, list) else [value]:
            if isinstance(message, dict):
                yield message


def _event_message(item: object) -> dict[str, Any] | None:
    if not isinstance(item, SseEvent) or not item.has_data or not item.data.strip():
        return None
    try:
        value = json.loads(item.data)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


class ReplayHttp:
    """Sends the replay's requests to one endpoint (the in-process proxy's)."""

    def __init__(self, session: aiohttp.ClientSession, url: str, mask: Mask = _no_mask) -> None:
        self.session = session
        self.url = url
        self.mask = mask
        """Masks what a reply's body is quoted with in a report (`Reply.opening`, a body not JSON)."""

    @asynccontextmanager
    async def post(self, body: dict[str, Any], headers: Mapping[str, str]) -> AsyncIterator[Reply]:
        """POST one message; the reply is open inside the `async with`."""
        data = json.dumps(body, separators=(",", ":")).encode()
        try:
            async with self.session.post(self.url, data=data, headers=dict(headers)) as response:
                yield Reply(response.status, response.headers, response, self.mask)
        except aiohttp.ClientError as exc:
            raise ReplayHttpError(f"POST {body.get('method') or 'answer'}: {plainly(exc)}") from exc

    async def delete(self, headers: Mapping[str, str]) -> int:
        """DELETE the endpoint (a legacy session's end); returns the status."""
        try:
            async with self.session.delete(self.url, headers=dict(headers)) as response:
                await response.read()
                return response.status
        except aiohttp.ClientError as exc:
            raise ReplayHttpError(f"DELETE: {plainly(exc)}") from exc
