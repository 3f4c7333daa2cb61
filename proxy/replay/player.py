"""Plays one recorded chain's client side again, in the captured client's era, and answers questions.

A legacy client's call is POSTed in its session; a question the server sends in flight on the call's
stream is answered by POSTing the recorded answer to the same question under the new question's id.
A 2026-07-28 client's call is POSTed; an `input_required` result is answered by retrying the call
(the recorded retry's id and headers where there is one) with `inputResponses` keyed by the new
result's own keys, each the recorded answer to that entry's question, and its `requestState` echoed.
A question with no recorded match goes to `ask` (the user, with `--ask`) or fails the chain naming
it and the nearest recorded question; a legacy server waiting on it is answered with an error so
the call ends. A 2026-07-28 client that got `input_required` and sent no retry after it stopped
there: the replay stops after the same round (or at a question that client never answered), and what
it got is compared. A legacy server waiting in flight on a question the recording never answered
cannot be left waiting as that client left it: it is answered with an error and the chain fails
saying so.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from proxy.record.mock_table import shown
from proxy.record.replay_plan import STAND_IN, AnswerMiss, ChainPlan, Sent, headers_to_send, redacted_paths
from proxy.replay.http import ReplayHttp, Reply

AskUser = Callable[[ChainPlan, str, Any], Awaitable[Any]]
"""Asks the user for the answer to a question the recording has none for (`--ask`); None declines."""

MAX_ROUNDS: Final = 10
"""`input_required` rounds one replayed call may take (the SDKs' default bound)."""

NO_ANSWER: Final = -32603
"""The code of the error a legacy server gets for a question the replay cannot answer."""

REFUSALS: Final = {401: "Unauthorized", 403: "Forbidden"}
"""HTTP statuses a server refuses a caller with: the credential given is wrong, expired or missing."""


class ReplayFailed(Exception):
    """A chain that cannot be replayed (or finished): the text says why and what to do."""


class Refused(ReplayFailed):
    """The server refused the replay's caller (HTTP 401 or 403): the text names the `--header` to give."""


@dataclass
class Played:
    """What playing a chain gave: the first request's id, a new session, a question unanswered, and
    the question where the replay stopped as the recording's client did."""

    request_id: Any = None
    session: str | None = None
    unanswered: str | None = None
    stopped: str | None = None
    """A question the recording's client never answered (`input_required` it did not retry after):
    the replay stopped after that round too, so its chain waits on the client as the recording's did."""


class Player:
    """Plays chains through one endpoint (the in-process proxy's)."""

    def __init__(
        self, http: ReplayHttp, given: Mapping[str, str], ask: AskUser | None = None, *, stdio: bool = False
    ) -> None:
        self.http = http
        self.given = dict(given)
        """Headers the user gave (`--header`): they replace recorded ones, redacted ones included."""
        self.ask = ask
        self.stdio = stdio
        """The server is a stdio command (`--upstream-cmd`): it reads no HTTP header, so a recorded
        credential held redacted is left out instead of asked for."""

    def headers(self, sent: Sent, session: str | None) -> dict[str, str]:
        """The headers to send for a recorded request; fails naming redacted ones nobody gave (a
        stdio server reads none, so for it they are left out)."""
        headers, missing = headers_to_send(sent.headers, self.given)
        if missing and not self.stdio:
            names = ", ".join(missing)
            raise ReplayFailed(
                f"the capture holds {names} redacted: give the value to send with "
                f"--header '{missing[0]}: VALUE'"
            )
        if session is not None:
            headers["Mcp-Session-Id"] = session
        return headers

    async def refused(self, plan: ChainPlan, sent: Sent, reply: Reply) -> None:
        """Fail the chain saying the server refused the caller, and which `--header` to give, when it
        answered 401 or 403 where the recording's server did not (a refusal recorded is compared)."""
        if reply.status not in REFUSALS or _recorded_refusal(plan):
            return
        names = [n for n in sent.headers if STAND_IN.search(sent.headers[n])] or ["Authorization"]
        given = [n for n in self.given if n.lower() in {m.lower() for m in names}]
        if given:
            why = f"the {given[0]} given with --header is not one it accepts: give another"
        else:
            why = "it wants a credential the recording's request did not carry: give it"
        said = await reply.opening()
        quoted = f" (it said {said!r})" if said else ""
        raise Refused(
            f"the server refused it with HTTP {reply.status} {REFUSALS[reply.status]}{quoted}: {why} "
            f"with --header '{names[0]}: VALUE'"
        )

    async def play(self, plan: ChainPlan, session: str | None) -> Played:
        """Send the chain's requests and answer its questions; the new chain is the proxy's to tell."""
        first = plan.first
        if first is None or plan.problem:
            raise ReplayFailed(plan.problem or "nothing to send")
        hidden = redacted_paths(first.body.get("params"), "params")
        if hidden:
            raise ReplayFailed(
                f"{hidden[0]} holds a value redacted in the capture, which cannot be sent again "
                "(the capture keeps only its length and hash)"
            )
        if plan.era == "modern":
            played = await self._modern(plan, first)
        else:
            played = await self._legacy(plan, first, session)
        for note in plan.notes:
            await self._send(note.body, self.headers(note, played.session or session))
        return played

    async def _legacy(self, plan: ChainPlan, first: Sent, session: str | None) -> Played:
        headers = self.headers(first, session)
        played = Played(request_id=first.body.get("id"))
        async with self.http.post(first.body, headers) as reply:
            await self.refused(plan, first, reply)
            played.session = reply.headers.get("Mcp-Session-Id")
            answering = {**headers, "Mcp-Session-Id": played.session} if played.session else headers
            async for message in reply.messages():
                if "method" in message and "id" in message:
                    await self._answer_in_flight(plan, message, answering, played)
                elif message.get("id") == played.request_id and ("result" in message or "error" in message):
                    break
        return played

    async def _answer_in_flight(
        self, plan: ChainPlan, question: dict[str, Any], headers: dict[str, str], played: Played
    ) -> None:
        method, params = str(question["method"]), question.get("params")
        answer = await self._recorded(plan, method, params, played)
        if played.stopped is not None:  # nothing can leave a legacy server's call waiting as the client did
            played.stopped = None
            played.unanswered = played.unanswered or (
                f"the recording's client never answered {shown(method, params)} (it stopped there); a "
                "legacy server waits on it in flight, so the replay answered it with an error"
            )
        reply: dict[str, Any] = {"jsonrpc": "2.0", "id": question["id"]}
        if answer is None:
            reply["error"] = {"code": NO_ANSWER, "message": f"mcp-proxy replay: {played.unanswered}"}
        elif isinstance(answer, dict) and set(answer) == {"error"}:
            reply["error"] = answer["error"]  # the client refused it when recorded
        else:
            reply["result"] = answer
        await self._send(reply, headers)

    async def _recorded(self, plan: ChainPlan, method: str, params: Any, played: Played) -> Any:
        found = plan.answers.take(method, params)
        if not isinstance(found, AnswerMiss):
            if found.answer is None:
                played.stopped = played.stopped or shown(found.method, found.params)
            return found.answer
        if self.ask is not None:
            given = await self.ask(plan, method, params)
            if given is not None:
                return given
        played.unanswered = played.unanswered or found.text()
        return None

    async def _modern(self, plan: ChainPlan, first: Sent) -> Played:
        played = Played(request_id=first.body.get("id"))
        sent = first
        body = first.body
        for round_ in range(MAX_ROUNDS + 1):
            final = await self._final(plan, sent, body)
            result = final.get("result") if final else None
            if not isinstance(result, dict) or result.get("resultType") != "input_required":
                return played
            if plan.stopped is not None and round_ >= len(plan.retries):  # the recording retried no more
                played.stopped = plan.stopped
                return played
            if round_ == MAX_ROUNDS:
                raise ReplayFailed(f"the server asked for input more than {MAX_ROUNDS} times")
            responses = await self._responses(plan, result.get("inputRequests"), played)
            if responses is None:
                return played
            sent = plan.retries[round_] if round_ < len(plan.retries) else first
            body = _retry(sent.body, responses, result.get("requestState"), round_)
        return played

    async def _responses(self, plan: ChainPlan, requests: Any, played: Played) -> dict[str, Any] | None:
        responses: dict[str, Any] = {}
        for key, entry in (requests if isinstance(requests, dict) else {}).items():
            entry = entry if isinstance(entry, dict) else {}
            answer = await self._recorded(plan, str(entry.get("method")), entry.get("params"), played)
            if answer is None:  # unanswered, or where the recording's client stopped: no retry
                return None
            responses[str(key)] = answer
        return responses

    async def _final(self, plan: ChainPlan, sent: Sent, body: dict[str, Any]) -> dict[str, Any] | None:
        """The response to `body` (`sent` as it was sent, or edited: the last message of its reply with
        its id)."""
        final = None
        async with self.http.post(body, self.headers(sent, None)) as reply:
            await self.refused(plan, sent, reply)
            async for message in reply.messages():
                if message.get("id") == body.get("id") and ("result" in message or "error" in message):
                    final = message
        return final

    async def _send(self, body: dict[str, Any], headers: dict[str, str]) -> None:
        async with self.http.post(body, headers) as reply:
            async for _ in reply.messages():
                pass

    async def end_session(self, handshake: Sent, session: str) -> int:
        """DELETE a legacy session the replay opened; returns the status."""
        return await self.http.delete(self.headers(handshake, session))


def _recorded_refusal(plan: ChainPlan) -> bool:
    """Whether the recording's server refused the chain's caller too (then a refusal is what it did)."""
    return any(r.http is not None and r.http.status in REFUSALS for r in plan.records)


def _retry(recorded: dict[str, Any], responses: dict[str, Any], state: Any, round_: int) -> dict[str, Any]:
    """The retry of a call: the recorded retry's body (or the call's, under a new id) with these answers."""
    params = dict(recorded.get("params") or {})
    params["inputResponses"] = responses
    if isinstance(state, str):
        params["requestState"] = state
    else:
        params.pop("requestState", None)
    body = {**recorded, "params": params}
    if "inputResponses" not in (recorded.get("params") or {}):  # the call's own body: a fresh id
        body["id"] = f"replay-retry-{round_ + 1}-{recorded.get('id')}"
    return body
