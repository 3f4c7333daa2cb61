"""The 14 ``input-required-result-*`` server scenarios of conformance 0.2.0-alpha.12, and how to judge them.

Read from the package's ``dist/index.js`` (the TypeScript source is ``src/scenarios/server/
input-required-result.ts``). Each scenario POSTs raw 2026-07-28 requests (``MCP-Protocol-Version``
and ``Mcp-Method``/``Mcp-Name`` headers, the ``_meta`` envelope with capabilities
``{sampling: {}, elicitation: {}, roots: {listChanged: true}}`` unless stated), each bounded to 10 s,
and answers every input request itself: elicitation ``{action: "accept", content: ...}``, sampling
``{role: "assistant", content: {type: "text", text}, model: "test-model", stopReason: "endTurn"}``,
roots ``{roots: [{uri: "file:///test/root", name: "Test Root"}]}``. Retries echo ``requestState``
when there is one and use the keys the server chose (``Object.keys(inputRequests)``), except where a
check below names a key literally. Every scenario also gets ``wire-schema-valid``: every message the
server sent validates against the 2026-07-28 JSON schema.

The CLI's own verdict (exit code 1 iff some check is ``FAILURE``) ignores ``WARNING`` checks and
missing checks. `evaluate` is stricter: every expected check must be present and ``SUCCESS``, apart
from the documented key-literal exceptions (and only in the exact shape the exception describes).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

__all__ = [
    "KEY_LITERAL_CHECKS",
    "PREFIX",
    "SCENARIOS",
    "Check",
    "KeyLiteral",
    "Scenario",
    "Verdict",
    "evaluate",
    "fixture_names",
]

PREFIX: Final = "input-required-result-"
WIRE_SCHEMA: Final = "wire-schema-valid"


@dataclass(frozen=True)
class Scenario:
    """One conformance scenario: what it calls and which checks it emits when all goes well."""

    name: str
    fixture: str
    """The tool (``tools/call``) or prompt (``prompts/get``) it exercises."""
    calls: str
    """What it sends, in order."""
    checks: tuple[str, ...]
    """Check ids it emits on a conforming server (``wire-schema-valid`` included)."""
    vacuous: str = ""
    """How the scenario can pass without the feature working, when it can."""


def _s(short: str, fixture: str, calls: str, *checks: str, vacuous: str = "") -> Scenario:
    return Scenario(PREFIX + short, fixture, calls, (*checks, WIRE_SCHEMA), vacuous)


_ELICIT = "test_input_required_result_elicitation"

SCENARIOS: Final[dict[str, Scenario]] = {
    s.name: s
    for s in (
        _s(
            "basic-elicitation",
            _ELICIT,
            "call; must get input_required with key `user_name` (elicitation/create); "
            "retry with user_name={name: Alice} (+ state) must complete with non-empty content",
            "sep-2322-elicitation-incomplete",
            "sep-2322-elicitation-complete",
        ),
        _s(
            "basic-sampling",
            "test_input_required_result_sampling",
            "call; input_required whose first entry is sampling/createMessage (any key); "
            "retry with that key answered must complete",
            "sep-2322-sampling-incomplete",
            "sep-2322-sampling-complete",
        ),
        _s(
            "basic-list-roots",
            "test_input_required_result_list_roots",
            "call; input_required whose first entry is roots/list (any key); retry must complete",
            "sep-2322-list-roots-incomplete",
            "sep-2322-list-roots-complete",
        ),
        _s(
            "request-state",
            "test_input_required_result_request_state",
            "call; input_required with inputRequests and a string requestState; "
            "retry with first key = {ok: true} + requestState must complete",
            "sep-2322-request-state-incomplete",
            "sep-2322-request-state-complete",
        ),
        _s(
            "multiple-input-requests",
            "test_input_required_result_multiple_inputs",
            "call; ONE input_required round with >= 3 entries covering elicitation/create, "
            "sampling/createMessage and roots/list, plus requestState; retry answering all must complete",
            "sep-2322-multiple-inputs-incomplete",
            "sep-2322-multiple-inputs-complete",
        ),
        _s(
            "multi-round",
            "test_input_required_result_multi_round",
            "r1 input_required + requestState; r2 (first key = {name}) input_required with a "
            "DIFFERENT requestState; r3 (first key = {color}) complete",
            "sep-2322-multi-round-r1",
            "sep-2322-multi-round-r2",
            "sep-2322-multi-round-r3",
        ),
        _s(
            "missing-input-response",
            _ELICIT,
            "first call already carries inputResponses {wrong_key: ...} (no requestState); "
            "must get input_required (a JSON-RPC error or a complete result is only a WARNING)",
            "sep-2322-missing-response-rerequests",
        ),
        _s(
            "non-tool-request",
            "test_input_required_result_prompt",
            "prompts/get; input_required with inputRequests; retry (first key = {context}) must "
            "give a complete result with messages",
            "sep-2322-non-tool-incomplete",
            "sep-2322-non-tool-complete",
        ),
        _s(
            "result-type",
            _ELICIT,
            "call; the result must carry resultType explicitly, = input_required",
            "sep-2322-result-type-included",
        ),
        _s(
            "unsupported-methods",
            "(tools/list, prompts/list)",
            "tools/list and prompts/list must not answer input_required",
            "sep-2322-not-on-unsupported-requests",
            vacuous="JSON-RPC errors pass; the harness adds `harness-lists-answered` (both lists "
            "answered with the fixtures) to close that gap",
        ),
        _s(
            "tampered-state",
            "test_input_required_result_tampered_state",
            "call (must give input_required + requestState); retry with requestState + '-TAMPERED' "
            "must get a JSON-RPC error",
            "sep-2322-reject-tampered-state",
        ),
        _s(
            "capability-check",
            "test_input_required_result_capabilities",
            "call with _meta clientCapabilities {sampling: {}} only; must get input_required with "
            "at least one entry and no elicitation/create entry (no retry)",
            "sep-2322-respect-client-capabilities",
        ),
        _s(
            "ignore-extra-params",
            _ELICIT,
            "first call (no requestState) with inputResponses {user_name: {name: Alice}, "
            "unknown_extra_key, another_unexpected}; must complete (else WARNING)",
            "sep-2322-ignore-unexpected-params",
        ),
        _s(
            "validate-input",
            _ELICIT,
            "first call with inputResponses {user_name: 12345}, then with inputResponses null; "
            "neither may complete (else WARNING)",
            "sep-2322-validate-input-responses",
            "sep-2322-error-on-protocol-error",
            vacuous="any JSON-RPC error passes both checks; the harness adds "
            "`harness-validate-input-meaningful` (each answer is input_required or -32602)",
        ),
    )
}


def fixture_names() -> set[str]:
    """Every tool and prompt name the scenarios call."""
    return {s.fixture for s in SCENARIOS.values() if not s.fixture.startswith("(")}


# --------------------------------------------------------------------------------------------
# Key-literal checks: what only the original server can satisfy.
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Check:
    """One entry of the CLI's ``checks.json``."""

    id: str
    name: str
    status: str
    """``SUCCESS``, ``FAILURE``, ``WARNING``, ``SKIPPED`` or ``INFO``."""
    error_message: str = ""
    details: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def parse(cls, raw: Any) -> Check:
        """Read one check; raises ValueError on anything that is not a check object."""
        if (
            not isinstance(raw, dict)
            or not isinstance(raw.get("id"), str)
            or not isinstance(raw.get("status"), str)
        ):
            raise ValueError(f"not a conformance check: {raw!r:.200}")
        details = raw.get("details")
        return cls(
            id=raw["id"],
            name=str(raw.get("name", raw["id"])),
            status=raw["status"],
            error_message=str(raw.get("errorMessage") or ""),
            details=details if isinstance(details, dict) else {},
        )


