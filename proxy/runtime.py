"""The composition root: builds the store, bus, chain builder, recorders, upstream pool and servers.

`Proxy` is what the CLI runs and what tests start in-process on a free port. Each component gets the
few things it uses from here; nothing shares a grab-bag of the proxy's parts.
"""

from __future__ import annotations

import asyncio
import time

from proxy import __version__
from proxy.addresses import base_url, parse_host_port
from proxy.config import Settings
from proxy.engine.select import UpstreamEras
from proxy.flows.bus import EventBus
from proxy.flows.chains import ChainBuilder
from proxy.flows.endpoint import Endpoint
from proxy.flows.events import ProxyInfo
from proxy.flows.retry_waits import RetryWaits
from proxy.flows.sink import SWEEP_EVERY, ObservationSink
from proxy.flows.store import ChainStore
from proxy.logs import get_logger, reopen_file, traffic_line, use_redactor
from proxy.record.capture import CaptureError, CaptureWriter
from proxy.record.observations import ObservationEncoder
from proxy.runtime_build import add_bridges, channel_client, redactor_for, run_prefix, upstream_for
from proxy.runtime_drain import CLOSE_TIMEOUT, wait_for_conversations
from proxy.runtime_tracing import Tracing
from proxy.runtime_tuning import fit_descriptor_limit
from proxy.runtime_warnings import DroppedObservations, LeftOutCalls, warn_of_settings_at_start
from proxy.transport.admin import AdminContext, AdminServer
from proxy.transport.capture_sink import CaptureSink
from proxy.transport.channel_client import Serving
from proxy.transport.channel_upstream import ChannelUpstream
from proxy.transport.fault_control import FaultControl
from proxy.transport.front import FrontServer
from proxy.transport.health import HealthAnswers, HealthServer
from proxy.transport.intercept_control import InterceptControl
from proxy.transport.intercept_desk import InterceptDesk
from proxy.transport.metrics import continuations_of
from proxy.transport.relay import RelayContext
from proxy.transport.response_budget import ResponseBudget
from proxy.transport.routing import Router
from proxy.transport.self_loop import loop_refusal, upstream_is_listener
from proxy.transport.sse_clients import SseClients, sse_paths
from proxy.transport.upstream_pool import UpstreamClient, UpstreamPool

PROBE_WAIT_SAID_AFTER = 5.0
"""Seconds the start-up era probe waits for an answer before the log says the proxy waits on it."""


