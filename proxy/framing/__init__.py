"""Sans-IO framing: SSE codec, HTTP head rewriting, body <-> messages, and the route-or-reject classifier.

Nothing here awaits, reads a clock or touches a socket; the transport feeds it bytes and headers.
"""
