"""Per-address stream slots: the refusals past an address's share, and the lines that tell of them."""

from __future__ import annotations

from proxy.engine.flood_lines import FloodLines
from proxy.transport.client_slots import ClientSlots
from tests.transport.helpers import captured_logs


def full_slots(*peers: str) -> ClientSlots:
    """A share of one stream per address, each of `peers` holding it."""
    slots = ClientSlots("max_streams_per_client", "streams", 1, FloodLines())
    for peer in peers:
        assert slots.take(peer)
    return slots


def test_two_addresses_refused_in_turn_get_one_line_a_second_each() -> None:
    slots = full_slots("10.0.0.1", "10.0.0.2")
    with captured_logs() as logs:
        for at, peer in ((1.0, "10.0.0.1"), (1.1, "10.0.0.2"), (1.2, "10.0.0.1"), (1.3, "10.0.0.2")):
            assert slots.refusal(peer, None, at).status == 429
        slots.refusal("10.0.0.1", None, 2.5)
    lines = [(e["peer"], e.get("also_unlogged")) for e in logs if e["event"] == "client_streams_refused"]
    assert lines == [("10.0.0.1", None), ("10.0.0.2", None), ("10.0.0.1", 1)]
    assert slots.refused == 5


def test_an_address_that_gives_back_its_last_slot_leaves_nothing_behind() -> None:
    """The table of lines stays as small as the table of addresses holding slots."""
    slots = full_slots("10.0.0.1")
    slots.refusal("10.0.0.1", None, 1.0)
    slots.give_back("10.0.0.1")
    assert slots.held == {}
    assert not slots._lines
