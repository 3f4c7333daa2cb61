"""The admin API's intercepts: `/api/intercepts` (docs/intercept.md, docs/admin-api.md).

Rules, held messages, decisions and a long poll for newly held messages, over `InterceptControl`
(the same operations a TUI in this process calls directly). Like `/api/faults` these steer the
traffic, so beyond loopback without a token they answer 403 naming what to do.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from aiohttp import web

from proxy.transport.admin_faults import forbidden_without_token
from proxy.transport.admin_names import stray_keys
from proxy.transport.admin_query import known_only
from proxy.transport.intercept_control import InterceptControl
from proxy.transport.intercept_desk import MAX_WAIT_S, InterceptError

MAX_DECISION_BYTES = 64 * 1024 * 1024
"""Largest POST body the intercept paths read (an edited message is bounded by max_body_bytes)."""

WAIT_PATH = "/api/intercepts/wait"
"""The long poll, the one intercept path that takes query parameters."""

WAIT_PARAMETERS = frozenset({"after", "timeout"})
"""The query names the long poll takes; any other is refused, not ignored."""

RULE_KEYS = ("rule", "timeout")
"""The keys a new rule's body takes; any other is refused, not ignored (a misspelled `timeout`
would give the rule the default one)."""

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class InterceptRoutes:
    """The handlers of `/api/intercepts`, over the proxy's `InterceptControl`."""

    def __init__(self, control: InterceptControl, *, has_token: bool, host: Callable[[], str]) -> None:
        self.control = control
        self.has_token = has_token
        self.host = host

    def add(self, app: web.Application) -> None:
        """Route the intercept paths on the admin application."""
        guard = self._guarded
        app.router.add_get("/api/intercepts", guard(self.listing))
        app.router.add_post("/api/intercepts", guard(self.create))
        app.router.add_delete("/api/intercepts", guard(self.clear))
        app.router.add_get(WAIT_PATH, guard(self.wait))
        app.router.add_post("/api/intercepts/held/{held_id}", guard(self.decide))
        app.router.add_delete("/api/intercepts/{rule_id}", guard(self.delete))

    def _guarded(self, handler: Handler) -> Handler:
        """403 beyond loopback without a token; InterceptError answered with its status and reason."""

        async def guarded(request: web.Request) -> web.StreamResponse:
            refused = forbidden_without_token(self.has_token, self.host(), "intercepts")
            if refused is not None:
                return refused
            try:
                return await handler(request)
            except InterceptError as exc:
                error = {400: "bad_request", 404: "not_found", 409: "conflict"}.get(exc.status, "error")
                return _json({"error": error, "message": exc.message}, status=exc.status)

        return guarded

    async def listing(self, request: web.Request) -> web.StreamResponse:
        """The rules in force and the messages held now (redacted)."""
        return _json(self.control.listing())

    async def create(self, request: web.Request) -> web.StreamResponse:
        """Add a rule: `{"rule": "MATCH", "timeout": "30s"}` (timeout optional); 201 with the rule."""
        body = await _body(request, 'send JSON {"rule": "MATCH", "timeout": "30s"} (timeout optional)')
        stray = stray_keys(body, RULE_KEYS, "POST /api/intercepts")
        if stray is not None:
            raise InterceptError(400, stray)
        rule, timeout = body.get("rule"), body.get("timeout")
        if not isinstance(rule, str) or not (timeout is None or isinstance(timeout, str | int | float)):
            raise InterceptError(400, 'send JSON {"rule": "MATCH", "timeout": "30s"} (timeout optional)')
        return _json(self.control.add(rule, timeout), status=201)

    async def clear(self, request: web.Request) -> web.StreamResponse:
        """Take every rule out of force; held messages go on unchanged."""
        return _json(self.control.delete_all())

    async def delete(self, request: web.Request) -> web.StreamResponse:
        """Take one rule out of force; its held messages go on unchanged."""
        return _json(self.control.delete(request.match_info["rule_id"]))

    async def decide(self, request: web.Request) -> web.StreamResponse:
        """Release a held message: forward (edited or not), drop, or answer."""
        body = await _body(request, 'send JSON {"decision": "forward" | "drop" | "answer", ...}')
        return _json(self.control.decide(request.match_info["held_id"], body))

    async def wait(self, request: web.Request) -> web.StreamResponse:
        """Long poll: messages held after `after` (`h3`), waiting up to `timeout` seconds for one."""
        known_only(request.query, WAIT_PARAMETERS)
        text = request.query.get("timeout", "10")
        try:
            timeout = float(text)
        except ValueError:
            timeout = -1.0
        if not 0 <= timeout <= MAX_WAIT_S:
            raise InterceptError(400, f"timeout is seconds from 0 to {MAX_WAIT_S:g}, got {text!r}")
        return _json(await self.control.wait(request.query.get("after"), timeout))


async def _body(request: web.Request, shape: str) -> dict[str, Any]:
    """The JSON object of a POST body, or InterceptError(400) saying what to send."""
    if request.content_length is not None and request.content_length > MAX_DECISION_BYTES:
        raise InterceptError(400, f"body over {MAX_DECISION_BYTES} bytes; {shape}")
    data = await request.content.read(MAX_DECISION_BYTES + 1)
    if len(data) > MAX_DECISION_BYTES:
        raise InterceptError(400, f"body over {MAX_DECISION_BYTES} bytes; {shape}")
    try:
        body = orjson.loads(data)
    except orjson.JSONDecodeError:
        raise InterceptError(400, f"the body is not JSON; {shape}") from None
    if not isinstance(body, dict):
        raise InterceptError(400, shape)
    return body


def _json(body: Any, *, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(body), status=status, content_type="application/json")
