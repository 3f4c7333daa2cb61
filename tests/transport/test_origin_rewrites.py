"""What one exchange's origin rewrites say: each rewrite logged and recorded once."""

from __future__ import annotations

import time
from typing import cast

from proxy.engine.oauth_origin import DocumentPaths, Origins
from proxy.flows.events import Direction
from proxy.flows.sink import ObservationSink
from proxy.framing.classify import Route, classify
from proxy.framing.http import parse_upstream
from proxy.transport.origin_rewrites import OriginRewrites

UPSTREAM = parse_upstream("http://localhost:9100/mcp")
CLIENT = "http://127.0.0.1:8080"


class _Clock:
    """The one thing the rewrites ask of the observation sink: the time."""

    def now(self) -> float:
        return time.time()


def test_a_token_request_framed_twice_has_its_resource_rewrite_said_once() -> None:
    """The relay frames a request once to try a warm connection and again to send it on a new one: the
    second framing moves `resource` again (the bytes sent must carry it) but says nothing new."""
    form = b"grant_type=authorization_code&code=c&resource=http%3A%2F%2F127.0.0.1%3A8080%2Fmcp"
    route = classify(
        "POST",
        "/token",
        [("Content-Type", "application/x-www-form-urlencoded")],
        form,
        max_body=1 << 20,
    )
    assert isinstance(route, Route)
    rewrites = OriginRewrites(
        Origins(UPSTREAM, CLIENT), cast(ObservationSink, _Clock()), "x1", DocumentPaths()
    )

    first = rewrites.resource_moved(route, "", form)
    said = rewrites.take()
    second = rewrites.resource_moved(route, "", form)

    assert first == second
    assert b"resource=http%3A%2F%2Flocalhost%3A9100%2Fmcp" in first[1], first
    assert [(r.direction, r.changed) for r in said] == [(Direction.TO_SERVER, "resource (form)")]
    assert rewrites.take() == []
