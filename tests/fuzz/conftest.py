"""The front fuzz targets' proxies: one in pass-through, one bridging legacy clients, as users run them."""

from __future__ import annotations

from collections.abc import Iterator

import orjson
import pytest

from tests.fuzz.front import LEGACY, MAX_BODY, legacy_request
from tests.fuzz.live import LiveProxy, live_proxy
from tests.fuzz.raw import exchange

OBSERVED = {"admin_enabled": True, "admin": "127.0.0.1:0", "max_body_bytes": MAX_BODY}
"""As users run it: the admin API on (chains built live), and a capture (set per proxy below)."""


@pytest.fixture(scope="module")
def passthrough(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveProxy]:
    where = tmp_path_factory.mktemp("fuzz")
    with live_proxy("legacy", where / "log.jsonl", capture=where / "capture.jsonl", **OBSERVED) as live:
        yield live


@pytest.fixture(scope="module")
def bridged(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveProxy, str]]:
    """A proxy bridging legacy clients to a 2026-07-28 upstream, and a session it minted for the inputs.

    The canary has a session of its own: an input may end the other one (a DELETE naming it), as a
    client may.
    """
    where = tmp_path_factory.mktemp("fuzz")
    with live_proxy("modern", where / "log.jsonl", capture=where / "capture.jsonl", **OBSERVED) as live:
        live.canary_session = mint_session(live)
        yield live, mint_session(live)


def mint_session(live: LiveProxy) -> str:
    """A legacy session the bridging proxy minted (`initialize` answered by the proxy itself)."""
    init = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": LEGACY,
            "capabilities": {},
            "clientInfo": {"name": "f", "version": "1"},
        },
    }
    out = exchange(live.address, [legacy_request(live, orjson.dumps(init))], expect=1)
    session = out.final[0].header("mcp-session-id")
    assert session, out
    return session
