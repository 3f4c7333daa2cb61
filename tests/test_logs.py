"""Log redaction: what a log line must not carry in clear is masked by the processor chain itself."""

from __future__ import annotations

import json
import pty
import re
import select
import sys
import time
from pathlib import Path

import pytest
import structlog

from proxy import logs
from proxy.flows.redact import Redactor
from proxy.logs import exchange_text


def test_principal_fields_are_rekeyed_and_known_secret_texts_masked_in_every_line(
    tmp_path: Path, restore_logging: None
) -> None:
    path = tmp_path / "log.jsonl"
    opened = logs.configure(level="debug", fmt="json", file=path)
    assert opened is not None
    redactor = Redactor(secret_texts=["q-secret-123"], key=b"deployment-key")
    logs.use_redactor(redactor)
    log = logs.get_logger()
    log.warning("session_opened", principal="0123456789abcdef", note="upstream /mcp?api_key=q-secret-123")
    log.info("plain", count=3, principal=None, path="/mcp?access_token=tok-in-a-query&x=1")
    opened.close()

    first, second = (json.loads(line) for line in path.read_text().splitlines())
    assert first["principal"] == redactor.fingerprint("0123456789abcdef")
    assert first["principal"] != "0123456789abcdef"
    assert "q-secret-123" not in first["note"]
    assert first["note"].startswith("upstream /mcp?api_key=<redacted len=12 hmac:")
    assert (second["count"], second["principal"]) == (3, None)
    assert "tok-in-a-query" not in second["path"]
    assert second["path"].endswith("&x=1")


def test_without_a_redactor_lines_pass_unchanged(restore_logging: None) -> None:
    logs.use_redactor(None)
    event = {"event": "x", "principal": "abc", "note": "q-secret-123"}
    assert logs.redact_fields(None, "info", dict(event)) == event


SECRET = "-".join(("local", "secret", "987"))
"""Built at run time, so the traceback's source lines cannot carry it: only a frame's locals could."""


@pytest.mark.parametrize("fmt", ["console", "json"])
def test_a_logged_exception_shows_its_traceback_but_never_the_locals_of_its_frames(
    tmp_path: Path, restore_logging: None, fmt: str
) -> None:
    path = tmp_path / "log.txt"
    opened = logs.configure(level="info", fmt=fmt, file=path)
    assert opened is not None

    def fails(headers: list[tuple[str, str]], nested: list[object]) -> None:
        raise RuntimeError("relay failed")

    deep: list[object] = []
    for _ in range(5000):  # a client-sized structure a locals renderer would walk
        deep = [deep]
    try:
        fails([("Authorization", "Bearer " + SECRET)], deep)
    except RuntimeError:
        logs.get_logger().exception("front_exchange_failed")
    opened.close()

    text = path.read_text()
    assert "RuntimeError: relay failed" in text
    assert "in fails" in text
    assert SECRET not in text
    assert "[[[[" not in text


