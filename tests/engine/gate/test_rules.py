"""The fault rule language: parsed once, refused with the reason, matched as a pure function."""

from __future__ import annotations

import random
import re

import pytest

from proxy.engine.gate.match import Seen, parse_match
from proxy.engine.gate.messages import asked_of, corrupt_state, drop_answer, error_answer, seen
from proxy.engine.gate.rules import FaultGate, parse_rule
from proxy.flows.redact import Redactor
from proxy.wire.jsonrpc import Message, classify_value

MASKS = Redactor(body_keys=("api_token",), key=b"k" * 32)
"""The proxy's redactor, with a fixed key so a test knows the stand-ins."""
SESSION = "sess-08b2-S3cret"


def call(name: str = "delete_repo", ident: int = 1, **params: object) -> Seen:
    msg = classify_value(
        {"jsonrpc": "2.0", "id": ident, "method": "tools/call", "params": {"name": name, **params}}
    )
    return seen(msg, "client", era="legacy", session=SESSION, asked={}, masks=MASKS)


def answer_to(request: Seen, ident: int = 1) -> Seen:
    msg = classify_value({"jsonrpc": "2.0", "id": ident, "result": {"content": []}})
    asked = {ident: (request.method, request.name)}
    return seen(msg, "server", era="legacy", session=SESSION, asked=asked, masks=MASKS)


def server_request(method: str = "elicitation/create") -> Seen:
    msg = classify_value({"jsonrpc": "2.0", "id": 9, "method": method, "params": {}})
    return seen(msg, "server", era="legacy", session=None, asked={}, masks=MASKS)


def test_the_filter_languages_fields_pick_a_message_as_they_pick_a_chain() -> None:
    message = call()
    for text in (
        "method:tools/call",
        "tool:delete_*",
        "name:DELETE_REPO",
        "era:legacy",
        "mode:pass",
        "-mode:bridged",
        f"session:{MASKS.token(SESSION)[-9:-1]}",  # the hmac the chains show
        "body:delete_repo",
        "dir:client",
        "round:1",
        "-tool:create_*",
        "*",
        "",
    ):
        assert parse_match(text).matches(message), text
    for text in (
        "tool:create_*",
        "-method:tools/call",
        "dir:server",
        "round:>1",
        "era:modern",
        "body:octocat",
    ):
        assert not parse_match(text).matches(message), text


def test_session_and_body_terms_see_secrets_masked_so_a_rule_cannot_confirm_a_guess() -> None:
    message = call(arguments={"api_token": "victim-bodysecret-424242", "note": "hi"})
    stand_in = MASKS.token(SESSION)
    assert message.session == stand_in
    for text in (f"session:{stand_in[-9:-5]}", "body:*api_token*<redacted*", "body:note"):
        assert parse_match(text).matches(message), text
    for text in ("session:sess-08b2*", "session:S3cret", "body:*victim-b*", "body:bodysecret"):
        assert not parse_match(text).matches(message), text


def test_an_answer_is_picked_by_the_request_it_answers_and_dir_tells_them_apart() -> None:
    request = call()
    answer = answer_to(request)
    assert parse_match("tool:delete_*").matches(answer)
    assert not parse_match("tool:delete_* dir:client").matches(answer)
    assert parse_match("tool:delete_* dir:server").matches(answer)


def test_a_retry_is_round_two_and_a_server_request_has_no_round() -> None:
    retry = call(requestState="abc", inputResponses={})
    assert parse_match("round:>1").matches(retry)
    assert not parse_match("round:1").matches(retry)
    assert not parse_match("round:1").matches(server_request())


@pytest.mark.parametrize(
    ("rule", "reason"),
    [
        ("method:tools/call delay=1s", "no '=>'"),
        ("method:tools/call =>", "needs an action"),
        ("colour:red => drop", "unknown field 'colour'"),
        ("octocat => drop", "is not a field term"),
        ("dir:up => drop", "dir: is client or server"),
        ("round:>3 => drop", "cannot count rounds further"),
        ("* => explode", "unknown action 'explode'"),
        ("* => delay=soon", "delay= is a duration"),
        ("* => delay=2h", "delay= is a duration"),
        ("* => delay=11m", "at most 10m"),
        ("* => error=abc", "error= is a JSON-RPC code"),
        ("* => error=99999999999999999999:big", "a code from -2147483648 to 2147483647"),
        ("* => error=2147483648", "a code from -2147483648 to 2147483647"),
        ("* => drop=yes", "drop takes no value"),
        ("* => cut_after", "cut_after needs a value"),
        ("* => drop p=2", "p= is a probability"),
        ("* => drop p=0", "a rule with p=0 never acts"),
        ("* => drop count=0", "count= is how many"),
        ("* => drop often", "only p=P and count=N"),
        ("tool:x => drop p=0.5 p=0.2", "p= is given twice in one rule; keep the one you mean, got 'p=0.2'"),
        ("tool:x => drop count=3 P=1 count=1", "count= is given twice in one rule"),
        ("tool:x => error=-32001:no p=1 p=1", "p= is given twice"),
        ("dir:server => cut_after=2", "cuts the SSE stream that answers a client request"),
        ("dir:server => corrupt_state", "alters the requestState"),
        ("round:1 => corrupt_state", "round:1 has none"),
        (
            "method:notifications/progress => error=-32099",
            "method:notifications/progress picks only notifications",
        ),
        (
            "method:notifications/cancelled dir:client => error=-32001",
            "answers a client's request, or replaces",
        ),
        ("method:elicitation/create dir:client => error=-32001:nope", "picks only the client's answer to a"),
        (
            "method:sampling/createMessage => error=-32001",
            "a server's request to the client and the client's",
        ),
        ("method:notifications/initialized => corrupt_state", "alters the requestState a client's retry"),
        ("method:notifications/initialized => cut_after=0", "cuts the SSE stream that answers a client's"),
        ("method:notifications/progress dir:client => cut_after=1", "picks only notifications"),
        (
            "method:notifications/x method:elicitation/create => error=-32000",
            "picks no message (its terms exclude each other)",
        ),
        (
            "method:roots/list dir:client => cut_after=1",
            "picks only the client's answer to a server's request",
        ),
        ("mode:legacy_to_mrtr => duplicate", "on a bridged exchange (mode:legacy_to_mrtr) faults act on"),
        ("mode:bridged dir:server => delay=1s", "the client's messages only, with delay, error, drop"),
    ],
)
def test_a_rule_that_cannot_work_is_refused_with_the_reason(rule: str, reason: str) -> None:
    with pytest.raises(ValueError, match=re.escape(reason)):
        parse_rule(rule)


