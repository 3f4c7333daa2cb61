"""A channel client's messages as Streamable HTTP requests: what each becomes, what answers teach."""

from __future__ import annotations

import orjson

from proxy.engine.mirror import Cancel, ChannelClient, EndSession, OpenStream, Post, Reply
from proxy.wire.jsonrpc import classify_value

ACCEPT = ("Accept", "application/json, text/event-stream")
JSON = ("Content-Type", "application/json")
MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
}


def j(value: object) -> bytes:
    return orjson.dumps(value)


def call(ident: object, method: str, **params: object) -> bytes:
    return j({"jsonrpc": "2.0", "id": ident, "method": method, "params": params})


def note(method: str, **params: object) -> bytes:
    return j({"jsonrpc": "2.0", "method": method, "params": params})


def answer(ident: object, **result: object) -> object:
    return classify_value({"jsonrpc": "2.0", "id": ident, "result": result})


def initialized(client: ChannelClient) -> None:
    """Run a legacy handshake: session `s-1`, version 2025-06-18."""
    (post,) = client.received(call(1, "initialize", protocolVersion="2025-11-25"))
    assert isinstance(post, Post)
    client.head(post.seq, (("mcp-session-id", "s-1"),))
    client.delivered(post.seq, answer(1, protocolVersion="2025-06-18"))  # type: ignore[arg-type]


def test_a_legacy_handshake_holds_later_messages_until_its_answer_then_names_session_and_version() -> None:
    client = ChannelClient()
    (init,) = client.received(call(1, "initialize", protocolVersion="2025-11-25"))
    assert init == Post(
        1, call(1, "initialize", protocolVersion="2025-11-25"), (JSON, ACCEPT), (1,), "initialize"
    )
    assert client.received(note("notifications/initialized")) == []  # waits: it needs the session
    assert client.received(call(2, "tools/list")) == []
    assert client.head(1, (("Mcp-Session-Id", "s-1"), ("Content-Type", "text/event-stream"))) == []
    released = client.delivered(1, answer(1, protocolVersion="2025-06-18"))  # type: ignore[arg-type]
    session = (JSON, ACCEPT, ("Mcp-Session-Id", "s-1"), ("MCP-Protocol-Version", "2025-06-18"))
    get = (("Accept", "text/event-stream"), ("Mcp-Session-Id", "s-1"), ("MCP-Protocol-Version", "2025-06-18"))
    # The notification goes with the session's GET stream; the call waits for the notification's 202.
    assert released == [
        Post(2, note("notifications/initialized"), session, (), "notifications/initialized"),
        OpenStream(get),
    ]
    assert client.head(2, ()) == [Post(3, call(2, "tools/list"), session, (2,), "tools/list")]


def test_requests_do_not_wait_for_one_another_but_what_follows_an_answer_waits_for_its_202() -> None:
    client = ChannelClient()
    initialized(client)
    first = client.received(call(5, "tools/call", name="slow"))
    second = client.received(call(6, "tools/call", name="fast"))
    assert [type(o) for o in first + second] == [Post, Post]
    (reply,) = client.received(j({"jsonrpc": "2.0", "id": "srv-1", "result": {"action": "accept"}}))
    assert isinstance(reply, Post)
    assert reply.calls == ()
    assert client.received(call(7, "ping")) == []
    (ping,) = client.head(reply.seq, ())
    assert isinstance(ping, Post)
    assert ping.calls == (7,)


def test_a_modern_request_carries_its_version_and_routing_headers_learned_from_tool_lists() -> None:
    client = ChannelClient()
    (listing,) = client.received(call(1, "tools/list", _meta=MODERN_META))
    assert isinstance(listing, Post)
    assert listing.headers == (
        JSON,
        ACCEPT,
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", "tools/list"),
    )
    schema = {"type": "object", "properties": {"region": {"type": "string", "x-mcp-header": "Region"}}}
    tools = answer(1, tools=[{"name": "deploy", "inputSchema": schema}])
    client.delivered(listing.seq, tools)  # type: ignore[arg-type]
    (post,) = client.received(
        call(2, "tools/call", name="deploy", arguments={"region": "eu"}, _meta=MODERN_META)
    )
    assert isinstance(post, Post)
    assert post.headers[2:] == (
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", "tools/call"),
        ("Mcp-Name", "deploy"),
        ("Mcp-Param-Region", "eu"),
    )


def test_a_modern_clients_cancellation_closes_the_calls_exchange_and_is_not_sent_on() -> None:
    client = ChannelClient()
    client.received(call(9, "tools/call", name="slow", _meta=MODERN_META))
    assert client.received(note("notifications/cancelled", requestId=9)) == [Cancel(9)]


