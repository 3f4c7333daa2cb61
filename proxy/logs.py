"""Structured logging: one structlog processor chain, pretty on a TTY, JSON otherwise, a file in TUI mode.

Context (the chain id of the exchange being handled) is bound through contextvars, so every line a
handler logs carries it without being passed around. One processor masks what a line must not carry
in clear: a principal's fingerprint is re-keyed with the deployment's redaction key, credential-like
query values in a request target are masked, and any known secret text (the upstream URL's query
values) is masked wherever it appears in a string field.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import io
import json
import logging
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, MutableMapping
from pathlib import Path
from typing import Any, Literal, Protocol, TextIO

import orjson
import structlog

from proxy.wire.shown import SHOWN_TEXT_BOUND, shown_text
from proxy.wire.visible import visible

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


def choose_format(requested: str, stream: TextIO) -> Literal["console", "json"]:
    """`auto` means console when a person is watching (a TTY) and JSON for machines."""
    if requested == "console":
        return "console"
    if requested == "json":
        return "json"
    return "console" if stream.isatty() else "json"


def _json_line(event: dict[str, Any], default: Callable[[Any], Any]) -> str:
    """Render one log line with orjson (several times faster than json.dumps); json for what it refuses."""
    try:
        return orjson.dumps(event, default=default, option=orjson.OPT_NON_STR_KEYS).decode()
    except TypeError:  # an integer beyond 64 bits, or nesting deeper than orjson allows
        return json.dumps(event, default=default)


WRITE_BUFFER = 1024 * 1024
"""Bytes a log file buffers between flushes (a busy proxy writes about 4 MB/s of lines)."""

FLUSH_INTERVAL = 0.01
"""Seconds a log line may wait in the buffer before it is flushed (one write(2) for all lines meanwhile)."""


class LineWriter:
    """Writes rendered lines to a stream like structlog's PrintLogger, minus the flush after every line.

    A busy proxy logs a line per exchange, and a flush per line is a write(2) per request. Inside a
    running event loop the lines are flushed together `FLUSH_INTERVAL` after the first of them
    (`call_later`); outside a loop every line is flushed at once.
    """

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._lock = threading.Lock()  # a TUI logs from its own thread too: lines never interleave
        self._flush_scheduled = False

    def msg(self, message: str) -> None:
        """Write one line; make sure it is flushed before the loop goes idle."""
        with self._lock:
            self._stream.write(message + "\n")
        if self._flush_scheduled:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.flush()
            return
        self._flush_scheduled = True
        loop.call_later(FLUSH_INTERVAL, self.flush)

    def urgent(self, message: str) -> None:
        """Write one line and flush at once, with the lines before it: a warning or an error is read
        next to what the command prints itself (a start failure, a hint), so it never waits."""
        with self._lock:
            self._stream.write(message + "\n")
        self.flush()

    def swap(self, stream: TextIO) -> TextIO:
        """Write to `stream` from now on (the lines before go to the old one, flushed); the old one."""
        self.flush()
        with self._lock:
            old, self._stream = self._stream, stream
        return old

    def flush(self) -> None:
        """Flush what was written (a stream closed meanwhile, or a reader gone, is left alone)."""
        self._flush_scheduled = False
        with self._lock:
            if not self._stream.closed:
                with contextlib.suppress(OSError, ValueError):
                    self._stream.flush()

    log = debug = info = msg
    warn = warning = fatal = failure = err = error = critical = exception = urgent


def _buffered(stream: TextIO) -> TextIO:
    """`stream` (stderr) with a buffer of its own when it has a file descriptor.

    Python writes each line to stderr straight through, a write(2) per line: one per request for the
    round-trip log. The same descriptor behind a `WRITE_BUFFER` buffer lets `LineWriter` write the
    lines of `FLUSH_INTERVAL` at once. A stream without a descriptor (a test's capture) is kept.
    """
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):
        return stream
    encoding = getattr(stream, "encoding", None) or "utf-8"
    return open(  # the descriptor stays open (closefd=False); `flush` and exit flush the buffer
        fd, "w", encoding=encoding, errors="backslashreplace", buffering=WRITE_BUFFER, closefd=False
    )


_WRITER: LineWriter | None = None
"""The writer `configure` installed last: flushed when the interpreter exits."""

_LOG_PATH: Path | None = None
"""The log file the lines go to (`log_file`), reopened at its path by `reopen_file`."""


class LogFileError(OSError):
    """The log file cannot be opened: the message names the setting, the path and the cause."""


def _open_log(file: Path) -> TextIO:
    try:
        # LineWriter flushes on its timer, so the large buffer means one write(2) per flush.
        return open(file, "a", encoding="utf-8", buffering=WRITE_BUFFER)
    except OSError as exc:
        cause = exc.strerror or str(exc)
        raise LogFileError(exc.errno, f"log_file: cannot open {file}: {cause}") from None


def reopen_file() -> bool:
    """Reopen the log file at its path (SIGUSR1, after logrotate or `mv` moved it away), as nginx
    does; whether there was one to reopen. One that cannot be opened now leaves the lines where they
    went, said in a line there."""
    path, writer = _LOG_PATH, _WRITER
    if path is None or writer is None:
        return False
    try:
        fresh = _open_log(path)
    except LogFileError as exc:
        get_logger().error("log_file_reopen_failed", error=str(exc))
        return True
    writer.swap(fresh).close()
    get_logger().info("log_file_reopened", path=str(path))
    return True


@atexit.register
def flush() -> None:
    """Write out the lines still buffered (a command calls it as it ends; so does the interpreter)."""
    if _WRITER is not None:
        _WRITER.flush()


class LogRedactor(Protocol):
    """What the log processor needs of the proxy's redactor."""

    def fingerprint(self, value: str) -> str:
        """A keyed fingerprint of an identity."""
        ...

    def scrub(self, value: str) -> str:
        """`value` with every known secret text in it masked."""
        ...

    def path(self, target: str) -> str:
        """A request target with credential-like query values masked."""
        ...


FINGERPRINTED_FIELDS = frozenset({"principal"})
"""Log fields that carry an identity's digest: shown only as a keyed fingerprint."""

TARGET_FIELDS = frozenset({"path", "target", "path_qs", "url"})
"""Log fields that may carry a request target: credential-like query values in them are masked."""

CLIENT_TEXT_FIELDS = frozenset({"name", "client_id"})
"""Log fields that carry a client's text (a bridged round's tool name, its string id): bounded to
`SHOWN_TEXT_BOUND` characters (the round-trip line's are bounded where it is made)."""

_REDACTOR: LogRedactor | None = None


def use_redactor(redactor: LogRedactor | None) -> None:
    """Mask log fields with this redactor from now on (the running proxy's: its key and secret texts)."""
    global _REDACTOR
    _REDACTOR = redactor


def redact_fields(_logger: Any, _name: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """The processor: re-key fingerprint fields and mask known secret texts in string fields."""
    redactor = _REDACTOR
    if redactor is None:
        return event
    for key, value in event.items():
        if not isinstance(value, str):
            continue
        if key in FINGERPRINTED_FIELDS:
            event[key] = redactor.fingerprint(value)
        elif key in TARGET_FIELDS:
            event[key] = redactor.path(value)
        else:
            shown = redactor.scrub(value)
            # Bounded once masked (a secret cut in two would no longer be found).
            event[key] = (
                shown_text(shown) if len(shown) > SHOWN_TEXT_BOUND and key in CLIENT_TEXT_FIELDS else shown
            )
    return event


TRAFFIC_EVENTS = frozenset({"exchange", "bridge_round", "server_asked", "bridge_resumed"})
"""The lines that tell the traffic itself (a round trip, a round, a question): chains show them."""

KEPT_EVENTS = 500
"""The proxy's own log lines a `LogKeeper` holds for the TUI (the oldest go first)."""

LoggedEvent = tuple[str, str, str, str]
"""A kept log line: its clock time, level, event name and the rest of its fields as `key=value`."""


class LogKeeper:
    """Keeps the proxy's own log lines (not the traffic's) for a TUI that owns the terminal.

    With `--tui` and no log file, nothing is written anywhere, so a warning (an upstream out of
    reach, a forced era refused, a rule put in force) would be seen by nobody; the TUI shows these
    and announces the warnings. A processor after redaction, so it holds what a log file would.
    """

    def __init__(self, bound: int = KEPT_EVENTS) -> None:
        self.events: deque[LoggedEvent] = deque(maxlen=bound)
        self.total = 0
        """Every line kept so far (the oldest may be gone: `events` is bounded)."""
        self.warnings = 0
        """Lines at warning or above kept so far."""
        self.last_warning: LoggedEvent | None = None

    def __call__(self, _logger: Any, _name: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
        name = str(event.get("event", ""))
        if name in TRAFFIC_EVENTS:
            return event
        level = str(event.get("level", "info"))
        stamp = str(event.get("timestamp") or "")
        rest = " ".join(
            f"{key}={value}"
            for key, value in event.items()
            if key not in ("event", "level", "timestamp") and value is not None
        )
        kept = (stamp[11:19] if len(stamp) >= 19 else stamp, level, name, rest[:2000])
        self.events.append(kept)
        self.total += 1
        if level in ("warning", "error", "critical"):
            self.warnings += 1
            self.last_warning = kept
        return event


def configure(
    *,
    level: str = "info",
    fmt: str = "auto",
    file: Path | None = None,
    quiet: bool = False,
    keeper: LogKeeper | None = None,
) -> TextIO | None:
    """Install the one processor chain; returns the opened log file, if any (the caller closes it).

    Raises LogFileError (an OSError naming `log_file`) when the log file cannot be opened.

    `quiet` sends nothing anywhere (a TUI with no log file must own the terminal alone); `keeper`
    also keeps the proxy's own lines, redacted, for the TUI to show.
    """
    stream: TextIO | None
    opened: TextIO | None = None
    global _LOG_PATH
    _LOG_PATH = file
    if file is not None:
        opened = _open_log(file)  # lifetime owned by the caller (a reopened one: by this module)
        stream = opened
    elif quiet:
        stream = None
    else:
        stream = _buffered(sys.stderr)
    renderer: Any
    if stream is not None and choose_format(fmt, stream) == "console":
        # Plain tracebacks: a rich one shows every frame's locals, which hold request headers (secrets)
        # and client-sized structures that take seconds to render on the event loop.
        colors = wants_colors(stream, os.environ)
        renderer = ConsoleLines(
            structlog.dev.ConsoleRenderer(colors=colors, exception_formatter=visible_traceback),
            colors=colors,
        )
    else:
        renderer = structlog.processors.JSONRenderer(serializer=_json_line)
    is_json = not isinstance(renderer, ConsoleLines)
    processors: list[Any] = [structlog.contextvars.merge_contextvars]
    if is_json:
        # `log.exception(...)` leaves `exc_info=True`; the console renderer formats it itself, JSON needs
        # the traceback rendered into the line, or the line says only that there was an exception. It is
        # rendered before redaction: an exception's message may quote a request's credential.
        processors.append(structlog.processors.format_exc_info)
    processors += [
        redact_fields,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    if keeper is not None:
        processors.append(keeper)
    processors.append(renderer)
    global _FAST, _WRITER
    if _WRITER is not None:
        _WRITER.flush()  # what the previous configuration wrote comes first
    _FAST = None
    _WRITER = LineWriter(stream) if stream is not None else None
    if _WRITER is not None and is_json and _LEVELS.get(level, logging.INFO) <= logging.INFO:
        _FAST = _FastJson(_WRITER, processors)
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS.get(level, logging.INFO)),
        # Quiet: a logger that returns its line instead of printing it (structlog has no level above
        # CRITICAL to filter everything with).
        logger_factory=_shared(_WRITER) if _WRITER is not None else structlog.ReturnLoggerFactory(),
        cache_logger_on_first_use=False,
    )
    return opened


def visible_traceback(sio: TextIO, exc_info: Any) -> None:
    """A plain traceback with known secret texts masked and what a terminal would act on escaped: an
    exception's message may quote what a client or the upstream sent, its credentials included."""
    rendered = io.StringIO()
    structlog.dev.plain_traceback(rendered, exc_info)
    text = rendered.getvalue()
    redactor = _REDACTOR
    sio.write(visible(text if redactor is None else redactor.scrub(text), lines=True))


class ConsoleLines:
    """The console rendering: a round-trip line compact, every other line as structlog's renderer does
    (with the round-trip lines' clock, and without the fields that hold nothing).

    A person scans the round-trip lines the way they scan mitmproxy's event log, so each is one short
    line: time, exchange, what it carried, status, content kind, size, duration, and the mode or what
    went wrong only when there is one. The JSON rendering keeps every field. `colors` paints them as
    the fallback paints its own lines (dim time, bright names, a status coloured by its class).
    """

    def __init__(self, fallback: structlog.dev.ConsoleRenderer, *, colors: bool = False) -> None:
        self.fallback = fallback
        self.colors = colors

    def __call__(self, logger: Any, name: str, event: MutableMapping[str, Any]) -> str:
        kind = event.get("event")
        if kind == "exchange" and "carried" in event:
            return exchange_text(event, colors=self.colors)
        if kind == "bridge_round" and "round" in event:
            return round_text(event, colors=self.colors)
        if kind == "server_asked" and "asks" in event:
            return asked_text(event, colors=self.colors)
        if kind == "bridge_resumed" and "round" in event:
            return resumed_text(event, colors=self.colors)
        # Every other line starts with the same clock as the round-trip lines and leaves out the
        # fields that say nothing (None): the JSON rendering keeps them all. Text fields are shown
        # through `visible` (structlog prints them raw; other values it shows by `repr`, escaped).
        shown = {
            key: visible(value) if isinstance(value, str) else value
            for key, value in event.items()
            if value is not None
        }
        stamp = str(shown.get("timestamp") or "")
        if len(stamp) >= 23:
            shown["timestamp"] = stamp[11:23]
        text: str = self.fallback(logger, name, shown)
        return text


def wants_colors(stream: TextIO, environ: Mapping[str, str]) -> bool:
    """Colours only for a person at a terminal who has not opted out (`NO_COLOR`, https://no-color.org)."""
    return stream.isatty() and not environ.get("NO_COLOR")


_KINDS = {"application/json": "json", "text/event-stream": "sse"}

QUIET_ENDS = frozenset({"client_disconnected", "session_deleted"})
"""Ends a terminal line leaves unsaid: how streams end, and a client hanging up once answered. Every
other `end` (`cancelled`, `proxy_stopping`) is told after the duration; the JSON line has them all."""

Part = tuple[str, str]
"""A piece of a console line and its ANSI style ('' for none)."""

# The ANSI styles structlog's console renderer paints its own lines with.
_DIM: str = structlog.dev.DIM
_BRIGHT: str = structlog.dev.BRIGHT
_RESET: str = structlog.dev.RESET_ALL
_ID: str = structlog.dev.CYAN
_MODE: str = structlog.dev.MAGENTA
_OK: str = structlog.dev.GREEN
_WARN: str = structlog.dev.YELLOW
_BAD: str = structlog.dev.RED


def _painted(parts: list[Part], colors: bool) -> str:
    """The parts as one line, shown through `visible`: clients and the upstream choose tool names, ids
    and methods, and a terminal must not obey the controls in them. The line is checked once; only a
    line that holds such a character has its parts escaped one by one (between their colours)."""
    plain = " ".join([text for text, _style in parts])
    shown = visible(plain)
    if not colors:
        return shown
    if shown is not plain:
        parts = [(visible(text), style) for text, style in parts]
    return " ".join(f"{style}{text}{_RESET}" if style else text for text, style in parts)


def _status_style(status: Any) -> str:
    if not isinstance(status, int):
        return _BAD
    return _OK if status < 400 else _WARN if status < 500 else _BAD


def _ids_text(ids: list[Any], more: Any) -> str:
    """`#1 #2 #3`, then `+N more` for the ids of a large batch its line does not list."""
    listed = " ".join(f"#{ident}" for ident in ids)
    return f"{listed} +{more} more" if more else listed


def exchange_text(event: Mapping[str, Any], *, colors: bool = False) -> str:
    """One round-trip line for a person: `12:00:01.234 x7 POST tools/call add #3 -> 200 json 136 B 2.1 ms`,
    with the transports (`[stdio→http]`) when either side is not Streamable HTTP."""
    stamp = str(event.get("timestamp") or "")
    clock = stamp[11:23] if len(stamp) >= 23 else stamp
    ids = event.get("ids") or []
    http_method, carried = str(event.get("http_method", "")), str(event["carried"])
    parts: list[Part] = [(clock, _DIM), (str(event.get("exchange", "")), _ID)]
    # A stdio client's exchanges are HTTP-shaped inside the proxy only: no method went on its wire.
    no_method = carried.startswith(http_method) or event.get("client") == "stdio"
    parts += [(carried, _BRIGHT)] if no_method else [(http_method, ""), (carried, _BRIGHT)]
    if ids:
        parts.append((_ids_text(ids, event.get("ids_more")), _ID))
    status = event.get("status")
    end = event.get("end")
    told_end = end if end and end not in QUIET_ENDS else None
    # A call the client cancelled before any answer got none by its client's wish: no failure's red.
    style = _WARN if status is None and told_end == "cancelled" else _status_style(status)
    parts.append((f"-> {status}" if status is not None else "-> (no response)", style))
    content_type = str(event.get("content_type") or "").split(";", 1)[0].strip().lower()
    size = int(event.get("bytes_out") or 0)
    if size or content_type == "text/event-stream":
        parts += [(_KINDS.get(content_type, content_type or "body"), ""), (_size(size), "")]
    if content_type == "text/event-stream":
        count = int(event.get("messages_out") or 0)
        parts.append((f"{count} message{'' if count == 1 else 's'}", ""))
    parts.append((_duration(float(event.get("duration_ms") or 0.0)), _DIM))
    mode = event.get("mode")
    if mode and mode != "passthrough":
        parts.append((f"[{mode}]", _MODE))
    client, upstream = event.get("client", "http"), event.get("upstream", "http")
    if client != "http" or upstream != "http":  # Streamable HTTP both sides is the usual, left unsaid
        parts.append((f"[{client}→{upstream}]", _MODE))
    if told_end:  # how it ended when that was not the usual way (`cancelled`): a fact, no failure
        parts.append((str(told_end), _WARN))
    trouble = event.get("trouble")
    if trouble:
        parts.append((f"!! {trouble}", _BRIGHT + _BAD))
    fault = event.get("fault")
    if fault:  # injected by a fault rule: never to be taken for the server's own behaviour
        parts.append((f"!! fault: {fault}", _BRIGHT + _WARN))
    intercept = event.get("intercept")
    if intercept:  # held or changed by a person: never to be taken for the peers' own behaviour
        parts.append((f"!! intercept: {intercept}", _BRIGHT + _WARN))
    if event.get("not_inspected"):  # relayed whole, unread: what it carried is not known
        parts.append(("(body not inspected)", _WARN))
    return _painted(parts, colors)


def asked_text(event: Mapping[str, Any], *, colors: bool = False) -> str:
    """The client asked something, as it goes: `12:00:01.234 x7 tools/call ask_name #2 <- asks
    elicitation/create #0, waiting on the client` (an `input_required` answer's input names its key:
    `<- input_required asks elicitation/create (name), ...`). The exchange's own line follows when it
    closes; until then this one says what it waits for."""
    stamp = str(event.get("timestamp") or "")
    clock = stamp[11:23] if len(stamp) >= 23 else stamp
    parts: list[Part] = [
        (clock, _DIM),
        (str(event.get("exchange", "")), _ID),
        (str(event.get("carried", "")), ""),
    ]
    ids = event.get("ids") or []
    if ids:
        parts.append((_ids_text(ids, event.get("ids_more")), _ID))
    parts.append(("<-", _DIM))
    if event.get("how") == "input_required":
        parts += [
            ("input_required asks", ""),
            (str(event["asks"]), _BRIGHT),
            (f"({event.get('asked')}),", _ID),
        ]
    else:
        parts += [("asks", ""), (str(event["asks"]), _BRIGHT), (f"#{event.get('asked')},", _ID)]
    parts.append(("waiting on the client", _WARN))
    mode = event.get("mode")
    if mode and mode != "passthrough":
        parts.append((f"[{mode}]", _MODE))
    return _painted(parts, colors)


def resumed_text(event: Mapping[str, Any], *, colors: bool = False) -> str:
    """A parked call taken up again by the client's retry, among the round lines it sits between:
    `12:00:01.234 x9 round 2 resumed by #11 [mrtr_to_legacy]`."""
    stamp = str(event.get("timestamp") or "")
    clock = stamp[11:23] if len(stamp) >= 23 else stamp
    parts: list[Part] = [
        (clock, _DIM),
        (str(event.get("exchange", "")), _ID),
        (f"round {event['round']}", ""),
        ("resumed by", ""),
        (f"#{event.get('client_id')}", _ID),
    ]
    mode = event.get("mode")
    if mode:
        parts.append((f"[{mode}]", _MODE))
    return _painted(parts, colors)


_OUTCOME_STYLES = {"complete": _OK, "input_required": _WARN, "error": _BAD}


def round_text(event: Mapping[str, Any], *, colors: bool = False) -> str:
    """One bridged round for a person: `12:00:01.234 x4 round 1 tools/call ask_name: input_required,
    asks name (elicitation/create:form) [legacy_to_mrtr]`."""
    stamp = str(event.get("timestamp") or "")
    clock = stamp[11:23] if len(stamp) >= 23 else stamp
    what = " ".join(str(part) for part in (event.get("method"), event.get("name")) if part)
    parts: list[Part] = [
        (clock, _DIM),
        (str(event.get("exchange", "")), _ID),
        (f"round {event['round']}", ""),
    ]
    parts.append((what + ":", _BRIGHT))
    outcome = str(event.get("outcome") or "?")
    asks = event.get("input_keys")
    listed = isinstance(asks, dict) and asks
    parts.append((outcome + ("," if listed else ""), _OUTCOME_STYLES.get(outcome, "")))
    if isinstance(asks, dict) and asks:
        parts.append(("asks " + ", ".join(f"{key} ({kind})" for key, kind in asks.items()), ""))
    status = event.get("http_status")
    if isinstance(status, int) and status >= 400:
        parts.append((f"(upstream {status})", _status_style(status)))
    if event.get("error_code") is not None:
        parts.append((f"(error {event['error_code']})", _BAD))
    mode = event.get("mode")
    if mode:
        parts.append((f"[{mode}]", _MODE))
    return _painted(parts, colors)


def _size(count: int) -> str:
    if count < 1024:
        return f"{count} B"
    if count < 1024 * 1024:
        return f"{count / 1024:.1f} KiB"
    return f"{count / (1024 * 1024):.1f} MiB"


def _duration(ms: float) -> str:
    return f"{ms:.1f} ms" if ms < 1000 else f"{ms / 1000:.2f} s"


def _shared(writer: LineWriter) -> Callable[..., LineWriter]:
    """A logger factory handing out one writer, so every logger shares its pending flush."""
    return lambda *args: writer


class _FastJson:
    """The JSON configuration `configure` installed: its writer and processor chain."""

    def __init__(self, writer: LineWriter, processors: list[Any]) -> None:
        self.writer = writer
        self.processors = processors


_FAST: _FastJson | None = None


def traffic_line(logger: Any, event: str, fields: dict[str, Any], level: str = "info") -> None:
    """Log one line of the traffic (the round-trip line of every exchange) at `level`, `info` or
    `warning`: the hot path's logging. A line that tells a failure is a warning, so a deployment that
    logs at `warning` keeps every failed exchange and drops only the ones that went well.

    With the JSON configuration `configure` installed (at `info` or below), the line is rendered
    directly (the same keys structlog's chain would add: context vars, level, ISO timestamp),
    skipping the bind and the processor calls that cost a busy proxy more than the rest of its
    logging together; a warning among them is buffered like the rest (a flood of failures is not a
    write each). Any other configuration (a console, `warning` and above, a test capturing logs) goes
    through structlog as usual.
    """
    fast = _FAST
    if fast is None or structlog.get_config()["processors"] is not fast.processors:
        getattr(logger, level)(event, **fields)
        return
    line = structlog.contextvars.get_contextvars()
    line.update(fields)
    line["event"] = event
    line["level"] = level
    line["timestamp"] = _utc_timestamp()
    fast.writer.msg(_json_line(line, str))


_second_text = ("", -1)
"""The ISO text of the last whole second a timestamp was made in, and that second."""


def _utc_timestamp() -> str:
    """Now as ISO 8601 UTC with microseconds, the text structlog's `TimeStamper(fmt="iso")` writes.

    The date and time of day are formatted once a second; a line adds only its microseconds.
    """
    global _second_text
    now = time.time()
    second = int(now)
    text, cached = _second_text
    if second != cached:
        text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
        _second_text = (text, second)
    return f"{text}.{int((now - second) * 1_000_000):06d}Z"


def get_logger(name: str = "mcp-proxy") -> Any:
    """A bound logger for one part of the proxy."""
    return structlog.get_logger(name)


def warn_whatever_the_level(event: str, **fields: Any) -> None:
    """Log a warning even when the configured level is above warning (`--log-level error`), through
    the same processors and writer as every other line (flushed at once, as warnings are): a setting
    that weakens redaction is always said, whatever quiet a deployment chose."""
    config = structlog.get_config()
    logger = structlog.wrap_logger(
        config["logger_factory"]("mcp-proxy"),
        processors=config["processors"],
        wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
    )
    logger.warning(event, **fields)
