"""The `mcp-proxy` console script: catches stop signals first, then loads the command line.

Importing `proxy.cli` loads pydantic, the settings and more, which takes a good part of a second; a
stop signal in that time must not be lost (`proxy.early_signals`). So this module imports only the
standard library and that one, installs the handlers, and only then imports the rest. The
subcommands (`tui`, `export`, `replay`, ...) keep the default dispositions: they are tools run by
hand, not a container's long-running process.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from proxy import early_signals

SUBCOMMANDS = frozenset({"tui", "demo", "export", "stdio", "mock", "replay"})
"""The first words that name a subcommand rather than the proxy itself."""


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `mcp-proxy` console script."""
    words = list(sys.argv[1:] if argv is None else argv)
    serving = not words or words[0] not in SUBCOMMANDS
    if serving:
        early_signals.install()
    try:
        from proxy.cli import main as cli_main

        return cli_main(words)
    finally:
        early_signals.uninstall()