def _single_entry(result: Any, method: str) -> bool:
    """`result` is an input_required result with exactly one entry, of `method`."""
    if not isinstance(result, dict) or result.get("resultType") != "input_required":
        return False
    requests = result.get("inputRequests")
    if not isinstance(requests, dict) or len(requests) != 1:
        return False
    (entry,) = requests.values()
    return isinstance(entry, dict) and entry.get("method") == method


@dataclass(frozen=True)
class KeyLiteral:
    """A check that insists on an input key only the original server could know.

    A bridge in front of a legacy server mints its own keys (the legacy server has none), so such
    a check may fail through the proxy; `tolerated` accepts exactly the failure that the key
    causes and nothing else (an error, a wrong method or a missing state still fail).
    """

    reason: str
    tolerated: Callable[[Check], bool]
    masks: tuple[str, ...] = ()
    """Checks the scenario only emits when this one passes (absent, not failed, when it fails)."""


def _user_name_missing(check: Check) -> bool:
    return (
        check.status == "FAILURE"
        and check.error_message == 'inputRequests missing expected key "user_name"'
        and _single_entry(check.details.get("result"), "elicitation/create")
    )


def _asked_instead(check: Check) -> bool:
    return check.status == "WARNING" and _single_entry(check.details.get("result"), "elicitation/create")


