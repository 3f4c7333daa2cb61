"""The channel core: Streamable HTTP exchanges served from one message channel, event in, commands out."""

from __future__ import annotations

from unittest.mock import ANY

import orjson

from proxy.engine.channel.core import ChannelCore
from proxy.engine.channel.vocab import (
    Answer,
    ChannelClosed,
    ChannelOversized,
    ChannelReceived,
    ChannelWriteFailed,
    CloseChannel,
    DeleteRequested,
    EndStream,
    ExchangeAbandoned,
    HeadDue,
    OpenStream,
    PostReceived,
    StreamMessage,
    StreamRequested,
    WriteChannel,
)
from proxy.engine.commands import Log
from tests.engine.playbook import Playbook

JSON = (("Content-Type", "application/json"),)
SESSION = (("Mcp-Session-Id", "s-1"),)


def j(value: object) -> bytes:
    return orjson.dumps(value)


def call(ident: object, method: str = "tools/call", **params: object) -> bytes:
    return j({"jsonrpc": "2.0", "id": ident, "method": method, "params": params})


def result(ident: object, **value: object) -> bytes:
    return j({"jsonrpc": "2.0", "id": ident, "result": value})


def note(method: str, **params: object) -> bytes:
    return j({"jsonrpc": "2.0", "method": method, "params": params})


def error(ident: object, code: int, message: str) -> bytes:
    return j({"jsonrpc": "2.0", "id": ident, "error": {"code": code, "message": message}})


def test_a_request_goes_out_as_sent_and_its_lone_answer_comes_back_as_json() -> None:
    core = ChannelCore()
    assert (
        Playbook(core)
        >> PostReceived("e1", call(1) + b"\n")
        << WriteChannel(call(1), "e1")
        >> ChannelReceived(result(1, ok=True))
        << Answer("e1", 200, JSON, result(1, ok=True))
    )
    assert not core.busy


def test_a_notification_or_an_answer_from_the_client_is_written_and_answered_202() -> None:
    assert (
        Playbook(ChannelCore(session="s-1"))
        >> PostReceived("e1", note("notifications/initialized"))
        << WriteChannel(note("notifications/initialized"), "e1")
        << Answer("e1", 202, SESSION, b"")
        >> PostReceived("e2", result("srv-1", action="accept"))
        << WriteChannel(result("srv-1", action="accept"), "e2")
        << Answer("e2", 202, SESSION, b"")
    )


def test_a_session_channel_names_its_session_on_every_answer() -> None:
    assert (
        Playbook(ChannelCore(session="s-1"))
        >> PostReceived("e1", call(0, "initialize"))
        << WriteChannel(call(0, "initialize"), "e1")
        >> ChannelReceived(result(0, protocolVersion="2025-11-25"))
        << Answer("e1", 200, (*JSON, *SESSION), result(0, protocolVersion="2025-11-25"))
    )


def test_a_server_request_during_the_only_call_makes_its_response_a_stream() -> None:
    ask = call("srv-1", "elicitation/create", message="Deploy?")
    assert (
        Playbook(ChannelCore(session="s-1"))
        >> PostReceived("e1", call(7))
        << WriteChannel(call(7), "e1")
        >> ChannelReceived(ask)
        << OpenStream("e1", SESSION)
        << StreamMessage("e1", ask)
        >> PostReceived("e2", result("srv-1", action="accept"))
        << WriteChannel(result("srv-1", action="accept"), "e2")
        << Answer("e2", 202, SESSION, b"")
        >> ChannelReceived(result(7, content=[]))
        << StreamMessage("e1", result(7, content=[]))
        << EndStream("e1")
    )


def test_an_id_already_in_flight_goes_out_under_an_alias_and_comes_back_as_the_clients() -> None:
    aliased = j({"jsonrpc": "2.0", "id": "mcp-proxy-1", "method": "tools/call", "params": {}})
    assert (
        Playbook(ChannelCore())
        >> PostReceived("a", call(1))
        << WriteChannel(call(1), "a")
        >> PostReceived("b", call(1))
        << WriteChannel(aliased, "b")
        >> ChannelReceived(result("mcp-proxy-1", who="b"))
        << Answer("b", 200, JSON, result(1, who="b"))
        >> ChannelReceived(result(1, who="a"))
        << Answer("a", 200, JSON, result(1, who="a"))
    )


