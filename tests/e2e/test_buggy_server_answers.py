"""A server that answers a request wrongly: the chain, the round-trip log line and the capture's
export say what it did, in the same words, and the client still gets its bytes unchanged.

The real `mcp-proxy` command relays one `tools/call` per scenario (the tool's name) to a hand-written
fake upstream: no SDK server answers with a wrong id, a batch, or a Content-Type no client takes,
which is what is under test. Each call goes out once; the tests read the proxy's `/api/chains`, its
JSON log and `export --json` of its capture.
"""

from __future__ import annotations

import http.client
import json
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.sidecar import ProxyProcess, clean_env, exported_chains, settings_env
from tests.threaded_http import serving

pytestmark = pytest.mark.e2e

VERSION = "2025-06-18"
"""The protocol version each call declares: one without batches."""

RESULT = {"content": [{"type": "text", "text": "hello"}], "isError": False}


def _json(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def _answer(status: str, headers: list[tuple[str, str]], body: bytes) -> bytes:
    head = [f"HTTP/1.1 {status}", *(f"{k}: {v}" for k, v in headers), f"Content-Length: {len(body)}"]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def _ok(ident: Any = 7) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": ident, "result": RESULT}


JSON = [("Content-Type", "application/json")]
SSE = [("Content-Type", "text/event-stream")]

ANSWERS: dict[str, bytes] = {
    "wrongid": _answer("200 OK", JSON, _json(_ok(999))),
    "noid": _answer("200 OK", JSON, _json({"jsonrpc": "2.0", "result": RESULT})),
    "nullid_error": _answer(
        "200 OK", JSON, b'{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}'
    ),
    "both": _answer("200 OK", JSON, _json({**_ok(), "error": {"code": 1, "message": "x"}})),
    "nojsonrpc": _answer("200 OK", JSON, _json({"id": 7, "result": {}})),
    "accepted": b"HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n",
    "nocontent": b"HTTP/1.1 204 No Content\r\n\r\n",
    "empty200": _answer("200 OK", JSON, b""),
    "textplain": _answer("200 OK", [("Content-Type", "text/plain")], b"Internal error: database is locked\n"),
    "batch": _answer("200 OK", JSON, _json([_ok(), {"jsonrpc": "2.0", "method": "notifications/message"}])),
    "noctype": _answer("200 OK", [], _json(_ok())),
    "wrongctype": _answer("200 OK", [("Content-Type", "application/octet-stream")], _json(_ok())),
    "textplain_json": _answer("200 OK", [("Content-Type", "text/plain")], _json(_ok())),
    "dupctype": _answer("200 OK", [("Content-Type", "text/html"), *JSON], _json(_ok())),
    "dupctype_quoted": _answer(
        "200 OK",
        [("Content-Type", 'application/json; profile="a,b"'), ("Content-Type", "text/html")],
        _json(_ok()),
    ),
    "unsolicited": _answer(
        "200 OK", SSE, b"data: " + _json(_ok(4242)) + b"\n\ndata: " + _json(_ok()) + b"\n\n"
    ),
}
"""Each scenario's exact answer to the `tools/call` (id 7) that names it."""


class _BuggyServer(BaseHTTPRequestHandler):
    """A hand-written fake MCP server: each `tools/call` gets the exact bytes its tool's name picks
    from `ANSWERS`, the faults of a buggy server that no real peer makes."""

    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        name = body.get("params", {}).get("name")
        self.wfile.write(ANSWERS.get(name) or _answer("200 OK", JSON, _json(_ok(body.get("id")))))
        self.wfile.flush()

    def log_message(self, format: str, *args: object) -> None:
        pass


@dataclass
class Seen:
    """What each scenario's call left: its chain in `/api/chains`, in the capture's export, its log line."""

    live: dict[str, dict[str, Any]]
    exported: dict[str, dict[str, Any]]
    lines: dict[str, dict[str, Any]]
    bodies: dict[str, bytes]


def _call(url: str, name: str) -> bytes:
    """POST the `tools/call` of `name` (id 7) as a client would; the body it gets back."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=10)
    try:
        call = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": name, "arguments": {}}}
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": VERSION,
        }
        conn.request("POST", parts.path, body=_json(call), headers=headers)
        return conn.getresponse().read()
    finally:
        conn.close()


@pytest.fixture(scope="module")
def seen(tmp_path_factory: pytest.TempPathFactory) -> Seen:
    capture = tmp_path_factory.mktemp("buggy") / "run.jsonl"
    with serving(_BuggyServer) as upstream:
        env = clean_env(**settings_env(upstream=upstream, upstream_era="legacy", capture=capture))
        with ProxyProcess(env) as proxy:
            bodies = {name: _call(proxy.endpoint(), name) for name in ANSWERS}
            lines = proxy.wait_events(lambda e: sum(x.get("event") == "exchange" for x in e) >= len(ANSWERS))
            live = _admin_chains(proxy.admin)
            proxy.stop()
    _, exported = exported_chains(capture)
    by_name = {e["name"]: e for e in lines if e.get("event") == "exchange"}
    return Seen(_named(live), _named(exported), by_name, bodies)


def _admin_chains(admin: str) -> list[dict[str, Any]]:
    parts = urlsplit(admin)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=10)
    try:
        conn.request("GET", "/api/chains?limit=100")
        chains: list[dict[str, Any]] = json.loads(conn.getresponse().read())
        return chains
    finally:
        conn.close()


def _named(chains: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in chains if c.get("method") == "tools/call"}


UNMATCHED = {
    "wrongid": (
        "the server answered id 999; the request was id 7",
        "a response to id 999, which no request of this exchange carried",
    ),
    "noid": (
        "the server's answer has no id; the request was id 7",
        "a response with no id, which no request can be matched to",
    ),
    "nullid_error": (
        "the server answered with id null: -32700 Parse error; the request was id 7",
        "a response with id null: -32700 Parse error, which no request can be matched to",
    ),
    "both": (
        "the server's answer to id 7 is no valid JSON-RPC response: it holds both result and error",
        "the server sent a response that is no valid JSON-RPC response: it holds both result and error",
    ),
    "nojsonrpc": (
        'the server\'s answer to id 7 is no valid JSON-RPC response: missing or wrong "jsonrpc" member',
        'the server sent a response that is no valid JSON-RPC response: missing or wrong "jsonrpc" member',
    ),
}


@pytest.mark.parametrize("name", sorted(UNMATCHED))
def test_an_answer_no_request_can_be_matched_to_is_named_in_the_chain_the_log_and_the_export(
    seen: Seen, name: str
) -> None:
    error, note = UNMATCHED[name]
    for chain in (seen.live[name], seen.exported[name]):
        assert (chain["status"], chain["error"]) == ("error", error)
        assert note in chain["notes"]
    assert seen.lines[name]["trouble"] == error
    assert seen.bodies[name] == ANSWERS[name].split(b"\r\n\r\n", 1)[1]  # relayed unchanged


NOT_ANSWERED = {
    "accepted": "the server answered 202 Accepted with no body to a request",
    "nocontent": "the server answered 204 No Content to a request",
    "empty200": "the server's 200 answer has an empty body, no response to a request",
    "textplain": "the text/plain answer holds no response to the request (not JSON: ",
}


@pytest.mark.parametrize("name", sorted(NOT_ANSWERED))
def test_a_body_without_a_response_is_named_for_what_it_was_not_as_a_stream(seen: Seen, name: str) -> None:
    said = NOT_ANSWERED[name]
    for error in (seen.live[name]["error"], seen.exported[name]["error"], seen.lines[name]["trouble"]):
        assert error.startswith(said), error
    assert seen.live[name]["status"] == seen.exported[name]["status"] == "error"


def test_a_response_to_an_id_no_request_carried_is_noted_and_the_call_stays_ok(seen: Seen) -> None:
    note = "a response to id 4242, which no request of this exchange carried"
    for chain in (seen.live["unsolicited"], seen.exported["unsolicited"]):
        assert (chain["status"], chain.get("error"), chain["notes"]) == ("ok", None, [note])
    assert seen.lines["unsolicited"]["trouble"] is None


def test_a_batch_answered_to_a_request_of_a_version_without_batches_is_noted(seen: Seen) -> None:
    note = (
        f"the server answered with a JSON-RPC batch, which protocol {VERSION} (the request's) does not have: "
        "batches were removed in 2025-06-18"
    )
    for chain in (seen.live["batch"], seen.exported["batch"]):
        assert (chain["status"], chain["notes"]) == ("ok", [note])


ACCEPTS = ": a Streamable HTTP client accepts application/json or text/event-stream only, and may refuse it"
CONTENT_TYPES = {
    "noctype": "the answer has no Content-Type",
    "wrongctype": "the answer's Content-Type is application/octet-stream",
    "textplain_json": "the answer's Content-Type is text/plain",
    "dupctype": "the answer has two Content-Types (text/html, application/json)",
    "dupctype_quoted": 'the answer has two Content-Types (application/json; profile="a,b", text/html)',
}


@pytest.mark.parametrize("name", sorted(CONTENT_TYPES))
def test_an_answer_with_a_content_type_no_client_takes_is_noted_and_stays_ok(seen: Seen, name: str) -> None:
    for chain in (seen.live[name], seen.exported[name]):
        assert (chain["status"], chain["notes"]) == ("ok", [CONTENT_TYPES[name] + ACCEPTS])
    assert seen.bodies[name] == _json(_ok())
