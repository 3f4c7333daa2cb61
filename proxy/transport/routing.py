"""Routing: which engine serves a client request, from the client's era and what the probe found.

Every client request is classified once (`classify_request`: route or refusal), and a route is
given to one engine once (`Router.choose`: probe first, a bridge, or None for pass-through).

No request is routed on a guess. While the upstream's eras are unknown because it could not be
reached (it is still starting, as a sidecar's server often is), every request waits for a probe (one
probe at a time, shared by everyone waiting) and, if the upstream is still out of reach, gets a 503
naming why. An upstream that answers but fits no era (it wants credentials the probe lacked, say) is
passed through, so the client sees its own answer, an OAuth 401 included; the probe is repeated at
most every REPROBE_INTERVAL seconds (at once for the first request with credentials after a refusal
for want of them), with the credentials of the request that asked for it. Only a
request to the MCP endpoint asks (another path, an OAuth `/token` say, is passed through whatever the
era), and when the upstream wants credentials only one that carries some: a probe without them
would learn nothing and hold off the one that can. A known verdict is probed again when the
upstream's answers stop fitting it (`suspect`), and when it shows that it restarted (`restarted`: a
bridge's upstream session or stream ended, or a connection to the upstream failed), since a server
started anew may speak another era. While such a stale verdict's upstream is out of reach, each
request probes first (requests that come together share one probe), so the first one after it is
back is routed by what it speaks then; one whose probe found nobody there is answered 502 at once
(`out_of_reach`), without a connection attempt of its own.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import time
from collections.abc import Callable

from proxy.config import Settings
from proxy.engine.events import UpstreamEraProbed
from proxy.engine.faults import fault_hint, setup_fault
from proxy.engine.flood_lines import FloodLine
from proxy.engine.passthrough import fault_answer
from proxy.engine.select import UNKNOWN_ERAS, UpstreamEras, forced_eras, select_mode
from proxy.flows.events import Mode
from proxy.framing.classify import Limits, Rejection, Route, classify
from proxy.framing.http import Upstream
from proxy.logs import get_logger
from proxy.transport.bridge import BridgeDriver
from proxy.transport.channel_upstream import ChannelUpstream, off_endpoint_answer
from proxy.transport.probe import NOT_SERVING, ProbeResult, probe_upstream
from proxy.transport.tasks import spawn
from proxy.transport.upstream_pool import UpstreamClient
from proxy.wire.jsonrpc import Body
from proxy.wire.versions import Era

# Enum members read through their class cost about ten times a module constant's on Python 3.11
# (the enum metaclass's attribute hook): the traffic path reads these.
_LEGACY = Era.LEGACY
_MODERN = Era.MODERN
_PASSTHROUGH = Mode.PASSTHROUGH

REPROBE_INTERVAL = 2.0
"""Seconds between probes of a reachable upstream whose verdict is inconclusive or stale."""

DUAL_ERA_HINT = (
    "the upstream serves both eras, so every client passes through unchanged, but each of its tools "
    "works in one era only: if its tools ask the client in flight (elicitation, sampling, roots) and "
    "2026-07-28 clients must reach them, run with --upstream-era legacy so the proxy bridges those "
    "clients; if its tools answer input_required themselves (written for 2026-07-28) and legacy "
    "clients must reach them, run with --upstream-era modern so the proxy bridges legacy clients"
)
"""What a user of a dual-era server (the Python SDK's default) may need to know."""

FORCED_ERA_HINT = (
    "--upstream-era skips the probe, and the upstream refused a request of the era it was said to "
    "speak: if its tools ask the client in flight (elicitation, sampling, roots), it is a legacy or "
    "dual-era server; --upstream-era legacy (or no --upstream-era) lets the proxy bridge 2026-07-28 "
    "clients to it"
)
"""What a refusal means when the eras were forced to `modern` rather than probed."""

FORCED_LEGACY_HINT = (
    "--upstream-era skips the probe, and the upstream refused a request of the era it was said to "
    "speak: if it now serves only 2026-07-28 (a refusal whose data.supported names no handshake "
    "version), --upstream-era modern (or no --upstream-era) lets the proxy bridge legacy clients to it"
)
"""What a refusal means when the eras were forced to `legacy` rather than probed."""

FORCED_LINE_EVERY = 60.0
"""Seconds between two `upstream_era_forced_refused` lines (the ones between are counted): every
refusal of a run says the same until the upstream changes again."""

UNREACHABLE_HINT = (
    "the proxy serves anyway and probes the upstream again on the next request; /readyz answers 503 "
    "until the upstream answers (normal for a sidecar started before its server; else check --upstream)"
)
"""What an upstream nobody answers at (yet) means for the proxy, said once with the probe's problem."""

STDIO_UNKNOWN_HINT = (
    "the command did not answer the probe as an MCP stdio server does (its stderr lines are logged as "
    "upstream_stderr): fix the command, or set --upstream-era legacy (or modern) to skip the probe"
)
"""What a stdio command that gave no era means: the proxy ran it, so nothing is still starting."""

CREDENTIALS_HINT = (
    "the upstream wants credentials (HTTP 401/403 to the probe): requests pass through unchanged "
    "meanwhile, and the era is learned by probing again with those of the first request to the MCP "
    "endpoint that carries any (Authorization or Cookie, as an OAuth client's calls after its login do)"
)
"""What an upstream that refused the probe for want of credentials means for the proxy."""

_CREDENTIALS = ("authorization", "cookie")
"""Headers of the request that asked for a probe that go along with it."""


class ProbeFirst:
    """`Router.choose`'s answer when the upstream must be probed before the request can be routed."""


PROBE_FIRST = ProbeFirst()


def classify_request(
    settings: Settings,
    method: str,
    path: str,
    headers: tuple[tuple[str, str], ...],
    raw: bytes,
    parsed: Body | None = None,
) -> Route | Rejection:
    """Route or refuse one client request (the path as sent, percent-encoded), within the settings' bounds.

    `parsed`: one message's body already decoded (`classify`).
    """
    limits = _limits(settings.max_batch_messages, settings.max_json_depth, settings.max_method_length)
    return classify(
        method, path, headers, raw, max_body=settings.max_body_bytes, limits=limits, parsed=parsed
    )


@functools.lru_cache(maxsize=8)
def _limits(max_batch: int, max_depth: int, max_method: int) -> Limits:
    """One Limits per configuration, not one per request (a frozen dataclass costs a microsecond)."""
    return Limits(max_batch, max_depth, max_method)


class Router:
    """Knows the upstream's eras and the running bridges; picks the engine for each request."""

    def __init__(
        self,
        settings: Settings,
        upstream: Upstream,
        pool: UpstreamClient,
        probe_headers: tuple[tuple[str, str], ...] = (),
    ) -> None:
        self.settings = settings
        self.upstream = upstream
        self.pool = pool
        self.probe_headers = probe_headers
        """Headers every probe carries, whoever asks for it (what a replay sends with each request,
        `--header`): a server that answers nobody without them is probed as it is then spoken to."""
        """What carries upstream requests (the probe's included); replaced once if the probe finds an
        HTTP+SSE upstream behind the URL."""
        self.transport = "sse" if settings.upstream_transport == "sse" else upstream.transport
        """How the upstream is spoken to now: `http`, `sse` or `stdio`."""
        self.on_sse: Callable[[], UpstreamClient] | None = None
        """Makes what speaks HTTP+SSE to the upstream, when the probe finds it speaks that (None: the
        transport was named, so the probe never looks)."""
        forced = forced_eras(settings.upstream_era)
        self.forced = forced is not None
        self.eras: UpstreamEras = UNKNOWN_ERAS
        self._known = False
        """`eras.known`, kept with `eras`: read on every request."""
        self._modes: dict[Era, Mode] = {}
        """The mode for each client era under `eras` (a table the request path reads, never a call)."""
        self._set_eras(forced or UNKNOWN_ERAS)
        self.bridges: dict[Mode, BridgeDriver] = {}
        self.reachable: bool | None = None
        """Did the upstream answer the last probe at all (None: not probed yet)."""
        self.problem = ""
        """Why the last probe found no era ("" when it found one)."""
        self._probe: asyncio.Task[ProbeResult] | None = None
        self._waiting = 0
        """Requests waiting on the probe under way: an unknown verdict then stalls them, said louder."""
        self._wants_credentials = False
        """The last probe was refused for want of credentials: a probe without any learns nothing."""
        self._probed_with_credentials = False
        """The last probe carried a request's credentials. One that carried none and was refused for
        want of them is followed at once by the first request that carries some (an OAuth client
        back from its login within the reprobe interval), not routed on the refusal's verdict."""
        self._last_probe = 0.0
        self._stale = False
        self._restart_due = False
        """The upstream showed it restarted since the last probe: the next request probes at once."""
        self._restart_probed = 0.0
        """When the last probe asked for by a restart began (such probes come at most every
        REPROBE_INTERVAL, however often an upstream seems to restart)."""
        self._forced_lines = FloodLine()
        """When `upstream_era_forced_refused` was last written (a minute's refusals are one line)."""
        self.on_change: Callable[[UpstreamEras], None] | None = None
        self._unknown_lines = FloodLine()
        """When `upstream_era_unknown` was last written: while no era is known every request probes
        again, so an upstream that is down is one line a second (a changed problem is said at once)."""

    @property
    def settled(self) -> bool:
        """Routing needs no probe: the eras are forced, bridging is off, or the verdict is fresh."""
        return self.forced or self.settings.bridge == "off" or (self._known and not self._stale)

    def needs_probe(self, route: Route | None = None) -> bool:
        """A request must wait for a probe before it can be routed (`route` None: a probe is asked for
        by no request, as at start-up and by `/readyz`)."""
        if self.settled:
            return False
        if self._known or self.reachable:  # stale, or answered without fitting an era
            if not self._could_teach(route):
                return False
            if self._wants_credentials and not self._probed_with_credentials:
                return True  # the first credentials since a refusal for want of them: at once
            if self._stale and (self._restart_due or self.reachable is False):
                return True  # a restarting upstream: the first request once it is back probes first
            return not (self._last_probe and time.monotonic() - self._last_probe < REPROBE_INTERVAL)
        return True  # never reached: nothing to route on but a guess

    def _could_teach(self, route: Route | None) -> bool:
        """Whether a probe asked for by `route` could find what the last one did not: not for a path
        other than the MCP endpoint's (passed through whatever the era), nor without credentials for
        an upstream that wants them."""
        if route is not None and route.path not in self.upstream.endpoint_paths:
            return False
        return not self._wants_credentials or bool(_credentials(route))

    async def ensure_probed(self, route: Route | None = None) -> UpstreamEras:
        """Probe when a request needs it, joining a probe already under way; the verdict after it.

        `route` is the asking request (None: none asks): its credentials go along with the probe.
        """
        if not self.needs_probe(route):
            return self.eras
        task = self._probe
        if task is None or task.done():
            credentials = _with_given(self.probe_headers, _credentials(route))
            task = self._probe = spawn(self._run_probe(credentials), name="era-probe")
        self._waiting += route is not None
        try:
            await asyncio.shield(task)  # a waiter that gives up leaves the probe to the others
        finally:
            self._waiting -= route is not None
        return self.eras

    async def _run_probe(self, credentials: tuple[tuple[str, str], ...]) -> ProbeResult:
        self._last_probe = started = time.monotonic()
        if self._restart_due:
            self._restart_due, self._restart_probed = False, started
        self._probed_with_credentials = bool(credentials)
        limit, discover_s = self.settings.upstream_timeout, self.settings.stdio_discover_timeout
        found = await probe_upstream(self.pool, self.upstream, limit, credentials, discover_s)
        found = _explained(found, self.pool, started)
        if found.transport == "sse" and self.on_sse is not None and self.transport == "http":
            self.pool, self.transport = self.on_sse(), "sse"
            get_logger().info("upstream_transport", transport="sse", upstream=self.endpoint)
            if self.on_change is not None:
                self.on_change(self.eras)
            found = await probe_upstream(self.pool, self.upstream, limit, credentials)
        answered_before = self.reachable
        self.reachable, self.problem = found.reachable, found.problem
        self._wants_credentials = found.wants_credentials
        changed = False
        if found.eras.known or not self.eras.known:
            changed = found.eras != self.eras
            self._set_eras(found.eras)
            self._stale = False
            if changed:
                get_logger().info("upstream_eras", eras=found.eras.label, upstream=self.endpoint)
                if found.eras.legacy and found.eras.modern:
                    get_logger().info("upstream_dual_era", hint=DUAL_ERA_HINT)
        if found.eras.known:  # the bridges let go of what no longer holds for this upstream
            probed = UpstreamEraProbed(found.eras.legacy, found.eras.modern, found.eras.label)
            for bridge in self.bridges.values():
                bridge.feed(probed)
        if (changed or answered_before != found.reachable) and self.on_change is not None:
            self.on_change(self.eras)  # whoever shows the upstream says whether it answers, too
        if not found.eras.known:  # a 404 or 5xx to initialize: no server still starting says that
            setup = setup_fault(found.problem)  # a setup to fix: said as loudly as a failing server
            serving = not setup and not any(hint in found.problem for hint in NOT_SERVING)
            # Requests wait on the verdict, or a command the proxy ran gave none: routing is stalled.
            stalled = self._waiting > 0 or self.transport == "stdio"
            level = get_logger().info if serving and not stalled else get_logger().warning
            hint = None if found.reachable else UNREACHABLE_HINT
            if self.transport == "stdio":
                hint = STDIO_UNKNOWN_HINT
            if setup is not None:
                hint = fault_hint(setup, found.problem)
            elif found.wants_credentials:
                hint = CREDENTIALS_HINT
            elif found.hint:
                hint = found.hint
            also = self._unknown_lines.due(time.monotonic(), (level.__name__, found.problem, hint))
            if also is not None:  # each request probes again while no era is known: one line a second
                fields = {"also_unlogged": also} if also else {}
                level(
                    "upstream_era_unknown", upstream=self.endpoint, problem=found.problem, hint=hint, **fields
                )
        return found

    def _set_eras(self, eras: UpstreamEras) -> None:
        self.eras, self._known = eras, eras.known
        bridge = self.settings.bridge
        self._modes = {era: select_mode(era, eras, bridge) for era in (_LEGACY, _MODERN)}

    @property
    def endpoint(self) -> str:
        """The upstream's MCP endpoint as shown to people: scheme, host, port and path (no credentials)."""
        if self.transport == "stdio":
            return self.upstream.shown
        return self.upstream.origin + self.upstream.shown_path

    def unroutable(self) -> str | None:
        """Why a request cannot be routed now (the upstream was out of reach at the last probe), or None."""
        if self.settled or self.eras.known or self.reachable is not False:
            return None
        if self.transport == "stdio":  # nothing listens: a command is started
            return (
                f"{self.problem}. The proxy routes no request before it knows which protocol era the "
                "upstream speaks; fix the command, then retry (or set --upstream-era to skip the probe)"
            )
        return (
            f"{self.endpoint}: {self.problem}. The proxy routes no request before it knows which protocol "
            "era the upstream speaks; check that the MCP server is running and listening there, then "
            "retry (or set --upstream-era to skip the probe)"
        )

    def out_of_reach(self, route: Route) -> Rejection | None:
        """The 502 for a request that waited for a probe of a known verdict and the probe found nobody
        at the upstream; None otherwise. The request's own attempt would fail as the probe's did, so it
        is not made: a down upstream costs each request one connection attempt (fewer when requests
        share a probe), and a silent one a single connect timeout."""
        if not (self._known and self._stale and self.reachable is False):
            return None
        answer = fault_answer("unreachable", self.problem, route.request_id)
        assert answer is not None  # "unreachable" has its status
        return Rejection(answer.status, answer.body, "upstream unreachable")

    def suspect(self, reason: str) -> None:
        """The upstream answered in a way its verdict does not explain: probe again soon (or, with the
        eras forced, say what the forced verdict may have got wrong, at most once a minute)."""
        if self.forced:
            also = self._forced_lines.due(time.monotonic(), None, FORCED_LINE_EVERY)
            if also is not None:
                era = self.settings.upstream_era
                hint = FORCED_LEGACY_HINT if era == "legacy" else FORCED_ERA_HINT
                fields = {"also_unlogged": also} if also else {}
                get_logger().warning(
                    "upstream_era_forced_refused", reason=reason, upstream_era=era, hint=hint, **fields
                )
        if not self.forced and not self._stale:
            self._stale = True
            if self.eras.legacy and self.eras.modern:  # the dual-era case the start-up hint is about
                get_logger().info("upstream_eras_suspect", reason=reason, hint=DUAL_ERA_HINT)
            else:
                get_logger().info("upstream_eras_suspect", reason=reason)

    def restarted(self, reason: str) -> None:
        """The upstream showed that it restarted or ended a session (`reason` says how): a server
        started anew may speak another era, so its verdict is probed again before the next request is
        routed (at once, unless a restart asked for one within REPROBE_INTERVAL)."""
        if self.forced or self.settings.bridge == "off" or not self._known or self._stale:
            return
        self._stale = True
        recent = self._restart_probed and time.monotonic() - self._restart_probed < REPROBE_INTERVAL
        self._restart_due = not recent
        get_logger().info("upstream_eras_suspect", reason=reason)

    def off_endpoint(self, route: Route) -> Rejection | None:
        """The proxy's own 404 for a request to a path an HTTP+SSE or stdio upstream does not have (it
        has one endpoint, and no other path to pass a request to), or None. Answered here, it is
        blamed on nobody: the upstream never saw it, so it says nothing of its era."""
        if self.transport == "http" or route.path in self.upstream.endpoint_paths:
            return None
        body = off_endpoint_answer(self.upstream, route.path, self.transport, route.raw)
        return Rejection(404, body, "not_the_endpoint")

    def choose(self, route: Route) -> BridgeDriver | ProbeFirst | None:
        """The one routing decision for a request: probe first, a bridge, or None for pass-through."""
        if self.needs_probe(route):
            return PROBE_FIRST
        return self.bridge_for(route)

    def mode_for(self, route: Route) -> Mode:
        """The engine that serves this request: only the MCP endpoint's requests are ever bridged."""
        if route.path not in self.upstream.endpoint_paths:
            return _PASSTHROUGH  # the server's other paths (OAuth metadata, say) are its own
        session = route.session_id
        if session is not None:
            for mode, bridge in self.bridges.items():
                if session in bridge.engine.client_sessions:
                    return mode
        return self._modes.get(route.era, _PASSTHROUGH)

    def passes_through(self, route: Route) -> bool:
        """The request is served by pass-through now, with nothing to wait for: no probe due, the
        upstream routable, and no bridge for its era or session."""
        return (
            not self.needs_probe(route) and self.unroutable() is None and self.mode_for(route) is _PASSTHROUGH
        )

    def bridge_for(self, route: Route) -> BridgeDriver | None:
        """The bridge driver for this request, or None for pass-through."""
        mode = self.mode_for(route)
        return self.bridges.get(mode) if mode is not _PASSTHROUGH else None

    def connection_closed(self, connection: str) -> None:
        """A client connection closed: each bridge lets go of what it kept for that connection alone."""
        for bridge in self.bridges.values():
            bridge.connection_closed(connection)

    def close(self) -> None:
        """Stop a probe still under way (the proxy is stopping)."""
        if self._probe is not None and not self._probe.done():
            self._probe.cancel()


def _credentials(route: Route | None) -> tuple[tuple[str, str], ...]:
    """The asking request's headers that go along with a probe (none when no request asks)."""
    if route is None:
        return ()
    return tuple((name, value) for name, value in route.headers if name.lower() in _CREDENTIALS)


def _with_given(
    given: tuple[tuple[str, str], ...], asking: tuple[tuple[str, str], ...]
) -> tuple[tuple[str, str], ...]:
    """The headers a probe carries: the given ones, and the asking request's credentials they do not name."""
    named = {name.lower() for name, _ in given}
    return (*given, *((name, value) for name, value in asking if name.lower() not in named))


def _explained(found: ProbeResult, pool: UpstreamClient | ChannelUpstream, since: float) -> ProbeResult:
    """A probe of a stdio command whose child exited under it says so (exit status, last stderr
    lines), not which HTTP statuses the proxy's own stand-in answers carried."""
    if found.eras.known or not isinstance(pool, ChannelUpstream):
        return found
    exited = pool.exited_since(since)
    if exited is None:
        return found
    return dataclasses.replace(found, problem=f"{exited} (during the era probe)")