def test_progress_rides_the_stream_of_the_call_whose_token_it_carries() -> None:
    first = call(1, _meta={"progressToken": "t1"})
    second = call(2, _meta={"progressToken": "t2"})
    progress = note("notifications/progress", progressToken="t2", progress=1)
    assert (
        Playbook(ChannelCore())
        >> PostReceived("a", first)
        << WriteChannel(first, "a")
        >> PostReceived("b", second)
        << WriteChannel(second, "b")
        >> ChannelReceived(progress)
        << OpenStream("b", ())
        << StreamMessage("b", progress)
    )


def test_a_progress_token_already_in_flight_goes_out_renamed_and_its_progress_comes_back_as_the_clients() -> (
    None
):
    first = call(1, _meta={"progressToken": 7})
    second = call(2, _meta={"progressToken": 7})
    renamed = call(2, _meta={"progressToken": "mcp-proxy-progress-1"})
    to_first = note("notifications/progress", progressToken=7, progress=1)
    to_second = note("notifications/progress", progressToken="mcp-proxy-progress-1", progress=1)
    assert (
        Playbook(ChannelCore())
        >> PostReceived("a", first)
        << WriteChannel(first, "a")
        >> PostReceived("b", second)
        << WriteChannel(renamed, "b")
        >> ChannelReceived(to_first)
        << OpenStream("a", ())
        << StreamMessage("a", to_first)
        >> ChannelReceived(to_second)
        << OpenStream("b", ())
        << StreamMessage("b", note("notifications/progress", progressToken=7, progress=1))
    )


def test_with_several_calls_a_server_request_goes_to_the_get_stream_when_one_is_open() -> None:
    ask = call("srv-1", "roots/list")
    assert (
        Playbook(ChannelCore(session="s-1"))
        >> StreamRequested("g")
        << OpenStream("g", SESSION)
        >> PostReceived("a", call(1))
        << WriteChannel(call(1), "a")
        >> PostReceived("b", call(2))
        << WriteChannel(call(2), "b")
        >> ChannelReceived(ask)
        << StreamMessage("g", ask)
    )


def test_with_several_calls_and_no_get_stream_a_server_request_goes_to_the_newest_call() -> None:
    ask = call("srv-1", "sampling/createMessage")
    assert (
        Playbook(ChannelCore(session="s-1"))
        >> PostReceived("a", call(1))
        << WriteChannel(call(1), "a")
        >> PostReceived("b", call(2))
        << WriteChannel(call(2), "b")
        >> ChannelReceived(ask)
        << Log("upstream_request_placed", "info", {"method": "sampling/createMessage", "exchange": "b"})
        << OpenStream("b", SESSION)
        << StreamMessage("b", ask)
    )


def test_on_the_shared_channel_a_server_request_no_cue_places_is_refused_never_given_to_a_call() -> None:
    # The calls are different clients': the newest may not be the one the question is for.
    ask = call("srv-1", "roots/list")
    refused = error(
        "srv-1",
        -32603,
        "roots/list names no client request, while 2 calls of different clients are in flight on the "
        "server's one shared stream: the proxy cannot tell whose it is",
    )
    assert (
        Playbook(ChannelCore())
        >> PostReceived("a", call(1))
        << WriteChannel(call(1), "a")
        >> PostReceived("b", call(2))
        << WriteChannel(call(2), "b")
        >> ChannelReceived(ask)
        << Log(
            "upstream_request_refused",
            "warning",
            {"method": "roots/list", "id": "srv-1", "in_flight": 2, "hint": ANY},
        )
        << WriteChannel(refused, None)
    )


def test_on_the_shared_channel_a_cancellation_naming_an_id_several_clients_use_is_not_sent() -> None:
    aliased = j({"jsonrpc": "2.0", "id": "mcp-proxy-1", "method": "tools/call", "params": {}})
    assert (
        Playbook(ChannelCore())
        >> PostReceived("a", call(1))
        << WriteChannel(call(1), "a")
        >> PostReceived("b", call(1))
        << WriteChannel(aliased, "b")
        >> PostReceived("c", note("notifications/cancelled", requestId=1))
        << Log("client_cancellation_dropped", "warning", ANY)
        << Answer("c", 202, (), b"")
    )


