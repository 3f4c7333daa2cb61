"""The 21 conformance scenarios of the modern->legacy bridge, directly and through the proxy.

- direct: the CLI against ``conformance-modern`` (the fixtures written MRTR-style, 2026-07-28 only).
  Every check passes except the modern reference's documented deviations
  (`tests.conformance.checks.REFERENCE_DEVIATIONS`): this validates the harness and the fixtures.
- via proxy: the CLI against the proxy in front of ``conformance-legacy`` (the same fixtures asking
  in flight, legacy era only), which is the ``mrtr_to_legacy`` bridge's job. Every check passes
  except the documented key-literal ones, and those only in the exact shape a minted key explains.
- the score: at least 20 of the 21 pass by the suite's own measure (no FAILURE check) with every
  expected check present; the one allowed to fail is ``input-required-result-basic-elicitation``,
  and only by its key-literal check.

Which 21 and why: tests/conformance/scenarios.py. A Markdown table of both columns is written to
``<pytest basetemp>/conformance-report.md`` and printed at the end of the module.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any, Final

import pytest

from proxy.runtime import Proxy
from tests.conformance.checks import Check, Verdict, evaluate
from tests.conformance.harness import (
    HarnessMissingError,
    Run,
    check_installed,
    cli_command,
    judge,
    render_report,
    run_guarded,
    run_judged,
    run_scenario,
)
from tests.conformance.scenarios import OTHER_SCENARIOS, PREFIX, SCENARIOS, fixture_names
from tests.e2e.reports import publish_report
from tests.peers import conformance_more as more
from tests.peers.conformance_app import PROMPT_NAME, TOOL_NAMES
from tests.peers.runner import PeerServer
from tests.peers.scenarios import (
    CallbackLog,
    client_for,
    normalize_prompt_result,
    normalize_resource_result,
    normalize_tool_result,
)

pytestmark = pytest.mark.e2e

DIRECT = "direct (modern MRTR reference)"
VIA_PROXY = "via proxy (legacy in-flight upstream)"
Results = dict[str, dict[str, tuple[Run, Verdict]]]
Scores = dict[str, Verdict]

ALLOWED_TO_FAIL: Final = PREFIX + "basic-elicitation"
"""The bridge mints its own input keys; this scenario insists on the original server's key."""

TOOL_ARGUMENTS: Final[dict[str, dict[str, Any]]] = {
    "test_param_header": {"region": "eu-west"},
    "json_schema_2020_12_tool": {"contactMethod": "email", "email": "a@example.com"},
}


@pytest.fixture(scope="module")
def harness() -> None:
    """The conformance CLI must be installed (``./scripts/test`` does it); missing is a failure."""
    try:
        check_installed()
    except HarnessMissingError as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="module")
def conformance_modern() -> Iterator[PeerServer]:
    with PeerServer("conformance-modern") as peer:
        yield peer


@pytest.fixture(scope="module")
def conformance_legacy() -> Iterator[PeerServer]:
    with PeerServer("conformance-legacy") as peer:
        yield peer


@pytest.fixture(scope="module")
def report(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Results]:
    """Collects every judged run; at module end writes and prints the Markdown table."""
    results: Results = {}
    yield results
    if not results:
        return
    text = render_report([DIRECT, VIA_PROXY], results, title="Conformance: the modern->legacy bridge's 21")
    publish_report(request, tmp_path_factory, "conformance", text)


@pytest.fixture(scope="module")
def scores() -> Scores:
    """Each via-proxy run judged by the suite's measure (key-literal WARNINGs forgiven, FAILUREs not)."""
    return {}


def _failure(scenario: str, target: str, run: Run, verdict: Verdict) -> str:
    lines = [f"{scenario} {target}: {len(verdict.problems)} check(s) not passing ({run.url}):"]
    lines += [f"  - {problem}" for problem in verdict.problems]
    lines += [f"  - tolerated: {note}" for note in verdict.tolerated]
    if run.harness_error or not run.checks:
        lines.append(run.output_tail())
    return "\n".join(lines)


