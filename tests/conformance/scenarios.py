"""The 21 conformance scenarios the proxy's modern->legacy bridge is measured by, and why these.

``@modelcontextprotocol/conformance@0.2.0-alpha.12`` lists 40 server scenarios for
``--spec-version 2026-07-28`` (``conformance list --server --spec-version 2026-07-28``). The bridge
plays a 2026-07-28 server in front of a legacy one, so it is measured by the scenarios whose checks
test what the bridge itself produces or translates, not what the server behind it contains:

- the 14 ``input-required-result-*`` scenarios (SEP-2322, MRTR): in-flight questions of the legacy
  server become ``input_required`` rounds the bridge seals, parks and resumes;
- ``server-stateless`` (SEP-2575): the per-request envelope, ``server/discover``, removed methods,
  -32020/-32021/-32022 and their layouts, no requests or unasked-for logs on a request's stream,
  ``subscriptions/listen``: all answered or enforced by the bridge;
- ``caching`` (SEP-2549): ``ttlMs``/``cacheScope``, which a legacy server never sends;
- ``sep-2164-resource-not-found``: the legacy -32002 becomes 2026's -32602 (with ``data.uri``);
- ``http-header-validation`` and ``http-custom-header-server-validation`` (SEP-2243):
  ``Mcp-Method``/``Mcp-Name``/``Mcp-Param-*`` never reach a legacy server, so the bridge checks them
  (the ``x-mcp-header`` annotations learned from the tool lists it relays);
- ``tools-call-with-progress``: progress from the legacy call's stream, re-addressed to the 2026
  request's token on the 2026 response;
- ``json-schema-2020-12`` (SEP-1613/2106): tool schemas relayed across eras keyword for keyword.

`OTHER_SCENARIOS` says why each of the other 19 is not among them. The fixtures for all 40 are in
``tests.peers.conformance_app`` / ``conformance_more`` (a legacy in-flight twin and a 2026 MRTR
reference of each), so any of them can be run by hand (``python -m tests.conformance.harness``).

Each scenario POSTs raw 2026-07-28 requests (``MCP-Protocol-Version`` and ``Mcp-Method``/``Mcp-Name``
headers, the ``_meta`` envelope with capabilities ``{sampling: {}, elicitation: {}, roots:
{listChanged: true}}`` unless stated), each bounded to 10 s. The MRTR ones answer every input request
themselves: elicitation ``{action: "accept", content: ...}``, sampling ``{role: "assistant", content:
{type: "text", text}, model: "test-model", stopReason: "endTurn"}``, roots ``{roots: [{uri:
"file:///test/root", name: "Test Root"}]}``; retries echo ``requestState`` when there is one and use
the keys the server chose (``Object.keys(inputRequests)``), except where a check names a key
literally. Most scenarios also get ``wire-schema-valid``: every message the server sent validates
against the 2026-07-28 JSON schema. How a run is judged: ``tests.conformance.checks``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

__all__ = ["OTHER_SCENARIOS", "PREFIX", "SCENARIOS", "Scenario", "fixture_names"]

PREFIX: Final = "input-required-result-"
WIRE_SCHEMA: Final = "wire-schema-valid"

MRTR_WHY: Final = (
    "SEP-2322: the bridge plays the MRTR server; the legacy server's in-flight questions become "
    "input_required rounds"
)


@dataclass(frozen=True)
class Scenario:
    """One conformance scenario: what it calls, which checks it emits when all goes well, and why
    it measures the bridge."""

    name: str
    fixture: str
    """What it exercises, for the report (a tool or prompt name, or a summary in parentheses)."""
    calls: str
    """What it sends, in order."""
    checks: tuple[str, ...]
    """Check ids it emits on a conforming server, each as often as it emits it."""
    why: str
    """Why the bridge is measured by it."""
    vacuous: str = ""
    """How the scenario can pass without the feature working, when it can."""
    allowed: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    """check id -> (the one non-SUCCESS status it may have here, and why)."""
    tools: tuple[str, ...] = ()
    prompts: tuple[str, ...] = ()


def _s(short: str, fixture: str, calls: str, *checks: str, vacuous: str = "") -> Scenario:
    """One of the 14 MRTR scenarios (its fixture is the tool, or prompt, it calls)."""
    tools = (fixture,) if fixture.startswith("test_") and not fixture.endswith("_prompt") else ()
    prompts = (fixture,) if fixture.endswith("_prompt") else ()
    return Scenario(
        PREFIX + short, fixture, calls, (*checks, WIRE_SCHEMA), MRTR_WHY, vacuous, {}, tools, prompts
    )


_ELICIT = "test_input_required_result_elicitation"

_MRTR: Final[dict[str, Scenario]] = {
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
            "at least one entry and no elicitation/create entry (no retry). The fixture asks the user "
            "when it may and otherwise falls back to sampling: through the bridge the legacy twin "
            "falls back only if the session the bridge opened for this client declares sampling alone",
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


_NOT_LISTED = "the fixtures declare no listChanged capability, so there is no list that changes (a SHOULD)"

_OTHERS_OF_THE_21: Final[tuple[Scenario, ...]] = (
    Scenario(
        "server-stateless",
        "(test_missing_capability, test_streaming_elicitation, test_logging_tool)",
        "discover with missing/partial _meta (-32602, 400), without clientInfo (served); discover "
        "(supportedVersions, capabilities, _meta serverInfo); discover at v999.0.0 (-32022 with "
        "data.supported among supportedVersions and data.requested echoed, 400; error ids echoed); "
        "header/envelope version mismatch (-32020); test_missing_capability with no capabilities "
        "(-32021 naming sampling, 400); initialize, ping, logging/setLevel, resources/(un)subscribe and "
        "an unknown method (404 -32601); test_streaming_elicitation (no request on the stream); "
        "test_logging_tool without logLevel (no log); subscriptions/listen (ack first, subscriptionId, "
        "filter)",
        (
            "sep-2575-request-meta-invalid-missing-meta",
            "sep-2575-http-server-meta-invalid-400",
            "sep-2575-request-meta-invalid-missing-protocol-version",
            "sep-2575-http-server-meta-invalid-400",
            "sep-2575-request-meta-invalid-missing-client-capabilities",
            "sep-2575-http-server-meta-invalid-400",
            "sep-2575-request-meta-client-info-optional",
            "sep-2575-server-implements-discover",
            "sep-2575-server-identifies-in-result-meta",
            "sep-2575-server-declares-prompts-in-discover",
            "sep-2575-discover-capabilities-match-handlers",
            "sep-2575-server-unsupported-version-error",
            "sep-2575-http-server-unsupported-version-400",
            "sep-2575-http-server-header-mismatch-400",
            "sep-2575-server-rejects-undeclared-capability",
            "sep-2575-missing-capability-http-400",
            "sep-2575-http-server-method-not-found-404-initialize",
            "sep-2575-http-server-method-not-found-404-ping",
            "sep-2575-http-server-method-not-found-404-logging-setlevel",
            "sep-2575-http-server-method-not-found-404-resources-subscribe",
            "sep-2575-http-server-method-not-found-404-resources-unsubscribe",
            "sep-2575-http-server-method-not-found-404",
            "sep-2575-http-server-no-independent-requests-on-stream",
            "sep-2575-server-no-log-without-loglevel",
            "sep-2575-server-sends-subscription-ack",
            "sep-2575-server-tags-subscription-id",
            "sep-2575-server-honors-notification-filter",
            "sep-2575-server-sends-prompts-list-changed-on-subscription",
            "sep-2575-server-sends-tools-list-changed-on-subscription",
            "sep-2575-http-server-error-jsonrpc-id",
        ),
        "SEP-2575: the envelope, discovery, version and capability errors, removed methods, request "
        "streams and listen streams of 2026-07-28 are all the bridge's own answers",
        vacuous="the diagnostic-tool checks fail as untestable without the tools, so they are served; "
        "the notification-filter check passes on a listen stream that never carries anything",
        allowed={
            "sep-2575-server-sends-prompts-list-changed-on-subscription": ("SKIPPED", _NOT_LISTED),
            "sep-2575-server-sends-tools-list-changed-on-subscription": ("SKIPPED", _NOT_LISTED),
        },
        tools=("test_missing_capability", "test_streaming_elicitation", "test_logging_tool"),
    ),
    Scenario(
        "caching",
        "(lists, test://static-text)",
        "tools/list, prompts/list, resources/list, resources/templates/list, resources/read of the "
        "first resource: each result carries ttlMs (integer >= 0) and cacheScope (public|private)",
        (
            "sep-2549-tools-list-caching-hints",
            "sep-2549-prompts-list-caching-hints",
            "sep-2549-resources-list-caching-hints",
            "sep-2549-resources-templates-list-caching-hints",
            "sep-2549-resources-read-caching-hints",
            "sep-2549-ttl-non-negative",
            "sep-2549-cache-scope-valid",
            WIRE_SCHEMA,
        ),
        "SEP-2549: a legacy server sends no caching hints; the bridge adds them",
    ),
    Scenario(
        "sep-2164-resource-not-found",
        "(resources/read of an unknown URI)",
        "resources/read test://nonexistent-resource-for-conformance-testing: no empty contents, a "
        "-32602 error (SHOULD) with data.uri (SHOULD)",
        ("sep-2164-no-empty-contents", "sep-2164-error-code", "sep-2164-data-uri", WIRE_SCHEMA),
        "SEP-2164: the legacy server answers -32002 (its era's code); the bridge must say -32602",
    ),
    Scenario(
        "http-header-validation",
        "(the first listed tool: test_simple_text)",
        "mismatched, missing and case-changed Mcp-Method / Mcp-Name headers (400 -32020 each); "
        "Mcp-Name with surrounding whitespace and lower-case header names (accepted)",
        (
            *("sep-2243-server-reject-invalid-headers", "sep-2243-server-reject-error-code") * 4,
            "sep-2243-server-accepts-whitespace-header-value",
            "sep-2243-header-name-case-insensitive",
            "sep-2243-header-name-case-insensitive",
            "sep-2243-server-reject-invalid-headers",
            "sep-2243-server-reject-error-code",
            WIRE_SCHEMA,
        ),
        "SEP-2243: the 2026 routing headers never reach a legacy server; the bridge checks them",
        vacuous="the reject cases pass on any 400 -32020; the accept cases keep it honest",
        tools=("test_simple_text",),
    ),
    Scenario(
        "http-custom-header-server-validation",
        "test_param_header",
        "tools/call of the first tool with a string x-mcp-header argument: valid base64 sentinel "
        "(accepted), bad padding and bad characters (400 -32020), values without the prefix or suffix "
        "taken literally (accepted), header omitted while the body has the value (400 -32020)",
        (
            "sep-2243-server-decode-base64",
            *("sep-2243-server-reject-invalid-param-chars", "sep-2243-server-reject-param-mismatch") * 2,
            "sep-2243-server-validate-param-match",
            "sep-2243-server-validate-param-match",
            "sep-2243-server-validate-param-match",
            "sep-2243-server-reject-param-mismatch",
            WIRE_SCHEMA,
        ),
        "SEP-2243: Mcp-Param-* headers never reach a legacy server; the bridge checks them against the "
        "x-mcp-header annotations of the tool lists it relayed",
        tools=("test_param_header",),
    ),
    Scenario(
        "tools-call-with-progress",
        "test_tool_with_progress",
        "tools/call with _meta.progressToken: at least 3 progress notifications, non-decreasing, "
        "under that token",
        ("tools-call-with-progress", WIRE_SCHEMA),
        "the legacy call's progress is carried onto the 2026 request's stream under its own token",
        tools=("test_tool_with_progress",),
    ),
    Scenario(
        "json-schema-2020-12",
        "json_schema_2020_12_tool",
        "tools/list: the tool's inputSchema keeps $schema, $defs (with $anchor), additionalProperties, "
        "allOf/anyOf and if/then/else",
        (
            "json-schema-2020-12-tool-found",
            "json-schema-2020-12-$schema",
            "json-schema-2020-12-$defs",
            "json-schema-2020-12-additionalProperties",
            "sep-2106-composition-keywords-preserved",
            "sep-2106-conditional-keywords-preserved",
            "sep-2106-anchor-keyword-preserved",
            WIRE_SCHEMA,
        ),
        "SEP-1613/2106: tool schemas cross the bridge (which reads them for x-mcp-header) untouched",
        tools=("json_schema_2020_12_tool",),
    ),
)

SCENARIOS: Final[dict[str, Scenario]] = {
    **_MRTR,
    **{scenario.name: scenario for scenario in _OTHERS_OF_THE_21},
}
"""The 21 scenarios, in the order they run and are reported."""

_CONTENT = "what the server contains, which the bridge only relays (it passes through the proxy too)"

OTHER_SCENARIOS: Final[dict[str, str]] = {
    **{
        name: _CONTENT
        for name in (
            "completion-complete",
            "tools-list",
            "tools-call-simple-text",
            "tools-call-image",
            "tools-call-audio",
            "tools-call-embedded-resource",
            "tools-call-mixed-content",
            "tools-call-error",
            "resources-list",
            "resources-read-text",
            "resources-read-binary",
            "resources-templates-read",
            "prompts-list",
            "prompts-get-simple",
            "prompts-get-with-args",
            "prompts-get-embedded-resource",
            "prompts-get-with-image",
        )
    },
    "server-sse-multiple-streams": "concurrent POST streams of any server; its functional check is INFO",
    "dns-rebinding-protection": "Host/Origin validation is the upstream's: pass-through carries the "
    "client's Origin to it, and each bridge answers an origin from what it holds only once the server "
    "accepted that origin; measured through both bridges, in both eras, by "
    "tests/e2e/test_conformance.py::test_dns_rebinding_protection_holds_through_both_bridges_fresh_and_"
    "after_a_client_was_served",
}
"""The other 2026-07-28 server scenarios, each with why it does not measure the bridge."""


def fixture_names() -> set[str]:
    """Every tool and prompt name the 21 scenarios call."""
    return {name for s in SCENARIOS.values() for name in (*s.tools, *s.prompts)}
