"""The composition root's own choices: chain ids that never repeat across restarts, the redactor it
builds, the allocator's threshold for big blocks."""

from __future__ import annotations

import os
import platform
import re
import subprocess
import sys

import pytest

from proxy.config import Settings
from proxy.flows.events import Channel, Direction
from proxy.runtime import Proxy
from proxy.runtime_build import redactor_for
from proxy.wire.jsonrpc import classify_value
from tests.peers.runner import REPO_ROOT

UPSTREAM = "http://127.0.0.1:9/mcp"


def first_chain_id(proxy: Proxy) -> str:
    proxy.builder.open_exchange("x1", http_method="POST", path="/mcp", headers={}, session=None)
    call = classify_value({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    chain = proxy.builder.message("x1", call, size=10, direction=Direction.TO_SERVER, channel=Channel.POST)
    assert chain is not None
    return chain


def test_chain_ids_of_two_runs_never_collide() -> None:
    settings = Settings(upstream=UPSTREAM)
    one, two = first_chain_id(Proxy(settings)), first_chain_id(Proxy(settings))

    assert one != two
    assert re.fullmatch(r"c[0-9a-f]{6}-1", one), one


def test_the_redactor_masks_the_built_in_entries_plus_the_users_and_drops_only_unredacted_ones() -> None:
    value = "v-secret-value"
    default = redactor_for(Settings(upstream=UPSTREAM))
    added = redactor_for(
        Settings(upstream=UPSTREAM, redact_headers=["x-tenant"], redact_header_patterns=["priv"])
    )
    dropped = redactor_for(Settings(upstream=UPSTREAM, unredact_headers=["mcp-session-id", "session"]))

    for name in ("Authorization", "Cookie", "X-Auth", "X-Access-Key", "X-Credentials", "Mcp-Session-Id"):
        assert default.headers({name: value})[name] != value, name
        assert added.headers({name: value})[name] != value, name
    tenant = "acme-tenant"  # another value: the credentials above are masked wherever they show up
    assert default.headers({"X-Tenant": tenant})["X-Tenant"] == tenant
    assert default.headers({"X-Tenant": value})["X-Tenant"] != value
    assert added.headers({"X-Tenant": value, "X-Priv-Id": value}) != {"X-Tenant": value, "X-Priv-Id": value}
    assert dropped.headers({"Mcp-Session-Id": value})["Mcp-Session-Id"] == value
    assert dropped.headers({"Authorization": value})["Authorization"] != value


def test_a_configured_redact_key_gives_the_same_masks_across_restarts_and_none_differs_per_run() -> None:
    keyed = Settings(upstream=UPSTREAM, redact_key="a-long-deployment-key")
    assert redactor_for(keyed).token("abcd") == redactor_for(keyed).token("abcd")
    assert redactor_for(Settings(upstream=UPSTREAM)).token("abcd") != redactor_for(
        Settings(upstream=UPSTREAM)
    ).token("abcd")


_BIG_ALLOCATION = """
import ctypes, sys
from proxy.runtime_tuning import tune_malloc

class Info(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
        "keepcost",
    )]

libc = ctypes.CDLL(None)
libc.mallinfo2.restype = Info
print(tune_malloc() if sys.argv[1] == "tuned" else "untouched")
body = bytearray(8 << 20)
del body  # glibc raises its mmap threshold to the size of the first big block it frees
mapped = libc.mallinfo2().hblkhd
body = bytearray(8 << 20)
print((libc.mallinfo2().hblkhd - mapped) >> 20)
"""


def _big_body_mapped_mib(how: str, **env: str) -> tuple[str, int]:
    """In a fresh interpreter: what tune_malloc said, and the MiB of a second 8 MiB block in pages of
    its own (mmapped, given back when freed) rather than in the heap the process keeps."""
    done = subprocess.run(
        [sys.executable, "-c", _BIG_ALLOCATION, how],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, **env},
        cwd=REPO_ROOT,
    )
    said, mapped = done.stdout.split()
    return said, int(mapped)


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="the threshold is glibc's (mallinfo2, mallopt)")
def test_a_big_body_gets_pages_of_its_own_after_the_first_is_freed_so_a_burst_gives_its_memory_back() -> None:
    assert _big_body_mapped_mib("untouched") == ("untouched", 0)  # glibc's own moving threshold
    assert _big_body_mapped_mib("tuned") == ("True", 8)
    # A threshold the user chose in the environment stays theirs.
    assert _big_body_mapped_mib("tuned", MALLOC_MMAP_THRESHOLD_=str(64 << 20)) == ("False", 0)


def test_a_stdio_servers_hidden_arguments_and_secret_environment_are_masked_where_it_echoes_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GITHUB_PERSONAL_ACCESS_TOKEN", "ghp_LEAKenv0123456789")
    monkeypatch.setenv("DATABASE_URL", "postgres://app:dbLEAKpw-0083@db/app")
    settings = Settings(upstream_cmd="python server.py --api-key argkeyLEAK-1111", listen="127.0.0.1:0")

    proxy = Proxy(settings)

    echoed = proxy.redactor.scrub(
        "started with argkeyLEAK-1111, token ghp_LEAKenv0123456789, DATABASE_URL=postgres://app:dbLEAKpw-0083@db/app"
    )
    assert "LEAK" not in echoed
    assert "argkeyLEAK" not in proxy.upstream.shown
