"""mitmdump addon for the benchmark: stream `text/event-stream` responses instead of buffering them.

Without it mitmproxy holds a whole response body before relaying it, so an SSE call would reach the
client only when it ends (and an idle GET stream never would). Every other body keeps mitmproxy's
default (buffered), as a user running `mitmdump --mode reverse:URL` would have it.
Loaded by bench/run.py as `mitmdump -s bench/mitm_stream.py`.
"""

from mitmproxy import http


def responseheaders(flow: http.HTTPFlow) -> None:
    """Turn on streaming for SSE responses as soon as their head is known."""
    if flow.response is not None:
        content_type = flow.response.headers.get("content-type", "")
        if content_type.split(";", 1)[0].strip().lower() == "text/event-stream":
            flow.response.stream = True
