"""Pure protocol data: JSON-RPC envelopes, MCP error codes, protocol versions and eras, header names.

This room imports only the standard library, pydantic and orjson. It never performs I/O and never
knows about HTTP servers, logging or the UI.
"""
