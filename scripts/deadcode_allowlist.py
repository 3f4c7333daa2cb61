"""What the dead-code check must not report, each with the reason it is alive.

`./scripts/test` runs vulture over `proxy/` and `ui/` with this file beside them; vulture only parses
it (nothing here runs), and any name written below counts as used. Names a framework calls by
convention (asyncio protocol callbacks, Textual handlers and class settings, pydantic validators)
are ignored by the `[tool.vulture]` settings in pyproject.toml instead. A name belongs here only when
something outside `proxy/` and `ui/` reads it on purpose; code nobody reads is deleted, not listed.
"""

# Counters and views the tests read to prove a table drains or a bound holds; nothing in the
# product needs to read them back.
_.relaying  # PassthroughRelay: exchanges between their upstream request and their end
_.idle_closed  # UpstreamPool: idle connections closed before the upstream's Keep-Alive timeout
_.open_connections  # UpstreamPool: connections held, asserted to stay flat under hostile input
_.correlation_sizes  # ChainBuilder: its correlation tables, asserted to drain
_.open_legs  # ObservationSink: bridge legs still open, asserted to drain
_.open_spans  # SpanFollower: exchanges and legs it still follows, asserted to drain
_.sessions_view  # the modern-client bridge's upstream sessions, read by e2e and TUI tests
_.bytes_written  # CaptureWriter: what the rotation tests measure
_.events_written
_.events_applied  # ui ChainModel: how many events a batch applied
_.batches  # ui feeds: how many batches a feed delivered
_.deadline_text  # ui HeldEditor: the countdown line the tests read as shown
_.wide  # ui ChainTable: whether a wide column set shows, which the row tests wait for
read_capture  # record.capture: the one-call reader the tests and scripts use on a capture file

# Called by the libraries they are handed to, under names those libraries choose.
context  # the MCP SDK passes its request context to the demo client's callbacks
capture_signals  # uvicorn.Server: the demo's server overrides it to keep the proxy's handlers
should_exit  # uvicorn.Server: set to stop the demo's servers
input_requests  # pydantic field of InputRequiredResult, filled by validation
TITLE  # Textual App and widget class settings and attributes
HORIZONTAL_BREAKPOINTS
ENABLE_COMMAND_PALETTE
border_title
auto_expand
display
can_replace  # Textual Message: lets a newer message replace a queued one
debug  # structlog's logger methods, which the fast JSON logger provides under the same names
warn
critical
failure
fatal
exc_type  # the context-manager protocol's __exit__ arguments
tb
ui  # cli_tui imports ui.app only to learn whether the TUI's dependencies are installed
_update_dimensions  # Textual DataTable: sizes the table after rows are added (the chain list overrides it)
virtual_size  # Textual widget: the scrollable size
