"""Which client capability a server's request to the client needs, and whether a client declared it.

Protocol facts, shared by the bridges (which gate what a server may ask through them) and the chain
builder (which notes a question the client never said it could answer). Capabilities are the
client's, in the shape either era declares them (a legacy `initialize`'s `capabilities`, a 2026-07-28
request's `_meta` `clientCapabilities`): `elicitation: {}` is form elicitation, as 2025-06-18 meant.
"""

from __future__ import annotations

from typing import Any


def required_capability(entry: dict[str, Any]) -> str | None:
    """The 2026 capability an embedded request needs (TS `requiredClientCapabilitiesForInputRequest`).

    None means the method is not one MRTR may embed, so no capability can make it servable.
    """
    method = entry.get("method")
    params = request_params(entry)
    if method == "elicitation/create":
        return "elicitation.url" if params.get("mode") == "url" else "elicitation.form"
    if method == "sampling/createMessage":
        return "sampling.tools" if "tools" in params or "toolChoice" in params else "sampling"
    if method == "roots/list":
        return "roots"
    return None


def has_capability(caps: dict[str, Any], needed: str) -> bool:
    """Whether translated client capabilities cover `needed` (a `required_capability` value)."""
    elicitation = caps.get("elicitation")
    sampling = caps.get("sampling")
    match needed:
        case "elicitation.url":
            return isinstance(elicitation, dict) and "url" in elicitation
        case "elicitation.form":
            return isinstance(elicitation, dict) and (not elicitation or "form" in elicitation)
        case "sampling.tools":
            return isinstance(sampling, dict) and "tools" in sampling
        case "sampling" | "roots":
            return needed in caps
    return False


def request_params(entry: dict[str, Any]) -> dict[str, Any]:
    """The `params` of a request object, or {} when it has none (or they are no object)."""
    params = entry.get("params")
    return params if isinstance(params, dict) else {}
