"""Replaying captured chains against a live server (`mcp-proxy replay`), in either era, through an
in-process proxy; the recorded and replayed chains compared (`proxy.record.replay_compare`)."""
