"""Telling a key in a URL's path from the names around it."""

from __future__ import annotations

import secrets

from proxy.wire.path_keys import credential_segment, mask_target_segments, masked_path


def test_random_base64url_keys_are_read_as_keys_whatever_their_dashes_and_underscores() -> None:
    keys = [secrets.token_urlsafe(n) for n in (16, 24, 32) for _ in range(300)]
    missed = [k for k in keys if not credential_segment(k)]
    assert len(missed) <= len(keys) // 100, missed  # about 0.4% of 16-byte keys have too few changes


def test_each_key_segment_gets_its_own_stand_in_and_names_are_left_alone() -> None:
    path = "/gw/Zk0123456789abcdef0123/tools/AcsW20VstS13_UzK3rKPTw/mcp"

    shown = mask_target_segments(path, lambda segment: f"<{len(segment)}>")

    assert shown == "/gw/<22>/tools/<22>/mcp"
    assert masked_path(path) == "/gw/<redacted>/tools/<redacted>/mcp"
    assert masked_path("/server-everything/mcp") == "/server-everything/mcp"
