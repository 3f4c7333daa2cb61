"""The shim's direct lane tells the same story as the HTTP shape it skips.

A stdio client in front of a stdio server of the same era is served on the direct lane (no HTTP
request or response made in between); with a fault or intercept rule in force, every message takes
the HTTP shape through the (gated) relay instead. Both runs here use real peers end to end: the
Python SDK's stdio client through `mcp-proxy stdio -- SERVER` to the SDK's own stdio server (plain
calls, an in-flight elicitation, progress notifications) and to server-everything in stdio mode. The
second run of each pair has a fault rule that matches nothing, which sends every message the HTTP
shape's way: the client's answers, the round-trip log lines and the capture's records must be the
same on both, less what differs by nature (times, ids minted per run).
"""

from __future__ import annotations

import json
import re
import shlex
from collections import Counter
from pathlib import Path
from typing import Any, Final

import pytest

from tests.e2e.channel_peers import everything_stdio_command, python_stdio_command
from tests.e2e.test_stdio_clients import logged_exchanges, stdio_command
from tests.peers.clients import ClientKind, run_plan
from tests.peers.scenarios import expected_result

pytestmark = pytest.mark.e2e

UNMATCHED_RULE: Final = "method:no/such/method => drop"
"""A fault rule no message matches: in force, it makes every message take the HTTP shape."""

STEPS: Final = {
    "echo": {"tool": "echo", "arguments": {"text": "hello"}},
    "ask_name": {"tool": "ask_name", "arguments": {}},
    "progress": {"tool": "slow_progress", "arguments": {"steps": 3}, "progress": True},
}
"""The catalogue scenarios of the same names, as steps of one client session: one `mcp-proxy stdio`
(and one child) per run, where a client per scenario started three of each, which a loaded machine
took past the test's minute to do twice."""

_VARYING: Final = {
    "timestamp",
    "duration_ms",
    "exchange",
    "t",
    "ts",
    "created",
    "series",
    "follows",
    "run",
    "started",
}
"""Fields that differ between any two runs (times, the header's start times of its file and its
series, exchange ids in the order they were minted, the proxy process's run tag and start in its
`proxy_info`)."""
_DIGEST: Final = re.compile(r"hmac:[0-9a-f]+")
"""A redacted value's digest: each run's sessions are its own."""


def _stable(value: Any) -> Any:
    """A record with what differs between runs left out, at every level."""
    if isinstance(value, dict):
        return {k: _stable(v) for k, v in value.items() if k not in _VARYING}
    if isinstance(value, list):
        return [_stable(v) for v in value]
    if isinstance(value, str):
        return _DIGEST.sub("hmac:-", value)
    return value


_SHAPE: Final = {"content_type", "bytes_out", "channel", "headers"}
"""What tells a JSON response from an SSE stream. Both ways hold a response's head for a second at
most before it starts as a stream (`HEAD_HOLD`), so on a busy machine the same answer may come in
either shape: the handshake, which takes the HTTP shape on both runs, has been seen to. A stream
also sizes each message as text, not bytes, so the size of a message to the client is the shape's
too. The head's status and every message (its content, direction, the request's size) are still
compared."""


def _shape_free(record: dict[str, Any]) -> dict[str, Any]:
    if record.get("kind") == "exchange_opened":
        return record  # the request's headers are the client's, not a response's shape
    shape = _SHAPE | {"size"} if record.get("direction") == "to_client" else _SHAPE
    return {k: v for k, v in record.items() if k not in shape}


def _multiset(items: list[dict[str, Any]]) -> Counter[str]:
    return Counter(json.dumps(_stable(_shape_free(item)), sort_keys=True) for item in items)


def _capture(run_dir: Path) -> list[dict[str, Any]]:
    lines = (run_dir / "capture.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    return [r for r in records if r.get("kind") not in ("capture_started", "capture_header", "header")]


def _runs(tmp_path: Path, upstream: list[str], run: Any) -> tuple[Any, Any, Path, Path]:
    lane, shaped = tmp_path / "lane", tmp_path / "shaped"
    lane.mkdir()
    shaped.mkdir()
    first = run(stdio_command(lane, "--", *upstream))
    second = run(stdio_command(shaped, "--", *upstream, fault=UNMATCHED_RULE))
    return first, second, lane, shaped


def _same_observations(lane: Path, shaped: Path) -> None:
    lane_lines, shaped_lines = logged_exchanges(lane), logged_exchanges(shaped)
    assert [line["method"] for line in lane_lines if line["method"] == "tools/call"]
    assert _multiset(lane_lines) == _multiset(shaped_lines)
    # SSE framing bytes are counted per read on the HTTP shape, per message on the lane, and only
    # exist where the response was a stream (`_SHAPE`): left out.
    lane_records = [r for r in _capture(lane) if r.get("kind") != "bytes_out"]
    shaped_records = [r for r in _capture(shaped) if r.get("kind") != "bytes_out"]
    assert _multiset(lane_records) == _multiset(shaped_records)


def _as_scenario(line: dict[str, Any]) -> dict[str, Any]:
    """A plan step's line in the shape of its scenario's `expected_result` (texts of the content)."""
    if "result" not in line:
        return line
    result = line["result"]
    normalized = {
        "content": [block.get("text") for block in result["content"]],
        "isError": bool(result.get("isError")),
    }
    if "structuredContent" in result:
        normalized["structuredContent"] = result["structuredContent"]
    return {
        "scenario": line["id"],
        "result": normalized,
        "callbacks": line["callbacks"],
        "progress": line["progress"],
    }


@pytest.mark.parametrize("client", ["python-legacy", "python-2026"])
def test_the_lane_and_the_http_shape_give_the_sdk_client_the_same_answers_and_chains(
    tmp_path: Path, client: ClientKind
) -> None:
    upstream = shlex.split(python_stdio_command())
    scenarios = list(STEPS) if client == "python-legacy" else ["echo", "progress"]
    plan = [{"id": scenario, "op": "call", **STEPS[scenario]} for scenario in scenarios]

    def run(command: str) -> Any:
        return run_plan(client, command, plan, transport="stdio")

    lane_run, shaped_run, lane, shaped = _runs(tmp_path, upstream, run)
    for scenario in scenarios:
        assert _as_scenario(lane_run.lines[scenario]) == expected_result(scenario), lane_run.stderr[-3000:]
        assert _as_scenario(shaped_run.lines[scenario]) == expected_result(scenario), shaped_run.stderr[
            -3000:
        ]
    _same_observations(lane, shaped)


def test_the_lane_and_the_http_shape_serve_server_everything_alike(tmp_path: Path) -> None:
    plan = [
        {"id": "echo", "op": "call", "tool": "echo", "arguments": {"message": "hi"}},
        {"id": "elicit", "op": "call", "tool": "trigger-elicitation-request", "arguments": {}},
    ]

    def run(command: str) -> Any:
        return run_plan("python-legacy", command, plan, transport="stdio")

    lane_run, shaped_run, lane, shaped = _runs(tmp_path, shlex.split(everything_stdio_command()), run)
    for each in (lane_run, shaped_run):
        assert each.lines["echo"]["result"]["content"][0]["text"] == "Echo: hi", each.stderr[-3000:]
        assert each.lines["elicit"]["callbacks"] == [
            "elicitation:Please provide inputs for the following fields:"
        ]
        assert "octocat" in json.dumps(each.lines["elicit"]["result"])
    _same_observations(lane, shaped)
