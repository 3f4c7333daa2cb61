"""The translation tables of the legacy->MRTR bridge: capabilities, headers, errors.

These are the pure functions the engine composes; the engine tests show them in context, these pin
the edge cases (old versions, odd shapes) one by one.
"""

from __future__ import annotations

import pytest

from proxy.engine.capabilities import (
    can_subscribe,
    input_kind,
    legacy_server_capabilities,
    listen_flags,
    modern_client_capabilities,
    negotiate_version,
    unservable,
)
from proxy.engine.legacy_client.answers import call_failure, legacy_error, legacy_result, state_fingerprint
from proxy.engine.legacy_client.request import Envelope, leg_headers, with_envelope
from proxy.engine.tool_headers import ToolHeaders
from proxy.wire.capabilities import required_capability
from proxy.wire.relayed import relayed_client_headers


@pytest.mark.parametrize(
    ("requested", "answered"),
    [
        ("2025-11-25", "2025-11-25"),
        ("2025-06-18", "2025-06-18"),
        ("2025-03-26", "2025-03-26"),
        ("2024-11-05", "2024-11-05"),
        ("2026-07-28", "2025-11-25"),
        (None, "2025-11-25"),
    ],
)
def test_the_clients_version_is_kept_when_the_bridge_can_speak_it(requested: object, answered: str) -> None:
    assert negotiate_version(requested) == answered


def test_client_capabilities_lose_legacy_tasks_and_roots_list_changed_and_keep_the_rest() -> None:
    legacy = {
        "roots": {"listChanged": True},
        "tasks": {"requests": {}},
        "sampling": {"tools": {}, "context": {}},
        "elicitation": {},
        "experimental": {"x": {}},
        "extensions": {"io.example/y": {}},
    }

    assert modern_client_capabilities(legacy, "2025-11-25") == {
        "roots": {},
        "sampling": {"tools": {}, "context": {}},
        "elicitation": {},
        "experimental": {"x": {}},
        "extensions": {"io.example/y": {}},
    }
    assert legacy["roots"] == {"listChanged": True}, "the session's own record must not change"


def test_client_capabilities_drop_what_older_versions_cannot_carry() -> None:
    legacy = {"elicitation": {"form": {}, "url": {}}, "sampling": {"tools": {}}}

    assert modern_client_capabilities(legacy, "2025-06-18") == {"elicitation": {"form": {}}, "sampling": {}}
    assert modern_client_capabilities(legacy, "2025-03-26") == {"sampling": {}}
    assert modern_client_capabilities({"elicitation": {"url": {}}}, "2025-06-18") == {}
    assert modern_client_capabilities({"elicitation": True}, "2025-06-18") == {"elicitation": {}}
    assert modern_client_capabilities(None, "2025-11-25") == {}


def test_server_capabilities_keep_known_families_add_logging_and_drop_unemulated_subscribe() -> None:
    modern = {
        "tools": {"listChanged": True},
        "resources": {"subscribe": False, "listChanged": True},
        "extensions": {},
        "tasks": {},
    }

    assert legacy_server_capabilities(modern) == {
        "tools": {"listChanged": True},
        "resources": {"listChanged": True},
        "logging": {},
    }
    assert legacy_server_capabilities("nonsense") == {"logging": {}}
    assert not can_subscribe(modern)
    assert can_subscribe({"resources": {"subscribe": True}})
    assert listen_flags(modern) == {"toolsListChanged": True, "resourcesListChanged": True}


@pytest.mark.parametrize(
    ("entry", "needed"),
    [
        ({"method": "elicitation/create", "params": {"mode": "url"}}, "elicitation.url"),
        ({"method": "elicitation/create", "params": {"message": "?"}}, "elicitation.form"),
        ({"method": "sampling/createMessage", "params": {"toolChoice": {}}}, "sampling.tools"),
        ({"method": "sampling/createMessage"}, "sampling"),
        ({"method": "roots/list"}, "roots"),
        ({"method": "ping"}, None),
    ],
)
def test_each_input_kind_needs_its_capability(entry: dict[str, object], needed: str | None) -> None:
    assert required_capability(entry) == needed


