"""What a draining proxy still serves: requests that carry on a conversation it is waiting for.

A SIGTERM drain keeps listening (a client's next step often needs a new connection: its answer to a
server's in-flight request, its DELETE, a GET stream's resumption) and refuses only new work, so a
load balancer's clients go elsewhere while the conversations under way end here. Which requests
carry on a conversation follows from the protocol (legacy Streamable HTTP sessions; SEP-2322 retries):

- a body of responses and notifications only: the answer to a server->client request (elicitation,
  sampling, roots; a bridged client's answers too), a cancellation, `notifications/initialized`;
- anything in a legacy session (`Mcp-Session-Id`) except `initialize`: the session is the legacy
  era's conversation, and its client may need a request of its own before it reports a result (the
  Python SDK lists tools to check a call's structured output against the tool's schema); its
  DELETE, its GET stream and that stream's resumption;
- a 2026-07-28 retry carrying `requestState` or `inputResponses`: the next round of a call whose
  earlier round was answered `input_required` (a parked continuation, on the modern-client bridge;
  a call passed through to a 2026-07-28 server, `proxy.flows.retry_waits`);
- a sessionless request that only reads the server's catalogue (`server/discover` and the list
  methods): with no session to tell one client's conversation from another's, these are what a
  client sends to finish a call (the SDK's output-schema check; a refresh after `-32020`), and each
  is a short read that never holds a drain.

Everything else is new work and gets 503 with `Retry-After`: an `initialize` (a new session), and a
sessionless call, read, prompt or listen that is no retry (each would begin a chain of its own). A
GET or DELETE naming no session belongs to no conversation either, unless it resumes a stream
(`Last-Event-ID`). Pure: the transport asks, and answers the refusal this module builds.
"""

from __future__ import annotations

from typing import Final

from proxy.framing.classify import Rejection, Route
from proxy.framing.http import header
from proxy.framing.status import gateway_error
from proxy.wire.headers import LAST_EVENT_ID
from proxy.wire.jsonrpc import Kind

_REQUEST = Kind.REQUEST
_NOTIFICATION = Kind.NOTIFICATION

RETRY_AFTER_S: Final = 1
"""Seconds a refused client is told to wait (`Retry-After`): by then its load balancer has seen
/readyz turn 503 and sends it to another instance."""

DRAINING_REASON: Final = "draining"
"""The refusal's reason, as exchange records and log lines show it."""

_RETRY_FIELDS: Final = ("requestState", "inputResponses")
"""The params of a 2026-07-28 retry (SEP-2322) that tie it to an earlier round."""

CATALOGUE_METHODS: Final = frozenset(
    {"server/discover", "tools/list", "prompts/list", "resources/list", "resources/templates/list"}
)
"""Requests that only read what the server offers: served while draining (see the module doc)."""


def continues_work(route: Route) -> bool:
    """Whether a draining proxy serves this request: it carries on a conversation already under way."""
    messages = route.body.messages
    if messages and all(msg.is_response or msg.kind is _NOTIFICATION for msg in messages):
        return True  # answers and notifications: the conversation's own traffic
    requests = [msg for msg in messages if msg.kind is _REQUEST]
    if any(msg.method == "initialize" for msg in requests):
        return False  # a new session
    if route.session_id is not None:
        return True  # the legacy session is the conversation: its requests, GET, DELETE
    if route.http_method == "GET":
        return header(route.headers, LAST_EVENT_ID) is not None  # a stream's resumption
    return bool(requests) and all(_finishes(msg.method, msg.params) for msg in requests)


def _finishes(method: str | None, params: dict[str, object]) -> bool:
    """A sessionless request that carries on or finishes a call: a retry, or a catalogue read."""
    return method in CATALOGUE_METHODS or any(params.get(name) is not None for name in _RETRY_FIELDS)


def draining_refusal(route: Route | None, grace: float) -> Rejection:
    """503 for new work while draining: the JSON-RPC error names the drain (the request's id when it
    has one); the transport adds `Retry-After` and `Connection: close`."""
    ident = route.request_id if route is not None else None
    text = (
        "the proxy is draining (shutting down after SIGTERM): it finishes the conversations under way "
        "and takes no new ones; retry against another instance"
    )
    data = {"reason": DRAINING_REASON, "retryAfter": RETRY_AFTER_S, "setting": "drain_grace", "grace": grace}
    status, body = gateway_error(503, ident, text, data)
    return Rejection(status, body, DRAINING_REASON)
