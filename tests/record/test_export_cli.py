"""`mcp-proxy export` refusing what it cannot export: exit 2, one line naming why, no output file."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import orjson
import pytest

from proxy.cli import main
from proxy.flows.events import Channel, Direction, Mode, ProxyInfo, Side
from proxy.flows.observations import ExchangeClosed, ExchangeOpened, MessageSeen
from proxy.flows.redact import Redactor
from proxy.record.capture import FORMAT_VERSION, MAX_UNKNOWN_SHOWN, CaptureWriter
from proxy.record.mock_table import read_table
from proxy.record.observations import ObservationEncoder
from proxy.wire.jsonrpc import classify_value
from tests.flows.bridge_play import parked_bridge_call
from tests.flows.test_sink import SCENARIOS
from tests.otlp_receiver import OtlpReceiver, closed_port
from tests.record.captures import UPSTREAM, damage_opening, record_play
from tests.sidecar import proxy_command, run_into_a_closed_pipe, run_mcp_proxy


def record_small(directory: Path) -> Path:
    """A capture of one answered `tools/call` (chain r1), so an export of it would succeed."""
    path = directory / "small.jsonl"
    encode = ObservationEncoder(Redactor(), 65536).encode
    call = classify_value({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "echo"}})
    done = classify_value({"jsonrpc": "2.0", "id": 1, "result": {"content": []}})
    observations = [
        ExchangeOpened(1.0, "x1", "POST", "/mcp", {}, None, "modern", "modern", Mode.PASSTHROUGH, 60),
        MessageSeen(1.1, "x1", call, 60, Direction.TO_SERVER, Channel.POST, Side.BOTH, None, None),
        MessageSeen(1.2, "x1", done, 40, Direction.TO_CLIENT, Channel.JSON, Side.BOTH, None, None),
        ExchangeClosed(1.3, "x1", None),
    ]
    with CaptureWriter(path) as writer:
        writer.write(
            ProxyInfo(ts=1.0, version="t", listen="http://127.0.0.1:1", upstream="http://127.0.0.1:2/mcp")
        )
        writer.write_lines([encode(obs) for obs in observations])
    return path


def test_a_file_that_is_not_a_capture_exports_nothing_and_exits_2_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "notes.txt"
    source.write_text("hello\n")
    out = tmp_path / "out.har"
    assert main(["export", "--har", str(out), str(source)]) == 2
    assert f"{source}:1: not a mcp-debug-proxy-capture file" in capsys.readouterr().err
    assert not out.exists()


def test_an_unknown_status_filter_exits_2_naming_what_it_accepts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out.json"
    assert main(["export", "--json", str(out), "--status", "fine", str(tmp_path / "any.jsonl")]) == 2
    err = capsys.readouterr().err
    accepted = "cancelled, error, incomplete, ok, parked, pending, waiting_client"
    assert f"status must be one of {accepted}, got fine" in err
    assert not out.exists()


@pytest.mark.parametrize("fmt", ["--har", "--json", "--ndjson"])
def test_an_output_that_is_one_of_the_captures_is_refused_and_left_as_it_was(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fmt: str
) -> None:
    capture = tmp_path / "run.jsonl"
    capture.write_bytes(b'{"kind":"header"}\n{"kind":"anything"}\n')
    alias = tmp_path / "alias.jsonl"
    alias.symlink_to(capture)
    for target in (capture, alias):
        assert main(["export", fmt, str(target), str(tmp_path / "other.jsonl"), str(capture)]) == 2
        assert "is one of the captures read" in capsys.readouterr().err
        assert capture.read_bytes() == b'{"kind":"header"}\n{"kind":"anything"}\n'


def test_a_capture_given_first_as_if_it_were_read_is_refused_not_overwritten(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`export --json a.jsonl b.jsonl` meant to read both: the output is the first name."""
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    for path in (first, second):
        path.write_bytes(b'{"format":"mcp-debug-proxy-capture","version":"1.4"}\n')

    assert main(["export", "--json", str(first), str(second)]) == 2

    err = capsys.readouterr().err
    assert f"{first} is a capture, and writing the json there would replace it" in err
    assert "mcp-proxy export --json OUT CAPTURE..." in err
    assert first.read_bytes() == b'{"format":"mcp-debug-proxy-capture","version":"1.4"}\n'


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("http://user:pa55word@127.0.0.1:4318", "carries credentials"),
        ("notaurl", "not an http(s) URL"),
    ],
)
def test_an_otlp_url_is_checked_as_the_proxys_setting_is_and_never_echoes_a_password(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], url: str, said: str
) -> None:
    assert main(["export", "--otlp", url, str(tmp_path / "any.jsonl")]) == 2
    err = capsys.readouterr().err
    assert said in err
    assert "pa55word" not in err