# -- the choice and the fixtures ------------------------------------------------------------------


async def test_the_21_and_the_others_are_every_2026_server_scenario_of_the_cli(harness: None) -> None:
    """The choice is made from the CLI's own list: nothing missing, nothing invented, 21 chosen."""
    base = cli_command("http://127.0.0.1:1/mcp", "none", Path("unused"))
    command = [*base[: base.index("server")], "list", "--server", "--spec-version", "2026-07-28"]
    proc = await asyncio.create_subprocess_exec(
        *command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    async with asyncio.timeout(30):
        out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode(errors="replace")
    listed = {
        line.strip()[2:].split(" ", 1)[0]
        for line in out.decode().splitlines()
        if line.strip().startswith("- ")
    }

    assert len(SCENARIOS) == 21
    assert not set(SCENARIOS) & set(OTHER_SCENARIOS)
    assert {*SCENARIOS, *OTHER_SCENARIOS} == listed


def test_the_peers_serve_every_tool_and_prompt_the_21_call() -> None:
    served = {*TOOL_NAMES, PROMPT_NAME, *(t.name for t in more.TOOLS), *(p.name for p in more.PROMPTS)}

    assert fixture_names() <= served
    assert more.TOOLS[0].name == "test_simple_text"  # http-header-validation calls the first tool


async def test_legacy_fixtures_match_modern(
    conformance_modern: PeerServer, conformance_legacy: PeerServer
) -> None:
    """Same questions, same final results: the legacy fixtures are the modern ones asking in flight."""
    tools = [*TOOL_NAMES, *(tool.name for tool in more.TOOLS if tool.name != more.WHOAMI)]
    prompts = [
        (PROMPT_NAME, None),
        *((p.name, {a.name: "x" for a in p.arguments or []}) for p in more.PROMPTS),
    ]
    uris = [*(str(r.uri) for r in more.RESOURCES), "test://template/7/data"]

    async def run(url: str, mode: str) -> dict[str, Any]:
        out: dict[str, Any] = {}
        log = CallbackLog()
        async with client_for(url, mode, log=log) as client:
            for name in tools:
                log.clear()
                result = await client.call_tool(name, TOOL_ARGUMENTS.get(name, {}))
                out[name] = (normalize_tool_result(result), sorted(log.callbacks))
            for name, arguments in prompts:
                log.clear()
                out[name] = (
                    normalize_prompt_result(await client.get_prompt(name, arguments)),
                    log.callbacks[:],
                )
            for uri in uris:
                out[uri] = normalize_resource_result(await client.read_resource(uri))
        return out

    modern = await run(conformance_modern.url, "2026-07-28")
    legacy = await run(conformance_legacy.url, "legacy")
    assert legacy == modern
    assert all(modern[name][1] for name in TOOL_NAMES), "every MRTR fixture asks something"


def test_key_literal_tolerance_is_narrow() -> None:
    """A key-literal check is forgiven only for the minted key, never for an error or a wrong method."""
    scenario = PREFIX + "basic-elicitation"
    wire = Check(id="wire-schema-valid", name="WireSchemaValid", status="SUCCESS")

    def incomplete(message: str, result: dict[str, Any] | None) -> Check:
        details = {"result": result} if result is not None else {}
        return Check("sep-2322-elicitation-incomplete", "Incomplete", "FAILURE", message, details)

    minted = {"resultType": "input_required", "inputRequests": {"k1": {"method": "elicitation/create"}}}
    key_message = 'inputRequests missing expected key "user_name"'
    forgiven = evaluate(scenario, [incomplete(key_message, minted), wire], key_literal="all")
    assert forgiven.passed, forgiven.problems
    assert len(forgiven.tolerated) == 2  # the check and the retry check it masks
    for mode in ("none", "warnings"):
        assert not evaluate(scenario, [incomplete(key_message, minted), wire], key_literal=mode).passed
    sampling = {"resultType": "input_required", "inputRequests": {"k1": {"method": "sampling/createMessage"}}}
    for check in (
        incomplete("JSON-RPC error: Unsupported protocol version", None),
        incomplete(key_message, sampling),
    ):
        assert not evaluate(scenario, [check, wire], key_literal="all").passed
    missing_wire = evaluate(scenario, [incomplete(key_message, minted)], key_literal="all")
    assert missing_wire.problems == [
        "wire-schema-valid [MISSING]: reported 0 of 1 time(s) (the scenario stopped before it)"
    ]


def test_repeated_checks_must_all_be_there_and_reference_deviations_count_only_directly() -> None:
    scenario = "http-header-validation"
    expected = SCENARIOS[scenario].checks
    good = [Check(check_id, check_id, "SUCCESS") for check_id in expected]
    whitespace = "sep-2243-server-accepts-whitespace-header-value"
    sdk = Check(
        whitespace,
        "ServerAcceptsWhitespaceHeaderValue",
        "FAILURE",
        "Expected successful response, got HTTP 400. Server MUST accept this request.; Expected successful "
        'response, but body contains JSON-RPC error {"code":-32020,"message":"mcp-name header does not '
        "match the request body's 'name' parameter\"}.",
    )
    deviating = [sdk if check.id == whitespace else check for check in good]

    assert evaluate(scenario, good).passed
    assert not evaluate(scenario, good[1:]).passed  # one of the five reject checks is gone
    assert evaluate(scenario, deviating, reference=True).passed
    assert not evaluate(scenario, deviating).passed


# -- the runs -------------------------------------------------------------------------------------


@pytest.mark.parametrize("scenario", list(SCENARIOS))
async def test_direct_modern_reference(
    scenario: str, harness: None, conformance_modern: PeerServer, report: Results
) -> None:
    """The CLI against the MRTR reference fixtures: every check passes (the harness is sound)."""
    run, verdict = await run_judged(conformance_modern.url, scenario, reference=True)
    report.setdefault(scenario, {})[DIRECT] = (run, verdict)
    assert verdict.passed, _failure(scenario, "direct", run, verdict)


async def _via_proxy(
    scenario: str,
    legacy: PeerServer,
    proxy_for: Callable[..., AbstractAsyncContextManager[Proxy]],
    report: Results,
    scores: Scores,
) -> Verdict:
    """One run through a fresh proxy; judged with every key-literal shape forgiven, and scored.

    The multiple-inputs fixture asks its three questions from three tasks; on a loaded two-core CI
    machine they can arrive more than the default round window apart and be split over two rounds,
    which the scenario (not MRTR) forbids. A 50 ms window makes "sent together" hold here: the
    scenario checks how a round is assembled, not how long the proxy waits for one.
    """
    async with proxy_for(legacy.url, round_window=0.05) as proxy:
        run, extra = await run_guarded(proxy.endpoint(), scenario)
    verdict = judge(run, key_literal="all", extra_expected=extra)
    report.setdefault(scenario, {})[VIA_PROXY] = (run, verdict)
    scores[scenario] = judge(run, key_literal="warnings", extra_expected=extra)
    assert verdict.passed, _failure(scenario, "via proxy", run, verdict)
    return verdict


@pytest.mark.parametrize("scenario", list(SCENARIOS))
async def test_via_proxy_legacy_upstream(
    scenario: str,
    harness: None,
    conformance_legacy: PeerServer,
    proxy_for: Callable[..., AbstractAsyncContextManager[Proxy]],
    report: Results,
    scores: Scores,
) -> None:
    """The CLI against the proxy in front of the in-flight fixtures: all but key-literal checks pass."""
    await _via_proxy(scenario, conformance_legacy, proxy_for, report, scores)


@pytest.mark.timeout(300)
async def test_at_least_20_of_the_21_pass_through_the_bridge(
    harness: None,
    conformance_legacy: PeerServer,
    proxy_for: Callable[..., AbstractAsyncContextManager[Proxy]],
    report: Results,
    scores: Scores,
) -> None:
    """By the suite's measure, with every expected check there; only basic-elicitation may fail, and
    only by the key it insists on. (Runs what the module's earlier tests did not, e.g. under -k.)"""
    for scenario in [name for name in SCENARIOS if name not in scores]:
        await _via_proxy(scenario, conformance_legacy, proxy_for, report, scores)
    failing = {name: verdict.problems for name, verdict in scores.items() if not verdict.passed}

    assert len(SCENARIOS) - len(failing) >= 20, failing
    assert set(failing) <= {ALLOWED_TO_FAIL}, failing
    if ALLOWED_TO_FAIL in failing:
        assert failing[ALLOWED_TO_FAIL] == [
            'sep-2322-elicitation-incomplete [FAILURE]: inputRequests missing expected key "user_name"',
            "sep-2322-elicitation-complete [MISSING]: reported 0 of 1 time(s) "
            "(the scenario stopped before it)",
        ]
        assert report[ALLOWED_TO_FAIL][VIA_PROXY][1].passed  # ... in exactly the minted-key shape


# -- DNS rebinding through both bridges ------------------------------------------------------------

REBINDING: Final = "dns-rebinding-protection"
REBINDING_CHECKS: Final = ("localhost-host-rebinding-rejected", "localhost-host-valid-accepted")
EVIL: Final = {"Host": "evil.example.com", "Origin": "http://evil.example.com"}
"""What a page on a rebound name sends: the suite's own Host and Origin."""


def _rebinding_passed(run: Run) -> list[str]:
    """The problems of a dns-rebinding-protection run: each of its two checks must be a SUCCESS."""
    found = {check.id: check for check in run.checks}
    problems = [run.harness_error] if run.harness_error else []
    for check_id in REBINDING_CHECKS:
        check = found.get(check_id)
        if check is None:
            problems.append(f"{check_id} [MISSING]")
        elif check.status != "SUCCESS":
            problems.append(f"{check_id} [{check.status}: {check.error_message} {dict(check.details)}]")
    return problems


@pytest.mark.parametrize(
    ("spec_version", "reference", "upstream", "mode"),
    [
        ("2026-07-28", "conformance_modern", "conformance_legacy", "mrtr_to_legacy"),
        ("2025-11-25", "conformance_legacy", "conformance_modern", "legacy_to_mrtr"),
    ],
)
async def test_dns_rebinding_protection_holds_through_both_bridges_fresh_and_after_a_client_was_served(
    spec_version: str,
    reference: str,
    upstream: str,
    mode: str,
    harness: None,
    request: pytest.FixtureRequest,
    proxy_for: Callable[..., AbstractAsyncContextManager[Proxy]],
) -> None:
    """The suite's scenario through each bridge, twice on one proxy: its rebound request first meets
    a bridge that holds nothing, then one that has served a localhost client (what it answers from
    what the server said then must not reach the rebound page). Direct, a server of the scenario's
    era passes it: the reference."""
    direct = await run_scenario(request.getfixturevalue(reference).url, REBINDING, spec_version)
    assert _rebinding_passed(direct) == [], direct.output_tail()
    peer: PeerServer = request.getfixturevalue(upstream)
    async with proxy_for(peer.url) as proxy:
        fresh = await run_scenario(proxy.endpoint(), REBINDING, spec_version)
        served = await run_scenario(proxy.endpoint(), REBINDING, spec_version)
        modes = {m.value for m in proxy.router.bridges}

    assert mode in modes, modes
    assert _rebinding_passed(fresh) == [], fresh.output_tail()
    assert _rebinding_passed(served) == [], served.output_tail()
