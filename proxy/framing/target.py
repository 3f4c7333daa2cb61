"""A client's request target and `Host`, checked as RFC 9112 asks of a server before anything is routed.

The proxy maps the client's path onto the upstream's and decides by that path whether a request is the
MCP endpoint's (and so may be bridged). A path the upstream would read differently from the proxy
(dot segments, which servers resolve and the proxy does not; a `#fragment`, which origin form has no
place for and a server drops before routing) or a request naming no host or two hosts is refused here
with 400, so the proxy's view and the upstream's never part. An absolute-form target
(`http://host/path`) is taken apart as section 3.2.2 says: its authority stands for `Host`, its path
and query are what the proxy maps.

Pure: no I/O; the lean front and the aiohttp entry both call it.
"""

from __future__ import annotations

import re

from proxy.framing.classify import Rejection
from proxy.framing.status import gateway_error
from proxy.wire.jsonrpc import Kind, parse_body
from proxy.wire.values import value

_USERINFO = re.compile(r"(//)[^/?#@]*@")
_QUERY_VALUE = re.compile(r"([?&][^=&#]*=)[^&#]*")


@value
class Target:
    """Where a checked request goes: its origin-form path and query, and the host it named."""

    path_qs: str
    """The path and query as sent (percent-encoding kept), in origin form."""
    host: str | None
    """The authority of an absolute-form target, which replaces the `Host` header; None for origin form."""


@value
class TargetProblem:
    """Why a request's target or `Host` is refused, and which field it is about."""

    field: str
    text: str


def check_target(target: str, host_count: int, *, http10: bool) -> Target | TargetProblem:
    """Check a request target and how many `Host` fields came with it; the origin form to route, or why not.

    HTTP/1.1 requires exactly one `Host` (RFC 9112 section 3.2); an HTTP/1.0 request may omit it.
    """
    if host_count > 1:
        return TargetProblem("Host", f"{host_count} Host header fields; a request names exactly one host")
    if host_count == 0 and not http10:
        return TargetProblem("Host", "no Host header field; HTTP/1.1 requests must name their host")
    if "#" in target:
        return TargetProblem(
            "request target",
            f"the target {_shown(target.partition('#')[0][:200])!r} carries a '#fragment'; a request target "
            "never has one (RFC 9112 section 3.2), send it without",
        )
    host: str | None = None
    path_qs = target
    if not target.startswith("/"):
        split = _absolute_form(target)
        if isinstance(split, TargetProblem):
            return split
        host, path_qs = split
    path = path_qs.split("?", 1)[0]
    if ("." in path or "%2" in path) and _has_dot_segment(path):
        return TargetProblem(
            "request target",
            f"the path {path[:200]!r} has a '.' or '..' segment; send the path with those resolved",
        )
    return Target(path_qs, host)


def _absolute_form(target: str) -> tuple[str, str] | TargetProblem:
    """`http://authority/path?query` split into the authority and the origin form (`/` for no path)."""
    scheme, sep, rest = target.partition("://")
    if not sep or scheme.lower() not in ("http", "https"):
        return TargetProblem(
            "request target", f"{_shown(target[:200])!r} is neither a path (/mcp) nor an http(s) URL"
        )
    cut = min((i for i in (rest.find("/"), rest.find("?")) if i >= 0), default=len(rest))
    authority, tail = rest[:cut], rest[cut:]
    if not authority or "@" in authority:  # the userinfo may be a credential: never echoed
        return TargetProblem("request target", f"an absolute {scheme} URL with no host, or with userinfo")
    return authority, tail if tail.startswith("/") else "/" + tail


def _shown(target: str) -> str:
    """A refused target as the refusal may echo it: it also reaches the capture and the feed, so any
    userinfo and every query value are masked."""
    return _QUERY_VALUE.sub(r"\1<redacted>", _USERINFO.sub(r"\1<redacted>@", target))


def _has_dot_segment(path: str) -> bool:
    """A `.` or `..` segment, spelled raw or percent-encoded (`%2e`), anywhere in the path."""
    for segment in path.split("/"):
        if segment and segment.replace("%2e", ".").replace("%2E", ".") in (".", ".."):
            return True
    return False


def refuse_target(problem: TargetProblem, http_method: str, raw: bytes) -> Rejection:
    """The 400 for a refused target or `Host`: a JSON-RPC error naming the field, with the request's id."""
    ident = None
    if http_method == "POST" and raw:
        first = parse_body(raw).first
        if first is not None and first.kind is Kind.REQUEST:
            ident = first.id
    status, body = gateway_error(400, ident, f"{problem.field}: {problem.text}", {"field": problem.field})
    return Rejection(status, body, f"bad {problem.field}")
