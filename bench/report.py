"""Turn bench/run.py's results into the Markdown tables and the issue's targets (met or missed, per run).

Also usable on its own to re-render a results file: `python bench/report.py bench/results/results.json`.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

PATH_LABELS = {
    "direct": "direct",
    "ours-default": "ours (default: admin on)",
    "ours-otel": "ours (default + OTLP)",
    "ours-default-off": "ours (default, admin off)",
    "ours": "ours (log+capture)",
    "ours-live": "ours (log+capture, admin on)",
    "ours-quiet": "ours (logging off)",
    "bare-aiohttp": "bare aiohttp relay",
    "mitmdump": "mitmdump",
    "nginx": "nginx",
}
OURS = "ours-default"
"""The path the targets are judged on: `mcp-proxy --upstream URL` as users get it (admin API on)."""
OURS_ADMIN_OFF = "ours-default-off"
"""The same build with the admin API off: the default's cost is judged against it."""

Value = float | int | str | None
Getter = Callable[[dict[str, Any], str], Value]


def dig(node: Any, *keys: str) -> Value:
    """`node[k1][k2]...`, None when missing, "err" where a workload recorded an error."""
    for key in keys:
        if not isinstance(node, dict):
            return None
        if "error" in node and key not in node:
            return "err"
        if "na" in node:
            return "n/a"
        node = node.get(key)
    return node if isinstance(node, int | float | str) or node is None else None


def metric(workload: str, *keys: str) -> Getter:
    return lambda run, path: dig(run.get("paths", {}).get(path), workload, *keys)


def added(workload: str, *keys: str) -> Getter:
    """The path's value minus direct's in the same run (added latency)."""

    def get(run: dict[str, Any], path: str) -> Value:
        if path == "direct":
            return None
        mine = metric(workload, *keys)(run, path)
        base = metric(workload, *keys)(run, "direct")
        if isinstance(mine, int | float) and isinstance(base, int | float):
            return round(mine - base, 3)
        return mine if isinstance(mine, str) else None

    return get


def proxy_only(getter: Getter) -> Getter:
    return lambda run, path: None if path == "direct" else getter(run, path)


ROWS: list[tuple[str, str, Getter]] = []
for _c in (1, 16, 64):
    _w = f"json_c{_c}"
    ROWS += [
        (f"JSON tools/call c={_c}", "req/s", metric(_w, "rps")),
        ("", "p50 / p95 / p99 ms", lambda r, p, w=_w: _triple(r, p, w)),
        ("", "added p50 ms", added(_w, "p50")),
        ("", "added p95 ms", added(_w, "p95")),
        ("", "added p99 ms", added(_w, "p99")),
        ("", "proxy CPU s / 1k req", proxy_only(metric(_w, "cpu_per_1k"))),
        ("", "proxy peak RSS MiB", proxy_only(metric(_w, "peak_rss_mib"))),
    ]
ROWS += [
    ("SSE call (2 progress + result)", "response head p50 ms", metric("sse", "head", "p50")),
    ("", "first event p50 ms", metric("sse", "first_event", "p50")),
    ("", "first event added p50 ms", added("sse", "first_event", "p50")),
    ("", "first event p99 ms", metric("sse", "first_event", "p99")),
    ("", "result p50 ms", metric("sse", "result", "p50")),
    ("", "result added p50 ms", added("sse", "result", "p50")),
    ("", "proxy CPU s / 1k calls", proxy_only(metric("sse", "cpu_per_1k"))),
]
for _w, _label in (("big1m", "1 MiB result"), ("big10m", "10 MiB result")):
    ROWS += [
        (_label, "latency p50 ms", metric(_w, "latency", "p50")),
        ("", "added p50 ms", added(_w, "latency", "p50")),
        ("", "proxy RSS growth MiB", proxy_only(metric(_w, "rss_growth_mib"))),
        ("", "proxy peak RSS MiB", proxy_only(metric(_w, "peak_rss_mib"))),
        ("", "proxy CPU s / 1k calls", proxy_only(metric(_w, "cpu_per_1k"))),
    ]
