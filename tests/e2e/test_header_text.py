"""A header sent as UTF-8 is relayed as its bytes, shown as its text, and copied as curl as its bytes.

The `mcp-proxy` command, recording a capture, relays a 2026-07-28 `tools/call` whose client sends
non-ASCII header values as raw bytes: `X-Weird` and a secret `X-Api-Key` in UTF-8, `X-Latin` in
bytes that are not UTF-8 (a legacy client's obs-text). The upstream is the raw-socket recording fake
(`tests/e2e/recording_upstream.py`): the point is the exact bytes of each header line, which no SDK
server hands over. The capture, `export --json` and `--har` must show each UTF-8 value as its text
(not its latin-1 mojibake) and mask the secret wherever its text shows, the body and the log
included; and `export --curl CHAIN --to upstream`, run by bash, must send the header bytes the
client sent.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from pathlib import Path
from typing import Any

import httpx2
import pytest

from tests.e2e.modern_raw import modern_headers, modern_params
from tests.e2e.recording_upstream import Head, recording_upstream
from tests.record.captures import as_written_by_1_9
from tests.sidecar import (
    ProxyProcess,
    chain_ids,
    clean_env,
    exported_chains,
    run_bash,
    run_mcp_proxy,
    settings_env,
)

pytestmark = pytest.mark.e2e

WEIRD = "it's café $HOME `id` 名前"
SECRET = "clé-secrète-77"
LATIN = b"caf\xe9 \xff"
"""Not UTF-8: shown as its latin-1 reading, one character per byte."""


async def test_a_utf8_header_is_relayed_as_sent_shown_as_its_text_and_copied_as_curl_as_its_bytes(
    tmp_path: Path,
) -> None:
    capture = tmp_path / "run.jsonl"
    async with recording_upstream("modern") as fake:
        env = clean_env(**settings_env(upstream=fake.url("/mcp"), capture=capture))
        # Started off the loop: the proxy probes the fake, which answers from this loop meanwhile.
        proxy = await asyncio.to_thread(ProxyProcess(env).start)
        try:
            params = modern_params({"name": "echo", "arguments": {"text": f"key {SECRET}"}})
            body = {"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": params}
            raw: dict[str, str | bytes] = {
                **modern_headers("tools/call", params),
                "X-Weird": WEIRD.encode(),
                "X-Api-Key": SECRET.encode(),
                "X-Latin": LATIN,
            }
            async with httpx2.AsyncClient(timeout=10.0) as http:
                answer = await http.post(proxy.endpoint(), json=body, headers=raw)
            assert answer.status_code == 200, answer.text
        finally:
            proxy.stop()
        (relayed,) = [h for h in fake.heads if h.method == "tools/call"]
        text, chains = await asyncio.to_thread(exported_chains, capture)
        (chain,) = chain_ids(chains, "name", "echo")
        har = await asyncio.to_thread(run_mcp_proxy, "export", "--har", "-", str(capture))
        command, replayed = await _by_hand(fake.heads, capture, chain)

    for line in (b"X-Weird: " + WEIRD.encode(), b"X-Api-Key: " + SECRET.encode(), b"X-Latin: " + LATIN):
        assert _field(relayed, line) == line  # the relay changes no byte
    shown = _request_headers(json.loads(text))
    assert shown["X-Weird"] == WEIRD
    assert shown["X-Latin"] == LATIN.decode("latin-1")
    assert re.fullmatch(r"<redacted len=14 hmac:[0-9a-f]{8}>", shown["X-Api-Key"])
    entry = next(e for e in json.loads(har.stdout)["log"]["entries"] if "tools/call" in json.dumps(e))
    assert {"name": "X-Weird", "value": WEIRD} in entry["request"]["headers"]
    for seen in ("\n".join(proxy.lines), capture.read_text("utf-8"), text, har.stdout, command):
        assert SECRET not in seen
        assert SECRET.encode().decode("latin-1") not in seen
        assert WEIRD.encode().decode("latin-1") not in seen  # no mojibake anywhere a person reads
    for line in (b"X-Weird: " + WEIRD.encode(), b"X-Api-Key: " + SECRET.encode()):
        assert _field(replayed, line) == line  # the command sends the bytes the client sent


async def test_a_capture_written_before_1_10_exports_a_utf8_header_as_its_text_and_curl_sends_its_bytes(
    tmp_path: Path,
) -> None:
    """A capture of format 1.9, made by hand from a real one (`as_written_by_1_9`: each header value
    its latin-1 reading, `cafÃ©` for `café`), is read as that text: `export --json` and `--har` show
    the text, and the `--curl` command sends the client's bytes."""
    capture = tmp_path / "run.jsonl"
    async with recording_upstream("modern") as fake:
        env = clean_env(**settings_env(upstream=fake.url("/mcp"), capture=capture))
        proxy = await asyncio.to_thread(ProxyProcess(env).start)
        try:
            params = modern_params({"name": "echo", "arguments": {"text": "hi"}})
            body = {"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": params}
            raw = {**modern_headers("tools/call", params), "X-Weird": WEIRD.encode()}
            async with httpx2.AsyncClient(timeout=10.0) as http:
                answer = await http.post(proxy.endpoint(), json=body, headers=raw)
            assert answer.status_code == 200, answer.text
        finally:
            proxy.stop()
        old = tmp_path / "old.jsonl"
        old.write_bytes(as_written_by_1_9(capture.read_bytes()))
        assert WEIRD.encode().decode("latin-1").encode() in old.read_bytes()
        text, chains = await asyncio.to_thread(exported_chains, old)
        (chain,) = chain_ids(chains, "name", "echo")
        har = await asyncio.to_thread(run_mcp_proxy, "export", "--har", "-", str(old))
        command, replayed = await _by_hand(fake.heads, old, chain)

    assert _request_headers(json.loads(text))["X-Weird"] == WEIRD
    entry = next(e for e in json.loads(har.stdout)["log"]["entries"] if "tools/call" in json.dumps(e))
    assert {"name": "X-Weird", "value": WEIRD} in entry["request"]["headers"]
    for seen in (text, har.stdout, command):
        assert WEIRD.encode().decode("latin-1") not in seen
    line = b"X-Weird: " + WEIRD.encode()
    assert _field(replayed, line) == line


