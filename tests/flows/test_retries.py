"""The retry book's waits run out in the order they began, whatever put them back."""

from __future__ import annotations

from proxy.flows.retries import UNKNOWN_STATE, Caller, RetryBook, request_signature

WINDOW = 10.0


def _expect(book: RetryBook, chain_id: str, since: float, state: str | None = None) -> None:
    result = {"requestState": state} if state is not None else {"inputRequests": {"q": {}}}
    book.expect(chain_id, request_signature("tools/call", {"name": chain_id}), result, Caller(), since)


def test_a_wait_put_back_after_a_refused_retry_runs_out_when_its_window_does() -> None:
    book = RetryBook(WINDOW)
    _expect(book, "c1", 0.0)
    _expect(book, "c2", 5.0)
    found = book.match("tools/call", {"name": "c1", "inputResponses": {"q": {}}}, Caller())
    assert found is not None
    assert found.chain_id == "c1"
    book.restore(found)  # the server refused the retry: c1 waits again, from when it first did
    assert book.overdue(WINDOW + 2) == [("c1", WINDOW)]
    assert book.overdue(5.0 + WINDOW + 1) == [("c2", 5.0 + WINDOW)]


def test_a_wait_that_ran_out_leaves_no_request_state_a_late_retry_could_join() -> None:
    book = RetryBook(WINDOW)
    _expect(book, "c1", 0.0, state="opaque")
    assert book.overdue(WINDOW + 1) == [("c1", WINDOW)]
    late = book.match("tools/call", {"name": "c1", "requestState": "opaque"}, Caller())
    assert late is not None
    assert late.chain_id is None
    assert late.unmatched_note == UNKNOWN_STATE
