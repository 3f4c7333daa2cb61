"""`mcp-proxy demo`: two bundled MCP servers, a proxy in front of each, scripted clients of both eras.

Nothing here is imported by the proxy itself. The servers and clients use the official `mcp` SDK,
which only the `demo` extra installs (`pip install -e '.[demo]'` in the checkout); `proxy.demo.run`
imports it when the demo starts, so a plain proxy never needs it.
"""
