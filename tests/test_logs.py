"""Log redaction: what a log line must not carry in clear is masked by the processor chain itself."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from proxy import logs
from proxy.flows.redact import Redactor


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
