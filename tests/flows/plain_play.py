"""The observer calls of an OAuth login beside `/mcp`: plain HTTP requests to the server's other paths.

Shared by the tally, chain, metrics and index tests. As the relay reports them, the bodies of these
requests are read as JSON-RPC would be (a JSON registration is a message that is no JSON-RPC, a form
body an invalid one): every reader must tell them apart from the endpoint's by their path alone.
"""

from __future__ import annotations

from typing import Any, Protocol

from proxy.flows.events import Channel, Direction
from proxy.wire.jsonrpc import classify_value

ENDPOINT = "/mcp"
CLIENT_SECRET = "cs-3f9a2b7c1d8e4f60a5b9c3d2e1f0a7b6"
FORM = f"grant_type=authorization_code&code=c0de-77&client_id=app&client_secret={CLIENT_SECRET}"
HEADERS = {"Host": "127.0.0.1:18201", "Content-Type": "application/x-www-form-urlencoded"}


class Ticking(Protocol):
    """A clock the play moves by hand."""

    now: float


def oauth_login(obs: Any, clock: Ticking) -> list[Any]:
    """Discovery (200), registration (201, JSON both ways), authorization (302, no body), a token
    trade (200, a form answered in JSON) and one refused (400). Returns what each close returned."""
    closed = []
    obs.open_exchange(
        "w1", http_method="GET", path="/.well-known/oauth-authorization-server", headers={}, session=None
    )
    obs.response_head("w1", status=200, content_type="application/json", headers={})
    metadata = classify_value({"issuer": "http://127.0.0.1:18201/", "token_endpoint": "/token"})
    obs.message("w1", metadata, size=70, direction=Direction.TO_CLIENT, channel=Channel.JSON)
    clock.now += 0.01
    closed.append(obs.close_exchange("w1"))

    obs.open_exchange("r1", http_method="POST", path="/register", headers={}, session=None, body_size=40)
    registration = classify_value({"redirect_uris": ["http://127.0.0.1:1/cb"]})
    obs.message("r1", registration, size=40, direction=Direction.TO_SERVER, channel=Channel.POST)
    obs.response_head("r1", status=201, content_type="application/json", headers={})
    client = classify_value({"client_id": "app", "client_secret": CLIENT_SECRET})
    obs.message("r1", client, size=80, direction=Direction.TO_CLIENT, channel=Channel.JSON)
    clock.now += 0.01
    closed.append(obs.close_exchange("r1"))

    obs.open_exchange(
        "a1", http_method="GET", path="/authorize?client_id=app&state=s7a7e", headers={}, session=None
    )
    obs.response_head(
        "a1", status=302, content_type=None, headers={"Location": "http://127.0.0.1:1/cb?code=c0de-77"}
    )
    clock.now += 0.01
    closed.append(obs.close_exchange("a1"))

    for exchange, status in (("t1", 200), ("t2", 400)):
        obs.open_exchange(
            exchange, http_method="POST", path="/token", headers=HEADERS, session=None, body_size=len(FORM)
        )
        obs.mark_invalid(exchange, "not JSON: unexpected character", size=len(FORM), body=FORM.encode())
        obs.response_head(exchange, status=status, content_type="application/json", headers={})
        answer = (
            {"access_token": "at-1", "token_type": "Bearer"} if status == 200 else {"error": "invalid_grant"}
        )
        obs.message(
            exchange, classify_value(answer), size=50, direction=Direction.TO_CLIENT, channel=Channel.JSON
        )
        clock.now += 0.01
        closed.append(obs.close_exchange(exchange))
    return closed