@pytest.mark.parametrize(
    "rule",
    [
        "method:notifications/progress => drop",
        "method:notifications/* => delay=1000ms",
        "method:elicitation/create dir:client => drop",
        "method:elicitation/create dir:server => duplicate",
        "method:notif* => error=-32001",  # a glob may pick requests too
        "-method:notifications/progress => error=-32001",
        "dir:client => corrupt_state",
    ],
)
def test_a_rule_whose_action_fits_some_message_it_picks_is_taken(rule: str) -> None:
    assert parse_rule(rule).text == rule


def test_a_rule_reads_back_as_it_was_meant() -> None:
    rule = parse_rule("tool:slow_*  dir:client =>  error=-32001:not now, sorry  p=0.25 count=3")
    assert rule.action.code == -32001
    assert rule.action.message == "not now, sorry"
    assert (rule.p, rule.count) == (0.25, 3)
    assert rule.text == "tool:slow_*  dir:client => error=-32001:not now, sorry p=0.25 count=3"
    assert parse_rule(rule.text) == rule
    assert parse_rule("* => delay=1.5s").action.describe() == "delay 1500 ms"


def test_the_gate_picks_the_first_rule_that_can_act_and_honours_its_count() -> None:
    gate = FaultGate(seed=1)
    gate.add(parse_rule("tool:delete_* => corrupt_state"))  # cannot act on an answer
    gate.add(parse_rule("tool:delete_* => delay=10ms count=1"))
    gate.add(parse_rule("tool:delete_* => drop"))
    request = call()
    first = gate.decide(request)
    assert first is not None
    assert first.action.kind == "corrupt_state"
    fault = gate.decide(answer_to(request))
    assert fault is not None
    assert (fault.rule_id, fault.action.kind) == ("f2", "delay")
    again = gate.decide(answer_to(request))
    assert again is not None
    assert again.action.kind == "drop"
    assert gate.decide(call("create_repo")) is None


def test_draws_come_from_the_seed_so_a_run_can_be_repeated() -> None:
    def outcomes(seed: int) -> list[bool]:
        gate = FaultGate(seed=seed)
        gate.add(parse_rule("* => drop p=0.3"))
        return [gate.decide(call()) is not None for _ in range(50)]

    draws = random.Random(11)
    assert outcomes(11) == [draws.random() < 0.3 for _ in range(50)]
    assert outcomes(11) == outcomes(11)
    assert outcomes(11) != outcomes(12)


def message(name: str = "delete_repo") -> Message:
    return classify_value({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": name}})


def test_an_exchange_no_rule_could_concern_is_left_alone() -> None:
    gate = FaultGate()
    gate.add(parse_rule("method:tools/call tool:nothing_* => error=-32000"))
    assert not gate.concerns([message()])
    assert gate.concerns([message("Nothing_here")])
    gate.clear()
    gate.add(parse_rule("method:elicitation/create => drop"))  # rides any call's stream
    assert gate.concerns([message()])
    gate.clear()
    gate.add(parse_rule("dir:client method:notifications/initialized => delay=1ms"))
    assert not gate.concerns([message()])
    gate.clear()
    gate.add(parse_rule("name:delete_* => delay=1ms count=1"))
    assert gate.concerns([message()])
    assert gate.decide(call()) is not None
    assert not gate.concerns([message()])  # its count is spent


def test_the_errors_a_fault_makes_say_the_proxy_made_them() -> None:
    rule = parse_rule("* => error=-32050:staging")
    made = error_answer(4, rule.action, "f1")
    assert made["id"] == 4
    assert made["error"]["code"] == -32050
    assert made["error"]["message"] == "staging"
    assert made["error"]["data"]["rule"] == "f1"
    dropped = drop_answer("a", "f2")
    assert "the proxy dropped this request" in dropped["error"]["message"]


def test_a_corrupted_state_keeps_its_length_and_differs() -> None:
    raw = b'{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"x","requestState":"AAAAxyz"}}'
    altered = corrupt_state(raw)
    assert altered is not None
    body, detail = altered
    state = classify_value(__import__("orjson").loads(body)).params["requestState"]
    assert len(state) == 7
    assert state != "AAAAxyz"
    assert "7 characters" in detail
    assert corrupt_state(b'{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{}}') is None


def test_asked_names_the_answers_of_a_batch() -> None:
    msgs = [
        classify_value({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "a"}}),
        classify_value({"jsonrpc": "2.0", "method": "notifications/x"}),
    ]
    assert asked_of(msgs) == {1: ("tools/call", "a")}
