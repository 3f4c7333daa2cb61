"""The bridge for a legacy (2025-era) client in front of a 2026-07-28 server.

Toward the client it plays a legacy Streamable HTTP server (its own sessions, `initialize`, in-flight
requests on SSE); toward the upstream a 2026-07-28 client (`_meta` envelopes, `Mcp-*` headers,
MRTR rounds). `engine.LegacyToMrtrEngine` is the entry; the other modules are its parts.
"""
