"""Builders of the parts `proxy.runtime.Proxy` composes, each from the settings: the upstream, its
message channels, the redactor, the run's chain-id prefix and the two bridges.

Each returns or wires a part and keeps nothing; starting, serving and stopping are the runtime's.
"""

from __future__ import annotations

import itertools
import os
import secrets
import shlex
from collections.abc import Callable

from proxy.config import Settings
from proxy.engine.legacy_client.engine import LegacyToMrtrEngine
from proxy.engine.modern_client.engine import MrtrToLegacyEngine
from proxy.flows.events import Mode
from proxy.flows.redact import DEFAULT_HEADER_NAMES, DEFAULT_HEADER_PATTERNS, Redactor
from proxy.flows.sink import ObservationSink
from proxy.framing.http import Upstream, command_secrets, parse_upstream, stdio_upstream
from proxy.transport.bridge import BridgeDriver
from proxy.transport.bridge_holds import BridgeHolds
from proxy.transport.channel_upstream import Channel, ChannelEvents, ChannelFactory, ChannelUpstream
from proxy.transport.relay import RelayContext
from proxy.transport.routing import Router
from proxy.transport.sse_upstream import SseChannel
from proxy.transport.stdio_upstream import StdioChannel, shown_command
from proxy.transport.upstream_pool import UpstreamPool


def upstream_for(settings: Settings) -> Upstream:
    """The upstream the settings name: a URL, or a stdio command (shown with secret-looking values masked)."""
    if settings.upstream_cmd:
        argv = shlex.split(settings.upstream_cmd)
        return stdio_upstream(shown_command(argv), command_secrets(argv, os.environ))
    assert settings.upstream is not None
    transport = "sse" if settings.upstream_transport == "sse" else "http"
    return parse_upstream(settings.upstream, transport)


def channel_client(
    settings: Settings, upstream: Upstream, pool: UpstreamPool, transport: str | None = None
) -> ChannelUpstream | None:
    """What speaks to a stdio or HTTP+SSE upstream through message channels; None for Streamable HTTP."""
    kind = transport or upstream.transport
    factory: ChannelFactory
    if kind == "stdio":
        assert settings.upstream_cmd is not None
        argv = shlex.split(settings.upstream_cmd)

        def factory(events: ChannelEvents) -> Channel:
            return StdioChannel(
                argv,
                events,
                max_line=settings.max_body_bytes,
                stop_grace=settings.upstream_stop_grace,
                shown=upstream.shown,
            )
    elif kind == "sse":

        def factory(events: ChannelEvents) -> Channel:
            return SseChannel(
                pool, upstream, events, limit_s=settings.upstream_timeout, max_event=settings.max_body_bytes
            )
    else:
        return None
    return ChannelUpstream(
        upstream,
        factory,
        transport=kind,
        head_timeout=settings.upstream_timeout,
        max_sessions=settings.max_upstream_children,
        restarts_per_minute=settings.upstream_restarts_per_minute,
        max_message_bytes=settings.max_body_bytes,
    )


def redactor_for(settings: Settings, url_secrets: tuple[str, ...] = ()) -> Redactor:
    """The proxy's redactor: the built-in entries (less those `unredact_headers` drops) plus the user's."""
    dropped = set(settings.unredact_headers)
    names = [n for n in DEFAULT_HEADER_NAMES if n not in dropped] + settings.redact_headers
    patterns = [p for p in DEFAULT_HEADER_PATTERNS if p not in dropped] + settings.redact_header_patterns
    key = settings.redact_key.get_secret_value().encode("utf-8") if settings.redact_key else None
    return Redactor(names, patterns, settings.redact_body_keys, secret_texts=url_secrets, key=key)


def run_prefix() -> str:
    """Chain ids of this run: `c` plus a short random run tag, so ids never repeat across restarts.

    A capture appended to by several runs, or two sidecars' feeds side by side, never show two
    different chains under one id.
    """
    return f"c{secrets.token_hex(3)}-"


def _id_factory() -> Callable[[str], str]:
    """Ids for the bridges: unguessable session ids, readable counters for everything else."""
    counter = itertools.count(1)

    def new_id(kind: str) -> str:
        if kind == "session":
            return secrets.token_hex(16)
        prefix = "mrtr" if kind == "nested" else kind
        return f"{prefix}-{next(counter)}"

    return new_id


def _state_key(settings: Settings) -> bytes:
    """The key that seals requestState tokens: configured (shared by replicas) or random per process."""
    if settings.state_key is not None:
        return settings.state_key.get_secret_value().encode("utf-8")
    return secrets.token_bytes(32)


def add_bridges(
    router: Router, settings: Settings, upstream: Upstream, relays: RelayContext, observer: ObservationSink
) -> None:
    """Give the router both bridges, each passing the relay's fault rules and intercepts."""
    ids = _id_factory()  # one counter: the two bridges' legs share the sink, so never one id
    router.bridges[Mode.LEGACY_TO_MRTR] = BridgeDriver(
        LegacyToMrtrEngine(
            upstream,
            ids,
            max_rounds=settings.max_rounds,
            max_sessions=settings.max_legacy_sessions,
            session_idle=settings.legacy_session_idle_timeout,
            max_sessions_per_client=settings.max_legacy_sessions_per_client,
        ),
        mode=Mode.LEGACY_TO_MRTR,
        upstream=upstream,
        pool=lambda: relays.pool,
        observer=observer,
        max_message_bytes=settings.max_bridged_message_bytes,
        responses=relays.responses,
    )
    router.bridges[Mode.MRTR_TO_LEGACY] = BridgeDriver(
        MrtrToLegacyEngine(
            upstream,
            ids,
            state_key=_state_key(settings),
            max_rounds=settings.max_rounds,
            continuation_ttl=settings.continuation_ttl,
            round_window=settings.round_window,
            max_continuations=settings.max_continuations,
            max_per_principal=settings.max_continuations_per_principal,
            max_per_client=settings.max_continuations_per_client,
            instance=secrets.token_hex(4),
            max_sessions=settings.max_upstream_sessions,
            session_ttl=settings.upstream_session_ttl,
            keep_streams=True,
            anonymous_per_connection=settings.anonymous_upstream_sessions == "per_connection",
        ),
        mode=Mode.MRTR_TO_LEGACY,
        upstream=upstream,
        pool=lambda: relays.pool,
        observer=observer,
        max_message_bytes=settings.max_bridged_message_bytes,
        responses=relays.responses,
    )
    for driver in router.bridges.values():  # the client's messages pass the fault rules too
        driver.faults = relays
        driver.upstream_transport = lambda: router.transport
        driver.suspect = router.suspect  # a replaced upstream meets only the bridge's own requests
        driver.restarted = router.restarted
        driver.intercepts = BridgeHolds(relays, driver.mode)  # and the bridge's own, intercepts
