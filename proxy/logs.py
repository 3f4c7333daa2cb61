"""Structured logging: one structlog processor chain, pretty on a TTY, JSON otherwise, a file in TUI mode.

Context (the chain id of the exchange being handled) is bound through contextvars, so every line a
handler logs carries it without being passed around.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any, Literal, TextIO

import structlog

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


def choose_format(requested: str, stream: TextIO) -> Literal["console", "json"]:
    """`auto` means console when a person is watching (a TTY) and JSON for machines."""
    if requested == "console":
        return "console"
    if requested == "json":
        return "json"
    return "console" if stream.isatty() else "json"


def configure(
    *, level: str = "info", fmt: str = "auto", file: Path | None = None, quiet: bool = False
) -> TextIO | None:
    """Install the one processor chain; returns the opened log file, if any (the caller closes it).

    `quiet` sends nothing anywhere (a TUI with no log file must own the terminal alone).
    """
    stream: TextIO | None
    opened: TextIO | None = None
    if file is not None:
        opened = open(file, "a", encoding="utf-8", buffering=1)  # noqa: SIM115 - lifetime owned by the caller
        stream = opened
    elif quiet:
        stream = None
    else:
        stream = sys.stderr
    renderer: Any
    if stream is not None and choose_format(fmt, stream) == "console":
        renderer = structlog.dev.ConsoleRenderer(colors=stream.isatty())
    else:
        renderer = structlog.processors.JSONRenderer()
    processors: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        renderer,
    ]
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(
            _LEVELS.get(level, logging.INFO) if stream else logging.CRITICAL + 10
        ),
        logger_factory=structlog.PrintLoggerFactory(file=stream if stream is not None else sys.stderr),
        cache_logger_on_first_use=False,
    )
    return opened


def get_logger(name: str = "mcp-proxy") -> Any:
    """A bound logger for one part of the proxy."""
    return structlog.get_logger(name)
