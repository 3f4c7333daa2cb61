"""Copy as curl: every byte of a recorded request reaches curl as it was, each stand-in from the
environment. bash runs the command with `curl` replaced by a function that prints its arguments."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from proxy.flows.events import Channel, Direction, HttpInfo, MessageRecord, Side
from proxy.record.curl import NoRequest, curl_command
from proxy.wire.visible import UNSAFE

AWKWARD = 'it\'s "quoted" $HOME `date` \\ back\nslash'
STAND_IN = "<redacted len=12 hmac:0123abcd>"
QUERY_STAND_IN = "<redacted len=8 hmac:4567ef01>"
TOKEN_STAND_IN = "<redacted len=20 hmac:89abcdef>"


def record(seq: int, **fields: object) -> MessageRecord:
    values: dict[str, object] = {
        "seq": seq,
        "ts": 1.0,
        "side": Side.BOTH,
        "direction": Direction.TO_SERVER,
        "channel": Channel.POST,
        "exchange": "x1",
        "kind": "request",
        "jsonrpc_id": 1,
        "method": "tools/call",
        "body": {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"text": AWKWARD, "s": STAND_IN},
        },
        "http": HttpInfo(
            method="POST",
            path="/mcp?token=" + QUERY_STAND_IN,
            headers={
                "Host": "x",
                "Authorization": f"Bearer {TOKEN_STAND_IN}",
                "X-Note": AWKWARD.replace("\n", " "),
            },
        ),
    }
    values.update(fields)
    return MessageRecord.model_validate(values)


def curl_args(command: str, env: dict[str, str]) -> list[str]:
    shim = 'curl() { printf "%s\\0" "$@"; }\n'
    done = subprocess.run(
        ["bash", "-c", shim + command], capture_output=True, text=True, timeout=10, env=env, check=True
    )
    return done.stdout.split("\0")[:-1]


def test_the_command_hands_curl_every_byte_and_each_secret_from_the_environment() -> None:
    request = record(1)
    command = curl_command(
        [request], request, chain_id="c1", proxy_url="http://127.0.0.1:8080", upstream_url=None
    )
    env = {
        **os.environ,
        "MCP_TOKEN": "tok",
        "MCP_QUERY_SECRET": "q-secret",
        "MCP_BODY_S": "b-secret",
    }

    args = curl_args(command, env)

    assert args[:5] == ["-sS", "-N", "-X", "POST", "http://127.0.0.1:8080/mcp?token=q-secret"]
    headers = [args[i + 1] for i, a in enumerate(args) if a == "-H"]
    assert "Authorization: Bearer tok" in headers
    assert f"X-Note: {AWKWARD.replace(chr(10), ' ')}" in headers
    assert not [h for h in headers if h.lower().startswith("host:")]
    body = args[args.index("--data-binary") + 1]
    assert json.loads(body)["params"] == {"text": AWKWARD, "s": "b-secret"}
    assert STAND_IN not in command
    for name in ("MCP_TOKEN", "MCP_QUERY_SECRET", "MCP_BODY_S"):
        assert f"# set {name} first" in command


def test_a_secret_header_sent_twice_is_sent_twice_each_value_from_its_own_variable() -> None:
    other = "<redacted len=9 hmac:99998888>"
    head = HttpInfo(
        method="POST", path="/mcp", headers={"X-Api-Key": f"{STAND_IN}, {other}", "Accept": "a, b"}
    )
    request = record(1, http=head)
    command = curl_command(
        [request], request, chain_id="c1", proxy_url="http://127.0.0.1:8080", upstream_url=None
    )

    args = curl_args(
        command, {**os.environ, "MCP_X_API_KEY": "k1", "MCP_X_API_KEY_2": "k2", "MCP_BODY_S": "b"}
    )

    headers = [args[i + 1] for i, a in enumerate(args) if a == "-H"]
    assert [h for h in headers if h.startswith("X-Api-Key")] == ["X-Api-Key: k1", "X-Api-Key: k2"]
    assert "Accept: a, b" in headers  # a list that holds no secret stays one header
    assert "X-Api-Key (the second of the 2 sent)" in command


def test_two_keys_in_the_path_each_come_from_their_own_variable_and_a_repeated_key_from_one() -> None:
    other = "<redacted len=22 hmac:99998888>"
    head = HttpInfo(method="POST", path=f"/gw/{STAND_IN}/{other}/x/{STAND_IN}/mcp", headers={})
    request = record(1, http=head)
    command = curl_command(
        [request], request, chain_id="c1", proxy_url="http://127.0.0.1:8080", upstream_url=None
    )

    env = {**os.environ, "MCP_URL_SECRET": "k1", "MCP_URL_SECRET_2": "k2", "MCP_BODY_S": "b"}
    args = curl_args(command, env)

    assert args[4] == "http://127.0.0.1:8080/gw/k1/k2/x/k1/mcp"
    assert "the second of 2 redacted segments of the URL's path" in command


def test_a_response_copies_the_request_of_its_exchange_and_a_stream_event_has_none() -> None:
    request = record(1)
    answer = record(2, direction=Direction.TO_CLIENT, kind="result", method=None, http=None)
    pushed = record(3, direction=Direction.TO_CLIENT, exchange="x9", kind="notification", http=None)
    messages = [request, answer, pushed]

    from_answer = curl_command(
        messages, answer, chain_id="c1", proxy_url="http://p", upstream_url="http://u/mcp"
    )

    assert "message 1 (tools/call #1)" in from_answer
    with pytest.raises(NoRequest):
        curl_command(messages, pushed, chain_id="c1", proxy_url="http://p", upstream_url="http://u/mcp")


def test_a_request_state_stand_in_comes_from_the_environment_too() -> None:
    state = "<requestState len=257 hmac:9f8e7d6c>"
    body = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"requestState": state}}
    request = record(1, body=body, http=HttpInfo(method="POST", path="/mcp", headers={"Host": "x"}))
    command = curl_command(
        [request], request, chain_id="c1", proxy_url="http://127.0.0.1:8080", upstream_url=None
    )
    assert state not in command
    assert "# set MCP_REQUEST_STATE first: the requestState of the input_required answer" in command
    args = curl_args(command, {**os.environ, "MCP_REQUEST_STATE": "the-state"})
    sent = json.loads(args[args.index("--data-binary") + 1])
    assert sent["params"]["requestState"] == "the-state"


def test_each_distinct_redacted_value_of_a_json_body_comes_from_a_variable_named_for_its_key() -> None:
    other, third = "<redacted len=9 hmac:99998888>", "<redacted len=5 hmac:77776666>"
    fourth = "<redacted len=3 hmac:55554444>"
    arguments = {
        "api_key": STAND_IN,
        "password": other,
        "again": STAND_IN,  # the same value, masked alike: one variable
        "tokens": [third, other],
        "x\n$(touch pwned)": fourth,
    }
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"arguments": arguments}}
    request = record(1, body=body, http=HttpInfo(method="POST", path="/mcp", headers={}))
    command = curl_command(
        [request], request, chain_id="c1", proxy_url="http://127.0.0.1:8080", upstream_url=None
    )

    env = {
        **os.environ,
        "MCP_BODY_API_KEY": "k",
        "MCP_BODY_PASSWORD": "p",
        "MCP_BODY_TOKENS": "t",
        "MCP_BODY_X_TOUCH_PWNED": "f",
    }
    args = curl_args(command, env)

    sent = json.loads(args[args.index("--data-binary") + 1])["params"]["arguments"]
    assert sent == {
        "api_key": "k",
        "password": "p",
        "again": "k",
        "tokens": ["t", "p"],
        "x\n$(touch pwned)": "f",
    }
    assert [line for line in command.split("\n") if line.startswith("# set ")] == [
        f"# set {name} first: {what} (redacted in the capture), e.g. export {name}=..."
        for name, what in (
            ("MCP_BODY_API_KEY", "the redacted value of body field 'api_key'"),
            ("MCP_BODY_PASSWORD", "the redacted value of body field 'password'"),
            ("MCP_BODY_TOKENS", "the redacted value of body field 'tokens'"),
            ("MCP_BODY_X_TOUCH_PWNED", "the redacted value of body field 'x\\n$(touch pwned)'"),
        )
    ]


def test_two_different_redacted_values_of_one_body_field_each_come_from_their_own_variable() -> None:
    other = "<redacted len=9 hmac:99998888>"
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"a": {"token": STAND_IN}, "b": {"token": other}},
    }
    request = record(1, body=body, http=HttpInfo(method="POST", path="/mcp", headers={}))
    command = curl_command([request], request, chain_id="c1", proxy_url="http://p", upstream_url=None)

    args = curl_args(command, {**os.environ, "MCP_BODY_TOKEN": "one", "MCP_BODY_TOKEN_2": "two"})

    sent = json.loads(args[args.index("--data-binary") + 1])["params"]
    assert sent == {"a": {"token": "one"}, "b": {"token": "two"}}
    assert "# set MCP_BODY_TOKEN_2 first: the second of 2 redacted values of body field 'token'" in command


def test_a_secret_the_body_echoes_comes_from_the_variable_its_header_or_query_value_already_has() -> None:
    token, key, other = TOKEN_STAND_IN, QUERY_STAND_IN, "<redacted len=12 hmac:22223333>"
    text = f"echo {token} and {key} and pw {other}"
    body = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"arguments": {"text": text}}}
    head = HttpInfo(method="POST", path=f"/?api_key={key}", headers={"Authorization": f"Bearer {token}"})
    request = record(1, body=body, http=head)
    command = curl_command([request], request, chain_id="r2", proxy_url="http://p", upstream_url=None)

    env = {**os.environ, "MCP_TOKEN": "tok", "MCP_QUERY_SECRET": "qs", "MCP_BODY_TEXT": "pw"}
    args = curl_args(command, env)

    sent = json.loads(args[args.index("--data-binary") + 1])["params"]["arguments"]
    assert sent == {"text": "echo tok and qs and pw pw"}
    assert [line.split(" first:")[0] for line in command.split("\n") if line.startswith("# set ")] == [
        "# set MCP_QUERY_SECRET",
        "# set MCP_TOKEN",
        "# set MCP_BODY_TEXT",
    ]
    assert (
        "# set MCP_BODY_TEXT first: the redacted value of body field 'text' (a part of its text: the "
        "rest of the text stays as recorded)" in command
    )


def test_an_initialize_shows_the_answers_head_where_the_session_id_comes_from() -> None:
    body = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {}}
    opening = record(1, method="initialize", jsonrpc_id=0, body=body)
    call = record(2)

    first = curl_command([opening, call], opening, chain_id="c1", proxy_url="http://p", upstream_url=None)
    later = curl_command([opening, call], call, chain_id="c1", proxy_url="http://p", upstream_url=None)

    assert curl_args(first, dict(os.environ, MCP_TOKEN="t", MCP_QUERY_SECRET="q"))[:3] == ["-sS", "-N", "-i"]
    assert "its Mcp-Session-Id is what later commands take as MCP_SESSION_ID" in first
    assert " -i " not in later


def test_a_sessions_placeholder_says_which_chains_answer_holds_the_session_id() -> None:
    session = "<redacted len=32 hmac:5589c7dc>"
    headers = {"Host": "x", "Mcp-Session-Id": session}
    call = record(2, http=HttpInfo(method="POST", path="/mcp", headers=headers))

    named = curl_command(
        [call], call, chain_id="r9", proxy_url="http://p", upstream_url=None, session_opener="r7"
    )
    unnamed = curl_command([call], call, chain_id="r9", proxy_url="http://p", upstream_url=None)

    assert session not in named
    assert (
        "# set MCP_SESSION_ID first: the session id, from the Mcp-Session-Id header of the answer to "
        "the session's initialize, chain r7 (`mcp-proxy export --curl r7` prints it)"
    ) in named
    assert "the session's initialize (its command prints it, with -i)" in unnamed
    live = curl_command(
        [call],
        call,
        chain_id="cb00287-9",
        proxy_url="http://p",
        upstream_url=None,
        session_opener="cb00287-7",
    )
    assert "chain cb00287-7 (C on its initialize copies that command)" in live
    assert "export --curl" not in live  # a running proxy's ids are no capture's
    args = curl_args(named, dict(os.environ, MCP_SESSION_ID="abc", MCP_BODY_S="s"))
    assert "Mcp-Session-Id: abc" in args


def test_a_call_the_server_asks_about_says_to_run_it_in_the_background_and_its_answer_which_id_to_use() -> (
    None
):
    call = record(1)
    asked = record(
        2,
        direction=Direction.TO_CLIENT,
        channel=Channel.SSE,
        kind="request",
        jsonrpc_id=7,
        method="elicitation/create",
        http=None,
    )
    answer = record(
        3, exchange="x2", kind="result", jsonrpc_id=7, method=None, body={"jsonrpc": "2.0", "id": 7}
    )
    messages = [call, asked, answer]

    for_call = curl_command(messages, call, chain_id="c1", proxy_url="http://p", upstream_url=None)
    for_answer = curl_command(messages, answer, chain_id="c1", proxy_url="http://p", upstream_url=None)

    assert "asked the client on this call's stream (elicitation/create #7)" in for_call
    assert "run it in the background (append &)" in for_call
    assert "answers the server's request #7" in for_answer
    assert "background" not in for_answer


def test_a_get_streams_event_copies_the_streams_own_request_head() -> None:
    head = record(
        1,
        exchange="x7",
        kind="http",
        channel=Channel.HTTP,
        jsonrpc_id=None,
        method=None,
        body=None,
        http=HttpInfo(
            method="GET", path="/mcp", headers={"Accept": "text/event-stream", "Mcp-Session-Id": STAND_IN}
        ),
    )
    pushed = record(2, direction=Direction.TO_CLIENT, exchange="x7", kind="notification", http=None)

    command = curl_command(
        [head, pushed], pushed, chain_id="c1", proxy_url="http://p", upstream_url="http://u/mcp"
    )

    assert "message 1 (GET /mcp)" in command
    assert "# a GET stream:" in command
    assert "curl -sS -N -X GET http://p/mcp" in command
    assert "--data-binary" not in command
    assert '"${MCP_SESSION_ID:?' in command


def test_an_edited_call_says_the_server_got_the_edit_and_the_edit_is_copied_with_the_clients_head() -> None:
    head = HttpInfo(
        method="POST",
        path="/mcp",
        headers={"Host": "proxy:1", "User-Agent": "sdk", "Mcp-Protocol-Version": "2025-11-25"},
    )
    client = record(1, side=Side.CLIENT, http=head)
    edited_body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "add", "a": 40}}
    edit = record(
        2, side=Side.UPSTREAM, http=None, body=edited_body, note="edited by the proxy's intercept (i1)"
    )
    messages = [client, edit]

    original = curl_command(
        messages, client, chain_id="c1", proxy_url="http://p", upstream_url="http://u/mcp"
    )
    sent = curl_command(messages, edit, chain_id="c1", proxy_url="http://p", upstream_url="http://u/mcp")

    assert "# the server got an edit of it instead (message 2, the proxy's intercept)" in original
    assert "sent to the upstream (what the proxy's intercept sent in place of the client's request)" in sent
    assert "curl -sS -N -X POST http://u/mcp" in sent
    assert "-H 'User-Agent: sdk'" in sent
    assert "-H 'Mcp-Protocol-Version: 2025-11-25'" in sent
    assert '"a":40' in sent
    assert "proxy:1" not in sent  # curl sets the upstream's Host itself


PWN = "touch pwned; echo INJECTED"
HOSTILE_ID = f"7)\n{PWN}\n# ("
HOSTILE_TEXT = "a\x1b]0;TITLE\x07\x1b[2J\r\u202eb\x9b31m'$(touch pwned)`touch pwned`"
CURL_STUB = '#!/bin/sh\nfor arg in "$@"; do printf "%s\\000" "$arg"; done > "$ARGV_FILE"\n'


def run_with_stub_curl(command: str, tmp_path: Path) -> tuple[list[str], str]:
    """Run the printed command with bash in an empty directory where `curl` is a stub on PATH that
    records its argv: what curl got, and what the command printed besides."""
    stub_dir = tmp_path / "bin"
    stub_dir.mkdir(parents=True)
    (stub_dir / "curl").write_text(CURL_STUB)
    (stub_dir / "curl").chmod(0o755)
    work = tmp_path / "work"
    work.mkdir()
    env = {
        **os.environ,
        "PATH": f"{stub_dir}{os.pathsep}{os.environ['PATH']}",
        "ARGV_FILE": str(tmp_path / "argv"),
        "MCP_TOKEN": "tok",
        "MCP_QUERY_SECRET": "q",
        "MCP_BODY_S": "b",
    }
    subprocess.run(["bash", "-n", "-c", command], check=True, timeout=10)
    done = subprocess.run(
        ["bash", "-c", command], cwd=work, env=env, capture_output=True, text=True, timeout=10, check=True
    )
    assert list(work.iterdir()) == []  # nothing the capture held ran
    return (tmp_path / "argv").read_bytes().decode().split("\0")[:-1], done.stdout + done.stderr


def assert_printable(command: str) -> None:
    """Every comment stays one line, and no line holds a character a terminal would act on."""
    comments, curl_line, _ = command.partition("\ncurl ")
    assert curl_line
    assert all(line.startswith("# ") for line in comments.split("\n"))
    assert all(UNSAFE.search(line) is None for line in command.split("\n"))


def test_hostile_ids_and_chain_ids_stay_inside_their_comment_lines(tmp_path: Path) -> None:
    call = record(1, jsonrpc_id=HOSTILE_ID)
    asked = record(
        2,
        direction=Direction.TO_CLIENT,
        channel=Channel.SSE,
        kind="request",
        jsonrpc_id=HOSTILE_ID,
        method="elicitation/create\n" + PWN,
        http=None,
    )
    answer = record(3, exchange="x2", kind="result", jsonrpc_id=HOSTILE_ID, method=None, body={"id": 1})
    messages = [call, asked, answer]

    for copied in (call, answer):
        command = curl_command(
            messages, copied, chain_id="r1\n" + PWN, proxy_url="http://p", upstream_url=None
        )
        assert_printable(command)
        args, printed = run_with_stub_curl(command, tmp_path / str(copied.seq))
        assert "INJECTED" not in printed
        assert args[:5] == ["-sS", "-N", "-X", "POST", "http://p/mcp?token=q"]
    call_command = curl_command(messages, call, chain_id="r1", proxy_url="http://p", upstream_url=None)
    shown_id = "#7)\\ntouch pwned; echo INJECTED\\n# ("
    assert f"# mcp-proxy: chain r1, message 1 (tools/call {shown_id})" in call_command
    assert "(elicitation/create\\ntouch pwned; echo INJECTED #7)\\n" in call_command


def test_a_crafted_method_path_and_header_reach_curl_as_recorded_and_run_nothing(tmp_path: Path) -> None:
    head = HttpInfo(
        method="POST$(touch pwned)",
        path="/mcp?x=" + HOSTILE_TEXT,
        headers={"Host": "x", "X-Note": HOSTILE_TEXT, "X-Evil\n" + PWN: "v"},
    )
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"text": HOSTILE_TEXT}}
    request = record(1, http=head, body=body)
    command = curl_command([request], request, chain_id="r2", proxy_url="http://p", upstream_url=None)

    assert_printable(command)
    args, printed = run_with_stub_curl(command, tmp_path)

    assert "INJECTED" not in printed
    assert args[:5] == ["-sS", "-N", "-X", "POST$(touch pwned)", "http://p/mcp?x=" + HOSTILE_TEXT]
    headers = [args[i + 1] for i, a in enumerate(args) if a == "-H"]
    assert f"X-Note: {HOSTILE_TEXT}" in headers
    assert f"X-Evil\n{PWN}: v" in headers
    assert json.loads(args[args.index("--data-binary") + 1])["params"]["text"] == HOSTILE_TEXT
