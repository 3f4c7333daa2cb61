"""Run conformance scenarios against a URL, read their checks, and tabulate the results.

The CLI is ``@modelcontextprotocol/conformance@0.2.0-alpha.12``, pinned in
``tests/peers/node/package-lock.json`` with the Node peers and installed with them under
``<repo>/.cache/node`` by ``python3 -m tests.peers.envs`` (``scripts/test`` runs it before pytest). It
is built for Node >= 22 and runs on Node 20 with the project's own preloads from ``tests/peers/node``:
``node20-fs.mjs`` supplies the ``fs.globSync`` it imports, ``loopback-only.cjs`` keeps its mock
servers on 127.0.0.1. One scenario per process:

    node --require loopback-only.cjs --import node20-fs.mjs .../dist/index.js server
         --url URL --scenario NAME --spec-version 2026-07-28 -o OUT --timeout MS

It exits 1 iff a check is ``FAILURE`` and writes ``OUT/server-NAME-<timestamp>/checks.json`` (a JSON
list of ``{id, name, description, status, errorMessage?, details?}``), which is what we read; the
exit code is only cross-checked. Usage for humans: ``scripts/conformance URL [SCENARIO...]``, or
``python -m tests.conformance.harness --url URL [--scenario NAME]... [--allow-key-literal]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from tests.conformance.checks import (
    KEY_LITERAL_CHECKS,
    REFERENCE_DEVIATIONS,
    Check,
    KeyLiteralMode,
    Verdict,
    evaluate,
)
from tests.conformance.scenarios import PREFIX, SCENARIOS
from tests.peers.envs import (
    BUILD_COMMAND,
    LOOPBACK_PRELOAD,
    NODE20_FS_SHIM,
    NODE_MODULES,
    EnvironmentMissingError,
    node_binary,
    node_modules,
)

__all__ = [
    "CLI_JS",
    "PACKAGE",
    "SPEC_VERSION",
    "HarnessMissingError",
    "Run",
    "check_installed",
    "judge",
    "lists_guard",
    "render_report",
    "run_scenario",
]

PACKAGE: Final = "@modelcontextprotocol/conformance"
VERSION: Final = "0.2.0-alpha.12"
SPEC_VERSION: Final = "2026-07-28"

PACKAGE_DIR: Final = NODE_MODULES / "@modelcontextprotocol" / "conformance"
CLI_JS: Final = PACKAGE_DIR / "dist" / "index.js"
PRELOAD: Final = LOOPBACK_PRELOAD
NODE20_COMPAT: Final = NODE20_FS_SHIM

SCENARIO_TIMEOUT_MS: Final = 30_000
"""The CLI's own per-scenario bound; each of its requests is bounded to 10 s on top."""
PROCESS_TIMEOUT_S: Final = 45.0
"""Our bound on the whole node process (startup + scenario + writing results)."""
GUARD_ID: Final = "harness-lists-answered"
VALIDATE_GUARD_ID: Final = "harness-validate-input-meaningful"
VALIDATE_INPUT_CHECKS: Final = ("sep-2322-validate-input-responses", "sep-2322-error-on-protocol-error")


class HarnessMissingError(RuntimeError):
    """node, the conformance package or the Node 20 preloads are not where they must be."""


def check_installed() -> None:
    """Raise `HarnessMissingError` saying what to do when something the CLI needs is missing."""
    try:
        node_binary()
        node_modules()
    except EnvironmentMissingError as exc:
        raise HarnessMissingError(str(exc)) from exc
    try:
        version = json.loads((PACKAGE_DIR / "package.json").read_text()).get("version")
    except (OSError, ValueError):
        version = None
    if version != VERSION or not CLI_JS.is_file():
        raise HarnessMissingError(
            f"{PACKAGE}@{VERSION} is not installed under {NODE_MODULES} (found {version!r}); "
            f"run `{BUILD_COMMAND}` (./scripts/test does it)"
        )
    for path in (PRELOAD, NODE20_COMPAT):
        if not path.is_file():
            raise HarnessMissingError(f"missing Node preload {path} (it is part of the repository)")


def cli_command(url: str, scenario: str, output_dir: Path, spec_version: str = SPEC_VERSION) -> list[str]:
    """The node command line running one scenario of `spec_version` against `url`, results under
    `output_dir`."""
    return [
        "node",
        "--require",
        str(PRELOAD),
        "--import",
        NODE20_COMPAT.as_uri(),
        str(CLI_JS),
        "server",
        "--url",
        url,
        "--scenario",
        scenario,
        "--spec-version",
        spec_version,
        "-o",
        str(output_dir),
        "--timeout",
        str(SCENARIO_TIMEOUT_MS),
    ]


