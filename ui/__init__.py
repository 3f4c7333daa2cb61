"""The Textual TUI: chains live, from an in-process bus, a remote proxy's admin feed, or a capture.

It sees only flow events (`proxy.flows`, plus `proxy.record` to read captures and `proxy.wire`), never
the proxy's machinery, so the same app watches a local proxy, a sidecar and a file. `proxy.cli`
imports it lazily, only when a TUI is asked for.
"""
