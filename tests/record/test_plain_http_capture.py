"""A capture's readers tell requests beside the MCP endpoint from the endpoint's by the `proxy_info`.

The capture records each request's path, and its `proxy_info` the upstream whose path is the
endpoint: a reader judges every other path's requests plain HTTP from those alone, so a capture
written before the proxy judged them reads the same way. The play's live builder is told no
endpoint, as such a proxy was; the full read, the index pass (records built back from their lines)
and the HAR export all name the OAuth requests by method and path and file their bodies as they are.
"""

from __future__ import annotations

from pathlib import Path

import orjson

from proxy.flows.events import Direction
from tests.flows.plain_play import oauth_login
from tests.record.captures import full_har, record_play
from tests.record.test_index import index_agrees


def test_a_capture_read_or_indexed_names_requests_beside_the_endpoint_by_method_and_path(
    tmp_path: Path,
) -> None:
    capture = tmp_path / "oauth.jsonl"
    store, _ = record_play(oauth_login, capture)
    assert [c.summary.method for c in store] == ["GET stream", None, "GET stream", None, None]  # as written

    _, records = index_agrees(capture)

    assert len(records) == 5
    token = records["r4"]
    assert [(r.kind, r.direction, r.note) for r in token] == [
        ("http", Direction.TO_SERVER, None),
        ("http", Direction.TO_SERVER, None),
        ("http", Direction.TO_CLIENT, None),
    ]
    assert token[2].http is not None
    assert token[2].http.status == 200
    assert {r.kind for chain in records.values() for r in chain} == {"http"}


def test_the_har_of_a_capture_files_plain_bodies_as_http(tmp_path: Path) -> None:
    capture = tmp_path / "oauth.jsonl"
    record_play(oauth_login, capture)

    entries = orjson.loads(full_har([capture]))["log"]["entries"]

    assert [e["request"]["method"] + " " + e["request"]["url"].split("/", 3)[3] for e in entries][:2] == [
        "GET .well-known/oauth-authorization-server",
        "POST register",
    ]
    messages = [m for e in entries for m in e["_mcp"]["messages"]]
    assert {m["kind"] for m in messages} == {"http"}
    assert not [m for m in messages if "note" in m or "method" in m]
    token = entries[3]
    assert token["request"]["postData"]["text"].startswith("grant_type=authorization_code")
    assert '"token_type":"Bearer"' in token["response"]["content"]["text"]
