"""The argument parser every `mcp-proxy` command uses: a mistake gets one line and a way on.

argparse answers a wrong flag with the whole usage block first (dozens of lines for the proxy's
settings) and the error last; here the error comes alone, with the closest flag when a flag was
mistyped, and where the full help is.
"""

from __future__ import annotations

import argparse
import difflib
from collections.abc import Mapping
from typing import Any, NoReturn


class CliParser(argparse.ArgumentParser):
    """An `ArgumentParser` whose errors are one line, a suggestion and a pointer to `--help`.

    `elsewhere` names flags other commands take and this one has no use for, each with why: typed
    here, the error says so instead of guessing at a near spelling.
    """

    def __init__(self, *args: Any, elsewhere: Mapping[str, str] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.elsewhere = dict(elsewhere or {})

    def error(self, message: str) -> NoReturn:
        """Say what was wrong (and what was likely meant), then exit 2 as argparse does."""
        self.exit(
            2,
            f"{self.prog}: error: {message}{self._suggestion(message)}\n"
            f"Run `{self.prog} --help` for the options.\n",
        )

    def _suggestion(self, message: str) -> str:
        known = list(self._option_string_actions)
        for word in message.replace(",", " ").split():
            if not word.startswith("--"):
                continue
            flag = word.split("=", 1)[0].rstrip(":;.'\")")  # argparse writes `argument --flag: ...`
            if flag in known:
                continue
            if flag in self.elsewhere:
                return f" ({flag} {self.elsewhere[flag]})"
            close = difflib.get_close_matches(flag, known, n=1, cutoff=0.75)
            if close:
                return f" (did you mean {close[0]}?)"
        return ""
