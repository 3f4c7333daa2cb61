"""The SDK's OAuth client (``mcp.client.auth.OAuthClientProvider``, last 1.x release) logging in and calling.

    .cache/peers/sdk1/bin/python -m tests.peers.sdk1_oauth_client URL

Runs only in ``.cache/peers/sdk1``. It is given one URL, the MCP endpoint, and finds everything else
as a user's client does: the 401's challenge, the protected resource metadata, the authorization
server's metadata, registration, the authorization request (the "browser" here is a GET of the
authorization URL that reads the redirect's code instead of following it), the token request, then
`tools/list` and `tools/call add`. It prints one JSON line per HTTP request it made (method, URL
without its query, status, the `WWW-Authenticate` it got, and the body of each discovery document as
received), then `{"step": "done", ...}` or `{"step": "error", ...}`, so a test can tell which host and
port each step went to and what bytes the client was given.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
from mcp import ClientSession
from mcp.client.auth import OAuthClientProvider, TokenStorage
from mcp.client.streamable_http import streamablehttp_client
from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata, OAuthToken

REDIRECT = "http://127.0.0.1:1/callback"
"""Never reached: the redirect to it is read, not followed."""


def emit(line: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(line) + "\n")
    sys.stdout.flush()


class Memory(TokenStorage):
    """Tokens and the registration in memory, for one run."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.info: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.info = client_info


async def seen(response: httpx.Response) -> None:
    """Log one response as the client got it (a discovery document's body included)."""
    url = response.request.url
    line: dict[str, Any] = {
        "step": "http",
        "method": response.request.method,
        "url": str(url.copy_with(query=None)),
        "status": response.status_code,
    }
    if "www-authenticate" in response.headers:
        line["www_authenticate"] = response.headers["www-authenticate"]
    if "/.well-known/" in url.path:
        line["body"] = (await response.aread()).decode("utf-8", "replace")
    emit(line)


def http_client(**kwargs: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(event_hooks={"response": [seen]}, **kwargs)


async def main(url: str) -> None:
    code: dict[str, str] = {}

    async def browser(authorization_url: str) -> None:
        query = parse_qs(urlsplit(authorization_url).query)
        emit({"step": "authorize", "url": authorization_url.split("?")[0], "resource": query.get("resource")})
        async with http_client() as http:
            answer = await http.get(authorization_url, follow_redirects=False)
        found = parse_qs(urlsplit(answer.headers["location"]).query)
        code.update({name: values[0] for name, values in found.items()})

    async def callback() -> tuple[str, str | None]:
        return code["code"], code.get("state")

    metadata = OAuthClientMetadata(
        client_name="sdk1-oauth-client",
        redirect_uris=[REDIRECT],  # type: ignore[list-item]
        grant_types=["authorization_code", "refresh_token"],
        response_types=["code"],
    )
    auth = OAuthClientProvider(url, metadata, Memory(), browser, callback)
    connected = streamablehttp_client(url, auth=auth, httpx_client_factory=http_client)
    async with connected as (read, write, _), ClientSession(read, write) as session:
        await session.initialize()
        tools = [tool.name for tool in (await session.list_tools()).tools]
        result = await session.call_tool("add", {"a": 1, "b": 2})
        text = result.content[0].text if result.content else ""  # type: ignore[union-attr]
    emit({"step": "done", "tools": tools, "add": text})


def innermost(exc: BaseException) -> BaseException:
    """The error an exception group (the SDK's task groups) wraps, first of each level."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


if __name__ == "__main__":
    try:
        asyncio.run(main(sys.argv[1]))
    except BaseException as exc:
        cause = innermost(exc)
        emit({"step": "error", "error": f"{type(cause).__name__}: {cause}"[:2000]})
        sys.exit(1)
