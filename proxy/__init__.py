"""mcp-debug-proxy: a debugging proxy for the Model Context Protocol.

This module holds the version only, so that importing any pure room (`proxy.wire`, ...) stays cheap
and never loads aiohttp.
"""

__version__ = "0.1.0"
