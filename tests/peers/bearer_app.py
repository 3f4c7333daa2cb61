"""A catalogue server of either era that asks every MCP request for a bearer token (the SDK's own check).

The SDK's ``streamable_http_app(auth=..., token_verifier=...)`` puts its bearer middleware in front
of ``/mcp``: a request without a valid token gets 401 with ``WWW-Authenticate: Bearer
error="invalid_token", ..., resource_metadata="..."``, as an OAuth-protected MCP server answers.
Tokens come from no authorization server here: `TOKEN` is the one the verifier accepts, so a test
can be an authenticated caller and an unauthenticated (or wrongly authenticated) one at will. The
protected resource is named on another origin (`RESOURCE`), which a proxy leaves as it is.
"""

from __future__ import annotations

from typing import Final

from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from starlette.types import ASGIApp

TOKEN: Final = "peer-bearer-token"
"""The only bearer token the server accepts."""

RESOURCE: Final = "https://auth.example.com/mcp"
"""The resource the server says it is (its 401 names this origin's metadata)."""


class OneToken:
    """Accepts `TOKEN` and nothing else."""

    async def verify_token(self, token: str) -> AccessToken | None:
        if token != TOKEN:
            return None
        return AccessToken(token=token, client_id="peer-client", scopes=[])


def build_bearer_app(era: str) -> ASGIApp:
    """The catalogue app of `era` (``legacy``: in flight, ``modern``: MRTR) behind the bearer check."""
    from tests.peers.apps import build_server, legacy_only, modern_only

    auth = AuthSettings(
        issuer_url=RESOURCE.removesuffix("/mcp"),  # type: ignore[arg-type]
        resource_server_url=RESOURCE,  # type: ignore[arg-type]
        validate_token_resource=False,
    )
    style = "inflight" if era == "legacy" else "mrtr"
    server = build_server(style)
    app: ASGIApp = server.streamable_http_app(
        streamable_http_path="/mcp", host="127.0.0.1", auth=auth, token_verifier=OneToken()
    )
    return legacy_only(app) if era == "legacy" else modern_only(app)
