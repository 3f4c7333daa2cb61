"""The era a replay speaks to the server in: the user's, else the one the recording spoke."""

from __future__ import annotations

import pytest

from proxy.replay.era import EraChoice, EraUnspoken, RecordedEra, recorded_era, users_era

FORCED_LEGACY = RecordedEra("legacy", forced=True)


def test_the_users_flag_wins_then_a_setting_that_is_not_auto_and_else_nothing_is_chosen() -> None:
    assert users_era("auto", "legacy") == EraChoice("auto", "--upstream-era auto")
    assert users_era(None, "modern") == EraChoice("modern", "the upstream_era setting, modern")
    assert users_era(None, "auto") is None


@pytest.mark.parametrize("probed", ["dual", "legacy", "unknown"])
def test_a_recording_forced_to_an_era_is_forced_again_wherever_the_server_may_speak_it(probed: str) -> None:
    assert recorded_era(FORCED_LEGACY, probed) == EraChoice(
        "legacy", "recorded with the upstream era forced to legacy"
    )


def test_a_recording_forced_to_an_era_the_server_no_longer_speaks_is_refused_in_plain_words() -> None:
    with pytest.raises(EraUnspoken) as refused:
        recorded_era(RecordedEra("modern", forced=True), "legacy")

    assert str(refused.value) == (
        "the capture was recorded with the upstream era forced to modern, and the server no longer "
        "speaks modern (it speaks legacy only); --upstream-era auto replays through the proxy's bridge "
        "instead"
    )


def test_a_probed_one_era_recording_speaks_that_era_to_a_server_that_now_speaks_both() -> None:
    assert recorded_era(RecordedEra("modern"), "dual") == EraChoice(
        "modern", "recorded in front of a modern server; this one speaks both eras"
    )


def test_a_probed_one_era_recording_goes_through_the_bridge_to_a_server_of_the_other_era() -> None:
    assert recorded_era(RecordedEra("legacy"), "modern") == EraChoice(
        "auto", "recorded in front of a legacy server; this one speaks modern only"
    )
    assert recorded_era(RecordedEra("legacy"), "legacy").setting == "auto"


@pytest.mark.parametrize(
    ("era", "why"),
    [
        ("dual", "the capture recorded a dual-era upstream"),
        ("unknown", "the capture recorded no era of the upstream"),
    ],
)
def test_a_recording_of_no_one_era_is_probed(era: str, why: str) -> None:
    assert recorded_era(RecordedEra(era), "dual") == EraChoice("auto", why)
