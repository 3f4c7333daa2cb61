"""Capability and version translation between a legacy (2025-era) client and a 2026-07-28 server.

The legacy->MRTR bridge declares to the upstream exactly what the client declared at `initialize`,
in 2026 shape, and never lets the upstream ask for something the client cannot serve. Both decisions
live here as pure functions over plain JSON dicts so that one table (protocol notes 1.6 and 3.4)
drives both the declaration and the gate: whatever `modern_client_capabilities` leaves out,
`missing_capability` refuses.

Nothing here knows about sessions, legs or commands.
"""

from __future__ import annotations

import copy
from typing import Any, Final

from proxy.wire.capabilities import has_capability, request_params, required_capability
from proxy.wire.versions import HANDSHAKE_VERSIONS, LATEST_LEGACY, is_at_least

BRIDGEABLE_CLIENT_VERSIONS: Final[tuple[str, ...]] = HANDSHAKE_VERSIONS
"""Legacy versions the bridge negotiates: every handshake version, so a client pinned to one it
supports (an HTTP+SSE client on 2024-11-05, say) gets it; the capability gate holds back what its
wire cannot carry."""

SERVER_CAPABILITIES_KEPT: Final[tuple[str, ...]] = (
    "tools",
    "prompts",
    "resources",
    "completions",
    "experimental",
)
"""Upstream capability families a legacy client understands; 2026-only families are dropped."""


_MIN_VERSION: Final[dict[str, str]] = {
    "elicitation.form": "2025-06-18",
    "elicitation.url": "2025-11-25",
    "sampling.tools": "2025-11-25",
}
"""The first legacy version whose wire can carry each capability."""


def negotiate_version(requested: Any) -> str:
    """The version the bridge answers `initialize` with: the client's if bridgeable, else the latest."""
    if isinstance(requested, str) and requested in BRIDGEABLE_CLIENT_VERSIONS:
        return requested
    return LATEST_LEGACY


def legacy_server_capabilities(modern: Any) -> dict[str, Any]:
    """The capabilities shown to a legacy client: upstream's known families plus emulated logging.

    `resources.subscribe` survives only when the upstream honours `resourceSubscriptions` on
    `subscriptions/listen`, which is how the bridge emulates `resources/subscribe`; logging is always
    offered because `logging/setLevel` is answered locally and carried upstream as `_meta.logLevel`.
    """
    source = modern if isinstance(modern, dict) else {}
    out = {key: copy.deepcopy(source[key]) for key in SERVER_CAPABILITIES_KEPT if key in source}
    resources = out.get("resources")
    if isinstance(resources, dict) and not resources.get("subscribe"):
        resources.pop("subscribe", None)
    out["logging"] = {}
    return out


def can_subscribe(modern: Any) -> bool:
    """True when the upstream declared `resources.subscribe` (so the bridge can emulate it)."""
    resources = modern.get("resources") if isinstance(modern, dict) else None
    return isinstance(resources, dict) and bool(resources.get("subscribe"))


def listen_flags(modern: Any) -> dict[str, bool]:
    """The list-changed toggles of `subscriptions/listen` the upstream can deliver."""
    source = modern if isinstance(modern, dict) else {}
    flags: dict[str, bool] = {}
    for family, flag in (
        ("tools", "toolsListChanged"),
        ("prompts", "promptsListChanged"),
        ("resources", "resourcesListChanged"),
    ):
        caps = source.get(family)
        if isinstance(caps, dict) and caps.get("listChanged"):
            flags[flag] = True
    return flags


def modern_client_capabilities(legacy: Any, version: str) -> dict[str, Any]:
    """Translate `initialize` capabilities into the 2026 `clientCapabilities` the client can serve.

    Drops legacy `tasks` and `roots.listChanged` (not in 2026 core) and whatever the negotiated
    version cannot carry on the wire: elicitation before 2025-06-18, URL mode and `sampling.tools`
    before 2025-11-25. Unknown families are kept (relay-safe), `{}` elicitation stays form-only.
    """
    source = legacy if isinstance(legacy, dict) else {}
    out = {key: copy.deepcopy(value) for key, value in source.items() if key != "tasks"}
    roots = out.get("roots")
    if isinstance(roots, dict):
        roots.pop("listChanged", None)
    if "elicitation" in out:
        _narrow_elicitation(out, version)
    sampling = out.get("sampling")
    if isinstance(sampling, dict) and not is_at_least(version, "2025-11-25"):
        sampling.pop("tools", None)
    return out


def _narrow_elicitation(caps: dict[str, Any], version: str) -> None:
    """Remove the elicitation modes the negotiated version has no wire form for."""
    if not is_at_least(version, "2025-06-18"):
        del caps["elicitation"]
        return
    elicitation = caps["elicitation"]
    if not isinstance(elicitation, dict):
        caps["elicitation"] = {}
        return
    if not is_at_least(version, "2025-11-25") and "url" in elicitation:
        elicitation.pop("url")
        if not elicitation:
            del caps["elicitation"]


def unservable(entries: dict[str, Any], caps: dict[str, Any], version: str) -> list[str]:
    """Explain every entry of an `inputRequests` map the client cannot serve (empty: all servable).

    Runs before any nested request is emitted, as the SDK shims do: a round is all or nothing.
    """
    problems: list[str] = []
    for key, entry in entries.items():
        needed = required_capability(entry) if isinstance(entry, dict) else None
        if needed is None:
            method = entry.get("method") if isinstance(entry, dict) else None
            problems.append(f"input request {key!r} uses unsupported method {method!r}")
        elif not has_capability(caps, needed):
            problems.append(_missing(key, needed, version))
    return problems


def _missing(key: str, needed: str, version: str) -> str:
    text = f"input request {key!r} needs client capability {needed}"
    minimum = _MIN_VERSION.get(needed)
    if minimum is not None and not is_at_least(version, minimum):
        return f"{text}, which protocol {version} cannot express"
    return f"{text}, which the client did not declare at initialize"


def input_kind(entry: Any) -> str:
    """A short label of an embedded request for logs: `elicitation/create:url`, `roots/list`, ..."""
    if not isinstance(entry, dict):
        return "invalid"
    method = entry.get("method")
    params = request_params(entry)
    if method == "elicitation/create":
        return f"elicitation/create:{params.get('mode', 'form')}"
    return method if isinstance(method, str) else "invalid"
