"""The rule desk over a proxy's admin API (`mcp-proxy tui --attach URL`): `/api/faults`, `/api/intercepts`.

httpx with the admin token as a bearer (never through an environment proxy to a loopback URL:
`ui.admin_client`), every request bounded (`TIMEOUT`), and every refusal turned
into a `DeskError` carrying the API's own reason (its JSON `message`), so the screens show what the
proxy said: why a rule does not parse, why an edit is not valid JSON-RPC, that a message was already
released. Learning of new held messages uses the API's long poll (`/api/intercepts/wait`); a proxy
without it is read every `POLL_SECONDS` instead.
"""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import quote

import httpx

from ui.admin_client import admin_client
from ui.desk import Decision, DeskError, FaultRule, InterceptRule, Intercepts

TIMEOUT = httpx.Timeout(10.0)
"""Bound on each admin request (the long poll adds its own wait on top)."""
POLL_SECONDS = 1.0
"""How often the held messages are read when the proxy has no long poll."""
MAX_WAIT = 30.0
"""Longest long poll asked for."""


class HttpDesk:
    """Fault and intercept rules, and held messages, of the proxy whose admin API is at `url`."""

    def __init__(
        self, url: str, token: str | None = None, *, transport: httpx.AsyncBaseTransport | None = None
    ) -> None:
        self.base = url.rstrip("/")
        self.description = self.base
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._client = admin_client(
            self.base, base_url=self.base, headers=headers, timeout=TIMEOUT, transport=transport
        )
        self._long_poll = True

    async def close(self) -> None:
        """Close the connection pool."""
        await self._client.aclose()

    async def _call(self, method: str, path: str, *, body: Any = None, wait: float | None = None) -> Any:
        """One admin request; its JSON body, or DeskError naming why not."""
        bound = TIMEOUT if wait is None else httpx.Timeout(10.0, read=wait + 10.0)
        try:
            response = await self._client.request(method, path, json=body, timeout=bound)
        except httpx.TimeoutException as exc:
            raise DeskError(f"the admin API at {self.base} did not answer in time") from exc
        except httpx.HTTPError as exc:
            reason = str(exc) or type(exc).__name__
            raise DeskError(f"cannot reach the admin API at {self.base}: {reason}") from exc
        if response.status_code >= 400:
            raise DeskError(_reason(response), response.status_code)
        try:
            return response.json() if response.content else {}
        except ValueError as exc:
            raise DeskError(f"the admin API answered {path} with something that is not JSON") from exc

    # -- fault rules --------------------------------------------------------------------------

    async def fault_rules(self) -> list[FaultRule]:
        """`GET /api/faults`."""
        data = await self._call("GET", "/api/faults")
        return [FaultRule.from_json(rule) for rule in data.get("rules") or ()]

    async def add_fault(self, rule: str) -> FaultRule:
        """`POST /api/faults` with one rule."""
        data = await self._call("POST", "/api/faults", body={"rule": rule})
        (added,) = data["rules"]
        return FaultRule.from_json(added)

    async def delete_fault(self, rule_id: str) -> None:
        """`DELETE /api/faults/{id}`."""
        await self._call("DELETE", f"/api/faults/{quote(rule_id, safe='')}")

    # -- intercepts ---------------------------------------------------------------------------

    async def intercepts(self) -> Intercepts:
        """`GET /api/intercepts`."""
        return Intercepts.from_json(await self._call("GET", "/api/intercepts"))

    async def add_intercept(self, rule: str, hold_for: str | None = None) -> InterceptRule:
        """`POST /api/intercepts`."""
        body: dict[str, Any] = {"rule": rule}
        if hold_for:
            body["timeout"] = hold_for
        data = await self._call("POST", "/api/intercepts", body=body)
        if isinstance(data.get("rule"), dict):  # {"rule": {...}} or the rule itself
            data = data["rule"]
        return InterceptRule.from_json(data)

    async def delete_intercept(self, rule_id: str) -> None:
        """`DELETE /api/intercepts/{id}`."""
        await self._call("DELETE", f"/api/intercepts/{quote(rule_id, safe='')}")

    async def decide(self, held_id: str, decision: Decision) -> None:
        """`POST /api/intercepts/held/{id}`."""
        await self._call("POST", f"/api/intercepts/held/{quote(held_id, safe='')}", body=decision.body())

    async def wait_held(self, after: str | None, seconds: float) -> None:
        """The API's long poll for a newly held message; a plain pause where the proxy has none."""
        seconds = max(0.0, min(seconds, MAX_WAIT))
        if self._long_poll:
            params = f"?timeout={seconds:g}" + (f"&after={quote(after, safe='')}" if after else "")
            try:
                await self._call("GET", "/api/intercepts/wait" + params, wait=seconds)
                return
            except DeskError as exc:
                if exc.status not in (404, 405):
                    raise
                self._long_poll = False
        await asyncio.sleep(min(seconds, POLL_SECONDS))


def _reason(response: httpx.Response) -> str:
    """The API's own reason for a refusal (its JSON `message`), with the status."""
    status = f"HTTP {response.status_code}"
    try:
        data = response.json()
    except ValueError:
        data = None
    message = data.get("message") if isinstance(data, dict) else None
    if isinstance(message, str) and message:
        return f"{message} ({status})"
    if response.status_code in (401, 403):
        return f"the admin API refused this token ({status})"
    return f"{response.request.method} {response.request.url.path}: {status}"
