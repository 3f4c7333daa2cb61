"""The admin API: health, readiness, Prometheus metrics, recent chains and the live feed.

It runs on its own aiohttp listener (`settings.admin`), apart from the MCP traffic, and only reads:
the chain store, the bus (through its own subscriptions), the router's era verdict and the bridges'
tables. With `admin_token` set, every request (unknown paths included) must carry
`Authorization: Bearer <token>`, compared in constant time; otherwise it gets 401, before anything
else is judged. A GET or HEAD of the two status paths, /healthz and /readyz, is the exception:
probes cannot send a token and those answers reveal nothing else (`proxy.transport.health`).
Configuration already refuses an admin listener beyond loopback without a token; on loopback,
`proxy.transport.admin_guard` refuses what a web page in the user's browser could send (a foreign
`Host` or `Origin`, a state change whose body is not JSON).
docs/admin-api.md is the reference for every endpoint and for the feed protocol.
"""

from __future__ import annotations

import errno
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web
from multidict import MultiMapping

from proxy.addresses import base_url, parse_host_port
from proxy.config import Settings
from proxy.flows.bus import EventBus
from proxy.flows.events import ChainSummary, Mode, ProxyInfo
from proxy.flows.filters import PARAMETERS, ChainFilter, FilterError
from proxy.flows.redact import Redactor
from proxy.flows.sink import ObservationSink
from proxy.flows.store import Chain, ChainStore
from proxy.logs import get_logger
from proxy.record.har import upstream_url
from proxy.transport.admin_export import build_queued, har_pieces, json_pieces, ndjson_pieces, stream_export
from proxy.transport.admin_faults import FaultRoutes
from proxy.transport.admin_guard import browser_guard, token_refusal
from proxy.transport.admin_intercepts import WAIT_PATH, InterceptRoutes
from proxy.transport.admin_query import BadQuery, int_param, known_only, parameterless_unless
from proxy.transport.admin_refusals import AdminRefusals
from proxy.transport.admin_runner import AdminRunner
from proxy.transport.fault_control import FaultControl, FaultMetrics
from proxy.transport.feed import FeedSource, serve_feed
from proxy.transport.health import OPEN_PATHS, HealthAnswers, ListenError
from proxy.transport.intercept_control import InterceptControl, InterceptMetrics
from proxy.transport.metrics import CONTENT_TYPE, ProxyMetrics, continuations_of
from proxy.transport.response_budget import ResponseBudget
from proxy.transport.response_metrics import ResponseBudgetMetrics
from proxy.transport.routing import Router

DEFAULT_HISTORY = 200
"""Chains the feed replays before going live when the client does not say (`?history=N`)."""

DEFAULT_LIMIT = 100
"""Chains `/api/chains` returns when the client does not say (`?limit=N`)."""

CHAIN_PARAMETERS = frozenset({"limit", *PARAMETERS})
"""The query names `/api/chains` and the exports take; any other is refused, not ignored."""

FEED_PARAMETERS = frozenset({"history"})
"""The query names `/api/feed` takes; any other is refused, not ignored."""

QUERY_PATHS = frozenset(
    {"/api/chains", "/api/export.har", "/api/export.json", "/api/export.ndjson", "/api/feed", WAIT_PATH}
)
"""The paths whose handlers take query parameters and judge their names; every other takes none."""

CLOSE_TIMEOUT = 1.0
"""Seconds the admin listener gives open requests (feeds) to end when the proxy stops."""

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class AdminListenError(ListenError):
    """The admin listener could not bind; the CLI blames the `admin` setting, not `listen`."""

    setting = "admin"


@dataclass
class AdminContext:
    """What the admin API reads from the running proxy."""

    settings: Settings
    store: ChainStore
    observations: ObservationSink
    """Where observations go: the metrics listen to it, and reads build what waits in it."""
    bus: EventBus
    redactor: Redactor
    router: Router
    info: Callable[[], ProxyInfo]
    draining: Callable[[], bool]
    open_streams: Callable[[], int]
    """SSE response streams being relayed now."""
    open_exchanges: Callable[[], int]
    """Client HTTP exchanges in flight."""
    otlp_spans: Callable[[], dict[str, int]] = dict
    """Spans the OTLP exporter sent and dropped, by reason (empty while tracing is off)."""
    client_timeouts: Callable[[], dict[str, int]] = dict
    """Requests refused 408 to a slow client, by the setting whose wait ran out."""
    client_unreadable: Callable[[], dict[str, int]] = dict
    """Requests the proxy could not read as HTTP/1.1, by cause (`proxy.transport.unreadable`)."""
    client_connections: Callable[[], tuple[int, dict[str, int]]] = lambda: (0, {})
    """Client connections open now, and those refused past `max_client_connections`, by how."""
    client_streams_refused: Callable[[], dict[str, int]] = dict
    """Client streams refused past a bound on them, by the setting (`FrontServer.streams_refused`)."""
    capture_failed: Callable[[], bool | None] = lambda: None
    """Whether writing the capture failed (None: no capture is written)."""
    faults: FaultControl | None = None
    """The fault rules in force (`/api/faults`; their counts in /metrics)."""
    intercepts: InterceptControl | None = None
    """The intercept rules and held messages (`/api/intercepts`; their counts in /metrics)."""
    responses: ResponseBudget | None = None
    """The response bytes held across all clients (`max_response_bytes_in_flight`; in /metrics)."""