EXCHANGE = {
    "carried": "tools/call add",
    "http_method": "POST",
    "exchange": "x7",
    "ids": [3],
    "status": 200,
    "content_type": "application/json",
    "bytes_out": 136,
    "duration_ms": 2.1,
    "mode": "mrtr_to_legacy",
}
ROUND = {"exchange": "x7", "round": 1, "method": "tools/call", "name": "add", "outcome": "complete"}
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def lines_on_a_terminal(monkeypatch: pytest.MonkeyPatch, **environ: str) -> list[str]:
    """An exchange line, a round line and a warning, logged to a real pseudo-terminal as stderr."""
    monkeypatch.delenv("NO_COLOR", raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    leader, follower = pty.openpty()
    with open(follower, "w", encoding="utf-8") as terminal, open(leader, "rb", buffering=0) as screen:
        monkeypatch.setattr(sys, "stderr", terminal)
        logs.configure(level="info", fmt="auto")
        log = logs.get_logger()
        log.info("exchange", **EXCHANGE)
        log.info("bridge_round", **ROUND)
        log.warning("client_timeout", peer="127.0.0.1:5", seconds=10.0)
        read = b""
        deadline = time.monotonic() + 5
        while read.count(b"\n") < 3 and time.monotonic() < deadline:
            if select.select([screen], [], [], 0.1)[0]:
                read += screen.read(65536)
    return read.decode().replace("\r\n", "\n").splitlines()


def test_on_a_terminal_exchange_and_round_lines_are_coloured_as_the_other_lines_are(
    monkeypatch: pytest.MonkeyPatch, restore_logging: None
) -> None:
    exchange, bridged, warning = lines_on_a_terminal(monkeypatch)

    for line in (exchange, bridged, warning):
        assert ANSI.search(line), line
    assert ANSI.sub("", exchange).endswith(
        "x7 POST tools/call add #3 -> 200 json 136 B 2.1 ms [mrtr_to_legacy]"
    )
    assert "\x1b[32m-> 200" in exchange  # a status in the colour of its class: green for a success
    assert ANSI.sub("", bridged).endswith("x7 round 1 tools/call add: complete")


def test_no_color_turns_every_colour_off_on_a_terminal(
    monkeypatch: pytest.MonkeyPatch, restore_logging: None
) -> None:
    lines = lines_on_a_terminal(monkeypatch, NO_COLOR="1")

    assert len(lines) == 3
    for line in lines:
        assert not ANSI.search(line), line
    assert lines[0].endswith("x7 POST tools/call add #3 -> 200 json 136 B 2.1 ms [mrtr_to_legacy]")


def test_a_console_line_that_is_no_round_trip_starts_with_the_same_clock_and_leaves_out_empty_fields(
    tmp_path: Path, restore_logging: None
) -> None:
    path = tmp_path / "log.txt"
    opened = logs.configure(level="info", fmt="console", file=path)
    assert opened is not None
    logs.get_logger().info("listening", listen="http://127.0.0.1:8080", health=None, admin="http://a:1")
    opened.close()

    (line,) = path.read_text().splitlines()
    assert re.match(r"^\d\d:\d\d:\d\d\.\d{3} \[info\s*\] listening\s", line), line
    assert "admin=http://a:1" in line
    assert "health" not in line


def test_a_stdio_exchange_line_names_no_http_method_it_never_sent_and_says_its_transports() -> None:
    line = {
        "timestamp": "2026-12-02T03:00:00.000000Z",
        "exchange": "s1",
        "http_method": "POST",
        "carried": "initialize",
        "ids": [0],
        "status": 200,
        "content_type": "application/json",
        "bytes_out": 120,
        "duration_ms": 1.5,
        "mode": "passthrough",
    }
    assert exchange_text(line) == "03:00:00.000 s1 POST initialize #0 -> 200 json 120 B 1.5 ms"
    assert exchange_text({**line, "client": "http", "upstream": "http"}) == exchange_text(line)
    stdio_client = exchange_text({**line, "client": "stdio", "upstream": "http"})
    assert stdio_client == "03:00:00.000 s1 initialize #0 -> 200 json 120 B 1.5 ms [stdio→http]"
    stdio_server = exchange_text({**line, "client": "http", "upstream": "stdio"})
    assert stdio_server == "03:00:00.000 s1 POST initialize #0 -> 200 json 120 B 1.5 ms [http→stdio]"


def test_an_exchange_line_whose_body_went_by_unread_says_so_and_no_trouble() -> None:
    line = {
        "timestamp": "2026-12-02T03:00:00.000000Z",
        "exchange": "x3",
        "http_method": "POST",
        "carried": "tools/call big",
        "ids": [3],
        "status": 200,
        "content_type": "application/json",
        "bytes_out": 2048,
        "duration_ms": 1.5,
        "trouble": None,
        "not_inspected": "a response body of 2048 bytes larger than max_inspected_bytes (1024 bytes) ...",
    }
    text = exchange_text(line)
    assert text == "03:00:00.000 x3 POST tools/call big #3 -> 200 json 2.0 KiB 1.5 ms (body not inspected)"


def test_a_bridged_call_its_client_cancelled_before_any_answer_reads_cancelled_not_painted_as_failed() -> (
    None
):
    line = {
        "timestamp": "2026-12-02T03:00:00.000000Z",
        "exchange": "x41",
        "http_method": "POST",
        "carried": "tools/call slow_progress",
        "ids": [2],
        "status": None,
        "duration_ms": 200.8,
        "mode": "mrtr_to_legacy",
        "trouble": None,
        "end": "cancelled",
    }
    text = exchange_text(line)
    shown = "x41 POST tools/call slow_progress #2 -> (no response) 200.8 ms [mrtr_to_legacy] cancelled"
    assert text == f"03:00:00.000 {shown}"
    painted = exchange_text(line, colors=True)
    assert f"{structlog.dev.RED}-> (no response)" not in painted, painted
    assert f"{structlog.dev.YELLOW}cancelled" in painted, painted
    quiet = exchange_text({**line, "status": 200, "end": "client_disconnected"})
    assert "client_disconnected" not in quiet, quiet


def test_a_resumed_bridge_call_reads_as_a_short_line_among_its_rounds() -> None:
    renderer = logs.ConsoleLines(structlog.dev.ConsoleRenderer(colors=False))
    event = {
        "event": "bridge_resumed",
        "mode": "mrtr_to_legacy",
        "call": "call-464",
        "exchange": "x654",
        "client_id": 11601,
        "round": 2,
        "timestamp": "2026-12-02T03:00:00.123000Z",
        "level": "info",
    }
    assert renderer(None, "info", event) == "03:00:00.123 x654 round 2 resumed by #11601 [mrtr_to_legacy]"


HOSTILE = "x\x1b]0;TITLE\x07\r\n\u202ey\x9b"
SHOWN = "x\\x1b]0;TITLE\\x07\\r\\n\\u202ey\\x9b"


@pytest.mark.parametrize("colors", [False, True])
def test_what_an_upstream_or_client_chose_is_shown_escaped_in_every_traffic_line(colors: bool) -> None:
    renderer = logs.ConsoleLines(structlog.dev.ConsoleRenderer(colors=colors), colors=colors)
    stamp = {"timestamp": "2026-12-02T03:00:00.123000Z", "level": "info", "exchange": "x4"}
    events = [
        {
            "event": "server_asked",
            "carried": f"tools/call {HOSTILE}",
            "ids": [HOSTILE],
            "asks": HOSTILE,
            "asked": HOSTILE,
        },
        {
            "event": "bridge_round",
            "round": 1,
            "method": "tools/call",
            "name": HOSTILE,
            "input_keys": {HOSTILE: HOSTILE},
        },
        {"event": "bridge_resumed", "round": 2, "client_id": HOSTILE, "mode": "mrtr_to_legacy"},
        {"event": "exchange", "carried": HOSTILE, "http_method": "POST", "ids": [HOSTILE], "status": 200},
    ]
    for event in events:
        line = ANSI.sub("", renderer(None, "info", {**stamp, **event}))
        assert SHOWN in line, line
        assert not any(char in line for char in "\n\x1b\u202e"), line


def test_any_other_console_line_shows_its_text_fields_and_traceback_escaped(
    tmp_path: Path, restore_logging: None
) -> None:
    path = tmp_path / "log.txt"
    opened = logs.configure(level="info", fmt="console", file=path)
    assert opened is not None
    log = logs.get_logger()
    log.warning("upstream_refused", reason=HOSTILE)
    try:
        raise RuntimeError(f"bad answer {HOSTILE}")
    except RuntimeError:
        log.exception(HOSTILE)
    opened.close()

    text = path.read_bytes().decode()
    assert f"reason={SHOWN}" in text
    # A traceback keeps its lines (and so the message's newline); everything else is escaped.
    assert f"RuntimeError: bad answer {SHOWN.replace(chr(92) + 'n', chr(10))}" in text
    assert f"] {SHOWN}" in text  # the event itself
    assert not any(char in text for char in "\x1b\x07\r\u202e\x9b"), text
