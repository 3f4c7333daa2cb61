"""The observation model: chains of messages, flow events, redaction, the bounded store and the bus.

Fed by the transport, read by the capture writer, metrics, the admin feed and the UI. It never drives
traffic and never imports aiohttp, structlog or textual.
"""
