"""mcp-debug-proxy: a debugging proxy for the Model Context Protocol.

This module holds the version (and the `Server` name built from it) only, so that importing any pure
room (`proxy.wire`, ...) stays cheap and never loads aiohttp.
"""

__version__ = "0.1.0"
SERVER_SOFTWARE = f"mcp-debug-proxy/{__version__}"
"""The `Server` header of every response the proxy makes itself."""


def install_hint(extra: str) -> str:
    """How to add an optional extra where the README installs the proxy: an editable checkout."""
    return f"pip install -e '.[{extra}]' in the mcp-debug-proxy checkout"