COLLECTOR_KEY = "collector-key-7f31"


def test_an_otlp_export_never_prints_the_collector_urls_query_value_sent_or_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    capture = record_small(tmp_path)
    with OtlpReceiver() as collector:
        sent = run_mcp_proxy("export", "--otlp", f"{collector.url}?api_key={COLLECTOR_KEY}", str(capture))
        targets = [r.path for r in collector.requests]
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "1")  # one quick try at the closed port
    failed = run_mcp_proxy("export", "--otlp", f"{closed_port()}?api_key={COLLECTOR_KEY}", str(capture))

    assert sent.returncode == 0, sent.stderr
    assert targets == [f"/v1/traces?api_key={COLLECTOR_KEY}"]  # the collector still gets its key
    assert f"sent 1 span to {collector.url}/v1/traces?api_key=<redacted>" in sent.stderr
    assert failed.returncode == 2, failed.stderr
    assert "1 of 1 span not delivered: ConnectionError: " in failed.stderr
    assert COLLECTOR_KEY not in sent.stderr + failed.stderr


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (
            ["--har", "{out}", "--to", "upstream"],
            "--to applies to --curl (where its commands send), not to --har",
        ),
        (
            ["--json", "{out}", "--to", "proxy"],
            "--to applies to --curl (where its commands send), not to --json",
        ),
        (["--otlp", "http://127.0.0.1:4318", "--to", "upstream"], "--to applies to --curl"),
        (
            ["--curl", "r1", "--status", "error", "--q", "x"],
            "--status, --q filter the chains of --har, --json and --ndjson; --curl takes one chain by its id",
        ),
        (["--curl", "r1", "--method", "tools/call"], "--method filter the chains of --har"),
    ],
)
def test_an_option_given_to_an_export_it_does_not_apply_to_is_refused_naming_where_it_applies(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], said: str
) -> None:
    out = tmp_path / "out"
    capture = record_small(tmp_path)

    code = main(["export", *(a.format(out=out) for a in args), str(capture)])

    assert code == 2
    captured = capsys.readouterr()
    assert f"mcp-proxy export: {said}" in captured.err
    assert captured.out == ""
    assert not out.exists()


def test_a_last_line_cut_short_is_named_with_its_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capture = record_small(tmp_path)
    lines = capture.read_bytes().count(b"\n")
    with capture.open("ab") as f:
        f.write(b'{"type":"obs","kind":"message","t":2.0,"exch')  # a proxy killed mid-write

    assert main(["export", "--json", str(tmp_path / "out.json"), str(capture)]) == 1
    err = capsys.readouterr().err

    assert f"{capture}:{lines + 1}: last line cut short (a proxy stopped mid-write)" in err
    report = orjson.loads((tmp_path / "out.json").read_bytes())["skipped"]
    assert report["cut_short"] == [str(capture)]


