"""A bridge's intercept outcomes say who answered a request in the client's place in one typed pair.

The desk and the gate are stand-ins: a rule `i1` picks every message, and the desk decides as told.
Both requests an intercept can answer for a client (one the bridge sends the client, one the upstream
sends the bridge) come back with `by` and `dropped`, and the words people read are made from them.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pytest

from proxy.flows.events import Mode
from proxy.flows.proxy_notes import answered_for_client, answerer
from proxy.flows.redact import Redactor
from proxy.transport.bridge_holds import BridgeHolds, Outcome
from proxy.wire.jsonrpc import classify_value

ASK = {"jsonrpc": "2.0", "id": 5, "method": "elicitation/create", "params": {"message": "Name?"}}
TYPED = {"action": "accept", "content": {"name": "the desk"}}


@dataclass
class _Decision:
    verb: str
    message: Any


class _Desk:
    def __init__(self, verb: str, message: Any) -> None:
        self.decision = _Decision(verb, message)

    async def hold(self, *_: Any, **__: Any) -> _Decision:
        return self.decision


class _Gate:
    holding = True

    def decide_hold(self, _: Any) -> Any:
        return SimpleNamespace(rule_id="i1")


def _holds(mode: Mode, verb: str, message: Any) -> BridgeHolds:
    relays: Any = SimpleNamespace(
        gate=_Gate(), desk=_Desk(verb, message), observations=SimpleNamespace(redactor=Redactor(key=b"k"))
    )
    return BridgeHolds(relays, mode)


@pytest.mark.parametrize("verb", ["answer", "drop"])
async def test_an_answer_for_the_client_names_its_intercept_and_whether_it_dropped(verb: str) -> None:
    typed = {"jsonrpc": "2.0", "id": 5, "result": TYPED} if verb == "answer" else None
    upstream = await _holds(Mode.MRTR_TO_LEGACY, verb, typed).from_upstream(
        "leg-1", "x1", classify_value(ASK)
    )
    to_client = await _holds(Mode.LEGACY_TO_MRTR, verb, typed).to_client("x1", ASK, "s1")

    for outcome in (upstream, to_client):
        assert (outcome.verb, outcome.by, outcome.dropped) == ("reply", "intercept:i1", verb == "drop")
        assert set(Outcome.__dataclass_fields__) == {"verb", "message", "by", "dropped"}
    assert answerer(upstream.by) == "the proxy's intercept (i1)"
    whose = "a drop error from" if verb == "drop" else "typed at"
    assert answered_for_client(upstream.by or "", upstream.dropped) == (
        f"{whose} the proxy's intercept (i1), sent in the client's place"
    )
