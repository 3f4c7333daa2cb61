"""The upstream's CORS answer carried onto a bridge's own answers, by origin, bounded."""

from __future__ import annotations

from proxy.wire.cors import ORIGINS_KEPT, CorsAnswers, origin_of

PAGE = "http://localhost:6274"
EVERYTHING = (
    ("Content-Type", "application/json"),
    ("Access-Control-Allow-Origin", "*"),
    ("Access-Control-Expose-Headers", "mcp-session-id,last-event-id,mcp-protocol-version"),
)


def test_an_answer_to_a_page_gets_the_upstreams_cors_headers_and_nothing_else_of_its_head() -> None:
    cors = CorsAnswers()
    cors.learn(PAGE, EVERYTHING)

    assert cors.add_to(PAGE, (("Retry-After", "1"),)) == (("Retry-After", "1"), *EVERYTHING[1:])


def test_nothing_is_added_for_a_request_without_an_origin_or_an_upstream_without_cors() -> None:
    cors = CorsAnswers()
    cors.learn(PAGE, (("Content-Type", "application/json"),))
    cors.learn(None, EVERYTHING)

    assert cors.add_to(PAGE, ()) == ()
    assert cors.add_to(None, ()) == ()
    assert len(cors) == 0


def test_a_session_the_bridge_mints_is_exposed_when_the_upstream_allows_the_origin() -> None:
    cors = CorsAnswers()
    cors.learn(PAGE, (("Access-Control-Allow-Origin", PAGE), ("Access-Control-Expose-Headers", "x-trace")))
    minted = (("Mcp-Session-Id", "s-1"),)

    assert cors.add_to(PAGE, minted) == (
        *minted,
        ("Access-Control-Allow-Origin", PAGE),
        ("Access-Control-Expose-Headers", "x-trace, Mcp-Session-Id"),
    )
    assert cors.add_to("http://elsewhere.example", minted) == minted


def test_a_header_the_bridge_sets_itself_is_never_overridden() -> None:
    cors = CorsAnswers()
    cors.learn(PAGE, EVERYTHING)
    own = (("Access-Control-Allow-Origin", PAGE),)

    assert cors.add_to(PAGE, own)[:1] == own
    assert [k for k, _ in cors.add_to(PAGE, own)].count("Access-Control-Allow-Origin") == 1


def test_origins_are_bounded_the_least_recently_answered_going_first() -> None:
    cors = CorsAnswers()
    for n in range(ORIGINS_KEPT + 5):
        cors.learn(f"http://o{n}.example", EVERYTHING)

    assert len(cors) == ORIGINS_KEPT
    assert cors.add_to("http://o0.example", ()) == ()
    assert cors.add_to(f"http://o{ORIGINS_KEPT + 4}.example", ()) != ()


def test_the_origin_is_read_in_any_case() -> None:
    assert origin_of((("ORIGIN", PAGE),)) == PAGE
    assert origin_of((("Host", "x"),)) is None
