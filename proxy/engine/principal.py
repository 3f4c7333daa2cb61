"""Who is asking: a request's principal, as the bridges tell callers apart.

A bridge never reads a credential's meaning (that is the server's business); it only needs to know
when two requests carry the same one. The principal is the SHA-256 of the `Authorization` value, so
it can key tables, bind sealed tokens and be compared without the secret being kept or shown.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Final

from proxy.framing.http import header

ANONYMOUS: Final = "anonymous"
"""The principal of a request without `Authorization` (all such callers share it)."""


def principal_of(headers: Iterable[tuple[str, str]]) -> str:
    """SHA-256 (hex) of the request's `Authorization` value, or `anonymous` without one."""
    value = header(headers, "authorization")
    if value is None:
        return ANONYMOUS
    return hashlib.sha256(value.encode("utf-8")).hexdigest()