ROWS += [
    ("legacy elicitation round trip", "p50 ms", metric("elicit", "latency", "p50")),
    ("", "p99 ms", metric("elicit", "latency", "p99")),
    ("", "added p50 ms", added("elicit", "latency", "p50")),
    ("", "proxy CPU s / 1k rounds", proxy_only(metric("elicit", "cpu_per_1k"))),
    ("1,000 idle GET streams", "streams opened", metric("idle", "opened")),
    ("", "proxy RSS growth MiB", proxy_only(metric("idle", "rss_growth_mib"))),
    ("", "c=16 req/s without / with", lambda r, p: _pair(r, p, "rps")),
    ("", "c=16 p99 ms without / with", lambda r, p: _pair(r, p, "p99")),
]


def _triple(run: dict[str, Any], path: str, workload: str) -> Value:
    values = [metric(workload, k)(run, path) for k in ("p50", "p95", "p99")]
    if any(v is None for v in values):
        return None
    return "/".join(fmt(v) for v in values)


def _pair(run: dict[str, Any], path: str, key: str) -> Value:
    a, b = metric("idle", "without", key)(run, path), metric("idle", "with", key)(run, path)
    if a is None and b is None:
        return None
    return f"{fmt(a)}→{fmt(b)}"


def fmt(value: Value) -> str:
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    if isinstance(value, int) or abs(value) >= 1000:
        return f"{value:,.0f}"
    if abs(value) >= 100:
        return f"{value:.1f}"
    if abs(value) >= 1:
        return f"{value:.2f}"
    return f"{value:.3f}"


def cell(values: list[Value]) -> str:
    return " / ".join(fmt(v) for v in values)


