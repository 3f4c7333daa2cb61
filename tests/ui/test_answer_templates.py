"""An answer to a held message starts from a result its client accepts, checked by the SDK's types."""

from __future__ import annotations

from typing import Any

import mcp.types as sdk
import pytest
from pydantic import BaseModel

from proxy.wire.mcp import META_PROTOCOL_VERSION
from ui.answer_templates import RESULTS, answer_result

SDK_RESULT: dict[str, type[BaseModel]] = {
    "tools/call": sdk.CallToolResult,
    "tools/list": sdk.ListToolsResult,
    "prompts/list": sdk.ListPromptsResult,
    "prompts/get": sdk.GetPromptResult,
    "resources/list": sdk.ListResourcesResult,
    "resources/templates/list": sdk.ListResourceTemplatesResult,
    "resources/read": sdk.ReadResourceResult,
    "completion/complete": sdk.CompleteResult,
    "initialize": sdk.InitializeResult,
    "server/discover": sdk.DiscoverResult,
    "elicitation/create": sdk.ElicitResult,
    "sampling/createMessage": sdk.CreateMessageResult,
    "roots/list": sdk.ListRootsResult,
}


def request(method: str, *, modern: bool = False, **params: Any) -> dict[str, Any]:
    if modern:
        params["_meta"] = {META_PROTOCOL_VERSION: "2026-07-28"}
    return {"jsonrpc": "2.0", "id": 7, "method": method, "params": params}


def test_every_method_with_a_template_is_checked_here() -> None:
    assert set(RESULTS) == set(SDK_RESULT)


@pytest.mark.parametrize("method", sorted(SDK_RESULT))
def test_the_start_of_an_answer_is_a_result_the_sdk_accepts(method: str) -> None:
    result = answer_result(method, request(method))

    SDK_RESULT[method].model_validate(result)  # raises when a required field is missing


def test_a_tools_call_answer_starts_as_one_empty_text_that_is_no_error() -> None:
    assert answer_result("tools/call", request("tools/call", name="echo")) == {
        "content": [{"type": "text", "text": ""}],
        "isError": False,
    }


def test_a_2026_request_gets_its_result_type_and_a_cacheable_one_its_cache_fields() -> None:
    call = answer_result("tools/call", request("tools/call", modern=True))
    listing = answer_result("tools/list", request("tools/list", modern=True))

    assert call["resultType"] == "complete"
    assert "ttlMs" not in call
    assert (listing["resultType"], listing["ttlMs"], listing["cacheScope"]) == ("complete", 0, "private")
    assert "resultType" not in answer_result("tools/call", request("tools/call"))


def test_initialize_answers_in_the_version_the_client_asked_for_and_unknown_methods_start_empty() -> None:
    asked = answer_result("initialize", request("initialize", protocolVersion="2025-06-18"))

    assert asked["protocolVersion"] == "2025-06-18"
    assert answer_result("ping", request("ping")) == {}
    assert answer_result("x/custom", request("x/custom")) == {}
