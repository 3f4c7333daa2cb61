"""The upstream era verdict follows the upstream: probed at start, probed again when answers stop fitting."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import pytest

from proxy.flows.events import Mode
from tests.peers.runner import PeerServer
from tests.peers.scenarios import run_scenario

pytestmark = pytest.mark.e2e


async def test_a_dual_era_upstream_passes_both_eras_through(
    dual_inflight_server: PeerServer, proxy_for: Callable[..., Any]
) -> None:
    async with proxy_for(dual_inflight_server.url) as proxy:
        assert proxy.router.eras.label == "dual"
        await run_scenario(proxy.endpoint(), "legacy", "ask_name")
        await run_scenario(proxy.endpoint(), "2026-07-28", "echo")
    assert {c.summary.mode for c in proxy.chains()} == {Mode.PASSTHROUGH}


async def test_bridge_off_passes_a_legacy_client_through_to_a_modern_server_unchanged(
    modern_server: PeerServer, proxy_for: Callable[..., Any]
) -> None:
    async with proxy_for(modern_server.url, bridge="off") as proxy:
        with pytest.raises(BaseException):  # noqa: PT011,B017 - the SDK wraps the refusal in exception groups
            await run_scenario(proxy.endpoint(), "legacy", "echo")
    initialize = [c for c in proxy.chains() if c.summary.method == "initialize"]
    assert initialize
    assert initialize[0].summary.mode is Mode.PASSTHROUGH
    assert initialize[0].summary.http_status == 400


async def test_an_upstream_that_changes_era_is_probed_again_and_then_bridged(
    peer_factory: Callable[..., PeerServer], proxy_for: Callable[..., Any]
) -> None:
    legacy = peer_factory("legacy-inflight")
    port = legacy.port
    async with proxy_for(legacy.url) as proxy:
        assert proxy.router.eras.label == "legacy"
        await run_scenario(proxy.endpoint(), "legacy", "echo")
        await anyio.to_thread.run_sync(legacy.stop)
        await anyio.to_thread.run_sync(lambda: peer_factory("modern-mrtr", port=port))
        result: dict[str, Any] | None = None
        with anyio.fail_after(20):
            while result is None:
                try:
                    result = await run_scenario(proxy.endpoint(), "legacy", "ask_name")
                except BaseException as exc:
                    if isinstance(exc, anyio.get_cancelled_exc_class()):
                        raise
                    await anyio.sleep(0.5)  # the proxy re-probes at most every 2 s; poll until it has
        assert proxy.router.eras.label == "modern"
    assert result["result"]["content"] == ["Hello, octocat!"]
    assert any(c.summary.mode is Mode.LEGACY_TO_MRTR and c.summary.name == "ask_name" for c in proxy.chains())
