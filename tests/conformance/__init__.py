"""Running the official MCP conformance suite (``@modelcontextprotocol/conformance``) from tests and scripts.

Stdlib only, so ``scripts/conformance`` can use it without the test dependencies.
"""