@dataclass
class Run:
    """One scenario run: the CLI's checks (plus any the harness adds) or why there are none."""

    scenario: str
    url: str
    checks: list[Check] = field(default_factory=list)
    exit_code: int | None = None
    seconds: float = 0.0
    harness_error: str = ""
    stdout: str = ""
    stderr: str = ""

    def output_tail(self, chars: int = 2000) -> str:
        """The end of the CLI's stdout and stderr, for failure messages."""
        parts = [f"--- stdout ---\n{self.stdout[-chars:]}" if self.stdout.strip() else ""]
        parts.append(f"--- stderr ---\n{self.stderr[-chars:]}" if self.stderr.strip() else "")
        return "\n".join(p for p in parts if p)


def _read_checks(output_dir: Path) -> list[Check]:
    files = sorted(output_dir.glob("**/checks.json"))
    if len(files) != 1:
        raise ValueError(f"expected one checks.json under the results dir, found {len(files)}")
    raw = json.loads(files[0].read_text(encoding="utf-8"))
    if not isinstance(raw, list):
        raise ValueError("checks.json is not a JSON list")
    return [Check.parse(item) for item in raw]


async def run_scenario(url: str, scenario: str, spec_version: str = SPEC_VERSION) -> Run:
    """Run `scenario` of `spec_version` against `url` in a node subprocess (bounded), in a private
    temp dir."""
    run = Run(scenario=scenario, url=url)
    workdir = Path(tempfile.mkdtemp(prefix="conformance-"))
    output_dir = workdir / "results"
    started = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        *cli_command(url, scenario, output_dir, spec_version),
        cwd=workdir,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "NO_COLOR": "1", "FORCE_COLOR": "0"},
    )
    try:
        try:
            async with asyncio.timeout(PROCESS_TIMEOUT_S):
                out, err = await proc.communicate()
        except TimeoutError:
            run.harness_error = f"node did not finish within {PROCESS_TIMEOUT_S:.0f}s (killed)"
            out, err = b"", b""
        run.exit_code = proc.returncode
        run.stdout = out.decode("utf-8", "replace")
        run.stderr = err.decode("utf-8", "replace")
        if not run.harness_error:
            try:
                run.checks = _read_checks(output_dir)
            except (OSError, ValueError) as exc:
                run.harness_error = f"could not read the CLI's checks (exit code {run.exit_code}): {exc}"
        if not run.harness_error:
            failed = any(c.status == "FAILURE" for c in run.checks)
            if run.exit_code != int(failed):
                run.harness_error = (
                    f"exit code {run.exit_code} disagrees with checks.json (FAILURE present: {failed})"
                )
    finally:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.communicate()
        run.seconds = time.monotonic() - started
        shutil.rmtree(workdir, ignore_errors=True)
    return run


# --------------------------------------------------------------------------------------------
# The guard that makes unsupported-methods non-vacuous.
# --------------------------------------------------------------------------------------------


def _post_modern(url: str, method: str, ident: int) -> Any:
    """POST one 2026-07-28 request the way the CLI does; the JSON-RPC response (JSON or SSE)."""
    meta = {
        "io.modelcontextprotocol/protocolVersion": SPEC_VERSION,
        "io.modelcontextprotocol/clientInfo": {"name": "conformance-harness-guard", "version": "1.0.0"},
        "io.modelcontextprotocol/clientCapabilities": {"sampling": {}, "elicitation": {}, "roots": {}},
    }
    body = json.dumps({"jsonrpc": "2.0", "id": ident, "method": method, "params": {"_meta": meta}}).encode()
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": SPEC_VERSION,
        "Mcp-Method": method,
    }
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            text = response.read().decode("utf-8", "replace")
            kind = response.headers.get("Content-Type", "")
    except urllib.error.HTTPError as exc:
        text, kind = exc.read().decode("utf-8", "replace"), exc.headers.get("Content-Type", "")
    if "text/event-stream" in kind:
        answers = [
            json.loads(line[5:].strip())
            for line in text.splitlines()
            if line.startswith("data:") and line[5:].strip().startswith("{")
        ]
        return next((a for a in reversed(answers) if a.get("id") == ident), None)
    return json.loads(text) if text.strip() else None


