"""Which era the replay's proxy speaks to the server in: the one the recording spoke, unless the user says.

A chain is comparable with its recording only when the proxy in front of the server did the same
thing both times. A capture recorded with `--upstream-era legacy` in front of a server that speaks
both eras went through the MRTR->legacy bridge for every 2026-07-28 client; a replay that probes
finds both eras and passes those clients through instead, and every chain differs for the proxy's
sake, not the server's. So the capture's `proxy_info` (the era it found or was told, and whether it
was told) decides, after the replay's own probe says what the server speaks now:

- the user's `--upstream-era` (or a non-auto `upstream_era` setting) wins, as it always did;
- an era the recording was forced to is forced again; a server that no longer speaks it is refused
  in plain words (`EraUnspoken`), not replayed into a page of differences;
- an era the recording found by probing one-era server is spoken again when the server now speaks
  both; when it speaks only the other one, the bridges convert, as replaying against a server of
  the other era is meant to;
- anything else (a dual-era or unknown recording) is probed, as before.

Pure: the labels in, the choice out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

EraSetting = Literal["auto", "legacy", "modern"]

ONE_ERA: Final[dict[str, EraSetting]] = {"legacy": "legacy", "modern": "modern"}
"""Era labels that name one era, as the setting that forces it (the others: `dual`, `unknown`)."""


@dataclass(frozen=True)
class RecordedEra:
    """What the capture's `proxy_info` says of the upstream's era when it was recorded (the first
    line that knew it: a recording proxy may learn it only from the first request it forwarded)."""

    era: str = "unknown"
    """`legacy`, `modern`, `dual` or `unknown`, as the recording proxy labelled it."""
    forced: bool = False
    """The recording proxy was told the era (`--upstream-era`) instead of probing for it."""


@dataclass(frozen=True)
class EraChoice:
    """The era setting of the replay's proxy, and why, in the words the report uses."""

    setting: EraSetting
    why: str


class EraUnspoken(Exception):
    """The recording's forced era is one the server no longer speaks: nothing would replay as recorded."""


def users_era(flag: EraSetting | None, setting: EraSetting) -> EraChoice | None:
    """The era the user chose (`--upstream-era`, else a non-auto `upstream_era` setting), or None."""
    if flag is not None:
        return EraChoice(flag, f"--upstream-era {flag}")
    if setting != "auto":
        return EraChoice(setting, f"the upstream_era setting, {setting}")
    return None


def recorded_era(recorded: RecordedEra, probed: str) -> EraChoice:
    """The era to replay in when the user chose none: the recording's, given what the probe found now.

    Raises EraUnspoken when the recording was forced to an era the server no longer speaks.
    """
    era = ONE_ERA.get(recorded.era)
    if era is None:
        said = "a dual-era upstream" if recorded.era == "dual" else "no era of the upstream"
        return EraChoice("auto", f"the capture recorded {said}")
    speaks = probed in (era, "dual")
    if recorded.forced:
        if probed in ONE_ERA and not speaks:
            raise EraUnspoken(
                f"the capture was recorded with the upstream era forced to {era}, and the server no "
                f"longer speaks {era} (it speaks {probed} only); --upstream-era auto replays through "
                "the proxy's bridge instead"
            )
        return EraChoice(era, f"recorded with the upstream era forced to {era}")
    if probed == "dual":
        return EraChoice(era, f"recorded in front of a {era} server; this one speaks both eras")
    if probed in ONE_ERA and not speaks:
        return EraChoice("auto", f"recorded in front of a {era} server; this one speaks {probed} only")
    return EraChoice("auto", f"recorded in front of a {era} server")
