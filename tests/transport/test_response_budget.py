"""The response budget (`max_response_bytes_in_flight`): shares grow, shrink and always come back,
and an observer with no room relays the rest unread, saying why."""

from __future__ import annotations

import pytest

from proxy.transport.observe import BodyObserver
from proxy.transport.response_budget import COUNTED_RESPONSE, ResponseBudget

BIG = 4 * COUNTED_RESPONSE


def test_a_share_grows_and_shrinks_within_the_limit_and_comes_back_whole() -> None:
    budget = ResponseBudget(2 * BIG)
    first, second = budget.hold(), budget.hold()
    assert first.settle(BIG)
    assert second.settle(BIG)
    assert not first.settle(BIG + 1)  # no room: nothing more is counted
    assert (budget.held, first.size) == (2 * BIG, BIG)
    assert first.settle(COUNTED_RESPONSE - 1)  # below the counted size: nothing is counted
    assert budget.held == BIG
    second.release()
    second.release()  # again: a no-op
    assert budget.held == 0
    assert budget.peak == 2 * BIG


def hold_then_break(budget: ResponseBudget) -> None:
    """Take a share in a `with` block that raises, as an exchange cut or cancelled does."""
    with budget.hold() as hold:
        assert hold.settle(BIG)
        raise RuntimeError("the exchange broke")


def test_a_share_taken_in_a_with_block_comes_back_when_the_block_raises() -> None:
    budget = ResponseBudget(BIG)
    with pytest.raises(RuntimeError):
        hold_then_break(budget)
    assert budget.held == 0


def _observer(
    budget: ResponseBudget, *, sse: bool, declared: int | None = None
) -> tuple[BodyObserver, list[int]]:
    extra: list[int] = []
    observer = BodyObserver(
        sse=sse,
        sink=lambda *_: None,
        on_extra_bytes=extra.append,
        declared_size=declared,
        limit=10 * BIG,
        hold=budget.hold(),
    )
    return observer, extra


def test_a_json_body_with_no_room_for_its_declared_length_is_relayed_unread_naming_the_setting() -> None:
    budget = ResponseBudget(BIG)
    observer, extra = _observer(budget, sse=False, declared=BIG + 1)
    observer.feed(b"x" * (BIG + 1))
    assert observer.finish() is None
    assert "max_response_bytes_in_flight" in str(observer.not_inspected)
    assert sum(extra) == BIG + 1  # every relayed byte still counted once
    assert budget.held == 0
    assert budget.refused["not_inspected"] == 1


def test_an_sse_event_still_arriving_counts_until_it_completes_and_the_exchanges_end_frees_the_rest() -> None:
    budget = ResponseBudget(BIG)
    observer, _ = _observer(budget, sse=True)
    observer.feed(b"data: " + b"x" * (2 * COUNTED_RESPONSE))
    assert budget.held > 2 * COUNTED_RESPONSE
    observer.feed(b"\n\n")
    assert budget.held == 0
    observer.feed(b"data: " + b"y" * (2 * COUNTED_RESPONSE))
    observer.stop()  # the exchange ended mid-event (the client left)
    assert budget.held == 0
    assert observer.not_inspected is None
