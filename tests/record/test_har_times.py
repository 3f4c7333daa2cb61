"""HAR times: each message's ISO 8601 time is the one `datetime` gives, however its microseconds round."""

from __future__ import annotations

import random
from datetime import UTC, datetime

from proxy.record.har import iso_time


def by_datetime(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def test_iso_time_is_datetimes_for_any_time_and_at_every_rounding_edge() -> None:
    rng = random.Random(16)
    times = [rng.uniform(0, 4e9) for _ in range(20_000)]
    # half a microsecond either side of each microsecond step, and the carry into the next second
    times += [
        s + k / 1e6 + d for s in (0, 1764620000) for k in range(0, 1_000_000, 7919) for d in (0, 5e-7, -5e-7)
    ]
    times += [1796177727.9999995, 1796177727.99999949, 1796177727.9995, 1764620000.25]
    for t in times:
        if t >= 0:
            assert iso_time(t) == by_datetime(t), t
