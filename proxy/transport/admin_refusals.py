"""The admin API's refusals of who asks, logged and counted: a 401 for the token, a 403 or 415 from the
web-page guard or the steering paths, a 400 for a request it could not read as HTTP/1.1.

Someone probing the admin port, or a web page trying it from the user's browser, is what on-call wants
to see, so each such refusal writes a warning naming the caller's address, the method, the path
(never its query, where a caller may put a credential, nor the `Authorization` it sent) and why. A
flood of them is one line a second per why (`proxy.engine.flood_lines`), the next line carrying
`also_unlogged`, and /metrics counts every one by why.

The code that refuses answers a `Refusal`, which carries the why, and the admin API's outermost
middleware records what it sent (`AdminRefusals.answered`), so the refusing code needs no logger.
"""

from __future__ import annotations

import time
from collections import Counter

import orjson
from aiohttp import web

from proxy.engine.flood_lines import FloodLines
from proxy.logs import get_logger

UNAUTHORIZED_WHYS = ("missing", "not_bearer", "wrong_token")
"""Why a request was refused 401 (`mcp_proxy_admin_unauthorized_total{why}`): no `Authorization`,
another scheme than `Bearer`, or a bearer token that is not the admin token."""

REFUSED_WHYS = ("foreign_host", "foreign_origin", "beyond_loopback", "not_json", "unreadable")
"""Why a request was refused before an endpoint judged it (`mcp_proxy_admin_refused_total{why}`): a
`Host` that is not loopback without a token (403), an `Origin` that is not the admin API's own (403),
a path that steers the traffic asked beyond loopback without a token (403), a body that changes state
and is not JSON (415), a request not read as HTTP/1.1 (400: a URL or header line too long, a
malformed head; `proxy.transport.admin_runner`)."""

PATH_SHOWN = 200
"""Characters of a refused request's path a line keeps: a prober must not make a long line."""


class Refusal(web.Response):
    """A JSON refusal of who asked, carrying its why for `AdminRefusals.answered`."""

    def __init__(self, status: int, error: str, why: str, message: str) -> None:
        body = orjson.dumps({"error": error, "message": message})
        super().__init__(body=body, status=status, content_type="application/json")
        self.why = why
        """One of `REFUSED_WHYS`."""


class AdminRefusals:
    """Counts and log lines of the requests one admin API refused for who asked."""

    def __init__(self) -> None:
        self.unauthorized: Counter[str] = Counter()
        """Requests refused 401 for the token, by why (`UNAUTHORIZED_WHYS`)."""
        self.refused: Counter[str] = Counter()
        """Requests refused 403, 415 or unread, by why (`REFUSED_WHYS`)."""
        self._lines = FloodLines()

    def unauthorized_request(self, request: web.BaseRequest, why: str) -> None:
        """A 401 for the token: counted, and logged as `admin_unauthorized` when its line is due."""
        self.unauthorized[why] += 1
        self._say("admin_unauthorized", request, 401, why)

    def answered(self, request: web.BaseRequest, response: web.StreamResponse) -> None:
        """Record `response` when it is a marked refusal; any other answer is left alone."""
        if isinstance(response, Refusal):
            self.refused_request(request, response.status, response.why)

    def refused_request(self, request: web.BaseRequest, status: int, why: str) -> None:
        """A 403 or 415 refusal: counted, and logged as `admin_refused` when its line is due."""
        self.refused[why] += 1
        self._say("admin_refused", request, status, why)

    def unreadable_request(self, request: web.BaseRequest, status: int, reason: str) -> None:
        """A request not read as HTTP/1.1: counted, and logged as `admin_refused` (with the reason, and
        no method or path: none was read) when its line is due."""
        self.refused["unreadable"] += 1
        self._say("admin_refused", request, status, "unreadable", reason=reason, read=False)

    def _say(
        self, event: str, request: web.BaseRequest, status: int, why: str, reason: str = "", read: bool = True
    ) -> None:
        also = self._lines.due(why, time.monotonic())
        if also is None:
            return
        fields: dict[str, object] = {"peer": request.remote or "unknown"}
        if read:
            path = request.path
            fields["method"] = request.method[:PATH_SHOWN]
            fields["path"] = path if len(path) <= PATH_SHOWN else path[:PATH_SHOWN] + "..."
        fields.update(status=status, why=why)
        if reason:
            fields["reason"] = reason
        if also:
            fields["also_unlogged"] = also
        get_logger().warning(event, **fields)
