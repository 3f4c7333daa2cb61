"""Health and readiness answers, and the health-only listener that orchestrator probes use.

`/healthz` and `/readyz` reveal status only, so neither ever asks for the admin token: Docker's
HEALTHCHECK and Kubernetes' httpGet probes cannot send one. The admin API serves both paths from
`HealthAnswers`, and so does `HealthServer`, a listener of its own (`health` setting) that serves
nothing else and keeps answering when the admin API is off; a running proxy gives both the same
answers, so one cache serves them and each change of readiness is logged once. Nothing here shows
the upstream URL's credentials: the upstream is named by its origin (scheme, host, port), and every
reason text is scrubbed of the URL's userinfo and query before it leaves the process (the log line
included).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import unquote, urlsplit

import orjson
from aiohttp import web

from proxy.addresses import base_url, parse_host_port
from proxy.config import Settings
from proxy.framing.http import Upstream
from proxy.logs import get_logger
from proxy.transport.readiness import Readiness
from proxy.transport.routing import Router

OPEN_PATHS = frozenset({"/healthz", "/readyz"})
"""The paths answered without the admin token."""

CLOSE_TIMEOUT = 1.0
"""Seconds the health listener gives an open request to end when the proxy stops."""

MASK = "***"
"""What stands in for a secret in a reason text."""

MIN_BARE_SECRET = 4
"""Shortest password or query value masked on its own, outside the URL forms that name it."""

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class ListenError(OSError):
    """A listener of the proxy's own could not bind; `setting` names the setting the CLI blames."""

    setting = "listen"

    def __init__(self, address: str, exc: OSError) -> None:
        super().__init__(exc.errno, exc.strerror or str(exc))
        self.address = address


class HealthListenError(ListenError):
    """The health-only listener could not bind its address."""

    setting = "health"


STDIO_SHOWN = "stdio"
"""How a health answer names a stdio upstream: not by its command, which the probe's caller (maybe
beyond loopback, with no token) has no business reading."""


def scrub(text: str, upstream: Upstream) -> str:
    """`text` with the upstream URL shown as its origin and its userinfo, password and query masked."""
    parts = urlsplit(upstream.url)
    if upstream.scheme == "stdio":  # its command line may hold what masking cannot tell is a secret
        shown = upstream.url.removeprefix("stdio:")
        return text.replace(upstream.url, STDIO_SHOWN).replace(shown, STDIO_SHOWN) if shown else text
    text = text.replace(upstream.url, upstream.origin)
    userinfo, at, _ = parts.netloc.rpartition("@")
    pairs = [(userinfo + at, MASK + at), ("?" + parts.query, "?" + MASK), ("#" + parts.fragment, "#" + MASK)]
    bare = [parts.query, *upstream.secrets]
    # A secret of a few characters could match innocent words; the forms above still catch it.
    pairs += [(s, MASK) for secret in bare for s in {secret, unquote(secret)} if len(s) >= MIN_BARE_SECRET]
    for secret, mask in pairs:
        if len(secret) > 1:
            text = text.replace(secret, mask)
    return text


def json_response(body: Any, *, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    """A JSON answer, as every health and admin endpoint gives."""
    data = orjson.dumps(body)
    return web.Response(body=data, status=status, content_type="application/json", headers=headers)


class HealthAnswers:
    """`/healthz` and `/readyz` over one cached readiness check."""

    def __init__(self, readiness: Readiness, upstream: Upstream) -> None:
        self.readiness = readiness
        self.upstream = upstream
        self._said: bool | None = None
        """Whether the last verdict logged was ready (None: none logged yet)."""

    @classmethod
    def running(
        cls, router: Router, settings: Settings, draining: Callable[[], bool], *, ttl: float = 2.0
    ) -> HealthAnswers:
        """The answers for a running proxy: readiness from its router (and upstream) and drain flag."""
        readiness = Readiness(
            router.upstream,
            router,
            bridge_off=settings.bridge == "off",
            draining=draining,
            timeout=min(settings.upstream_connect_timeout, 2.0),
            ttl=ttl,
        )
        return cls(readiness, router.upstream)

    def add_routes(self, app: web.Application) -> None:
        """Route GET (and HEAD) /healthz and /readyz to these answers."""
        app.router.add_get("/healthz", self.healthz)
        app.router.add_get("/readyz", self.readyz)

    async def healthz(self, request: web.Request) -> web.StreamResponse:
        """200 while the process serves requests."""
        return json_response({"status": "ok"})

    async def readyz(self, request: web.Request) -> web.StreamResponse:
        """200 when the upstream is reachable and its era known; 503 with the reason otherwise."""
        verdict = await self.readiness.check()
        shown = STDIO_SHOWN if self.upstream.scheme == "stdio" else self.upstream.origin
        body = {"upstream": shown, "upstream_era": verdict.upstream_era}
        reason = None if verdict.ready else scrub(verdict.reason, self.upstream)
        self._say(verdict.ready, reason)
        if reason is None:
            return json_response({"status": "ready", **body})
        return json_response({"status": "not_ready", "reason": reason, **body}, status=503)

    def _say(self, ready: bool, reason: str | None) -> None:
        """Log the first verdict and each change between ready and not ready, once: the log then says
        when and why the kubelet stopped or started sending traffic, however often it asks."""
        if ready is not self._said:
            self._said = ready
            get_logger().info("readiness", ready=ready, reason=reason)


class HealthServer:
    """A listener serving only `/healthz` and `/readyz`, with no token, for probes."""

    def __init__(self, answers: HealthAnswers, address: str) -> None:
        self.answers = answers
        self.address = address
        self._runner: web.AppRunner | None = None
        self.host = ""
        self.port = 0

    @property
    def url(self) -> str:
        """The listener's base URL (bound port)."""
        return base_url(self.host, self.port)

    def app(self) -> web.Application:
        """The health aiohttp application: two routes, JSON 404 for anything else."""
        app = web.Application(middlewares=[_only_health])
        self.answers.add_routes(app)
        return app

    async def start(self) -> None:
        """Bind the listener; HealthListenError when the address cannot be had."""
        host, port = parse_host_port(self.address)
        self._runner = web.AppRunner(
            self.app(), handler_cancellation=True, access_log=None, shutdown_timeout=CLOSE_TIMEOUT
        )
        await self._runner.setup()
        try:
            await web.TCPSite(self._runner, host, port, reuse_address=True).start()
        except OSError as exc:
            raise HealthListenError(self.address, exc) from exc
        self.host, self.port = host, self._runner.addresses[0][1]

    async def stop(self) -> None:
        """Close the listener."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


@web.middleware
async def _only_health(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        message = f"{request.method} {request.path}: this listener serves only GET /healthz and /readyz"
        kept = {k: v for k, v in exc.headers.items() if k.lower() == "allow"}
        error = exc.reason.lower().replace(" ", "_")
        return json_response({"error": error, "message": message}, status=exc.status, headers=kept)
