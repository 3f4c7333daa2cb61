"""Which tool arguments a 2026-07-28 server wants mirrored as `Mcp-Param-*` headers: one map, both bridges.

A tool's `inputSchema` property may carry `x-mcp-header: <suffix>`; a 2026 request for that tool
then carries `Mcp-Param-<suffix>` with the argument's value. The legacy-client bridge learns the map
from the upstream's `tools/list` to dress its requests (`values_for`); the modern-client bridge
learns it from the lists it relays to check the headers a 2026 client sent (`mirrored`). Only tools
with such arguments are kept, so the map is as small as what it serves; a suffix that cannot be a
header name is ignored rather than let it refuse every later call of the tool.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from proxy.wire.headers import is_param_suffix


@dataclass
class ToolHeaders:
    """tool name -> {argument name -> header suffix}, learned from `tools/list` results (pages)."""

    _by_tool: dict[str, dict[str, str]] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self._by_tool)

    def learn(self, result: Any) -> None:
        """Record the `x-mcp-header` arguments of every tool in one `tools/list` result (page)."""
        tools = result.get("tools") if isinstance(result, dict) else None
        for tool in tools if isinstance(tools, list) else ():
            if not (isinstance(tool, dict) and isinstance(tool.get("name"), str)):
                continue
            found = _header_arguments(tool.get("inputSchema"))
            if found:
                self._by_tool[tool["name"]] = found
            else:
                self._by_tool.pop(tool["name"], None)

    def values_for(self, params: dict[str, Any]) -> list[tuple[str, str | int | bool]]:
        """(suffix, value) per `Mcp-Param-*` header of one `tools/call` (absent, null, non-scalar omitted)."""
        name = params.get("name")
        wanted = self._by_tool.get(name, {}) if isinstance(name, str) else {}
        arguments = params.get("arguments")
        if not wanted or not isinstance(arguments, dict):
            return []
        out: list[tuple[str, str | int | bool]] = []
        for argument, suffix in wanted.items():
            value = arguments.get(argument)
            if isinstance(value, str | bool | int):
                out.append((suffix, value))
        return out

    def mirrored(self, tool: Any) -> dict[str, str]:
        """Every `Mcp-Param-*` suffix (lower case) `tool` declares, with the argument it mirrors."""
        known = self._by_tool.get(tool) if isinstance(tool, str) else None
        return {suffix.lower(): argument for argument, suffix in (known or {}).items()}


def _header_arguments(schema: Any) -> dict[str, str]:
    properties = schema.get("properties") if isinstance(schema, dict) else None
    found: dict[str, str] = {}
    for argument, spec in properties.items() if isinstance(properties, dict) else ():
        suffix = spec.get("x-mcp-header") if isinstance(spec, dict) else None
        if isinstance(suffix, str) and is_param_suffix(suffix):
            found[argument] = suffix
    return found
