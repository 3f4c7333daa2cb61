"""The conformance suite's OAuth client scenarios, run with the TypeScript SDK's client through `mcp-proxy`.

`auth/metadata-var3` has the server name its protected resource metadata at a path of its own
(`/custom/metadata/location.json`, which RFC 9728 allows), not under `/.well-known/`. The proxy moves
that URL in the 401's challenge onto its own origin; the document the client then asks for there must
be rewritten too, or the SDK refuses its `resource` (the upstream's URL, not the one it was given)
and the login never starts. Run the way the suite runs an SDK's client
(`tests.conformance.client_runs`), both spec versions.
"""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.conformance.client_runs import ClientRun, run_client_scenario
from tests.conformance.harness import HarnessMissingError, check_installed
from tests.e2e.test_oauth_origin import rewrites

pytestmark = pytest.mark.e2e

CUSTOM_PRM = "/custom/metadata/location.json"

NOT_THE_PROXYS = frozenset({"resource-parameter-matches-prm", "sep-837-application-type-present"})
"""Checks that fail for other reasons: with the authorization server on another origin the client asks
for its token for the proxy's URL, which the proxy never sees (README, "OAuth through the proxy": the
limit); the SDK v1 client registers without an `application_type` (2026-07-28), directly too."""


def _failing(run: ClientRun) -> list[str]:
    """The checks that did not pass, but for those that fail for reasons not the proxy's."""
    return [
        f"{c.id} [{c.status}]: {c.error_message}"
        for c in run.checks
        if c.status not in {"SUCCESS", "INFO"} and c.id not in NOT_THE_PROXYS
    ]


@pytest.mark.timeout(150)
@pytest.mark.parametrize("spec_version", ["2025-11-25", "2026-07-28"])
def test_metadata_at_a_custom_path_is_rewritten_and_the_client_logs_in_through_the_proxy(
    spec_version: str, tmp_path: Path
) -> None:
    try:
        check_installed()
    except HarnessMissingError as exc:
        pytest.fail(str(exc), pytrace=False)

    run = run_client_scenario("auth/metadata-var3", spec_version, tmp_path)

    challenged = next(line for line in run.client if line.get("www_authenticate"))
    me = f"{urlsplit(challenged['url']).scheme}://{urlsplit(challenged['url']).netloc}"
    assert f'resource_metadata="{me}{CUSTOM_PRM}"' in challenged["www_authenticate"], run.client
    document = next(line for line in run.client if urlsplit(line.get("url", "")).path == CUSTOM_PRM)
    assert json.loads(document["body"])["resource"] == f"{me}/mcp", document
    for check in ("client-registration", "authorization-request", "token-request", "valid-bearer-token"):
        assert run.status(check) == "SUCCESS", f"{check}: {_failing(run)}\n{run.output}"
    assert _failing(run) == [], run.output
    moved = [(path, changed) for path, _, changed, _, now in rewrites(run.capture) if now == me]
    assert moved[:2] == [("/mcp", "WWW-Authenticate resource_metadata"), (CUSTOM_PRM, "resource")]
    said = [e["changed"] for e in run.proxy_log if e.get("event") == "origin_rewritten"]
    assert said[:2] == ["WWW-Authenticate resource_metadata", "resource"]