def test_a_message_that_belongs_to_no_call_waits_for_the_get_stream() -> None:
    changed = note("notifications/tools/list_changed")
    ask = call("srv-1", "roots/list")
    assert (
        Playbook(ChannelCore(session="s-1"))
        >> ChannelReceived(changed)
        >> ChannelReceived(ask)
        >> StreamRequested("g")
        << OpenStream("g", SESSION)
        << StreamMessage("g", changed)
        << StreamMessage("g", ask)
    )


def test_the_backlog_is_bounded_and_says_what_it_dropped() -> None:
    core = ChannelCore(session="s-1", backlog=1)
    assert (
        Playbook(core)
        >> ChannelReceived(note("notifications/message", data="one"))
        >> ChannelReceived(note("notifications/message", data="two"))
        << Log("upstream_message_dropped", "warning", ANY)
        >> StreamRequested("g")
        << OpenStream("g", SESSION)
        << StreamMessage("g", note("notifications/message", data="two"))
    )


def test_listen_notifications_ride_the_listen_call_not_the_tool_call() -> None:
    listen = call(1, "subscriptions/listen", notifications={"toolsListChanged": True})
    changed = note("notifications/tools/list_changed")
    log = note("notifications/message", data="working")
    assert (
        Playbook(ChannelCore())
        >> PostReceived("l", listen)
        << WriteChannel(listen, "l")
        >> PostReceived("c", call(2))
        << WriteChannel(call(2), "c")
        >> ChannelReceived(changed)
        << OpenStream("l", ())
        << StreamMessage("l", changed)
        >> ChannelReceived(log)
        << OpenStream("c", ())
        << StreamMessage("c", log)
    )


def test_a_server_cancellation_follows_the_request_it_cancels() -> None:
    ask = call("srv-1", "elicitation/create")
    cancel = note("notifications/cancelled", requestId="srv-1")
    assert (
        Playbook(ChannelCore(session="s-1"))
        >> PostReceived("a", call(1))
        << WriteChannel(call(1), "a")
        >> ChannelReceived(ask)
        << OpenStream("a", SESSION)
        << StreamMessage("a", ask)
        >> PostReceived("b", call(2))
        << WriteChannel(call(2), "b")
        >> ChannelReceived(cancel)
        << StreamMessage("a", cancel)
    )


def test_a_head_due_before_any_message_opens_the_stream() -> None:
    assert (
        Playbook(ChannelCore())
        >> PostReceived("a", call(1))
        << WriteChannel(call(1), "a")
        >> HeadDue("a")
        << OpenStream("a", ())
        >> ChannelReceived(result(1))
        << StreamMessage("a", result(1))
        << EndStream("a")
    )


def test_closing_a_calls_stream_on_the_shared_channel_cancels_it_upstream() -> None:
    cancel = j(
        {
            "jsonrpc": "2.0",
            "method": "notifications/cancelled",
            "params": {"requestId": 1, "reason": "the client closed the request's stream"},
        }
    )
    core = ChannelCore()
    assert (
        Playbook(core)
        >> PostReceived("a", call(1))
        << WriteChannel(call(1), "a")
        >> ExchangeAbandoned("a")
        << WriteChannel(cancel, None)
        >> ChannelReceived(result(1))
        << Log("upstream_answer_unmatched", "info", {"id": 1, "session": False})
    )
    assert not core.busy


def test_closing_a_calls_stream_in_a_legacy_session_is_no_cancellation_and_its_answer_is_dropped() -> None:
    assert (
        Playbook(ChannelCore(session="s-1"))
        >> PostReceived("a", call(1))
        << WriteChannel(call(1), "a")
        >> ExchangeAbandoned("a")
        >> ChannelReceived(result(1))
        << Log("upstream_answer_dropped", "debug", {"id": 1})
    )