def test_a_line_with_a_field_of_the_wrong_type_is_skipped_whole_and_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capture = record_small(tmp_path)
    lines = capture.read_bytes().splitlines(keepends=True)
    head = b'{"type":"obs","kind":"response_head","t":1.15,"exchange":"x1","status":"200",'
    head += b'"content_type":"application/json","headers":{}}\n'
    capture.write_bytes(b"".join([*lines[:4], head, *lines[4:]]))  # after the request's line
    out = tmp_path / "out.json"

    assert main(["export", "--json", str(out), str(capture)]) == 1
    err = capsys.readouterr().err

    assert (
        f"mcp-proxy export: skipped {capture}:5: corrupt observation line: a field holds a value of the "
        "wrong type ('status' holds str, not int)"
    ) in err.splitlines()
    (chain,) = [c["chain"] for c in orjson.loads(out.read_bytes())["chains"]]
    assert chain.get("http_status") is None  # nothing of the skipped line reached the chain


def test_an_export_the_disk_refuses_leaves_the_previous_output_as_it_was_and_no_part_file(
    tmp_path: Path,
) -> None:
    # The file-size limit makes the kernel refuse the export's writes past it (EFBIG), as a full
    # disk does (ENOSPC).
    capture = record_small(tmp_path)
    out = tmp_path / "out" / "x.json"
    out.parent.mkdir()
    out.write_bytes(b'{"previous": "good export"}')
    command = ["prlimit", "--fsize=512", *proxy_command(), "export", "--json", str(out), str(capture)]

    done = subprocess.run(command, capture_output=True, text=True, timeout=30, check=False)

    assert done.returncode == 2, done.stderr
    assert f"mcp-proxy export: cannot write {out}: File too large" in done.stderr
    assert out.read_bytes() == b'{"previous": "good export"}'
    assert [p.name for p in out.parent.iterdir()] == ["x.json"]


