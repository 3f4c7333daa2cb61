"""End-of-module Markdown reports of the e2e suites (the conformance table, the client x server matrix)."""

from __future__ import annotations

import pytest


def publish_report(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, name: str, text: str
) -> None:
    """Write `text` to `<pytest basetemp>/<name>-report.md` and print it after the module's tests."""
    path = tmp_path_factory.getbasetemp() / f"{name}-report.md"
    path.write_text(text, encoding="utf-8")
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line("")
        reporter.write_sep("-", f"{name} report: {path}")
        for line in text.splitlines():
            reporter.write_line(line)