def test_the_gate_explains_every_entry_the_client_cannot_serve() -> None:
    entries = {
        "a": {"method": "elicitation/create", "params": {"mode": "url"}},
        "b": {"method": "roots/list"},
        "c": {"method": "ping"},
        "d": {"method": "elicitation/create", "params": {}},
    }

    assert unservable(entries, {"elicitation": {"url": {}}}, "2025-11-25") == [
        "input request 'b' needs client capability roots, which the client did not declare at initialize",
        "input request 'c' uses unsupported method 'ping'",
        "input request 'd' needs client capability elicitation.form, which the client did not declare "
        "at initialize",
    ]
    assert unservable({"d": entries["d"]}, {}, "2025-03-26") == [
        "input request 'd' needs client capability elicitation.form, which protocol 2025-03-26 cannot express"
    ]
    assert unservable({"d": entries["d"]}, {"elicitation": {}}, "2025-06-18") == []
    assert input_kind(entries["d"]) == "elicitation/create:form"
    assert input_kind("x") == "invalid"


def test_tool_headers_mirror_only_scalar_arguments_that_are_present() -> None:
    cache = ToolHeaders()
    cache.learn(
        {"tools": [{"name": "t", "inputSchema": {"properties": {"a": {"x-mcp-header": "A"}}}}, "junk"]}
    )
    cache.learn({"tools": [{"name": "u", "inputSchema": {"properties": {"b": {"x-mcp-header": "B"}}}}]})

    assert len(cache) == 2
    assert cache.values_for({"name": "t", "arguments": {"a": " padded "}}) == [("A", " padded ")]
    headers = leg_headers("tools/call", {"name": "t", "arguments": {"a": " padded "}}, [], cache)
    assert ("Mcp-Param-A", "=?base64?IHBhZGRlZCA=?=") in headers
    for absent in ({}, {"a": None}, {"a": 1.5}, {"a": ["x"]}):
        assert cache.values_for({"name": "t", "arguments": absent}) == []
    assert cache.values_for({"name": "unknown", "arguments": {"a": "x"}}) == []


def test_only_authorization_and_custom_client_headers_cross_to_the_upstream() -> None:
    headers = [
        ("Host", "proxy"),
        ("Connection", "keep-alive, X-Hop"),
        ("X-Hop", "1"),
        ("Authorization", "Bearer t"),
        ("Mcp-Session-Id", "s"),
        ("mcp-protocol-version", "2025-11-25"),
        ("Last-Event-ID", "7"),
        ("Mcp-Param-Old", "x"),
        ("Accept-Encoding", "gzip"),
        ("X-Tenant", "acme"),
    ]

    assert relayed_client_headers(headers) == [("Authorization", "Bearer t"), ("X-Tenant", "acme")]


def test_the_envelope_overrides_2026_keys_the_client_sent_but_keeps_its_own() -> None:
    params = {"_meta": {"progressToken": 1, "io.modelcontextprotocol/protocolVersion": "x"}, "a": 1}

    assert with_envelope(params, Envelope({}, None, "debug")) == {
        "a": 1,
        "_meta": {
            "progressToken": 1,
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/logLevel": "debug",
        },
    }


def test_errors_keep_legacy_codes_and_translate_2026_ones() -> None:
    state_error = {"code": -32602, "message": "bad", "data": {"reason": "invalid_request_state"}}

    assert legacy_error(1, {"code": -32002, "message": "nf", "data": {"uri": "u"}}, sent_state=False) == {
        "jsonrpc": "2.0",
        "id": 1,
        "error": {"code": -32002, "message": "nf", "data": {"uri": "u"}},
    }
    assert legacy_error(1, state_error, sent_state=True)["error"] == {
        "code": -32603,
        "message": "upstream rejected the echoed requestState, so the call cannot resume: bad",
    }
    assert legacy_error(1, state_error, sent_state=False)["error"]["code"] == -32602
    assert legacy_error(1, {"message": "?"}, sent_state=False)["error"]["code"] == -32603


def test_results_lose_2026_fields_and_failures_follow_the_shims() -> None:
    assert legacy_result({"resultType": "complete", "ttlMs": 5, "cacheScope": "private", "x": 1}) == {"x": 1}
    assert legacy_result([1]) == [1]
    assert call_failure("prompts/get", 3, "no")["error"] == {"code": -32603, "message": "no"}
    assert call_failure("tools/call", 3, "no")["result"]["isError"] is True
    assert state_fingerprint(None) is None
