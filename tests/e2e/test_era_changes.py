"""The upstream era verdict follows the upstream: probed at start, probed again when answers stop fitting.

The proxy is the `mcp-proxy` command; its verdict is read where an operator reads it (`/readyz`'s
`upstream_era`), and each chain's mode from the admin API (`/api/chains`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import pytest

from tests.e2e.commanded import Commanded, own_proxy
from tests.peers.runner import PeerServer
from tests.peers.scenarios import run_scenario

pytestmark = pytest.mark.e2e


async def upstream_era(proxy: Commanded) -> str:
    """The era verdict `/readyz` reports (no token needed there, as for a probe)."""
    status, answer = await proxy.call("GET", "/readyz")
    assert status == 200, answer
    return str(answer["upstream_era"])


async def test_a_dual_era_upstream_passes_both_eras_through(dual_inflight_server: PeerServer) -> None:
    async with own_proxy(dual_inflight_server.url) as proxy:
        assert await upstream_era(proxy) == "dual"
        await run_scenario(proxy.endpoint(), "legacy", "ask_name")
        await run_scenario(proxy.endpoint(), "2026-07-28", "echo")
        await proxy.no_exchange_open()
        chains = await proxy.chains()
    assert chains
    assert {c["mode"] for c in chains} == {"passthrough"}


async def test_bridge_off_passes_a_legacy_client_through_to_a_modern_server_unchanged(
    modern_server: PeerServer,
) -> None:
    async with own_proxy(modern_server.url, "--bridge", "off") as proxy:
        with pytest.raises(BaseException):  # noqa: PT011,B017 - the SDK wraps the refusal in exception groups
            await run_scenario(proxy.endpoint(), "legacy", "echo")
        await proxy.no_exchange_open()
        initialize = [c for c in await proxy.chains() if c.get("method") == "initialize"]
    assert initialize
    assert initialize[0]["mode"] == "passthrough"
    assert initialize[0]["http_status"] == 400


async def test_an_upstream_that_changes_era_is_probed_again_and_then_bridged(
    peer_factory: Callable[..., PeerServer],
) -> None:
    legacy = peer_factory("legacy-inflight")
    port = legacy.port
    async with own_proxy(legacy.url) as proxy:
        assert await upstream_era(proxy) == "legacy"
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
        assert await upstream_era(proxy) == "modern"
        await proxy.no_exchange_open()
        chains = await proxy.chains()
    assert result["result"]["content"] == ["Hello, octocat!"]
    assert any(c["mode"] == "legacy_to_mrtr" and c.get("name") == "ask_name" for c in chains)
