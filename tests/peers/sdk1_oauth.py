"""An authorization server on the MCP server's own origin, as ``FastMCP(auth_server_provider=...)`` mounts it.

Runs only in ``.cache/peers/sdk1`` (imported by ``tests.peers.sdk1_server --oauth``). The SDK serves
``/.well-known/oauth-authorization-server``, ``/register``, ``/authorize``, ``/token`` and
``/revoke`` beside ``/mcp``; this provider keeps clients, codes and tokens in memory and approves
every authorization at once (no login page), so a test drives the whole flow over HTTP through the
proxy's mirrored paths: the registration's client secret, the code, the PKCE verifier and the tokens
all pass the proxy as a real OAuth client sends and gets them. Each token keeps the RFC 8707
`resource` its code was issued for, so a server that checks it (`settings(base)`) refuses a token
asked for another resource.
"""

from __future__ import annotations

import secrets
import time

from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    RefreshToken,
    construct_redirect_uri,
)
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions, RevocationOptions
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken

LIFETIME = 3600
"""Seconds every code and token lives (far longer than a test)."""


class MemoryProvider:
    """Clients, codes and tokens in dictionaries; every authorization approved."""

    def __init__(self) -> None:
        self.clients: dict[str, OAuthClientInformationFull] = {}
        self.codes: dict[str, AuthorizationCode] = {}
        self.access: dict[str, AccessToken] = {}
        self.refresh: dict[str, RefreshToken] = {}
        self.resources: dict[str, str | None] = {}
        """The resource each refresh token's tokens were issued for."""

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        return self.clients.get(client_id)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        assert client_info.client_id is not None
        self.clients[client_info.client_id] = client_info

    async def authorize(self, client: OAuthClientInformationFull, params: AuthorizationParams) -> str:
        code = f"code-{secrets.token_hex(16)}"
        assert client.client_id is not None
        self.codes[code] = AuthorizationCode(
            code=code,
            scopes=params.scopes or [],
            expires_at=time.time() + LIFETIME,
            client_id=client.client_id,
            code_challenge=params.code_challenge,
            redirect_uri=params.redirect_uri,
            redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly,
            resource=params.resource,
        )
        return construct_redirect_uri(str(params.redirect_uri), code=code, state=params.state)

    async def load_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: str
    ) -> AuthorizationCode | None:
        return self.codes.get(authorization_code)

    async def exchange_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: AuthorizationCode
    ) -> OAuthToken:
        del self.codes[authorization_code.code]
        return self._issue(
            authorization_code.client_id, authorization_code.scopes, authorization_code.resource
        )

    async def load_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: str
    ) -> RefreshToken | None:
        return self.refresh.get(refresh_token)

    async def exchange_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: RefreshToken, scopes: list[str]
    ) -> OAuthToken:
        del self.refresh[refresh_token.token]
        resource = self.resources.pop(refresh_token.token, None)
        return self._issue(refresh_token.client_id, scopes or refresh_token.scopes, resource)

    async def load_access_token(self, token: str) -> AccessToken | None:
        return self.access.get(token)

    async def revoke_token(self, token: AccessToken | RefreshToken) -> None:
        self.access.pop(token.token, None)
        self.refresh.pop(token.token, None)

    def _issue(self, client_id: str, scopes: list[str], resource: str | None = None) -> OAuthToken:
        access, refresh = f"at-{secrets.token_hex(20)}", f"rt-{secrets.token_hex(20)}"
        expires = int(time.time()) + LIFETIME
        self.access[access] = AccessToken(
            token=access, client_id=client_id, scopes=scopes, expires_at=expires, resource=resource
        )
        self.resources[refresh] = resource
        self.refresh[refresh] = RefreshToken(
            token=refresh, client_id=client_id, scopes=scopes, expires_at=expires
        )
        return OAuthToken(
            access_token=access, token_type="Bearer", expires_in=LIFETIME, refresh_token=refresh
        )


def settings(base: str | None = None) -> AuthSettings:
    """Registration and revocation on. Without `base` the issuer is a placeholder a client never needs to
    reach and no resource is advertised; with it (`http://127.0.0.1:PORT`, the server's own origin) the
    server advertises its own URL, as servers usually do: the issuer there, the resource `base/mcp`
    (protected resource metadata, and a 401's `resource_metadata`), and only tokens issued for that
    resource accepted."""
    if base is None:
        return AuthSettings(
            issuer_url="http://127.0.0.1/",  # type: ignore[arg-type]
            client_registration_options=ClientRegistrationOptions(enabled=True),
            revocation_options=RevocationOptions(enabled=True),
            resource_server_url=None,
        )
    return AuthSettings(
        issuer_url=f"{base}/",  # type: ignore[arg-type]
        client_registration_options=ClientRegistrationOptions(enabled=True),
        revocation_options=RevocationOptions(enabled=True),
        resource_server_url=f"{base}/mcp",  # type: ignore[arg-type]
        validate_token_resource=True,
    )