def _lists_guard_sync(url: str, tools: set[str], prompts: set[str]) -> Check:
    problems: list[str] = []
    for ident, (method, key, wanted) in enumerate(
        (("tools/list", "tools", tools), ("prompts/list", "prompts", prompts)), start=1
    ):
        try:
            reply = _post_modern(url, method, ident)
        except (OSError, ValueError) as exc:
            problems.append(f"{method}: {exc}")
            continue
        result = reply.get("result") if isinstance(reply, dict) else None
        if not isinstance(result, dict):
            problems.append(f"{method}: no result ({json.dumps(reply)[:300]})")
            continue
        if result.get("resultType", "complete") != "complete":
            problems.append(f"{method}: resultType {result.get('resultType')!r}")
        names = {item.get("name") for item in result.get(key, []) if isinstance(item, dict)}
        if not wanted <= names:
            problems.append(f"{method}: missing {sorted(wanted - names)}")
    return Check(
        id=GUARD_ID,
        name="HarnessListsAnswered",
        status="FAILURE" if problems else "SUCCESS",
        error_message="; ".join(problems),
    )


async def lists_guard(url: str, tools: Iterable[str], prompts: Iterable[str]) -> Check:
    """A check that tools/list and prompts/list really answer (with the fixtures), complete.

    ``input-required-result-unsupported-methods`` passes when both lists fail with JSON-RPC errors;
    this closes that gap.
    """
    return await asyncio.to_thread(_lists_guard_sync, url, set(tools), set(prompts))


def _fixtures() -> tuple[set[str], set[str]]:
    tools = {name for s in SCENARIOS.values() for name in s.tools}
    prompts = {name for s in SCENARIOS.values() for name in s.prompts}
    return tools, prompts


def validate_input_guard(checks: Sequence[Check]) -> Check:
    """A check that both validate-input probes got a meaningful answer, read from their details.

    ``input-required-result-validate-input`` passes on any JSON-RPC error (even "Unsupported protocol
    version"). An answer means something only as input_required (the server re-asks) or -32602
    (invalid params: the inputResponses were judged and rejected).
    """
    problems: list[str] = []
    for check_id in VALIDATE_INPUT_CHECKS:
        check = next((c for c in checks if c.id == check_id), None)
        if check is None:
            problems.append(f"{check_id}: not reported")
            continue
        result, error = check.details.get("result"), check.details.get("error")
        if isinstance(result, dict) and result.get("resultType") == "input_required":
            continue
        if isinstance(error, dict) and error.get("code") == -32602:
            continue
        answer = json.dumps({"result": result, "error": error})[:300]
        problems.append(f"{check_id}: neither input_required nor a -32602 error: {answer}")
    return Check(
        id=VALIDATE_GUARD_ID,
        name="HarnessValidateInputMeaningful",
        status="FAILURE" if problems else "SUCCESS",
        error_message="; ".join(problems),
    )


async def run_guarded(url: str, scenario: str) -> tuple[Run, tuple[str, ...]]:
    """Run `scenario` and add the harness guard of the two scenarios that can pass vacuously; the
    ids of the checks the guards added (they are expected too)."""
    run = await run_scenario(url, scenario)
    if run.harness_error:
        return run, ()
    if scenario == PREFIX + "unsupported-methods":
        tools, prompts = _fixtures()
        run.checks.append(await lists_guard(url, tools, prompts))
        return run, (GUARD_ID,)
    if scenario == PREFIX + "validate-input":
        run.checks.append(validate_input_guard(run.checks))
        return run, (VALIDATE_GUARD_ID,)
    return run, ()


async def run_judged(
    url: str, scenario: str, *, key_literal: KeyLiteralMode = "none", reference: bool = False
) -> tuple[Run, Verdict]:
    """Run `scenario` with its guards and judge it (see `tests.conformance.checks.evaluate`)."""
    run, extra = await run_guarded(url, scenario)
    return run, judge(run, key_literal=key_literal, reference=reference, extra_expected=extra)


def judge(
    run: Run,
    *,
    key_literal: KeyLiteralMode = "none",
    reference: bool = False,
    extra_expected: tuple[str, ...] = (),
) -> Verdict:
    """`evaluate` the run's checks; a harness error is a problem of its own."""
    verdict = evaluate(
        run.scenario, run.checks, key_literal=key_literal, reference=reference, extra_expected=extra_expected
    )
    if run.harness_error:
        verdict.problems.insert(0, f"HARNESS: {run.harness_error}")
        verdict.passed = False
    return verdict


# --------------------------------------------------------------------------------------------
# Report.
# --------------------------------------------------------------------------------------------