KEY_LITERAL_CHECKS: Final[dict[tuple[str, str], KeyLiteral]] = {
    (PREFIX + "basic-elicitation", "sep-2322-elicitation-incomplete"): KeyLiteral(
        reason="requires the input key to be literally `user_name`; a bridge in front of a legacy "
        "server mints its own keys. Tolerated only as: input_required with exactly one "
        "elicitation/create entry under another key.",
        tolerated=_user_name_missing,
        masks=("sep-2322-elicitation-complete",),
    ),
    (PREFIX + "ignore-extra-params", "sep-2322-ignore-unexpected-params"): KeyLiteral(
        reason="answers `user_name` on a FIRST call (no requestState, no round before it) and "
        "expects completion: only a server that names its question `user_name` beforehand can "
        "accept that answer; a bridge has not even seen the legacy server's question yet. "
        "Tolerated only as: WARNING with an input_required asking exactly one elicitation/create.",
        tolerated=_asked_instead,
    ),
}


# --------------------------------------------------------------------------------------------
# Verdicts.
# --------------------------------------------------------------------------------------------


@dataclass
class Verdict:
    """How one scenario run fared, read check by check."""

    passed: bool
    problems: list[str]
    """One line per failed, non-SUCCESS or missing check (or harness error)."""
    tolerated: list[str]
    """Key-literal checks that failed in the tolerated way, and the checks they masked."""
    succeeded: int
    expected: int


def evaluate(
    scenario: str,
    checks: list[Check],
    *,
    allow_key_literal: bool,
    extra_expected: tuple[str, ...] = (),
) -> Verdict:
    """Judge `checks`: every expected one present and SUCCESS, nothing else short of SUCCESS.

    With `allow_key_literal`, the `KEY_LITERAL_CHECKS` of `scenario` may fail in their tolerated
    shape, and the checks they mask may then be absent.
    """
    expected = [*SCENARIOS[scenario].checks, *extra_expected]
    by_id: dict[str, Check] = {}
    problems: list[str] = []
    tolerated: list[str] = []
    for check in checks:
        if check.id in by_id:
            problems.append(f"{check.id}: reported twice")
        by_id[check.id] = check
    masked: set[str] = set()
    for check in checks:
        if check.status == "SUCCESS":
            continue
        literal = KEY_LITERAL_CHECKS.get((scenario, check.id))
        if allow_key_literal and literal is not None and literal.tolerated(check):
            tolerated.append(f"{check.id} [{check.status}] (key-literal): {check.error_message}")
            masked.update(literal.masks)
            continue
        problems.append(f"{check.id} [{check.status}]: {check.error_message or check.name}")
    for check_id in expected:
        if check_id in by_id:
            continue
        if check_id in masked:
            tolerated.append(f"{check_id} (not emitted: masked by a key-literal check)")
        else:
            problems.append(f"{check_id} [MISSING]: not reported (the scenario stopped before it)")
    succeeded = sum(1 for c in checks if c.status == "SUCCESS")
    return Verdict(not problems, problems, tolerated, succeeded, len(expected))
