"""`mcp-proxy mock`: a capture served back as an MCP server.

A small server of the capture's era (`legacy`: sessions and in-flight requests on SSE; `modern`:
2026-07-28 with `input_required` rounds) answers from the table `proxy.record.mock_table` builds, on
a loopback port of its own; the proxy's own front and bridges stand before it in the same process,
so a client of either era gets the recorded answers in the era it speaks.
"""
