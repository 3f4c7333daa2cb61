"""The protocol-version registry and the two eras.

Versions are an enumerated set, never compared as dates: an unknown string is treated conservatively.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Final

from proxy.wire.errors import UNSUPPORTED_PROTOCOL_VERSION


class Era(StrEnum):
    """Which family of MCP a peer speaks: `legacy` opens with `initialize`, `modern` is per-request."""

    LEGACY = "legacy"
    MODERN = "modern"
    UNKNOWN = "unknown"


HANDSHAKE_VERSIONS: Final[tuple[str, ...]] = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
"""Versions reached through the `initialize` handshake (legacy era), oldest first."""

MODERN_VERSIONS: Final[tuple[str, ...]] = ("2026-07-28",)
"""Versions that use the stateless per-request `_meta` envelope (modern era)."""

KNOWN_VERSIONS: Final[tuple[str, ...]] = (*HANDSHAKE_VERSIONS, *MODERN_VERSIONS)
"""Every released protocol revision, oldest first."""

LATEST_LEGACY: Final[str] = HANDSHAKE_VERSIONS[-1]
"""The newest handshake version; what the proxy offers when it must open a legacy session."""

LATEST_MODERN: Final[str] = MODERN_VERSIONS[-1]
"""The newest modern version; what the proxy speaks toward a modern peer."""


def era_of_version(version: str | None) -> Era:
    """Map a protocol-version string to its era; unknown strings are `UNKNOWN`, never guessed."""
    if version is None:
        return Era.UNKNOWN
    if version in MODERN_VERSIONS:
        return Era.MODERN
    if version in HANDSHAKE_VERSIONS:
        return Era.LEGACY
    return Era.UNKNOWN


def is_at_least(version: str, minimum: str) -> bool:
    """True when `version` is a known revision no older than `minimum` (which must be known)."""
    if minimum not in KNOWN_VERSIONS:
        raise ValueError(f"minimum must be a known protocol version, got {minimum!r}")
    if version not in KNOWN_VERSIONS:
        return False
    return KNOWN_VERSIONS.index(version) >= KNOWN_VERSIONS.index(minimum)


def denies_handshake(error: dict[str, Any]) -> bool:
    """Whether a JSON-RPC error refusing a request says the handshake era is not served at all:
    -32022 (unsupported protocol version) whose `data.supported` lists versions, none of them a
    handshake one (a 2026-07-28-only server refusing `initialize`)."""
    if error.get("code") != UNSUPPORTED_PROTOCOL_VERSION:
        return False
    data = error.get("data")
    supported = data.get("supported") if isinstance(data, dict) else None
    return isinstance(supported, list) and not any(v in HANDSHAKE_VERSIONS for v in supported)