def test_progress_of_a_call_whose_stream_closed_in_a_legacy_session_is_dropped() -> None:
    # The server may report progress of a call after its client closed the call's stream (or
    # cancelled it) and before it notices: nobody listens for it any more.
    progress = note("notifications/progress", progressToken="t1", progress=1)
    assert (
        Playbook(ChannelCore(session="s-1"))
        >> PostReceived("a", call(1, _meta={"progressToken": "t1"}))
        << WriteChannel(call(1, _meta={"progressToken": "t1"}), "a")
        >> ExchangeAbandoned("a")
        >> ChannelReceived(progress)
        << Log("upstream_message_dropped", "debug", {"method": "notifications/progress", "reason": ANY})
        >> ChannelReceived(result(1))
        << Log("upstream_answer_dropped", "debug", {"id": 1})
    )


def test_a_clients_cancellation_names_the_call_by_its_alias() -> None:
    cancel = note("notifications/cancelled", requestId=1)
    aliased_cancel = note("notifications/cancelled", requestId="mcp-proxy-1")
    aliased = j({"jsonrpc": "2.0", "id": "mcp-proxy-1", "method": "tools/call", "params": {}})
    assert (
        Playbook(ChannelCore())
        >> PostReceived("a", call(1))
        << WriteChannel(call(1), "a")
        >> PostReceived("b", call(1))
        << WriteChannel(aliased, "b")
        >> ChannelReceived(result(1))
        << Answer("a", 200, JSON, result(1))
        >> PostReceived("c", cancel)
        << WriteChannel(aliased_cancel, "c")
        << Answer("c", 202, (), b"")
    )


def test_a_closed_channel_answers_open_calls_with_an_error_naming_why_and_ends_streams() -> None:
    reason = "the upstream MCP server exited with status 3"
    failed_a = error(1, -32000, f"{reason} before answering")
    failed_b = error(2, -32000, f"{reason} before answering")
    core = ChannelCore(session="s-1")
    assert (
        Playbook(core)
        >> StreamRequested("g")
        << OpenStream("g", SESSION)
        >> PostReceived("a", call(1))
        << WriteChannel(call(1), "a")
        >> PostReceived("b", call(2))
        << WriteChannel(call(2), "b")
        >> HeadDue("b")
        << OpenStream("b", SESSION)
        >> ChannelClosed(reason)
        << Answer("a", 200, (*JSON, *SESSION), failed_a)
        << StreamMessage("b", failed_b)
        << EndStream("b")
        << EndStream("g")
        >> PostReceived("c", call(3))
        << Answer("c", 404, (*JSON, *SESSION), error(3, -32001, "Session not found"))
    )
    assert not core.busy


def test_delete_answers_and_closes_a_session_channel() -> None:
    assert (
        Playbook(ChannelCore(session="s-1"))
        >> DeleteRequested("d")
        << Answer("d", 200, SESSION, b"")
        << CloseChannel("its session ended (DELETE)")
    )


def test_a_request_after_delete_gets_404_at_once_while_the_sessions_process_stops() -> None:
    assert (
        Playbook(ChannelCore(session="s-1"))
        >> DeleteRequested("d")
        << Answer("d", 200, SESSION, b"")
        << CloseChannel("its session ended (DELETE)")
        >> PostReceived("a", call(7))
        << Answer("a", 404, (*JSON, *SESSION), error(7, -32001, "Session not found"))
        >> StreamRequested("g")
        << Answer("g", 404, (*JSON, *SESSION), error(None, -32001, "Session not found"))
    )


def test_a_notification_or_an_answer_after_the_session_ended_is_refused_under_no_id() -> None:
    # An error under the id of the client's own answer would answer a request of the client's own.
    assert (
        Playbook(ChannelCore(session="s-1"))
        >> DeleteRequested("d")
        << Answer("d", 200, SESSION, b"")
        << CloseChannel("its session ended (DELETE)")
        >> PostReceived("n", note("notifications/roots/list_changed"))
        << Answer("n", 404, (*JSON, *SESSION), error(None, -32001, "Session not found"))
        >> PostReceived("r", result(77, roots=[]))
        << Answer("r", 404, (*JSON, *SESSION), error(None, -32001, "Session not found"))
    )


def test_the_shared_channel_has_no_get_stream_and_no_session_to_delete() -> None:
    assert (
        Playbook(ChannelCore())
        >> StreamRequested("g")
        << Answer("g", 405, JSON, ANY)
        >> DeleteRequested("d")
        << Answer("d", 405, JSON, ANY)
    )