def paths_table(results: dict[str, Any]) -> list[str]:
    runs = results["runs"]
    paths = [p for p in PATH_LABELS if any(p in r.get("paths", {}) for r in runs)]
    head = ["workload", "metric", *(PATH_LABELS[p] for p in paths)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for workload, name, getter in ROWS:
        cells = [cell([getter(run, p) for run in runs]) for p in paths]
        lines.append("| " + " | ".join([workload, name, *cells]) + " |")
    return lines


BRIDGES = (
    ("legacy_to_modern", "legacy client → modern server", "modern_to_legacy"),
    ("modern_to_legacy", "modern client → legacy server", "legacy_to_modern"),
)
"""(direction, label, the direction whose native rounds are this bridge's server-era native rounds).

Each direction's `native_*` rounds are same-era rounds in the *client's* era (legacy client -> legacy
server for legacy_to_modern). The *server's* era native round (modern client -> modern server for
legacy_to_modern) makes the upstream do exactly the work it does for the bridged round, so the
difference between the two is what the bridge itself adds; both comparisons are shown."""


def _round(run: dict[str, Any], direction: str, column: str, key: str) -> Value:
    return dig(run.get("bridges", {}).get(direction, {}), column, "latency", key)


def bridge_added(
    run: dict[str, Any], direction: str, base: str, key: str = "p50", column: str = "bridged"
) -> Value:
    """Bridged round minus a native one (`base`: client_ours, client_direct, server_ours, server_direct)."""
    era, _, where = base.partition("_")
    other = next(o for d, _, o in BRIDGES if d == direction)
    native = _round(run, direction if era == "client" else other, f"native_{where}", key)
    bridged = _round(run, direction, column, key)
    if isinstance(bridged, int | float) and isinstance(native, int | float):
        return round(bridged - native, 3)
    return bridged if isinstance(bridged, str) else None


def paired_added(run: dict[str, Any], direction: str) -> Value:
    """The median of the per-pair differences: each bridged round less the server-era native round
    run beside it through the same proxy (`sse_client.py paired`)."""
    return dig(run.get("bridges", {}).get(direction, {}), "paired", "added", "p50")


def interleaved_ratio(run: dict[str, Any], other: str, mine: str = OURS) -> float | None:
    """The median over the interleaved rounds of ours' c=16 req/s over `other`'s in the same round."""
    rps = run.get("interleaved_c16", {}).get("rps", {})
    pairs = [(a, b) for a, b in zip(rps.get(mine, []), rps.get(other, []), strict=False) if b]
    return round(statistics.median(a / b for a, b in pairs), 3) if pairs else None


def interleaved_table(results: dict[str, Any]) -> list[str]:
    """Each path's median req/s over the rounds and ours' median ratio to it, per run."""
    runs = results["runs"]
    present = [r.get("interleaved_c16", {}).get("rps", {}) for r in runs]
    paths = [p for p in PATH_LABELS if any(p in rps for rps in present)]
    if not paths:
        return ["(not run)"]
    head = ["metric", *(PATH_LABELS[p] for p in paths)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    medians = [
        cell([round(statistics.median(rps[p]), 1) if rps.get(p) else None for rps in present]) for p in paths
    ]
    lines.append("| " + " | ".join(["req/s, median of rounds", *medians]) + " |")
    ratios = [cell([interleaved_ratio(r, p) for r in runs]) if p != OURS else "-" for p in paths]
    lines.append("| " + " | ".join(["ours (default) / path, median of per-round ratios", *ratios]) + " |")
    return lines


def bridges_table(results: dict[str, Any]) -> list[str]:
    runs = results["runs"]
    head = [
        "bridge",
        "metric",
        "bridged, via ours",
        "client-era native, direct",
        "client-era native, via ours",
        "server-era native, direct",
        "server-era native, via ours",
        "bridged - server-era native via ours",
        "bridged - client-era native via ours",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for direction, label, other in BRIDGES:
        for key in ("p50", "p99"):
            cols = [
                cell([_round(r, d, c, key) for r in runs])
                for d, c in (
                    (direction, "bridged"),
                    (direction, "native_direct"),
                    (direction, "native_ours"),
                    (other, "native_direct"),
                    (other, "native_ours"),
                )
            ]
            cols.append(cell([bridge_added(r, direction, "server_ours", key) for r in runs]))
            cols.append(cell([bridge_added(r, direction, "client_ours", key) for r in runs]))
            lines.append(
                "| " + " | ".join([label if key == "p50" else "", f"round trip {key} ms", *cols]) + " |"
            )
    lines += _window_0_rows(runs)
    lines += _whole_round_rows(runs)
    return lines


def _whole_round_rows(runs: list[dict[str, Any]]) -> list[str]:
    """How many `ask_two_at_once` calls asked the legacy server's two concurrent requests in one round."""
    rows = []
    measured = [r.get("bridges", {}).get("modern_to_legacy", {}).get("two_at_once") for r in runs]
    runs_of = [m for m in measured if isinstance(m, dict)]
    for label, key in (("default round window", "default"), ("`--round-window 0`", "window_0")):
        counts = [f"{m[key]['whole']}/{m[key]['calls']}" for m in runs_of if "whole" in m.get(key, {})]
        if counts:
            rows.append(
                f"| modern client → legacy server, {label} | two concurrent requests asked in one round | "
                + ", ".join(counts)
                + " |" * 7
            )
    return rows


def _window_0_rows(runs: list[dict[str, Any]]) -> list[str]:
    """The modern->legacy bridge again with `--round-window 0`: its rounds without the wait for more
    requests the server sends together, so the table tells the window from the bridge's own work."""
    direction, column = "modern_to_legacy", "bridged_window_0"
    if not any(_round(r, direction, column, "p50") is not None for r in runs):
        return []
    rows = []
    for key in ("p50", "p99"):
        cols = [cell([_round(r, direction, column, key) for r in runs]), *["" for _ in range(4)]]
        cols.append(cell([bridge_added(r, direction, "server_ours", key, column) for r in runs]))
        cols.append(cell([bridge_added(r, direction, "client_ours", key, column) for r in runs]))
        label = "modern client → legacy server, `--round-window 0`" if key == "p50" else ""
        rows.append("| " + " | ".join([label, f"round trip {key} ms", *cols]) + " |")
    return rows


# -- targets -----------------------------------------------------------------------------------


def _num(value: Value) -> float | None:
    return float(value) if isinstance(value, int | float) else None


def _ratio(run: dict[str, Any], other: str, mine_path: str = OURS) -> float | None:
    mine = _num(metric("json_c16", "rps")(run, mine_path))
    theirs = _num(metric("json_c16", "rps")(run, other))
    return round(mine / theirs, 2) if mine is not None and theirs else None


def _judge(value: float | None, ok: Callable[[float], bool], unit: str = "") -> dict[str, Any]:
    if value is None:
        return {"value": None, "met": None, "text": "n/a"}
    met = ok(value)
    return {"value": value, "met": met, "text": f"{fmt(value)}{unit} {'met' if met else 'MISSED'}"}


def _idle_not_slower(run: dict[str, Any]) -> dict[str, Any]:
    before, after = (
        _num(metric("idle", "without", "rps")(run, OURS)),
        _num(metric("idle", "with", "rps")(run, OURS)),
    )
    p50a, p50b = (
        _num(metric("idle", "without", "p50")(run, OURS)),
        _num(metric("idle", "with", "p50")(run, OURS)),
    )
    if before is None or after is None or p50a is None or p50b is None or not before:
        return {"value": None, "met": None, "text": "n/a"}
    ratio = round(after / before, 3)
    met = ratio >= 0.9 and p50b <= p50a * 1.1 + 0.05
    text = f"req/s x{ratio:.2f}, p50 {p50a:.3f}→{p50b:.3f} ms {'met' if met else 'MISSED'}"
    return {"value": ratio, "met": met, "text": text}


def _bridge(run: dict[str, Any], direction: str) -> dict[str, Any]:
    value = bridge_added(run, direction, "server_ours")
    if isinstance(value, str):
        return {"value": None, "met": None, "text": value}
    return _judge(_num(value), lambda v: v <= 2.0, " ms")


Target = tuple[str, Callable[[dict[str, Any]], dict[str, Any]]]


def _c16_targets(how: str, ratio: Callable[[dict[str, Any], str], float | None]) -> list[Target]:
    """The three c=16 targets, judged on one way of measuring the ratio of ours to another path."""
    bars = (("mitmdump", "req/s ≥ 6x mitmdump's", 6.0), ("nginx", "req/s ≥ 0.35x nginx's", 0.35))
    targets: list[Target] = [
        (
            f"JSON c=16, {how}: {text}",
            lambda r, other=other, bar=bar: _judge(ratio(r, other), lambda v: v >= bar, "x"),
        )
        for other, text, bar in bars
    ]
    targets.append(
        (
            f"JSON c=16, {how}: admin API on within 5% of off (req/s)",
            lambda r: _judge(ratio(r, OURS_ADMIN_OFF), lambda v: v >= 0.95, "x"),
        )
    )
    return targets


TARGETS: list[Target] = [
    *_c16_targets("interleaved (median of per-round ratios)", interleaved_ratio),
    *_c16_targets("one run per path", _ratio),
    (
        "JSON c=1: added p50 ≤ 0.2 ms",
        lambda r: _judge(_num(added("json_c1", "p50")(r, OURS)), lambda v: v <= 0.2, " ms"),
    ),
    (
        "JSON c=1: added p99 ≤ 0.5 ms",
        lambda r: _judge(_num(added("json_c1", "p99")(r, OURS)), lambda v: v <= 0.5, " ms"),
    ),
    (
        "SSE: first event added (p50) ≤ 0.4 ms",
        lambda r: _judge(_num(added("sse", "first_event", "p50")(r, OURS)), lambda v: v <= 0.4, " ms"),
    ),
    (
        "10 MiB result: proxy RSS grows < 4 MiB",
        lambda r: _judge(_num(metric("big10m", "rss_growth_mib")(r, OURS)), lambda v: v < 4, " MiB"),
    ),
    *(
        (
            f"{label} bridged round adds ≤ 2 ms (median of paired differences, vs server-era native)",
            lambda r, direction=direction: _judge(
                _num(paired_added(r, direction)), lambda v: v <= 2.0, " ms"
            ),
        )
        for direction, label in (("legacy_to_modern", "legacy→modern"), ("modern_to_legacy", "modern→legacy"))
    ),
    (
        "legacy→modern bridged round adds ≤ 2 ms (p50 less another series' p50, vs server-era native)",
        lambda r: _bridge(r, "legacy_to_modern"),
    ),
    (
        "modern→legacy bridged round adds ≤ 2 ms (p50 less another series' p50, vs server-era native)",
        lambda r: _bridge(r, "modern_to_legacy"),
    ),
    (
        "1,000 idle GET streams cost < 50 MiB",
        lambda r: _judge(_num(metric("idle", "rss_growth_mib")(r, OURS)), lambda v: v < 50, " MiB"),
    ),
    ("1,000 idle GET streams do not slow calls (c=16 req/s ≥ 90%, p50 ≤ 110%)", _idle_not_slower),
]


def targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Each target, judged in each run on ours as users get it (`mcp-proxy --upstream URL`)."""
    return [{"target": name, "runs": [judge(run) for run in results["runs"]]} for name, judge in TARGETS]


def targets_table(results: dict[str, Any]) -> list[str]:
    runs = results["runs"]
    head = ["target (ours, default configuration)", *(f"run {i + 1}" for i in range(len(runs)))]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for item in results.get("targets") or targets(results):
        lines.append("| " + " | ".join([item["target"], *(r["text"] for r in item["runs"])]) + " |")
    return lines


def quickack_states(runs: list[dict[str, Any]]) -> str:
    """How each run's bridge rounds treated delayed ACKs (older results did not record it)."""
    states = [str(run.get("bridges", {}).get("quickack", "not recorded")) for run in runs]
    return " / ".join(states)


def markdown(results: dict[str, Any]) -> str:
    meta = results["meta"]
    profile = meta["profile"]
    runs = results["runs"]
    versions = ", ".join(f"{k} {v}" for k, v in meta["versions"].items())
    out = [
        "# mcp-debug-proxy benchmark",
        "",
        f"- Profile: `{profile['name']}` ({profile['wrk_seconds']} s per wrk point, "
        f"{profile['sse_calls']} SSE calls, {profile['elicit_rounds']} elicitation rounds, "
        f"{profile['bridge_rounds']} bridge rounds, {profile['idle_streams']} idle streams); "
        f"{len(runs)} run(s), each cell is run 1 / run 2 / ….",
        f"- Layout: {meta['layout']}.",
        f"- Started: {', '.join(r.get('started', '?') for r in runs)}; "
        f"elapsed {meta.get('elapsed_s', '?')} s.",
        f"- Versions: {versions}.",
        f"- modern→legacy bridge (`mrtr_to_legacy`): {meta.get('mrtr_to_legacy')}.",
        "- Latencies in ms (wrk: closed loop, one connection per concurrency slot); `added` = path - direct "
        "in the same run; CPU = the proxy's user+system seconds (all its processes) per 1,000 requests; "
        "RSS growth = peak during the workload - RSS before it.",
        "",
        "## Paths",
        "",
        *paths_table(results),
        "",
        "## JSON tools/call c=16, paths interleaved",
        "",
        f"- {profile.get('interleave_rounds', '?')} rounds of {profile.get('interleave_seconds', '?')} s"
        " per path, every path once a round, the order rotated each round: the ratios compare paths"
        " measured seconds apart, not a minute apart as in the table above.",
        "",
        *interleaved_table(results),
        "",
        "## Bridges (full `ask_name` round trip: call, one elicitation answered, result)",
        "",
        f"- Loopback delayed ACKs during these rounds: {quickack_states(runs)} (see `loopback_quickack`"
        " in bench/run.py: without it the SDK peers' unbatched SSE writes wait 40 ms for a delayed ACK"
        " on reused connections, and every round moves in 4 ms kernel ticks).",
        "",
        *bridges_table(results),
        "",
        "## Targets (judged on the default configuration)",
        "",
        *targets_table(results),
        "",
    ]
    return "\n".join(out)


def write(results: dict[str, Any], out: Path) -> None:
    """Write results.json and results.md into `out`."""
    (out / "results.json").write_text(json.dumps(results, indent=1, sort_keys=False) + "\n")
    (out / "results.md").write_text(markdown(results))


if __name__ == "__main__":
    source = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parent / "results" / "results.json")
    data = json.loads(source.read_text())
    data["targets"] = targets(data)
    print(markdown(data))