def cell(run: Run | None, verdict: Verdict | None) -> str:
    """One table cell: verdict, SUCCESS count, the ids of failed checks."""
    if run is None or verdict is None:
        return "not run"
    head = "pass" if verdict.passed else "**FAIL**"
    text = f"{head} {verdict.succeeded}/{verdict.expected}"
    if verdict.tolerated:
        text += " (tolerated: " + ", ".join(t.split(" ", 1)[0] for t in verdict.tolerated) + ")"
    if not verdict.passed:
        text += ": " + ", ".join(p.split(":", 1)[0] for p in verdict.problems)
    return text


def render_report(
    columns: Sequence[str], results: dict[str, dict[str, tuple[Run, Verdict]]], *, title: str
) -> str:
    """Markdown: scenario x column table, then every problem and tolerated check in full."""
    lines = [f"# {title}", "", f"`{PACKAGE}@{VERSION}`, `--spec-version {SPEC_VERSION}`.", ""]
    lines.append("| Scenario | Fixture | " + " | ".join(columns) + " |")
    lines.append("|---|---|" + "---|" * len(columns))
    for name, scenario in SCENARIOS.items():
        row = results.get(name, {})
        cells = [cell(*row.get(col, (None, None))) for col in columns]
        lines.append(f"| {name.removeprefix(PREFIX)} | `{scenario.fixture}` | " + " | ".join(cells) + " |")
    details: list[str] = []
    for name in SCENARIOS:
        for col in columns:
            if col not in results.get(name, {}):
                continue
            run, verdict = results[name][col]
            notes = [f"  - {p}" for p in verdict.problems] + [
                f"  - tolerated: {t}" for t in verdict.tolerated
            ]
            if notes:
                details.append(f"- {name} / {col} ({run.url}, {run.seconds:.1f}s):")
                details.extend(notes)
    if details:
        lines += ["", "## Details", "", *details]
    lines += ["", "## Known key-literal checks", ""]
    for (scenario_name, check_id), literal in KEY_LITERAL_CHECKS.items():
        masks = f" (masks {', '.join(literal.masks)})" if literal.masks else ""
        lines.append(f"- `{scenario_name}` / `{check_id}`{masks}: {literal.reason}")
    lines += ["", "## Known deviations of the modern reference (direct column only)", ""]
    for (scenario_name, check_id), deviation in REFERENCE_DEVIATIONS.items():
        lines.append(f"- `{scenario_name}` / `{check_id}` [{deviation.status}]: {deviation.reason}")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------
# Command line (scripts/conformance).
# --------------------------------------------------------------------------------------------


def _scenario_name(value: str) -> str:
    name = value if value in SCENARIOS else PREFIX + value
    if name not in SCENARIOS:
        raise argparse.ArgumentTypeError(f"unknown scenario {value!r}; known: {', '.join(SCENARIOS)}")
    return name


async def _run_all(url: str, scenarios: list[str], key_literal: KeyLiteralMode) -> tuple[bool, str]:
    label = "via proxy (key-literal allowed)" if key_literal == "all" else "result"
    results: dict[str, dict[str, tuple[Run, Verdict]]] = {}
    for scenario in scenarios:
        run, verdict = await run_judged(url, scenario, key_literal=key_literal)
        results[scenario] = {label: (run, verdict)}
        print(f"{'pass' if verdict.passed else 'FAIL'}  {scenario}  ({run.seconds:.1f}s)", file=sys.stderr)
    passed = all(v.passed for row in results.values() for _, v in row.values())
    return passed, render_report([label], results, title=f"Conformance: {url}")


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m tests.conformance.harness --url URL [--scenario NAME]...``: run, print a table."""
    parser = argparse.ArgumentParser(prog="python -m tests.conformance.harness", description=__doc__)
    parser.add_argument("--url", required=True, help="the MCP endpoint, e.g. http://127.0.0.1:8080/mcp")
    parser.add_argument(
        "--scenario",
        action="append",
        type=_scenario_name,
        help="a scenario, MRTR ones with or without the input-required-result- prefix "
        "(repeatable; default: all 21)",
    )
    parser.add_argument(
        "--allow-key-literal",
        action="store_true",
        help="tolerate the documented key-literal checks (for a proxy in front of a legacy server)",
    )
    parser.add_argument("--report", type=Path, help="also write the Markdown table to this file")
    args = parser.parse_args(argv)
    try:
        check_installed()
    except HarnessMissingError as exc:
        print(f"conformance: {exc}", file=sys.stderr)
        return 2
    key_literal: KeyLiteralMode = "all" if args.allow_key_literal else "none"
    passed, text = asyncio.run(_run_all(args.url, args.scenario or list(SCENARIOS), key_literal))
    print(text)
    if args.report is not None:
        args.report.write_text(text, encoding="utf-8")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
