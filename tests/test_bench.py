"""The in-process benchmark (`bench/inproc.py`, behind `bench/instructions.sh`) runs against this proxy."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_the_in_process_benchmark_drives_a_few_calls_through_the_proxy() -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "inproc.py"), "--requests", "5", "--clients", "2"],
        capture_output=True,
        text=True,
        timeout=45,
        check=False,
    )

    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("5 requests, 2 client(s)"), done.stdout
