"""The admin API's fault rules: `GET/POST/DELETE /api/faults` (docs/faults.md, docs/admin-api.md).

Changing what the traffic gets is more than reading it: these paths answer only when the admin API
is safe to steer, that is with a token (which the admin API's own guard has checked by now) or on
loopback. Beyond loopback without a token they answer 403 naming what to do, whatever else lets the
listener run there.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
from aiohttp import web

from proxy.transport.admin_guard import is_loopback
from proxy.transport.admin_names import stray_keys
from proxy.transport.admin_refusals import Refusal
from proxy.transport.fault_control import FaultControl

MAX_RULE_BYTES = 4096
"""Largest POST body the fault paths read (a rule or a few of them)."""

RULE_KEYS = ("rule", "rules")
"""The keys a POST body takes; any other is refused, not ignored."""


class FaultRoutes:
    """The handlers of `/api/faults`, over the proxy's `FaultControl`."""

    def __init__(self, control: FaultControl, *, has_token: bool, host: Callable[[], str]) -> None:
        self.control = control
        self.has_token = has_token
        self.host = host
        """The host the admin API listens on (read when a request comes: it binds after this is made)."""

    def add(self, app: web.Application) -> None:
        """Route the fault paths on the admin application."""
        app.router.add_get("/api/faults", self.listing)
        app.router.add_post("/api/faults", self.create)
        app.router.add_delete("/api/faults", self.clear)
        app.router.add_delete("/api/faults/{rule_id}", self.delete)

    def _refusal(self) -> web.Response | None:
        """403 when the admin API listens beyond loopback without a token (anyone there could steer it)."""
        return forbidden_without_token(self.has_token, self.host(), "fault rules")

    async def listing(self, request: web.Request) -> web.StreamResponse:
        """The rules in force, each with its id and faults injected, and the counts by action."""
        refused = self._refusal()
        if refused is not None:
            return refused
        gate = self.control.gate
        return _json({"rules": gate.listing(), "seed": gate.seed, "injected": dict(gate.injected)})

    async def create(self, request: web.Request) -> web.StreamResponse:
        """Add rules: `{"rule": "..."}` or `{"rules": [...]}`; all or none, 400 naming the bad one."""
        refused = self._refusal()
        if refused is not None:
            return refused
        texts = await _rule_texts(request)
        if isinstance(texts, web.Response):
            return texts
        try:
            rules = self.control.add_texts(texts)
        except ValueError as exc:
            return _bad(str(exc))
        return _json({"rules": rules}, status=201)

    async def clear(self, request: web.Request) -> web.StreamResponse:
        """Take every rule out of force."""
        refused = self._refusal()
        if refused is not None:
            return refused
        return _json({"removed": self.control.clear()})

    async def delete(self, request: web.Request) -> web.StreamResponse:
        """Take one rule out of force; 404 naming the ids in force when it is not one of them."""
        refused = self._refusal()
        if refused is not None:
            return refused
        rule_id = request.match_info["rule_id"]
        if not self.control.remove(rule_id):
            known = ", ".join(rule["id"] for rule in self.control.gate.listing()) or "none"
            return _json(
                {"error": "not_found", "message": f"no fault rule {rule_id!r} (in force: {known})"},
                status=404,
            )
        return _json({"removed": 1})


async def _rule_texts(request: web.Request) -> list[str] | web.Response:
    """The rule texts of a POST body, or the 400 that says what the body should be."""
    shape = 'send JSON {"rule": "MATCH => ACTION [p=P] [count=N]"} or {"rules": [...]}'
    if request.content_length is not None and request.content_length > MAX_RULE_BYTES:
        return _bad(f"body over {MAX_RULE_BYTES} bytes; {shape}")
    data = await request.content.read(MAX_RULE_BYTES + 1)
    if len(data) > MAX_RULE_BYTES:
        return _bad(f"body over {MAX_RULE_BYTES} bytes; {shape}")
    try:
        body = orjson.loads(data)
    except orjson.JSONDecodeError:
        return _bad(f"the body is not JSON; {shape}")
    rules: Any = None
    if isinstance(body, dict):
        stray = stray_keys(body, RULE_KEYS, "POST /api/faults")
        if stray is not None:
            return _bad(f"{stray}; {shape}")
        if "rule" in body and "rules" in body:
            return _bad(f"give either rule or rules, not both; {shape}")
        rules = [body["rule"]] if "rule" in body else body.get("rules")
    if not isinstance(rules, list) or not rules or not all(isinstance(r, str) for r in rules):
        return _bad(shape)
    return rules


def forbidden_without_token(has_token: bool, host: str, what: str) -> web.Response | None:
    """403 naming what to do when paths that steer the traffic (`what`) are asked of an admin API that
    listens beyond loopback without a token; None when they may answer."""
    if has_token or is_loopback(host):
        return None
    return Refusal(
        403,
        "forbidden",
        "beyond_loopback",
        f"{what} are refused on an admin API that listens beyond loopback ({host}) "
        "without a token: set --admin-token (MCP_PROXY_ADMIN_TOKEN) or listen on 127.0.0.1",
    )


def _bad(message: str) -> web.Response:
    return _json({"error": "bad_request", "message": message}, status=400)


def _json(body: Any, *, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(body), status=status, content_type="application/json")