def _request_headers(document: dict[str, Any]) -> dict[str, str]:
    """The headers recorded on the chain's `tools/call` request, as `export --json` shows them."""
    for chain in document["chains"]:
        for message in chain["messages"]:
            if message.get("method") == "tools/call" and message.get("http", {}).get("method") == "POST":
                headers: dict[str, str] = message["http"]["headers"]
                return headers
    raise AssertionError("no tools/call request in the export")


def _field(head: Head, line: bytes) -> bytes | None:
    """The raw header line of `head` that starts with the name `line` starts with."""
    name = line.split(b":", 1)[0] + b":"
    return next((raw for raw in head.raw.split(b"\r\n") if raw.startswith(name)), None)


async def _by_hand(heads: list[Head], capture: Path, chain: str) -> tuple[str, Head]:
    """`export --curl CHAIN --to upstream` of the capture, run with bash, every placeholder set to
    the secret: the command, and the request head the fake got from it."""
    exported = await asyncio.to_thread(
        run_mcp_proxy, "export", "--curl", chain, "--to", "upstream", str(capture)
    )
    assert exported.returncode == 0, exported.stderr
    base = {k: v for k, v in os.environ.items() if not k.startswith("MCP_")}
    wanted = set(re.findall(r"# set (MCP_[A-Z0-9_]+) first", exported.stdout))
    done = await asyncio.to_thread(run_bash, exported.stdout, {**base, **dict.fromkeys(wanted, SECRET)})
    assert done.returncode == 0, done.stderr
    (replayed,) = [h for h in heads if h.method == "tools/call"][1:]
    return exported.stdout, replayed
