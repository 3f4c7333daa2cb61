"""Query strings of the admin API: every endpoint that takes query parameters reads them here.

A parameter name an endpoint does not take is refused with 400 naming it and the names the endpoint
takes, never ignored: a misspelled filter or bound that were ignored would answer 200 as if it were
not given, and a script would not know it never applied. So is a parameter read once (a bound, a
cursor) given twice: one of the two would be dropped without a word. Refusals are JSON like every
admin answer. An endpoint that takes no parameters refuses any (`DELETE /api/faults?id=f1`, ignored,
would take every rule out of force); `/healthz` and `/readyz` alone answer whatever query a probe
sends, as they answer whatever `Host`, `Origin` or token it sends.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable

import orjson
from aiohttp import web
from aiohttp.typedefs import Middleware
from multidict import MultiMapping

from proxy.transport.admin_names import did_you_mean


class BadQuery(web.HTTPBadRequest):
    """A 400 whose JSON body names the query parameter at fault and what it accepts."""

    def __init__(self, message: str) -> None:
        super().__init__(
            text=orjson.dumps({"error": "bad_request", "message": message}).decode(),
            content_type="application/json",
        )


def known_only(query: MultiMapping[str], known: Iterable[str], repeatable: Iterable[str] = ()) -> None:
    """BadQuery naming each parameter in `query` that is not one of `known` (with the closest known
    name, when one is close) and every name the endpoint takes; or naming each one given more than
    once that is not `repeatable` (a filter may repeat; a bound read once would drop the other)."""
    names = sorted(set(known))
    unknown = sorted(set(query) - set(names))
    if unknown:
        named = ", ".join(f"{name!r}{did_you_mean(name, names)}" for name in unknown)
        takes = ", ".join(names) or "no parameters"
        raise BadQuery(f"unknown parameter {named}; this endpoint takes {takes}")
    many = set(repeatable)
    repeated = sorted(name for name in set(query) if name not in many and len(query.getall(name)) > 1)
    if repeated:
        named = ", ".join(repr(name) for name in repeated)
        raise BadQuery(f"parameter {named} given more than once; give each once")


def int_param(query: MultiMapping[str], name: str, default: int, low: int, high: int) -> int:
    """An integer parameter; above `high` means "all there are" (a remote client cannot know the bound).
    Given empty (`limit=`) it is refused, not read as its default: a script's unset variable says so."""
    text = query.get(name)
    if text is None:
        return max(low, min(default, high))
    try:
        value = int(text)
    except ValueError:
        raise BadQuery(f"{name} must be an integer of at least {low}, got {text!r}") from None
    if value < low:
        raise BadQuery(f"{name} must be an integer of at least {low}, got {value}")
    return min(value, high)


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def parameterless_unless(takers: Iterable[str], exempt: Iterable[str]) -> Middleware:
    """The middleware that refuses any query parameter on a routed path other than `takers` (whose
    handlers judge their own names) and `exempt`; unknown paths and methods keep their 404 and 405."""
    judged = frozenset((*takers, *exempt, None))

    @web.middleware
    async def parameterless(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.query and _path_of(request) not in judged:
            known_only(request.query, ())
        return await handler(request)

    return parameterless


def _path_of(request: web.Request) -> str | None:
    """The routed path a request is for (`/api/chains/{chain_id}`); None when nothing takes it (404, 405)."""
    match = request.match_info
    resource = match.route.resource
    return resource.canonical if match.http_exception is None and resource is not None else None
