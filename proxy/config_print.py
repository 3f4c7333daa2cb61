"""`--print-config`: every setting as a TOML line with its value (secrets never shown, URLs masked)
and where it came from, and what the standard OpenTelemetry variables do to tracing.
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Mapping
from typing import Final

from pydantic import SecretStr

from proxy.addresses import env_otlp_refusal
from proxy.config import Settings
from proxy.config_load import LoadedSettings
from proxy.framing.http import masked_command, masked_url
from proxy.record.otlp_setup import endpoint_var, missing_sdk, sdk_disabled

_FIELDS = Settings.model_fields


def _toml_value(value: object) -> str:
    if value is None:
        return "unset"
    if isinstance(value, SecretStr):
        return '"<set>"'
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(item) for item in value) + "]"
    return json.dumps(str(value), ensure_ascii=False)


_URL_FIELDS: Final = ("upstream", "otlp_endpoint")
"""Settings that are URLs: `--print-config` masks their query values, as the log lines naming them do."""


def _tracing_note(settings: Settings, environ: Mapping[str, str]) -> str:
    """What the standard OpenTelemetry variables do to `otlp_endpoint`, which its value alone hides."""
    var = endpoint_var(environ)
    if sdk_disabled(environ):
        return "; tracing off: OTEL_SDK_DISABLED=true" if settings.otlp_endpoint or var else ""
    if settings.otlp_endpoint or var is None:
        return ""
    refused = env_otlp_refusal(environ)
    if refused is not None:
        return f"; tracing off: {refused}"
    shown = f"{var}={masked_url(environ[var])}"
    missing = missing_sdk()
    return f"; {shown} asks for traces, but {missing}" if missing else f"; tracing on: {shown}"


def _share_notes(settings: Settings) -> dict[str, str]:
    """What an unset per-client share comes to: `unset` alone would read as no bound at all."""
    shares = {
        "max_streams_per_client": (settings.streams_per_client, "max_client_connections"),
        "max_sse_sessions_per_client": (settings.sse_sessions_per_client, "max_sse_sessions"),
    }
    return {
        name: f"; in force: {value}, a quarter of {whole}"
        for name, (value, whole) in shares.items()
        if getattr(settings, name) is None
    }


def render_settings(loaded: LoadedSettings, environ: Mapping[str, str] | None = None) -> str:
    """The `--print-config` text: one `name = value    # source` line per field, secrets never shown.

    A setting another variable changes the effect of says so after its source: `otlp_endpoint` unset
    while `OTEL_EXPORTER_OTLP_ENDPOINT` turns tracing on, or set while `OTEL_SDK_DISABLED` turns it off.
    """
    urls = {name: url for name in _URL_FIELDS if (url := getattr(loaded.settings, name))}
    shown = {name: masked_url(url) for name, url in urls.items()}
    if loaded.settings.upstream_cmd:
        shown["upstream_cmd"] = masked_command(shlex.split(loaded.settings.upstream_cmd))
    lines = [f"{name} = {_toml_value(shown.get(name, getattr(loaded.settings, name)))}" for name in _FIELDS]
    width = max(len(line) for line in lines if len(line) <= 60)  # long lists do not push every comment
    sources = [loaded.sources.get(name, "default") for name in _FIELDS]
    notes = {"otlp_endpoint": _tracing_note(loaded.settings, os.environ if environ is None else environ)}
    notes.update(_share_notes(loaded.settings))
    sources = [source + notes.get(name, "") for name, source in zip(_FIELDS, sources, strict=True)]
    return "\n".join(
        f"{line.ljust(width)}    # {source}" for line, source in zip(lines, sources, strict=True)
    )
