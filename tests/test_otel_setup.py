"""Tracing is optional: off, nothing of the SDK loads; asked for without the SDK, it names the extra."""

from __future__ import annotations

import subprocess
import sys

import pytest

from proxy.record.otlp_setup import env_traces_url, traces_url, tracing_wanted
from tests.peers.runner import REPO_ROOT

BLOCK_SDK = "import sys; sys.modules['opentelemetry'] = None; "
"""A `None` entry makes `import opentelemetry...` fail as when the package is not installed."""


def run(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=REPO_ROOT,
        check=False,
    )


def test_the_proxy_without_tracing_loads_nothing_of_the_opentelemetry_sdk() -> None:
    done = run(
        "import sys, proxy.cli, proxy.runtime; print(sorted(m for m in sys.modules if 'opentelemetry' in m))"
    )

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_an_otlp_endpoint_without_the_sdk_stops_the_proxy_naming_the_extra_to_install() -> None:
    code = BLOCK_SDK + "from proxy.cli import main; raise SystemExit(main(sys.argv[1:]))"
    done = run(code, "--upstream", "http://127.0.0.1:9/mcp", "--otlp-endpoint", "http://127.0.0.1:4318")

    assert done.returncode == 2
    assert "otlp_endpoint (flag --otlp-endpoint)" in done.stderr
    assert "pip install -e '.[otel]' in the mcp-debug-proxy checkout" in done.stderr


def test_the_standard_variables_turn_tracing_on_and_otel_sdk_disabled_turns_it_off() -> None:
    assert not tracing_wanted(None, {})
    assert tracing_wanted("http://c:4318", {})
    assert tracing_wanted(None, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"})
    assert tracing_wanted(None, {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"})
    assert not tracing_wanted("http://c:4318", {"OTEL_SDK_DISABLED": "true"})


@pytest.mark.parametrize(
    ("endpoint", "url"),
    [
        ("http://c:4318", "http://c:4318/v1/traces"),
        ("http://c:4318/", "http://c:4318/v1/traces"),
        ("http://c:4318?tenant=a", "http://c:4318/v1/traces?tenant=a"),
        ("http://c:4318/?api_key=k&x=1", "http://c:4318/v1/traces?api_key=k&x=1"),
        ("https://c/otlp/?tenant=a", "https://c/otlp/v1/traces?tenant=a"),
        ("http://c:4318/v1/traces", "http://c:4318/v1/traces"),
        ("http://c:4318/v1/traces/?tenant=a", "http://c:4318/v1/traces?tenant=a"),
    ],
)
def test_otlp_endpoint_gets_the_traces_path_joined_to_its_path_and_keeps_its_query(
    endpoint: str, url: str
) -> None:
    assert traces_url(endpoint) == url


def test_the_standard_base_variable_gets_the_traces_path_joined_and_the_traces_one_is_used_as_is() -> None:
    base = "OTEL_EXPORTER_OTLP_ENDPOINT"
    own = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
    assert env_traces_url({}) is None
    assert env_traces_url({base: "http://c:4318/?tenant=b"}) == "http://c:4318/v1/traces?tenant=b"
    assert env_traces_url({base: "http://c:4318/mine/"}) == "http://c:4318/mine/v1/traces"
    assert (
        env_traces_url({own: "http://t:4318/x?tenant=c", base: "http://c:4318"}) == "http://t:4318/x?tenant=c"
    )
    assert env_traces_url({own: "", base: "http://c:4318"}) == "http://c:4318/v1/traces"
