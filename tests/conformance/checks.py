"""How a conformance run is judged: the CLI's checks, the documented exceptions, the verdict.

The CLI's own verdict (exit code 1 iff some check is ``FAILURE``) ignores ``WARNING`` checks and
checks that were never emitted. `evaluate` is stricter: every expected check must be present (as
often as the scenario emits it) and ``SUCCESS``, apart from three kinds of documented exception,
each allowed only in the exact shape its reason explains:

- ``Scenario.allowed``: a status a scenario legitimately reports for a server like ours (``SKIPPED``
  for a SHOULD that needs a capability the fixtures do not declare, ``INFO`` for a note);
- ``KEY_LITERAL_CHECKS``: what only the original server can satisfy, because it names the input key
  a bridge in front of a legacy server cannot know (the proxy column only);
- ``REFERENCE_DEVIATIONS``: where the modern reference server (the SDK, or the test peer's era
  wrapper) answers differently from the suite (the direct column only; never the proxy's).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from tests.conformance.scenarios import PREFIX, SCENARIOS

__all__ = [
    "KEY_LITERAL_CHECKS",
    "REFERENCE_DEVIATIONS",
    "Check",
    "KeyLiteral",
    "KeyLiteralMode",
    "Verdict",
    "evaluate",
]


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


# --------------------------------------------------------------------------------------------
# Key-literal checks: what only the original server can satisfy.
# --------------------------------------------------------------------------------------------


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

KeyLiteralMode = Literal["none", "warnings", "all"]
"""Which key-literal checks `evaluate` forgives: none, only those reported as WARNING (the CLI
passes such a scenario; the pass count uses this), or all of them (each in its exact shape)."""


# --------------------------------------------------------------------------------------------
# Where the modern reference answers differently from the suite.
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Deviation:
    """A check the reference server does not pass: with which status and message, and why."""

    message: str
    reason: str
    status: str = "FAILURE"


_NO_LISTEN = (
    "the Python SDK's 2026 server (mcp 2.3.0) does not serve subscriptions/listen (-32601) and "
    "declares nothing a listen stream could carry, so the suite skips this; the bridge serves listen"
)


REFERENCE_DEVIATIONS: Final[dict[tuple[str, str], Deviation]] = {
    ("server-stateless", "sep-2575-http-server-method-not-found-404-initialize"): Deviation(
        message="Expected HTTP 404 and code -32601 for removed methods, got HTTP 400 and code -32022",
        reason="the test peers' 2026-only wrapper (tests.peers.apps.modern_only) answers `initialize` "
        "the way the TypeScript SDK's `legacy: 'reject'` does: HTTP 400 with -32022 and the supported "
        "versions, which tells a dual-era client to speak 2026-07-28; the suite wants 404 -32601. The "
        "bridge answers 404 -32601.",
    ),
    **{
        ("server-stateless", check_id): Deviation("", _NO_LISTEN, "SKIPPED")
        for check_id in (
            "sep-2575-server-sends-subscription-ack",
            "sep-2575-server-tags-subscription-id",
            "sep-2575-server-honors-notification-filter",
        )
    },
    ("http-header-validation", "sep-2243-server-accepts-whitespace-header-value"): Deviation(
        message="Expected successful response, got HTTP 400. Server MUST accept this request.; "
        "Expected successful response, but body contains JSON-RPC error "
        '{"code":-32020,"message":"mcp-name header does not match the request body\'s \'name\' parameter"}.',
        reason="the Python SDK (mcp 2.3.0) compares `Mcp-Name` with the body before trimming the "
        "optional whitespace around the header value (RFC 9110 5.5); the proxy's HTTP parser trims it.",
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
    """Documented exceptions that applied, and the checks they masked."""
    succeeded: int
    expected: int


def _forgiven(
    scenario: str, check: Check, key_literal: KeyLiteralMode, reference: bool
) -> tuple[str, tuple[str, ...]] | None:
    """Why `check` (not SUCCESS) is forgiven, and what it masks; None when it is a problem."""
    allowed = SCENARIOS[scenario].allowed.get(check.id)
    if allowed is not None and check.status == allowed[0]:
        return f"{check.id} [{check.status}] (allowed): {allowed[1]}", ()
    literal = KEY_LITERAL_CHECKS.get((scenario, check.id))
    wanted = key_literal == "all" or (key_literal == "warnings" and check.status == "WARNING")
    if literal is not None and wanted and literal.tolerated(check):
        return f"{check.id} [{check.status}] (key-literal): {check.error_message}", literal.masks
    deviation = REFERENCE_DEVIATIONS.get((scenario, check.id))
    if (
        reference
        and deviation is not None
        and (check.status, check.error_message) == (deviation.status, deviation.message)
    ):
        return f"{check.id} [{check.status}] (reference deviation): {deviation.reason}", ()
    return None


def evaluate(
    scenario: str,
    checks: list[Check],
    *,
    key_literal: KeyLiteralMode = "none",
    reference: bool = False,
    extra_expected: tuple[str, ...] = (),
) -> Verdict:
    """Judge `checks`: every expected one present (as often as expected) and SUCCESS, nothing else
    short of SUCCESS, apart from the documented exceptions (`key_literal`, and with `reference` the
    reference server's deviations)."""
    expected = Counter((*SCENARIOS[scenario].checks, *extra_expected))
    reported = Counter(check.id for check in checks)
    problems: list[str] = []
    tolerated: list[str] = []
    masked: set[str] = set()
    for check in checks:
        if check.status == "SUCCESS":
            continue
        forgiven = _forgiven(scenario, check, key_literal, reference)
        if forgiven is None:
            problems.append(f"{check.id} [{check.status}]: {check.error_message or check.name}")
            continue
        tolerated.append(forgiven[0])
        masked.update(forgiven[1])
    for check_id, count in expected.items():
        if reported[check_id] >= count:
            continue
        if check_id in masked:
            tolerated.append(f"{check_id} (not emitted: masked by a key-literal check)")
        else:
            problems.append(
                f"{check_id} [MISSING]: reported {reported[check_id]} of {count} time(s) "
                "(the scenario stopped before it)"
            )
    for check_id in sorted(set(reported) - set(expected)):
        problems.append(f"{check_id} [UNEXPECTED]: not a check this scenario emits when all goes well")
    succeeded = sum(1 for c in checks if c.status == "SUCCESS")
    return Verdict(not problems, problems, tolerated, succeeded, sum(expected.values()))
