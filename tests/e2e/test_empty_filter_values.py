"""A filter or bound given with no value is refused, never read as "no filter".

A script that builds `status=$STATUS` from an unset variable sends `status=`: answered `200` with
every chain, it would believe it had filtered. The real `mcp-proxy` refuses each such parameter of
`/api/chains`, the exports and the feed with a `400` naming it, as it refuses a misspelled one.
"""

from __future__ import annotations

import json

import pytest

from tests.e2e.commanded import TOKEN, ProxyFleet
from tests.peers.runner import PeerServer
from tests.sidecar import admin_get

pytestmark = pytest.mark.e2e

EMPTY = [
    ("/api/chains", "status"),
    ("/api/chains", "method"),
    ("/api/chains", "mode"),
    ("/api/chains", "q"),
    ("/api/chains", "limit"),
    ("/api/export.har", "status"),
    ("/api/export.json", "method"),
    ("/api/export.ndjson", "mode"),
    ("/api/feed", "history"),
]


@pytest.mark.parametrize(("path", "name"), EMPTY, ids=[f"{p}?{n}=" for p, n in EMPTY])
async def test_a_parameter_given_empty_is_refused_naming_it(
    fleet: ProxyFleet, legacy_server: PeerServer, path: str, name: str
) -> None:
    proxy = await fleet.at(legacy_server)
    for query in (f"{name}=", f"{name}=,", f"limit=5&{name}="):
        status, headers, body = await admin_get(f"{proxy.admin_url}{path}?{query}", TOKEN)
        assert status == 400, (query, body)
        assert headers["Content-Type"].startswith("application/json")
        answer = json.loads(body)
        assert answer["error"] == "bad_request"
        assert name in answer["message"], answer


async def test_a_filter_with_a_value_still_filters(fleet: ProxyFleet, legacy_server: PeerServer) -> None:
    proxy = await fleet.at(legacy_server)
    status, _, body = await admin_get(
        f"{proxy.admin_url}/api/chains?status=ok,error&method=tools/call", TOKEN
    )
    assert status == 200, body
    assert all(c["method"] == "tools/call" for c in json.loads(body))