def test_a_last_line_a_running_proxy_is_still_writing_is_left_out_in_one_line_and_exits_0(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capture = record_small(tmp_path)
    lines = capture.read_bytes().count(b"\n")
    with CaptureWriter(capture):  # the proxy's own writer holds the file's lock, as while it runs
        with capture.open("ab") as f:
            f.write(b'{"type":"obs","kind":"message","t":2.0,"exch')  # the rest not flushed yet
        assert main(["export", "--json", str(tmp_path / "out.json"), str(capture)]) == 0
    err = capsys.readouterr().err

    assert err.splitlines() == [
        f"mcp-proxy export: {capture}:{lines + 1}: left out the last line, which the running proxy is "
        "still writing",
        f"mcp-proxy export: wrote 1 chain to {tmp_path / 'out.json'}",
    ]
    exported = orjson.loads((tmp_path / "out.json").read_bytes())
    assert "skipped" not in exported
    assert [c["chain"]["name"] for c in exported["chains"]] == ["echo"]


def test_a_capture_of_a_newer_minor_version_is_read_and_said_to_be_newer_without_failing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capture = record_small(tmp_path)
    lines = capture.read_bytes().split(b"\n", 1)
    header = orjson.loads(lines[0])
    header["version"] = "1.99"
    capture.write_bytes(orjson.dumps(header) + b"\n" + lines[1])

    assert main(["export", "--json", str(tmp_path / "out.json"), str(capture)]) == 0
    err = capsys.readouterr().err

    assert f"{capture}: capture format 1.99 is newer than this mcp-proxy writes" in err
    assert "wrote 1 chain to " in err
    assert orjson.loads((tmp_path / "out.json").read_bytes())["chains"]


def as_newer_minor(capture: Path) -> None:
    """Rewrite the capture's header as a newer sidecar's minor version (1.99) would write it."""
    head, rest = capture.read_bytes().split(b"\n", 1)
    capture.write_bytes(
        head.replace(f'"version":"{FORMAT_VERSION}"'.encode(), b'"version":"1.99"') + b"\n" + rest
    )


def test_lines_of_kinds_a_newer_minor_version_wrote_are_named_on_stderr_and_fail_no_export(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A capture from a newer sidecar's minor version is read as its format promises: every export of
    it, as replay, names the lines it skipped and exits 0."""
    capture = record_small(tmp_path)
    as_newer_minor(capture)
    with capture.open("ab") as f:
        f.write(b'{"type":"obs","kind":"kind_of_a_later_version","t":2.1}\n')
        f.write(b'{"type":"event_of_a_later_version","ts":2.2}\n')
    kind_at = len(capture.read_bytes().splitlines()) - 1
    named = [
        f"skipped {capture}:{kind_at}: a line of kind 'kind_of_a_later_version', which a newer "
        "mcp-proxy wrote",
        f"skipped {capture}:{kind_at + 1}: a line of type 'event_of_a_later_version', which a newer "
        "mcp-proxy wrote",
    ]

    for fmt, out in (("--json", "out.json"), ("--ndjson", "out.ndjson"), ("--har", "out.har")):
        assert main(["export", fmt, str(tmp_path / out), str(capture)]) == 0, fmt
        err = capsys.readouterr().err.splitlines()
        assert [line for line in err if " newer mcp-proxy wrote" in line] == [
            f"mcp-proxy export: {n}" for n in named
        ], fmt
    assert main(["export", "--curl", "r1", str(capture)]) == 0
    assert named[0] in capsys.readouterr().err
    written = orjson.loads((tmp_path / "out.json").read_bytes())
    assert written["skipped"]["unknown_lines"] == 2
    assert written["skipped"]["unknown"] == [
        {"file": str(capture), "line": kind_at, "reason": "kind 'kind_of_a_later_version'"},
        {"file": str(capture), "line": kind_at + 1, "reason": "type 'event_of_a_later_version'"},
    ]
    har = orjson.loads((tmp_path / "out.har").read_bytes())
    assert all(n in har["log"]["comment"] for n in named)
    assert [c["chain"]["name"] for c in written["chains"]] == ["echo"]


def test_past_the_first_few_lines_of_kinds_a_newer_minor_wrote_the_rest_are_counted_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capture = record_small(tmp_path)
    as_newer_minor(capture)
    with capture.open("ab") as f:
        f.write(b'{"type":"obs","kind":"kind_of_a_later_version","t":2.1}\n' * (MAX_UNKNOWN_SHOWN + 3))

    assert main(["export", "--json", str(tmp_path / "out.json"), str(capture)]) == 0
    err = [line for line in capsys.readouterr().err.splitlines() if "newer mcp-proxy wrote" in line]
    assert len(err) == MAX_UNKNOWN_SHOWN + 1
    assert err[-1] == "mcp-proxy export: skipped 3 more lines of kinds a newer mcp-proxy wrote"
    skipped = orjson.loads((tmp_path / "out.json").read_bytes())["skipped"]
    assert (skipped["unknown_lines"], len(skipped["unknown"])) == (MAX_UNKNOWN_SHOWN + 3, MAX_UNKNOWN_SHOWN)


def test_what_an_export_wrote_and_skipped_is_said_in_words_and_in_the_number_each_count_takes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capture = record_small(tmp_path)
    as_newer_minor(capture)
    with capture.open("ab") as f:
        f.write(b'{"type":"obs","kind":"message","t":2.0,"exchange":"x9","size":3,"direction":"to_server"}\n')
        f.write(b'{"type":"obs","kind":"kind_of_a_later_version","t":2.1}\n')

    assert main(["export", "--json", str(tmp_path / "out.json"), str(capture)]) == 1
    json_err = capsys.readouterr().err
    assert main(["export", "--curl", "r1", str(capture)]) == 1
    curl_err = capsys.readouterr().err

    assert f"skipped {capture}:7: corrupt observation line: no 'msg' field" in json_err
    assert "KeyError" not in json_err
    assert f"skipped {capture}:8: a line of kind 'kind_of_a_later_version', which a newer" in json_err
    assert "wrote 1 chain to " in json_err
    assert "wrote 1 curl command of chain r1" in curl_err


def test_curl_of_a_get_stream_chain_copies_its_request_head(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "stream.jsonl"
    encode = ObservationEncoder(Redactor(), 65536).encode
    pushed = classify_value({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
    observations = [
        ExchangeOpened(1.0, "x1", "GET", "/mcp", {}, "s1", "legacy", "legacy", Mode.PASSTHROUGH, 0),
        MessageSeen(1.1, "x1", pushed, 60, Direction.TO_CLIENT, Channel.GET_SSE, Side.BOTH, "e1", None),
        ExchangeClosed(1.3, "x1", None),
    ]
    with CaptureWriter(path) as writer:
        writer.write(
            ProxyInfo(ts=1.0, version="t", listen="http://127.0.0.1:1", upstream="http://127.0.0.1:2/mcp")
        )
        writer.write_lines([encode(obs) for obs in observations])

    assert main(["export", "--curl", "r1", str(path)]) == 0
    captured = capsys.readouterr()
    assert "curl -sS -N -X GET http://127.0.0.1:1/mcp" in captured.out  # the stream's own request head
    assert "--data-binary" not in captured.out
    assert "wrote 1 curl command of chain r1" in captured.err


@pytest.mark.parametrize("chosen", [["--har", "-"], ["--curl", "r1"]], ids=["har", "curl"])
def test_an_export_to_a_pipe_whose_reader_left_ends_quietly_like_cat(
    tmp_path: Path, chosen: list[str]
) -> None:
    capture = record_small(tmp_path)
    status, err = run_into_a_closed_pipe("export", *chosen, str(capture))

    assert status == 141
    assert b"Broken pipe" not in err
    assert b"Traceback" not in err


def test_curl_to_upstream_of_a_bridged_chain_copies_what_the_proxy_sent_the_server_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The server of a bridged chain never got the client's requests (they are of the other era):
    `--to upstream` copies the proxy's own requests to it instead, and says why."""
    capture = tmp_path / "bridged.jsonl"
    record_play(parked_bridge_call, capture)

    assert main(["export", "--curl", "r1", "--to", "upstream", str(capture)]) == 0
    upstream = capsys.readouterr()
    assert main(["export", "--curl", "r1", str(capture)]) == 0
    proxy = capsys.readouterr()

    assert "was bridged (mrtr_to_legacy): the server got the proxy's own requests" in upstream.err
    assert upstream.out.count("curl -sS") == 2  # the upstream call, then the answer the proxy posted
    assert '"id":"mrtr-1"' in upstream.out
    assert '"action":"accept"' in upstream.out
    assert "requestState" not in upstream.out  # nothing of the client's 2026-07-28 retry
    assert f"{UPSTREAM}" in upstream.out
    assert "requestState" in proxy.out  # --to proxy copies the client's own requests, as before
    assert "bridged" not in proxy.err


def _two_calls(obs: Any, clock: Any) -> list[Any]:
    """A call whose server asks the client its name (answered "Ada"), then a plain call."""
    return [*SCENARIOS["nested-elicitation"](obs, clock), *SCENARIOS["json-call"](obs, clock, "x9", 9)]


def test_the_exports_q_is_the_tui_filters_language_searching_bodies_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--q` takes what the TUI's `/` takes: `body:ada` finds the call whose elicitation was answered
    Ada, in the JSON export and the HAR alike; a query that does not parse exits 2 naming why."""
    capture = tmp_path / "two.jsonl"
    record_play(_two_calls, capture)

    def chains(*query: str) -> list[str]:
        out = tmp_path / "out.json"
        assert main(["export", "--json", str(out), *query, str(capture)]) == 0
        return [c["chain"]["name"] for c in orjson.loads(out.read_bytes())["chains"]]

    def har_exchanges(*query: str) -> set[str]:
        out = tmp_path / "out.har"
        assert main(["export", "--har", str(out), *query, str(capture)]) == 0
        return {e["_mcp"]["exchange"] for e in orjson.loads(out.read_bytes())["log"]["entries"]}

    assert chains() == ["ask", "add"]
    assert chains("--q", "body:ada") == ["ask"]
    assert chains("--q", "ada") == ["ask"]  # free text searches bodies too
    assert chains("--q", "tool:a* -status:waiting_client", "--q=-body:ada") == ["add"]
    assert har_exchanges("--q", "body:ada") == {"x1", "x2"}  # the call and the answer's POST
    assert har_exchanges("--q", "tool:add") == {"x9"}
    capsys.readouterr()
    assert main(["export", "--json", str(tmp_path / "bad.json"), "--q", "tol:add", str(capture)]) == 2
    assert "q: unknown field 'tol'" in capsys.readouterr().err


def test_what_export_says_on_stderr_shows_control_characters_escaped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "got\x1b]0;TITLE\x07\u202e"
    folder.mkdir()
    capture = record_small(folder)
    with capture.open("ab") as f:
        f.write(b'{"type":"obs","kind":"message","t":2.0,"exchange":"x9","size":3,"direction":"to_server"}\n')

    assert main(["export", "--json", str(tmp_path / "out.json"), str(capture)]) == 1
    err = capsys.readouterr().err

    shown = str(capture).replace("\x1b", "\\x1b").replace("\x07", "\\x07").replace("\u202e", "\\u202e")
    assert f"skipped {shown}:7: corrupt observation line" in err
    assert not any(char in err for char in "\x1b\x07\u202e"), err


def _reordered_and_broken(line: bytes) -> bytes:
    """The exchange id ahead of the kind, and the line no longer JSON."""
    obj = orjson.loads(line)
    first = {"exchange": obj.pop("exchange"), **obj}
    return orjson.dumps(first)[:-1] + b",\n"


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda line: line.replace(b'"http_method":"POST",', b""), id="a-field-missing"),
        pytest.param(lambda line: line.replace(b'"http_method":"POST",', b"\x00{junk"), id="not-json"),
        pytest.param(_reordered_and_broken, id="other-order-not-json"),
    ],
)
def test_the_lines_an_exchange_loses_with_its_skipped_opening_line_are_counted_and_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], damage: Any
) -> None:
    """The chains around it are whole; what went with the damaged exchange is said, not lost in silence."""
    capture = tmp_path / "two.jsonl"
    record_play(_two_calls, capture)
    opening, later = damage_opening(capture, "x9", damage)
    out = tmp_path / "out.json"

    assert main(["export", "--json", str(out), str(capture)]) == 1
    err = capsys.readouterr().err

    assert later >= 3  # its call, the answer and its close at least
    where = f"{capture}:{opening}"
    assert f"skipped {where}: corrupt " in err
    assert f"left out {later} later lines of exchange x9: its opening line ({where}) was skipped" in err
    written = orjson.loads(out.read_bytes())
    assert [c["chain"]["name"] for c in written["chains"]] == ["ask"]
    assert written["skipped"]["left_out_lines"] == later
    assert written["skipped"]["left_out"] == [{"exchange": "x9", "lines": later, "opening_line": where}]


def cut_request(capture: Path, exchange: str) -> tuple[int, int]:
    """Cut, in place, the client's request line on `exchange` in half (as a disk error might): its line
    number (from 1), and how many later message lines of that exchange there are."""
    lines = capture.read_bytes().splitlines(keepends=True)
    own = f'"exchange":"{exchange}"'.encode()
    at = next(i for i, line in enumerate(lines) if own in line and b'"direction":"to_server"' in line)
    later = sum(1 for line in lines[at + 1 :] if own in line and b'"kind":"message"' in line)
    lines[at] = lines[at][: len(lines[at]) // 2] + b"\n"
    capture.write_bytes(b"".join(lines))
    return at + 1, later


def test_the_lines_that_join_no_chain_after_a_skipped_request_are_counted_and_named_not_lost_in_silence(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The server's answer to a request whose line was cut has no chain to join: `--json` and
    `--ndjson` say so, as the HAR keeps it in its exchange's entry."""
    capture = tmp_path / "two.jsonl"
    record_play(_two_calls, capture)
    cut, later = cut_request(capture, "x9")
    where = f"{capture}:{cut}"
    said = f"left out 1 later line of exchange x9: it joined no chain, a line before it ({where}) was skipped"
    assert later == 1  # the call's answer

    out = tmp_path / "out.json"
    assert main(["export", "--json", str(out), str(capture)]) == 1
    err = capsys.readouterr().err
    assert f"skipped {where}: corrupt " in err
    assert said in err
    written = orjson.loads(out.read_bytes())
    assert [c["chain"]["name"] for c in written["chains"]] == ["ask"]
    assert written["skipped"]["unplaced_lines"] == 1
    assert written["skipped"]["unplaced"] == [{"exchange": "x9", "lines": 1, "after_line": where}]

    assert main(["export", "--ndjson", str(tmp_path / "out.ndjson"), str(capture)]) == 1
    assert said in capsys.readouterr().err

    har = tmp_path / "out.har"
    assert main(["export", "--har", str(har), str(capture)]) == 1
    assert "joined no chain" not in capsys.readouterr().err  # the HAR holds it
    (entry,) = [e for e in orjson.loads(har.read_bytes())["log"]["entries"] if e["_mcp"]["exchange"] == "x9"]
    assert entry["_mcp"]["chains"] == []
    assert '"result"' in entry["response"]["content"]["text"]


def test_an_intact_capture_leaves_nothing_out(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    capture = tmp_path / "two.jsonl"
    record_play(_two_calls, capture)

    assert main(["export", "--json", str(tmp_path / "out.json"), str(capture)]) == 0

    assert "left out" not in capsys.readouterr().err
    assert "skipped" not in orjson.loads((tmp_path / "out.json").read_bytes())


def test_a_mock_built_from_a_capture_counts_the_lines_a_skipped_opening_line_took(tmp_path: Path) -> None:
    capture = tmp_path / "two.jsonl"
    record_play(_two_calls, capture)
    _, later = damage_opening(capture, "x9", lambda line: line.replace(b'"http_method":"POST",', b""))

    table, report = read_table([capture])

    assert (report.corrupt_lines, report.left_out_lines) == (1, later)
    assert "tools/call" in table.methods()  # the call whose opening line is whole is served


def test_an_export_through_a_symlink_replaces_the_file_it_points_to_keeping_its_mode(tmp_path: Path) -> None:
    """The file is replaced as writing into it would leave it: the link stays a link, and an export
    kept private (0600) stays so, where the temporary file's rename put a new 0644 file in the
    link's place."""
    capture = record_small(tmp_path)
    kept = tmp_path / "kept"
    kept.mkdir()
    real = kept / "chains.json"
    real.write_text("earlier\n")
    real.chmod(0o600)
    link = tmp_path / "latest.json"
    link.symlink_to(real)

    done = run_mcp_proxy("export", "--json", str(link), str(capture))

    assert done.returncode == 0, done.stderr
    assert link.is_symlink()
    assert link.readlink() == real
    assert orjson.loads(real.read_bytes())["chains"][0]["chain"]["id"] == "r1"
    assert real.stat().st_mode & 0o777 == 0o600
    assert sorted(p.name for p in kept.iterdir()) == ["chains.json"], "no temporary file is left"


def test_a_stale_temporary_file_beside_the_output_is_passed_over(tmp_path: Path) -> None:
    """A temporary file left by an export killed before its rename, whose pid is this one's now, is
    neither written into nor in the way."""
    capture = record_small(tmp_path)
    out = tmp_path / "chains.json"
    stale = tmp_path / f".chains.json.{os.getpid()}.part"
    stale.write_text("stale\n")

    assert main(["export", "--json", str(out), str(capture)]) == 0

    assert orjson.loads(out.read_bytes())["chains"][0]["chain"]["id"] == "r1"
    assert stale.read_text() == "stale\n"
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.endswith(".part")) == [stale.name]
