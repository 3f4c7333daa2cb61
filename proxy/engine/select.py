"""Engine selection: which eras the upstream speaks (the probe), and which engine serves a request.

The probe is two requests the transport sends once (and again when the upstream's answers stop
fitting the verdict): a 2026-07-28 `server/discover`, and a legacy `initialize` whose session is
deleted right after. A server that accepts both is dual-era and every client passes through.

Over stdio, a server that refuses `server/discover` with an error of its own speaks only the
handshake era (a 2026-07-28 server must implement the method), so no `initialize` is sent: the child
that answered stays fresh for the first client's own handshake.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from proxy.flows.events import Mode
from proxy.wire import errors
from proxy.wire.headers import METHOD, PROTOCOL_VERSION
from proxy.wire.jsonrpc import Kind, Message, request
from proxy.wire.mcp import META_CLIENT_CAPABILITIES, META_CLIENT_INFO, META_PROTOCOL_VERSION
from proxy.wire.versions import LATEST_LEGACY, LATEST_MODERN, Era, denies_handshake

PROBE_CLIENT_INFO = {"name": "mcp-debug-proxy-probe", "version": "1"}

PROBE_IDS: Final = frozenset({"probe-discover", "probe-initialize"})
"""The JSON-RPC ids of the era probe's own requests (`modern_probe`, `legacy_probe`): a server that
exits on one cut no client's request short."""
_ACCEPT = ("Accept", "application/json, text/event-stream")
_JSON = ("Content-Type", "application/json")
_MODERN_ERRORS = frozenset(
    {errors.HEADER_MISMATCH, errors.MISSING_REQUIRED_CLIENT_CAPABILITY, errors.UNSUPPORTED_PROTOCOL_VERSION}
)


@dataclass(frozen=True, slots=True)
class UpstreamEras:
    """What the probe found: which eras the upstream accepts (both False: not known yet)."""

    legacy: bool
    modern: bool

    @property
    def known(self) -> bool:
        """True once the upstream accepted at least one era."""
        return self.legacy or self.modern

    @property
    def label(self) -> str:
        """`legacy`, `modern`, `dual` or `unknown` (status bar, logs, readiness)."""
        if self.legacy and self.modern:
            return "dual"
        if self.legacy:
            return Era.LEGACY.value
        if self.modern:
            return Era.MODERN.value
        return Era.UNKNOWN.value


UNKNOWN_ERAS = UpstreamEras(legacy=False, modern=False)


def forced_eras(setting: str) -> UpstreamEras | None:
    """`--upstream-era legacy|modern` replaces the probe; `auto` means probe."""
    if setting == "legacy":
        return UpstreamEras(legacy=True, modern=False)
    if setting == "modern":
        return UpstreamEras(legacy=False, modern=True)
    return None


def modern_probe() -> tuple[tuple[tuple[str, str], ...], dict[str, Any]]:
    """Headers and body of the `server/discover` probe (a complete 2026-07-28 request)."""
    meta = {
        META_PROTOCOL_VERSION: LATEST_MODERN,
        META_CLIENT_CAPABILITIES: {},
        META_CLIENT_INFO: PROBE_CLIENT_INFO,
    }
    headers = (_JSON, _ACCEPT, (PROTOCOL_VERSION, LATEST_MODERN), (METHOD, "server/discover"))
    return headers, request("probe-discover", "server/discover", {"_meta": meta})


def legacy_probe() -> tuple[tuple[tuple[str, str], ...], dict[str, Any]]:
    """Headers and body of the `initialize` probe (its session is deleted afterwards)."""
    meta = {
        META_PROTOCOL_VERSION: LATEST_LEGACY,
        META_CLIENT_CAPABILITIES: {},
        META_CLIENT_INFO: PROBE_CLIENT_INFO,
    }
    params = {
        "protocolVersion": LATEST_LEGACY,
        "capabilities": {},
        "clientInfo": PROBE_CLIENT_INFO,
        "_meta": meta,
    }
    headers = (_JSON, _ACCEPT, (PROTOCOL_VERSION, LATEST_LEGACY), (METHOD, "initialize"))
    return headers, request("probe-initialize", "initialize", params)


def modern_accepted(status: int, messages: Sequence[Message]) -> bool:
    """Did the upstream answer `server/discover` like a 2026-07-28 server (a result, or a modern error)?"""
    for msg in messages:
        if msg.kind is Kind.RESULT and isinstance(msg.result, dict):
            return True
        if msg.kind is Kind.ERROR and msg.error.get("code") in _MODERN_ERRORS:
            return True
    return False


def refused_as_legacy(messages: Sequence[Message]) -> bool:
    """Did a stdio server answer `server/discover` with an error of its own that no 2026-07-28
    server gives (an unknown method, invalid params)? A handshake-era server answers so; -32000 is
    left out, since the proxy says that itself when the child exits or cannot be written to."""
    return any(
        m.kind is Kind.ERROR
        and m.error.get("code") not in _MODERN_ERRORS
        and m.error.get("code") != errors.UPSTREAM_UNAVAILABLE
        for m in messages
    )


def legacy_denied(messages: Sequence[Message]) -> bool:
    """Did the upstream refuse `initialize` saying it serves no handshake version (a 2026-07-28-only
    server's -32022)? It may answer so before it asks for credentials, as the SDK's does."""
    return any(m.kind is Kind.ERROR and denies_handshake(m.error) for m in messages)


def legacy_accepted(status: int, messages: Sequence[Message]) -> bool:
    """Did the upstream answer `initialize` with an InitializeResult?"""
    return status == 200 and any(
        m.kind is Kind.RESULT and isinstance(m.result, dict) and "protocolVersion" in m.result
        for m in messages
    )


def select_mode(client_era: Era, upstream: UpstreamEras, bridge: str) -> Mode:
    """The engine for one request: pass-through unless the eras differ and bridging is on."""
    if bridge == "off" or not upstream.known:
        return Mode.PASSTHROUGH
    if client_era is Era.LEGACY and not upstream.legacy:
        return Mode.LEGACY_TO_MRTR
    if client_era is Era.MODERN and not upstream.modern:
        return Mode.MRTR_TO_LEGACY
    return Mode.PASSTHROUGH
