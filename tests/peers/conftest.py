"""Make the peer fixtures available to ``tests/peers`` even before the root conftest loads them.

The root ``tests/conftest.py`` is expected to declare ``pytest_plugins = ["tests.peers.fixtures"]``;
re-exporting here keeps this directory's tests self-contained either way (a conftest fixture simply
shadows the identical plugin fixture for the tests below it).
"""

from tests.peers.fixtures import (
    dual_inflight_server,
    dual_mrtr_server,
    legacy_server,
    modern_server,
    peer_factory,
)

__all__ = ["dual_inflight_server", "dual_mrtr_server", "legacy_server", "modern_server", "peer_factory"]
