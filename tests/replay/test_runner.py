"""The replay's own proxy: the user's settings, less what would make a replay act on anything else."""

from __future__ import annotations

from pathlib import Path

from pydantic import SecretStr

from proxy.config import Settings
from proxy.record.export import JSON_MESSAGES
from proxy.replay.runner import ReplayOptions, given_texts, replay_settings


def test_the_replays_proxy_keeps_the_users_redaction_and_bounds_but_records_and_injects_nothing() -> None:
    user = Settings(
        upstream="http://recorded:1/mcp",
        redact_headers=["X-Tenant-Key"],
        redact_key=SecretStr("team key"),
        max_rounds=3,
        capture=Path("/data/capture.jsonl"),
        faults=["method:tools/call => drop"],
        otlp_endpoint="http://collector:4318",
        health="127.0.0.1:9902",
        upstream_era="legacy",
    )

    settings = replay_settings("http://staging:8000/mcp", ReplayOptions(settings=user, timeout=12.0))
    chosen = replay_settings("http://staging:8000/mcp", ReplayOptions(settings=user, upstream_era="modern"))

    assert settings.upstream == "http://staging:8000/mcp"
    assert settings.redact_headers == ["x-tenant-key"]
    assert settings.redact_key == SecretStr("team key")
    assert settings.max_rounds == 3
    assert settings.upstream_era == "legacy"
    assert settings.upstream_timeout == 12.0
    assert (settings.capture, settings.faults, settings.otlp_endpoint, settings.health) == (
        None,
        [],
        None,
        None,
    )
    assert settings.admin_enabled is False
    assert settings.listen == "127.0.0.1:0"
    assert chosen.upstream_era == "modern"


def test_the_replays_proxy_keeps_as_many_messages_of_a_chain_as_the_captures_reader() -> None:
    user = Settings(upstream="http://recorded:1/mcp", max_messages_per_chain=500)

    settings = replay_settings("http://staging:8000/mcp", ReplayOptions(settings=user))

    assert settings.max_messages_per_chain == JSON_MESSAGES


def test_every_given_header_value_is_masked_by_its_credentials_or_whole_whatever_the_name() -> None:
    given = {
        "Authorization": "Bearer tok-0123456789",
        "Cookie": "session=ck-0123456789; theme=darkmode",
        "X-Tenant": "short; a=b",
        "X-Api-Key": "sk-0123456789==",
    }

    assert given_texts(given) == (
        "tok-0123456789",
        "ck-0123456789",
        "darkmode",
        "short; a=b",
        "sk-0123456789==",
    )