class AdminServer:
    """The admin listener of one proxy, with its metrics subscription and feed clients."""

    def __init__(self, ctx: AdminContext, *, keepalive: float = 15.0, ready_ttl: float = 2.0) -> None:
        settings = ctx.settings
        self.ctx = ctx
        self.token = settings.admin_token.get_secret_value() if settings.admin_token else None
        self.refusals = AdminRefusals()
        """The requests refused for who asked (401, 403, 415), counted and logged by why."""
        self.feed = FeedSource(
            bus=ctx.bus,
            store=ctx.store,
            build=ctx.observations.build,
            info=ctx.info,
            queue_size=settings.bus_queue_size,
            keepalive=keepalive,
        )
        self.metrics = ProxyMetrics(
            ctx.store,
            ctx.bus,
            open_streams=ctx.open_streams,
            open_exchanges=ctx.open_exchanges,
            info=ctx.info,
            continuations=self.continuations,
            feed_clients=lambda: self.feed.clients,
            draining=ctx.draining,
            observations_dropped=lambda: ctx.observations.dropped,
            observations_queued=lambda: (ctx.observations.pending, ctx.observations.pending_bytes),
            calls_left_out=lambda: ctx.observations.unwatched.left_out,
            otlp_spans=ctx.otlp_spans,
            client_timeouts=ctx.client_timeouts,
            client_unreadable=ctx.client_unreadable,
            admin_unauthorized=lambda: dict(self.refusals.unauthorized),
            admin_refused=lambda: dict(self.refusals.refused),
            client_connections=ctx.client_connections,
            client_streams_refused=ctx.client_streams_refused,
            capture_failed=ctx.capture_failed,
            retry_window=settings.continuation_ttl,
            sweep=ctx.observations.sweep,
            endpoint=ctx.observations.builder.endpoint,
        )
        self.feed.on_close = self.metrics.retire
        if ctx.faults is not None:
            self.metrics.registry.register(FaultMetrics(ctx.faults))
        if ctx.intercepts is not None:
            self.metrics.registry.register(InterceptMetrics(ctx.intercepts.desk))
        if ctx.responses is not None:
            self.metrics.registry.register(ResponseBudgetMetrics(ctx.responses))
        self.health = HealthAnswers.running(ctx.router, settings, ctx.draining, ttl=ready_ttl)
        # Listening now, before the MCP listener opens, so the counters see every observation.
        ctx.observations.listeners.append(self.metrics.counting.observe_all)
        ctx.observations.sweepers.append(self.metrics.counting.sweep)
        self._runner: AdminRunner | None = None
        self.host = ""
        self.port = 0

    @property
    def url(self) -> str:
        """The admin API's base URL (bound port)."""
        return base_url(self.host, self.port)

    async def start(self, *, fallback: bool = False) -> None:
        """Start counting and bind the listener; AdminListenError when the address cannot be had.

        With `fallback` (the user did not choose the address), a port already taken gives way to a
        free one on the same host, so a second proxy on this host starts too; the warning and the
        `listening` line say where the admin API went.
        """
        address = self.ctx.settings.admin
        host, port = parse_host_port(address)
        self._runner = AdminRunner(
            self.app(),
            self.refusals,
            handler_cancellation=True,
            access_log=None,
            shutdown_timeout=CLOSE_TIMEOUT,
        )
        await self._runner.setup()
        try:
            moved = await self._bind(host, port, fallback=fallback)
        except OSError as exc:
            raise AdminListenError(address, exc) from exc
        self.host, self.port = host, self._runner.addresses[0][1]
        if moved:
            get_logger().warning(
                "admin_port_taken",
                wanted=address,
                admin=self.url,
                hint="set admin (--admin HOST:PORT or MCP_PROXY_ADMIN) to choose its address",
            )

    async def _bind(self, host: str, port: int, *, fallback: bool) -> bool:
        """Bind host:port, or (with `fallback`, when it is taken) a free port on host; whether it moved."""
        assert self._runner is not None
        try:
            await web.TCPSite(self._runner, host, port, reuse_address=True).start()
        except OSError as exc:
            if not (fallback and port != 0 and exc.errno == errno.EADDRINUSE):
                raise
            await web.TCPSite(self._runner, host, 0, reuse_address=True).start()
            return True
        return False

    async def stop(self) -> None:
        """Close the listener (feeds end once the bus closes their subscriptions) and stop counting."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        listeners, counting = self.ctx.observations.listeners, self.metrics.counting.observe_all
        if counting in listeners:
            listeners.remove(counting)
        sweepers, sweep = self.ctx.observations.sweepers, self.metrics.counting.sweep
        if sweep in sweepers:
            sweepers.remove(sweep)

    def app(self) -> web.Application:
        """The admin aiohttp application."""
        guard = browser_guard(has_token=self.token is not None, bound_host=lambda: self.host)
        # The token first: without it, every request but a probe's gets 401 before anything else
        # is judged (a page's wrong Content-Type, a method the path does not take).
        parameterless = parameterless_unless(QUERY_PATHS, OPEN_PATHS)
        app = web.Application(middlewares=[self._auth, guard, _json_errors, parameterless])
        self.health.add_routes(app)
        app.router.add_get("/metrics", self.metrics_text)
        app.router.add_get("/api/chains", self.chains)
        app.router.add_get("/api/chains/{chain_id}", self.chain)
        app.router.add_get("/api/continuations", self.continuations_list)
        app.router.add_get("/api/export.har", self.export_har)
        app.router.add_get("/api/export.json", self.export_json)
        app.router.add_get("/api/export.ndjson", self.export_ndjson)
        app.router.add_get("/api/feed", self.live_feed)
        if self.ctx.faults is not None:
            FaultRoutes(self.ctx.faults, has_token=self.token is not None, host=lambda: self.host).add(app)
        if self.ctx.intercepts is not None:
            InterceptRoutes(
                self.ctx.intercepts, has_token=self.token is not None, host=lambda: self.host
            ).add(app)
        return app

    # -- guards -----------------------------------------------------------------------------------

    @web.middleware
    async def _auth(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path in OPEN_PATHS and request.method in _PROBE_METHODS:  # probes cannot send the token
            return await handler(request)
        why = None if self.token is None else token_refusal(request.headers.get("Authorization"), self.token)
        if why is not None:
            self.refusals.unauthorized_request(request, why)
            return _json(
                {"error": "unauthorized", "message": "send Authorization: Bearer <admin token>"},
                status=401,
                headers={"WWW-Authenticate": 'Bearer realm="mcp-proxy admin"'},
            )
        response = await handler(request)
        self.refusals.answered(request, response)  # a 403 or 415 the guard or a steering path gave
        return response

    # -- endpoints --------------------------------------------------------------------------------

    async def metrics_text(self, request: web.Request) -> web.StreamResponse:
        """Prometheus text format from this proxy's own registry."""
        return web.Response(body=self.metrics.render(), headers={"Content-Type": CONTENT_TYPE})

    async def chains(self, request: web.Request) -> web.StreamResponse:
        """Recent chain headlines, filtered, newest last."""
        store = self.ctx.store
        query = request.query
        limit = int_param(query, "limit", DEFAULT_LIMIT, 1, store.max_chains)
        keep = _filter(query)
        await build_queued(self.ctx.observations)  # what waits to be built is part of the answer
        found = [chain.summary for chain in store if keep.keeps(chain)][-limit:]
        return _json([_summary(summary) for summary in found])

    async def chain(self, request: web.Request) -> web.StreamResponse:
        """One chain: headline, held messages and how many messages it no longer holds."""
        chain_id = request.match_info["chain_id"]
        self.ctx.observations.build()
        chain = self.ctx.store.get(chain_id)
        if chain is None:
            return _json({"error": "not_found", "message": f"no chain {chain_id!r} in the store"}, status=404)
        messages = [m.model_dump(mode="json", exclude_none=True) for m in list(chain.messages)]
        return _json(
            {
                "chain": _summary(chain.summary),
                "messages": messages,
                "dropped_messages": chain.dropped_messages,
            }
        )

    async def export_har(self, request: web.Request) -> web.StreamResponse:
        """The filtered chains' exchanges as a HAR 1.2 log (`proxy.record.har_live`), sent in pieces."""
        chains = await self._export_chains(request)
        info = self.ctx.info()
        host = info.listen.partition("://")[2].rstrip("/")
        pieces = har_pieces(chains, host=host, upstream=upstream_url(info.upstream), run=info.run)
        return await stream_export(request, "application/json", pieces)

    async def export_json(self, request: web.Request) -> web.StreamResponse:
        """The filtered chains, each with its messages, as one JSON document (`proxy.record.chains_json`)."""
        pieces = json_pieces(await self._export_chains(request), [self.ctx.info().listen])
        return await stream_export(request, "application/json", pieces)

    async def export_ndjson(self, request: web.Request) -> web.StreamResponse:
        """The filtered chains, one JSON object per line."""
        return await stream_export(
            request, "application/x-ndjson", ndjson_pieces(await self._export_chains(request))
        )

    async def _export_chains(self, request: web.Request) -> list[Chain]:
        """The stored chains an export asks for: filtered as `/api/chains`, the newest `limit` (all)."""
        store = self.ctx.store
        limit = int_param(request.query, "limit", store.max_chains, 1, store.max_chains)
        keep = _filter(request.query)
        await build_queued(self.ctx.observations)
        return [chain for chain in store if keep.keeps(chain)][-limit:]

    async def continuations_list(self, request: web.Request) -> web.StreamResponse:
        """The parked upstream calls of the modern-client -> legacy-server bridge ([] without it)."""
        view = getattr(self._mrtr_engine(), "continuations_view", None)
        items = view(time.time()) if callable(view) else []  # `now` gives each its age_ms
        if items:  # what waits unbuilt may be the parking that names a call's chain
            await build_queued(self.ctx.observations)
        redactor, builder = self.ctx.redactor, self.ctx.observations.builder
        for item in items:  # the engine's principal digest is unkeyed: show the keyed fingerprint
            if isinstance(item.get("principal"), str):
                item["principal"] = redactor.fingerprint(item["principal"])
            if isinstance(continuation := item.get("continuation"), str):
                item["chain"] = builder.chain_of_continuation(continuation)
        return _json(items)

    async def live_feed(self, request: web.Request) -> web.StreamResponse:
        """The SSE feed: proxy_info, history, then live flow events."""
        known_only(request.query, FEED_PARAMETERS)
        history = int_param(request.query, "history", DEFAULT_HISTORY, 0, self.ctx.store.max_chains)
        return await serve_feed(request, self.feed, history)

    # -- helpers ----------------------------------------------------------------------------------

    def _mrtr_engine(self) -> Any:
        bridge = self.ctx.router.bridges.get(Mode.MRTR_TO_LEGACY)
        return bridge.engine if bridge is not None else None

    def continuations(self) -> int:
        """Parked continuations right now (0 without the modern-client -> legacy-server bridge)."""
        return continuations_of(self._mrtr_engine())


