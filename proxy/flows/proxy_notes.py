"""The words a chain's notes use for what the proxy itself did to its traffic: a fault injected, a
message held by an intercept (and what became of it), URLs moved between origins, an answer sent
in the client's place; and which notes say the recording is not the peers' own exchange.

Other rooms read these too (the transport names an intercept's answers with `by_intercept`, the
exports and the TUI pick out `proxy_changes`), so the wording lives once, here. No state, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Final

from proxy.flows.events import Direction
from proxy.flows.observations import FaultInjected, InterceptHeld, InterceptReleased, OriginRewritten
from proxy.wire.mcp import INPUT_METHODS


def sent_by(sender: str, method: str | None) -> str:
    """How a note names a message: `the client's tools/call`, `the server's answer to tools/call`.

    Observations carry, for an answer, the method of the request it answers, so who sent it tells the
    two apart: a server answers the client's requests, a client answers the server's
    (`elicitation/create`, sampling, roots). Notifications and `ping`, which either side sends, are
    named by their method alone.
    """
    who = "client's" if sender == "client" else "server's"
    if method is None:
        return f"the {who} message"
    two_way = method.startswith("notifications/") or method == "ping"
    if not two_way and (method in INPUT_METHODS) == (sender == "client"):
        return f"the {who} answer to {method}"
    return f"the {who} {method}"


def intercept_note(obs: InterceptHeld | InterceptReleased) -> str | None:
    """The chain's note for an intercept: a message released (how, by whom, after how long), or one a
    rule picked that was not held and why; None for a message now held (its release notes it)."""
    what = sent_by(obs.sender, obs.method)
    if isinstance(obs, InterceptHeld):
        if obs.applied:
            return None
        return f"not held by intercept ({obs.rule}): {what}: {obs.detail or 'it could not be held'}"
    rule = obs.rule.partition(":")[0]
    done = _INTERCEPT_DONE.get(obs.decision, obs.decision)
    return f"{what} held by intercept {rule} for {obs.held_ms / 1000:.1f} s, {done} by {obs.by}"


IN_CLIENTS_PLACE: Final = ", sent in the client's place"
"""How the note of an answer the proxy sent a server in the client's place ends (`answered_for_client`)."""

INTERCEPT_BY: Final = "intercept:"
"""How the name of a message's maker starts when an intercept rule made it (`by_intercept`)."""


def by_intercept(rule: str) -> str:
    """The typed name of the intercept rule `rule` as the maker of a message in the client's place
    (`intercept:i2`): what code compares, where a note's words are for people."""
    return f"{INTERCEPT_BY}{rule}"


def answerer(by: str | None) -> str:
    """Who `by` (`by_intercept`) names, in words: `the proxy's intercept (i2)`, else `the proxy`."""
    rule = by.removeprefix(INTERCEPT_BY) if by is not None and by.startswith(INTERCEPT_BY) else ""
    return f"the proxy's intercept ({rule})" if rule else "the proxy"


def answered_for_client(by: str, dropped: bool) -> str:
    """The note on the answer an intercept (`by`) sent a server to its request, which no client saw:
    the one typed at the desk, or the error a drop makes (`dropped`). For people: code reads the
    message's `answered_by`."""
    whose = "a drop error from" if dropped else "typed at"
    return f"{whose} {answerer(by)}{IN_CLIENTS_PLACE}"


_INTERCEPT_DONE: Final = {
    "forward": "forwarded unchanged",
    "forward_edited": "forwarded edited",
    "drop": "dropped",
    "answer": "answered in its place",
}
"""How an intercept note words each decision."""
_FAULT_INJECTED: Final = "fault injected by the proxy: "
_CHANGED_BY_INTERCEPT: Final = re.compile(
    r" held by intercept \S+ for [\d.]+ s, (?:"
    + "|".join(re.escape(_INTERCEPT_DONE[d]) for d in ("forward_edited", "drop", "answer"))
    + ") by "
)


def proxy_changes(notes: Iterable[str]) -> list[str]:
    """The notes of a chain that say the proxy changed its traffic: a fault injected, or a held
    message forwarded edited, dropped or answered by an intercept (its recording is then not what the
    peers alone would have exchanged)."""
    return [n for n in notes if n.startswith(_FAULT_INJECTED) or _CHANGED_BY_INTERCEPT.search(n)]


def fault_note(obs: FaultInjected) -> str:
    """The chain's note for an injected fault: what the proxy did (or why it could not), and the rule."""
    what = f"{obs.fault} on {sent_by(obs.sender, obs.method)}"
    if not obs.applied:
        return f"fault not injected ({obs.rule}): {what}: {obs.detail or 'it cannot act on this message'}"
    detail = f" ({obs.detail})" if obs.detail else ""
    return f"{_FAULT_INJECTED}{what}{detail} [{obs.rule}]"


def origin_note(obs: OriginRewritten) -> str:
    """The chain's note for URLs the proxy moved between the upstream's origin and the client's (or a
    discovery document it left as it was, and why)."""
    if obs.problem is not None:
        return f"origin not rewritten for the client: {obs.problem}"
    side = "client" if obs.direction is Direction.TO_CLIENT else "server"
    return f"origin rewritten for the {side} by the proxy: {obs.changed}: {obs.was} -> {obs.now}"
