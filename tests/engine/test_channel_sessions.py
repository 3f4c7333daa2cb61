"""Which channel a request goes to, and how soon a dying channel is started again."""

from __future__ import annotations

import itertools

import orjson

from proxy.engine.channel.restarts import Restarts
from proxy.engine.channel.sessions import SHARED, ChannelSessions, NewSession, Refused, ToSession

INIT = orjson.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {}})
CALL = orjson.dumps({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {}})


def sessions(limit: int = 2) -> ChannelSessions:
    counter = itertools.count(1)
    return ChannelSessions(lambda: f"s-{next(counter)}", limit, "max_upstream_children")


def test_initialize_opens_a_session_of_its_own_and_its_requests_follow_it() -> None:
    table = sessions()
    assert table.place("POST", None, INIT) == NewSession("s-1")
    assert table.place("POST", None, INIT) == NewSession("s-2")
    assert table.place("POST", "s-1", CALL) == ToSession("s-1")
    assert table.place("GET", "s-2", b"") == ToSession("s-2")


def test_sessionless_requests_share_one_channel() -> None:
    table = sessions()
    assert table.place("POST", None, CALL) is SHARED
    assert table.place("GET", None, b"") is SHARED
    assert table.place("POST", None, b'{"method":"initialize"}') is SHARED  # not a request
    assert table.place("POST", None, b"[" + INIT + b"]") is SHARED  # a batch is no handshake


def test_a_session_that_ended_is_answered_404_session_not_found() -> None:
    table = sessions()
    assert table.place("POST", None, INIT) == NewSession("s-1")
    table.ended("s-1")
    refused = table.place("POST", "s-1", CALL)
    assert isinstance(refused, Refused)
    assert refused.status == 404
    assert orjson.loads(refused.body)["error"] == {"code": -32001, "message": "Session not found"}
    assert orjson.loads(refused.body)["id"] == 4


def test_an_answer_in_a_session_that_ended_is_refused_under_no_id() -> None:
    # The client's answer to the server's request 77 is no request: an error under 77 would answer
    # the client's own request 77.
    table = sessions()
    assert table.place("POST", None, INIT) == NewSession("s-1")
    table.ended("s-1")
    answer = orjson.dumps({"jsonrpc": "2.0", "id": 77, "result": {"roots": []}})
    refused = table.place("POST", "s-1", answer)
    assert isinstance(refused, Refused)
    assert refused.status == 404
    assert orjson.loads(refused.body)["id"] is None


def test_sessions_past_the_bound_are_refused_503_naming_the_setting() -> None:
    table = sessions(limit=1)
    assert table.place("POST", None, INIT) == NewSession("s-1")
    refused = table.place("POST", None, INIT)
    assert isinstance(refused, Refused)
    assert refused.status == 503
    assert "max_upstream_children" in orjson.loads(refused.body)["error"]["message"]
    table.ended("s-1")
    assert table.place("POST", None, INIT) == NewSession("s-2")


def test_restarts_back_off_and_stop_past_the_limit_until_the_window_moves_on() -> None:
    restarts = Restarts(limit=3, window=60.0)
    assert restarts.delay(0.0) == 0.0
    restarts.exited(1.0)
    assert restarts.delay(1.0) == 0.1
    restarts.exited(2.0)
    restarts.exited(3.0)
    assert restarts.delay(3.0) == 0.4
    assert restarts.problem(3.0) is None
    restarts.exited(4.0)
    assert restarts.delay(4.0) is None
    problem = restarts.problem(4.0)
    assert problem is not None
    assert "4 times" in problem
    assert "upstream_restarts_per_minute=3" in problem
    assert restarts.delay(61.5) == 0.4  # the first exit left the window
    assert restarts.recent(200.0) == 0