def _summary(summary: ChainSummary) -> dict[str, Any]:
    return summary.model_dump(mode="json", exclude_none=True)


_PROBE_METHODS = frozenset({"GET", "HEAD"})
"""How a probe asks `/healthz` and `/readyz` without the token (a HEAD answers the status, no body)."""


def _json(body: Any, *, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    data = orjson.dumps(body, default=_jsonable)
    return web.Response(body=data, status=status, content_type="application/json", headers=headers)


def _jsonable(value: Any) -> Any:
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json", exclude_none=True)
    return str(value)


def _filter(query: MultiMapping[str]) -> ChainFilter:
    """The chain filter of a query string (`/api/chains`, the exports); 400 naming a bad parameter."""
    known_only(query, CHAIN_PARAMETERS, repeatable=PARAMETERS)
    try:
        return ChainFilter.from_params(lambda name: query.getall(name, []))
    except FilterError as exc:
        raise BadQuery(str(exc)) from None


@web.middleware
async def _json_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """HTTP errors (unknown path, wrong method, bad query) answered as JSON like every endpoint."""
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.content_type == "application/json" or exc.status < 400:
            raise
        kept = {k: v for k, v in exc.headers.items() if k.lower() == "allow"}
        error = exc.reason.lower().replace(" ", "_")
        return _json(
            {"error": error, "message": f"{request.method} {request.path}: {exc.reason}"},
            status=exc.status,
            headers=kept,
        )