class Proxy:
    """One running proxy: listener, upstream client, observation pipeline and capture."""

    def __init__(
        self,
        settings: Settings,
        *,
        admin_fallback: bool = False,
        http_clients: bool = True,
        keep_chains: bool = True,
        secret_texts: tuple[str, ...] = (),
        probe_headers: tuple[tuple[str, str], ...] = (),
    ) -> None:
        """`admin_fallback`: the user did not choose `admin`, so a taken port gives way to a free one.

        `http_clients` False: no listener for MCP clients (`mcp-proxy stdio` serves its one client on
        stdin and stdout through `serving`).

        `keep_chains` False: nothing in or out of the process can ever read chains (the command with
        the admin API off and no TUI), so observations go to the capture, metrics and log line only.

        `secret_texts`: secrets known up front (what a user gave a replay to send), masked wherever
        they appear, as the upstream URL's credentials are.

        `probe_headers`: headers every era probe carries (what a replay sends with each request), so an
        upstream that wants credentials is probed with them.
        """
        if not settings.upstream and not settings.upstream_cmd:
            raise ValueError("upstream (a URL) or upstream_cmd (a stdio command) is required")
        self.settings = settings
        self.admin_fallback = admin_fallback
        self.http_clients = http_clients
        self.bus = EventBus(settings.bus_queue_size)
        self.store = ChainStore(
            settings.max_chains,
            settings.max_messages_per_chain,
            settings.max_unfinished_chains,
            max_bytes=settings.max_chain_store_bytes,
        )
        upstream = upstream_for(settings)
        self.upstream = upstream
        self.redactor = redactor_for(settings, (*upstream.secrets, *secret_texts))
        use_redactor(self.redactor)
        self.run_tag = run_prefix().removesuffix("-")
        """What this process's chain ids start with, and what tells its feed from another run's."""
        self.started = time.time()
        self.builder = ChainBuilder(
            self.store,
            self.bus.publish,
            self.redactor,
            clock=time.time,
            body_limit=settings.capture_body_limit,
            id_prefix=self.run_tag + "-",
            retry_window=settings.continuation_ttl,
            endpoint=Endpoint(upstream.base_path),
        )
        # A small pass-through exchange makes about five observations, a bridged one more: the queue
        # keeps enough for the store's whole ring of chains either way.
        backlog = 10 * settings.max_chains
        self.observations = ObservationSink(
            self.builder,
            self.redactor,
            bus=self.bus,
            backlog=backlog,
            max_bytes=settings.max_chain_store_bytes // 2,
            keep=keep_chains,
            unwatched_rate=settings.unwatched_history_rate,
        )
        self.observations.on_left_out = LeftOutCalls(self.observations)
        self.retry_waits = RetryWaits(settings.continuation_ttl)
        """2026-07-28 pass-through calls answered `input_required` whose retry has not come: a drain
        waits for them as for a bridge's parked calls."""
        self.observations.modern_listeners.append(self.retry_waits.observe_all)
        self.observations.sweepers.append(self._sweep_retry_waits)
        log = get_logger()
        self.observations.on_asked = lambda asked: traffic_line(log, "server_asked", asked.log_fields())
        self.observations.on_not_resumed = lambda ended: traffic_line(
            log, "stream_not_resumed", ended.log_fields(), "warning"
        )
        self.observations.on_dropped = DroppedObservations(self.observations, settings)
        self.observations.on_released = lambda line, mode: traffic_line(
            log, "exchange", line.log_fields(mode), line.level
        )
        self.pool = UpstreamPool(
            upstream,
            connect_timeout=settings.upstream_connect_timeout,
            head_timeout=settings.upstream_timeout,
            body_idle_timeout=settings.upstream_body_idle_timeout,
            max_head_bytes=settings.upstream_max_head_bytes,
            idle_timeout=settings.upstream_idle_timeout,
        )
        """The keep-alive connections that carry every HTTP upstream request, the era probe's included."""
        self.channels: ChannelUpstream | None = channel_client(settings, upstream, self.pool)
        """The message channels behind a stdio or HTTP+SSE upstream (None for Streamable HTTP)."""
        client: UpstreamClient = self.channels if self.channels is not None else self.pool
        self.router = Router(settings, upstream, client, probe_headers)
        self.pool.on_unreachable = self.router.restarted
        if upstream.transport == "http" and settings.upstream_transport == "auto":
            self.router.on_sse = self._speak_sse
        self.relays = RelayContext(
            upstream=upstream,
            pool=client,
            observations=self.observations,
            router=self.router,
            upstream_timeout=settings.upstream_timeout,
            inspect_limit=settings.max_inspected_bytes,
            responses=ResponseBudget(settings.max_response_bytes_in_flight),
            rewrite_origin=settings.rewrite_oauth_origin,
        )
        self.faults = FaultControl(self.relays, settings.faults, settings.fault_seed)
        """The fault rules in force (none by default: the relay then never consults the gate)."""
        self.desk = InterceptDesk(
            self.observations,
            self.faults.gate,
            default_timeout=settings.intercept_timeout,
            max_held=settings.intercept_max_held,
            max_body_bytes=settings.max_body_bytes,
            chain_of=self._chain_of,
        )
        self.relays.desk = self.desk
        self.intercepts = InterceptControl(self.faults, self.desk, settings.intercepts)
        """The intercept rules and held messages (`/api/intercepts`; a TUI in this process is handed it)."""
        add_bridges(self.router, settings, upstream, self.relays, self.observations)
        self.router.on_change = self._eras_changed
        self._front: FrontServer | None = None
        self._capture: CaptureWriter | None = None
        self._sink: CaptureSink | None = None
        self.tracing = Tracing(settings, upstream, self.redactor, self.observations)
        """Spans of every observation for the OTLP exporter, while tracing is on."""
        self.admin: AdminServer | None = None
        self.health: HealthServer | None = None
        self.draining = False
        self._announced = False
        """The proxy's first `ProxyInfo` went out: later era changes are announced as they happen."""
        self._hurry = asyncio.Event()
        self._sweeper: asyncio.TimerHandle | None = None
        """The next sweep of the waits that ran out (`_sweep`), while the proxy runs."""
        self.port = 0
        self.host = ""

    @property
    def url(self) -> str:
        """The base URL clients use (scheme, host, bound port)."""
        return base_url(self.host, self.port)

    def endpoint(self) -> str:
        """The proxy URL that stands for the upstream's MCP endpoint."""
        return self.url + self.upstream.base_path

    def shown_endpoint(self) -> str:
        """The endpoint as the start-up line shows it: the bare `/` (which stands for the upstream's
        endpoint) when the upstream's path holds a key, so the URL shown works and shows no key."""
        upstream = self.upstream
        return self.url + "/" if upstream.shown_path != upstream.base_path else self.endpoint()

    def sse_endpoint(self) -> str | None:
        """The URL HTTP+SSE (2024-11-05) clients open their stream at (None: not served)."""
        front = self._front
        if front is None or front.sse_clients is None:
            return None
        return self.url + front.sse_clients.stream_path

    @property
    def admin_url(self) -> str | None:
        """The admin API's base URL once it listens (None when disabled)."""
        return self.admin.url if self.admin is not None and self.admin.port else None

    @property
    def health_url(self) -> str | None:
        """The health-only listener's base URL once it listens (None without the `health` setting)."""
        return self.health.url if self.health is not None and self.health.port else None

    async def start(self) -> None:
        """Bind the listener and the admin API (port 0 picks a free one) and start the capture writer.

        Raises `OtlpUnavailable` before anything starts when `otlp_endpoint` is set without the SDK.
        """
        self.tracing.start()
        if self.settings.capture is not None:
            self._capture = CaptureWriter(
                self.settings.capture,
                max_bytes=self.settings.capture_max_bytes,
                keep=self.settings.capture_keep,
            )
            self._sink = CaptureSink(
                self._capture, ObservationEncoder(self.redactor, self.settings.capture_body_limit)
            )
            self.observations.listeners.append(self._sink.observe_all)
        if self.settings.admin_enabled:  # subscribes now, so its metrics see every chain
            self.admin = AdminServer(self._admin_context())
        try:
            if self.http_clients:
                await self._start_front()
            if self.admin is not None:
                await self.admin.start(fallback=self.admin_fallback)
            if self.settings.health is not None:
                # one readiness check for both listeners: one cache, one log line per change
                answers = (
                    self.admin.health
                    if self.admin is not None
                    else HealthAnswers.running(self.router, self.settings, lambda: self.draining)
                )
                self.health = HealthServer(answers, self.settings.health)
                await self.health.start()
        except OSError:
            await self.stop()
            raise
        await self._probe_at_start()
        self._publish_info()
        self._announced = True
        log = get_logger()
        warn_of_settings_at_start(self.settings, self.upstream, self.redactor)
        log.info(
            "listening",
            listen=self.url if self.http_clients else "stdio",
            endpoint=self.shown_endpoint() if self.http_clients else None,
            sse=self.sse_endpoint(),
            admin=self.admin_url,
            health=self.health_url,
            upstream=self.upstream.shown,
            eras=self.router.eras.label,
        )
        self._sweeper = asyncio.get_running_loop().call_later(SWEEP_EVERY, self._sweep)

    async def _probe_at_start(self) -> None:
        """The start-up era probe, said in the log once it has waited `PROBE_WAIT_SAID_AFTER` seconds:
        an upstream that takes connections and does not answer (a server still starting, a hung one)
        holds it up to `upstream_timeout`, and nothing else is logged meanwhile."""
        said = asyncio.get_running_loop().call_later(PROBE_WAIT_SAID_AFTER, self._say_probe_waits)
        try:
            await self.router.ensure_probed()
        finally:
            said.cancel()

    def _say_probe_waits(self) -> None:
        get_logger().info(
            "era_probe_waiting",
            upstream=self.upstream.shown,
            waited_s=PROBE_WAIT_SAID_AFTER,
            limit_s=self.settings.upstream_timeout,
            note="the upstream has not answered the era probe yet; requests wait for its answer, and "
            "`listening` follows it (or upstream_timeout passing)",
        )

    def _sweep(self) -> None:
        """End the waits that ran out with no traffic to end them, then come back (`SWEEP_EVERY`)."""
        self._sweeper = asyncio.get_running_loop().call_later(SWEEP_EVERY, self._sweep)
        self.observations.sweep()

    async def _start_front(self) -> None:
        """Listen for MCP clients: Streamable HTTP, and HTTP+SSE on its own paths."""
        host, port = parse_host_port(self.settings.listen)
        settings = self.settings
        fit_descriptor_limit(
            settings.max_client_connections, settings.max_continuations + settings.max_upstream_sessions
        )
        self._front = FrontServer(self.settings, self.relays, self.router)
        paths = sse_paths(self.settings, self.upstream.base_path)
        if paths is not None:
            self._front.sse_clients = SseClients(self.serving(), paths)
        self.port = await self._front.start(host, port)
        self.host = host
        if upstream_is_listener(self.upstream, host, self.port):
            raise loop_refusal(self.upstream, f"{host}:{self.port}")
        self.relays.listen_url = self.url

    def serving(self) -> Serving:
        """What serving a client on a message channel needs (`proxy.transport.channel_client`)."""
        return Serving(self.settings, self.router, self.relays)

    def _speak_sse(self) -> UpstreamClient:
        """The probe found an HTTP+SSE server behind the URL: every upstream request goes through its
        sessions from now on."""
        self.channels = channel_client(self.settings, self.upstream, self.pool, transport="sse")
        assert self.channels is not None
        self.relays.pool = self.channels
        return self.channels

    @property
    def upstream_transport(self) -> str:
        """How the upstream is spoken to now: `http`, `sse` or `stdio` (the probe may find `sse`)."""
        return self.router.transport

    def _admin_context(self) -> AdminContext:
        """What the admin API reads: the store, the bus, the router, and two counts read on a scrape.

        Open streams are the pass-through relay's and the bridges' alike: a bridged call answered as
        an SSE stream is one too.
        """
        relays, observations = self.relays, self.observations
        bridges = tuple(self.router.bridges.values())
        return AdminContext(
            settings=self.settings,
            store=self.store,
            observations=observations,
            bus=self.bus,
            redactor=self.redactor,
            router=self.router,
            info=self.info,
            draining=lambda: self.draining,
            open_streams=lambda: relays.open_streams + sum(bridge.open_streams for bridge in bridges),
            open_exchanges=lambda: observations.open_exchanges,
            otlp_spans=self.tracing.counts,
            client_timeouts=lambda: dict(self._front.timeouts) if self._front is not None else {},
            client_unreadable=lambda: dict(self._front.unreadable) if self._front is not None else {},
            client_connections=self._client_connections,
            client_streams_refused=lambda: self._front.streams_refused() if self._front is not None else {},
            capture_failed=lambda: self._sink.failed if self._sink is not None else None,
            faults=self.faults,
            intercepts=self.intercepts,
            responses=relays.responses,
        )

    def _chain_of(self, exchange: str, message_id: str | int | None) -> str | None:
        """The chain of a held message, built from what waits to be built (None while nobody watches)."""
        self.observations.build()
        return self.observations.builder.chain_of(exchange, message_id)

    def info(self) -> ProxyInfo:
        """What the proxy is and where it points: the first event of every capture and admin feed."""
        return ProxyInfo(
            ts=time.time(),
            version=__version__,
            listen=self.url if self.http_clients else "stdio",
            upstream=self.upstream.shown,
            upstream_era=self.router.eras.label,
            upstream_era_forced=self.router.forced,
            bridge=self.settings.bridge,
            upstream_unreachable=self._unanswered(),
            run=self.run_tag,
            started=self.started,
        )

    def _client_connections(self) -> tuple[int, dict[str, int]]:
        """Client connections open now, and those refused past `max_client_connections`, by how."""
        front = self._front
        return (len(front.connections), dict(front.over_cap)) if front is not None else (0, {})

    def _unanswered(self) -> str | None:
        """Why the last probe got no answer from the upstream; None when it answered or none ran."""
        return (self.router.problem or "no answer") if self.router.reachable is False else None

    def _publish_info(self) -> None:
        info = self.info()
        if self._sink is not None:
            self._sink.event(info)
        self.bus.publish(info)

    def _eras_changed(self, eras: UpstreamEras) -> None:
        if self.channels is not None and eras.known and not eras.modern:
            self.channels.release_shared("the upstream serves no 2026-07-28 request: nothing would use it")
        if self._announced:  # the first probe's eras go out with the proxy's first announcement
            self._publish_info()

    async def stop(self) -> None:
        """Stop listening, close the upstream client, flush and close the capture."""
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        self.relays.holds.release()
        self.desk.drain()  # every held message goes on unchanged
        self.router.close()
        for bridge in self.router.bridges.values():  # their clients hear why, before connections close
            bridge.stopping()
        if self._front is not None:
            cut = 0
            if self._front.sse_clients is not None:  # their sessions end upstream before the pool closes
                cut = await self._front.sse_clients.close(CLOSE_TIMEOUT)
            cut += await self._front.close(CLOSE_TIMEOUT)
            self._front = None
            if cut:
                why = f"still answering {CLOSE_TIMEOUT:g} s after the proxy began to stop"
                get_logger().info("client_connections_cut", connections=cut, why=why)
        for bridge in self.router.bridges.values():  # before the upstream pool closes
            await bridge.release_upstream(CLOSE_TIMEOUT)
        if self.channels is not None:  # stdio children stopped (SIGTERM, then SIGKILL), SSE streams closed
            await self.channels.aclose(self.settings.upstream_stop_grace)
        self.pool.close()
        self.observations.release_held()  # no cancel comes any more: every line goes out as it stands
        for sub in self.bus.subscribers:
            sub.close()
        if self._sink is not None:
            self.observations.listeners.remove(self._sink.observe_all)
            self._sink.close()
            self._sink = None
        if self._capture is not None:
            self._capture.close()
            self._capture = None
        await self.tracing.stop()
        if self.admin is not None:
            await self.admin.stop()
            self.admin = None
        if self.health is not None:
            await self.health.stop()
            self.health = None

    def chains(self) -> ChainStore:
        """The chain store with every observation built into it (tests and in-process callers read it)."""
        self.observations.build()
        return self.store

    def in_flight(self) -> int:
        """Client exchanges still open, not counting standalone GET streams (they end only when closed)."""
        tally = self.observations.tally
        return max(0, tally.open_exchanges - tally.open_streams)

    async def drain(self, grace: float) -> None:
        """SIGTERM: finish the conversations under way for up to `grace` seconds, take no new ones, then
        `stop`.

        The listener stays open: a conversation's next step often comes on a new connection (a client's
        answer to a server's in-flight request, a request its SDK makes before reporting a result, an
        MRTR retry for a parked call, its DELETE). New work (an `initialize`, a request that begins a
        new chain) gets 503 with `Retry-After`, and every response closes its connection
        (`proxy.transport.front.FrontServer.begin_drain`). The drain ends once no exchange is in
        flight, no client connection is open and no call waits for a retry (parked in a bridge, or
        answered `input_required` in pass-through, within `continuation_ttl`), or at the grace; a
        second signal (`hurry`) cuts it short. The admin API stays up until the end, answering
        /readyz 503 so a load balancer stops sending traffic.
        """
        self.draining = True
        self.relays.holds.release()  # a fault's delay holds nothing the proxy is stopping for
        self.desk.drain()  # nor does an intercept: held messages go on unchanged
        if self._front is not None:
            self._front.begin_drain()
        await wait_for_conversations(self.conversations, self._hurry, grace)
        await self.stop()

    def conversations(self) -> dict[str, int]:
        """What a drain waits for: exchanges in flight, client connections open (a standalone GET
        stream's among them: its client is still in its session), calls a bridge parked for a retry,
        and pass-through calls answered `input_required` whose retry has not come (`awaiting_retry`)."""
        front = self._front
        return {
            "in_flight": self.in_flight(),
            "connections": front.open_connections() if front is not None else 0,
            "parked": sum(continuations_of(bridge.engine) for bridge in self.router.bridges.values()),
            "awaiting_retry": len(self.retry_waits),
        }

    def _sweep_retry_waits(self, now: float) -> None:
        """End the pass-through retry waits that ran out, and warn of any the table's bound forgot
        (at most once a sweep)."""
        waits = self.retry_waits
        waits.sweep(now)
        forgotten = waits.take_forgotten()
        if forgotten:
            get_logger().warning(
                "retry_waits_full",
                forgotten=forgotten,
                bound=waits.bound,
                hint="more 2026-07-28 pass-through calls wait for their client's retry than the proxy "
                "remembers: a SIGTERM drain no longer waits for the oldest of them",
            )

    def hurry(self) -> None:
        """End a drain's wait now (a second SIGTERM or SIGINT); open exchanges are then cut."""
        self._hurry.set()

    def reopen_files(self) -> None:
        """SIGUSR1: reopen the capture and the log file at their paths, after logrotate or `mv` moved
        them away."""
        self.reopen_capture()
        reopen_file()

    def reopen_capture(self) -> None:
        """Reopen the capture at its path, after logrotate or `mv` moved the file away."""
        log = get_logger()
        if self._capture is None:
            log.info("capture_reopen_skipped", reason="no capture file configured")
            return
        try:
            self._capture.reopen()
        except CaptureError as exc:
            log.error("capture_reopen_failed", error=str(exc))
            return
        resumed = self._sink is not None and self._sink.resume()
        log.info("capture_reopened", path=str(self._capture.path), resumed_after_failure=resumed or None)

    async def __aenter__(self) -> Proxy:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def run(self, stop: asyncio.Event) -> None:
        """Serve until `stop` is set."""
        await self.start()
        try:
            await stop.wait()
        finally:
            await self.stop()