def test_a_second_get_stream_in_a_session_is_refused_409() -> None:
    assert (
        Playbook(ChannelCore(session="s-1"))
        >> StreamRequested("g1")
        << OpenStream("g1", SESSION)
        >> StreamRequested("g2")
        << Answer("g2", 409, (*JSON, *SESSION), ANY)
        >> ExchangeAbandoned("g1")
        >> StreamRequested("g3")
        << OpenStream("g3", SESSION)
    )


def test_a_line_that_is_not_json_is_logged_as_the_servers_protocol_error_and_skipped() -> None:
    assert (
        Playbook(ChannelCore())
        >> PostReceived("a", call(1))
        << WriteChannel(call(1), "a")
        >> ChannelReceived(b"Server starting on stdio...")
        << Log(
            "upstream_protocol_error",
            "warning",
            {"problem": ANY, "preview": "Server starting on stdio...", "size": 27, "action": "skipped"},
        )
        >> ChannelReceived(result(1))
        << Answer("a", 200, JSON, result(1))
    )


def test_an_oversized_answer_fails_the_call_its_id_names() -> None:
    big = result(2, text="x" * 100)
    text = (
        "the upstream MCP server's answer was 5000 bytes, over the proxy's limit of 1000 "
        "(max_body_bytes); it was dropped"
    )
    assert (
        Playbook(ChannelCore())
        >> PostReceived("a", call(1))
        << WriteChannel(call(1), "a")
        >> PostReceived("b", call(2))
        << WriteChannel(call(2), "b")
        >> ChannelOversized(5000, big[:40], big[-40:], 1000)
        << Log("upstream_message_too_large", "warning", ANY)
        << Answer("b", 200, JSON, error(2, -32000, text))
    )


def test_an_oversized_answer_whose_id_sits_at_its_end_fails_that_call() -> None:
    tail = b'..."}],"jsonrpc":"2.0","id":"q-9"}'
    assert (
        Playbook(ChannelCore())
        >> PostReceived("a", call("q-9"))
        << WriteChannel(call("q-9"), "a")
        >> PostReceived("b", call(2))
        << WriteChannel(call(2), "b")
        >> ChannelOversized(5000, b'{"result":{"content":[{"type":"text","text":"xxxx', tail, 1000)
        << Log("upstream_message_too_large", "warning", ANY)
        << Answer("a", 200, JSON, ANY)
    )


def test_a_failed_write_fails_the_calls_it_carried() -> None:
    assert (
        Playbook(ChannelCore())
        >> PostReceived("a", call(1))
        << WriteChannel(call(1), "a")
        >> ChannelWriteFailed("a", "HTTP 500 from the message endpoint")
        << Answer(
            "a",
            200,
            JSON,
            error(1, -32000, "the request did not reach the upstream: HTTP 500 from the message endpoint"),
        )
    )


def test_a_batch_is_written_as_one_line_and_answered_as_a_stream() -> None:
    batch = j([orjson.loads(call(1, "tools/list")), orjson.loads(note("notifications/x"))])
    assert (
        Playbook(ChannelCore(session="s-1"))
        >> PostReceived("a", batch)
        << WriteChannel(batch, "a")
        >> ChannelReceived(j([orjson.loads(result(1))]))
        << OpenStream("a", SESSION)
        << StreamMessage("a", result(1))
        << EndStream("a")
    )


def test_a_body_with_a_newline_inside_is_written_compact_on_one_line() -> None:
    pretty = b'{\n  "jsonrpc": "2.0",\n  "id": 1,\n  "method": "ping"\n}'
    assert (
        Playbook(ChannelCore())
        >> PostReceived("a", pretty)
        << WriteChannel(b'{"jsonrpc":"2.0","id":1,"method":"ping"}', "a")
    )


def test_bodies_that_are_not_json_rpc_are_refused_400_and_never_written() -> None:
    assert (
        Playbook(ChannelCore())
        >> PostReceived("a", b"{nope")
        << Answer("a", 400, JSON, ANY)
        >> PostReceived("b", b'{"id":1}')
        << Answer("b", 400, JSON, ANY)
    )
