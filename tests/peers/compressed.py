"""A peer behind compression middleware, as many deployed servers are: Starlette's `GZipMiddleware`.

Clients that send `Accept-Encoding` (browsers, Node's fetch, httpx, aiohttp) then get gzip answers.
Two shapes, both real deployments:

- ``json``: the SDK app answering plain JSON (``json_response=True``) behind the middleware with its
  defaults, which compress JSON and leave SSE streams alone;
- ``sse``: SSE answers compressed too (``exclude_content_types=()``), each event flushed as it is
  written, as Express's ``compression()`` does.
"""

from __future__ import annotations

from typing import Final, Literal

from starlette.middleware.gzip import GZipMiddleware
from starlette.types import ASGIApp

Compression = Literal["json", "sse"]
COMPRESSIONS: Final[tuple[Compression, ...]] = ("json", "sse")

MINIMUM_SIZE: Final = 10
"""Bytes from which an answer is compressed: every MCP answer but an empty one."""


def gzipped(app: ASGIApp, compression: Compression) -> ASGIApp:
    """`app` behind `GZipMiddleware`; ``sse`` compresses event streams as well."""
    if compression == "sse":
        return GZipMiddleware(app, minimum_size=MINIMUM_SIZE, exclude_content_types=())
    return GZipMiddleware(app, minimum_size=MINIMUM_SIZE)