def test_a_legacy_clients_cancellation_is_sent_on_then_closes_the_calls_exchange_as_cancelled() -> None:
    # Sent as legacy HTTP sends it; once the upstream took it, nothing else would close the call's
    # exchange (a server need not answer a cancelled call), so the mirror closes it.
    client = ChannelClient()
    initialized(client)
    client.received(call(9, "tools/call", name="slow"))
    (post,) = client.received(note("notifications/cancelled", requestId=9))
    assert isinstance(post, Post)
    assert post.method == "notifications/cancelled"
    assert client.received(call(10, "ping")) == []  # waits for the notification's head
    cancel, ping = client.head(post.seq, ())
    assert cancel == Cancel(9, "cancelled")
    assert isinstance(ping, Post)
    assert ping.calls == (10,)
    assert client.cancelling == {}


def test_a_legacy_cancellation_whose_post_got_no_head_is_forgotten() -> None:
    client = ChannelClient()
    initialized(client)
    (post,) = client.received(note("notifications/cancelled", requestId=9))
    assert isinstance(post, Post)
    assert client.ended(post.seq, (), "no response came") == []
    assert client.cancelling == {}


def test_a_line_that_is_no_json_is_answered_with_a_parse_error_and_the_next_goes_on() -> None:
    client = ChannelClient()
    (reply,) = client.received(b"this is not json")
    assert isinstance(reply, Reply)
    error = orjson.loads(reply.data)
    assert error["id"] is None
    assert error["error"]["code"] == -32700
    assert error["error"]["data"] == {"received": "this is not json"}
    assert [type(o) for o in client.received(call(1, "tools/list"))] == [Post]


def test_a_message_over_the_limit_is_refused_under_the_id_its_start_shows() -> None:
    client = ChannelClient(max_body_bytes=100)
    (reply,) = client.oversized(5000, b'{"jsonrpc":"2.0","id":42,"method":"tools/call","params":{"x":"')
    assert isinstance(reply, Reply)
    error = orjson.loads(reply.data)
    assert error["id"] == 42
    assert error["error"]["data"] == {"limit": 100, "setting": "max_body_bytes"}


def test_a_call_whose_exchange_ended_unanswered_gets_an_error_and_what_waited_goes_on() -> None:
    client = ChannelClient()
    (init,) = client.received(call(1, "initialize", protocolVersion="2025-11-25"))
    assert client.received(call(2, "tools/list")) == []
    assert isinstance(init, Post)
    orders = client.ended(init.seq, (1,), "HTTP 502 without an answer")
    reply, post = orders
    assert isinstance(reply, Reply)
    assert orjson.loads(reply.data)["id"] == 1
    assert "HTTP 502" in orjson.loads(reply.data)["error"]["message"]
    assert isinstance(post, Post)
    assert post.calls == (2,)


def test_the_channels_end_ends_a_legacy_session_and_nothing_after_it_is_sent() -> None:
    client = ChannelClient()
    initialized(client)
    assert client.close() == [EndSession((("Mcp-Session-Id", "s-1"), ("MCP-Protocol-Version", "2025-06-18")))]
    assert client.received(call(3, "tools/list")) == []
    assert client.close() == []


def test_a_sessionless_channel_ends_without_a_delete() -> None:
    client = ChannelClient()
    client.received(call(1, "tools/list", _meta=MODERN_META))
    assert client.close() == []


def test_the_clients_own_credentials_go_along_but_not_its_framing_headers() -> None:
    client = ChannelClient(client_headers=(("Authorization", "Bearer t"), ("Host", "x"), ("X-Tenant", "a")))
    (post,) = client.received(call(1, "initialize", protocolVersion="2025-11-25"))
    assert isinstance(post, Post)
    assert post.headers == (JSON, ACCEPT, ("Authorization", "Bearer t"), ("X-Tenant", "a"))


def test_a_client_that_initializes_again_starts_a_new_session_with_no_dead_session_id() -> None:
    client = ChannelClient()
    initialized(client)
    (post, first_stream) = client.received(note("notifications/initialized"))
    assert isinstance(post, Post)
    assert isinstance(first_stream, OpenStream)
    client.head(post.seq, ())

    # The server restarted and forgot s-1; the client notices and initializes again.
    (again,) = client.received(call(9, "initialize", protocolVersion="2025-11-25"))
    assert again == Post(
        again.seq, call(9, "initialize", protocolVersion="2025-11-25"), (JSON, ACCEPT), (9,), "initialize"
    )
    client.head(again.seq, (("mcp-session-id", "s-2"),))
    client.delivered(again.seq, answer(9, protocolVersion="2025-06-18"))  # type: ignore[arg-type]
    (sent, stream) = client.received(note("notifications/initialized"))
    fresh = (("Mcp-Session-Id", "s-2"), ("MCP-Protocol-Version", "2025-06-18"))
    assert isinstance(sent, Post)
    assert sent.headers == (JSON, ACCEPT, *fresh)
    assert stream == OpenStream((("Accept", "text/event-stream"), *fresh))
