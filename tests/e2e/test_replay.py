"""`mcp-proxy replay`: the demo's captures sent again to live SDK servers of either era, and compared.

The captures are recorded as a user records them: the `mcp-proxy` command with `--capture` in front of
the demo's SDK servers (a legacy one asking in flight, a 2026-07-28 one asking with `input_required`
rounds), driven by the demo's SDK clients of both eras: the demo's four combinations. Replaying each
capture against the same servers, and against the servers of the other era, reproduces every chain.
A newer build of the servers that answers differently (`tests.e2e.replay_peers`) gives the first
difference with both values, a question nobody recorded fails its chain naming it (or is asked with
`--ask`), `--ignore` hides a difference, and a server that cannot be reached exits 2.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.session import ClientRequestContext
from mcp.client.streamable_http import streamable_http_client

from proxy.demo.clients import run_client
from proxy.flows.events import ProxyInfo
from proxy.record.replay_source import open_capture, plans
from proxy.replay.runner import for_tui
from tests.e2e.channel_peers import python_stdio_command
from tests.e2e.replay_peers import ADD_WORDED, DemoPeer
from tests.peers.bearer_app import TOKEN
from tests.peers.clients import run_client as run_peer_client
from tests.peers.runner import REPO_ROOT, PeerServer
from tests.peers.scenarios import CallbackLog, client_for, normalize_tool_result
from tests.sidecar import ProxyProcess, clean_env, proxy_command, run_mcp_proxy, settings_env
from tests.threaded_http import serving

pytestmark = pytest.mark.e2e

COMBINATIONS = [("legacy", "legacy"), ("modern", "modern"), ("legacy", "modern"), ("modern", "legacy")]
"""(client era, server era): the demo's four combinations."""

OTHER = {"legacy": "modern", "modern": "legacy"}


@dataclass(frozen=True)
class Demo:
    """The demo's servers, running, and a capture of each combination."""

    servers: dict[str, str]
    captures: dict[tuple[str, str], Path]

    def chain(self, combo: tuple[str, str], headline: str) -> str:
        """The id of the capture's chain of `headline` (`tools/call add`)."""
        found = [p.chain for p in plans(open_capture([self.captures[combo]])) if p.headline() == headline]
        assert found, f"no {headline} chain in {combo}"
        return found[0]


async def _record(endpoint: str, era: str) -> None:
    calls = await run_client(endpoint, era)
    assert [c.detail for c in calls if not c.ok] == []


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    """Both demo servers, and the four combinations recorded through `mcp-proxy --capture`."""
    folder = tmp_path_factory.mktemp("replay")
    with DemoPeer("legacy") as legacy, DemoPeer("modern") as modern:
        servers = {"legacy": legacy.url, "modern": modern.url}
        captures = {}
        for client, server in COMBINATIONS:
            capture = folder / f"{client}-{server}.jsonl"
            env = settings_env(
                upstream=servers[server], capture=capture, admin_enabled="false", drain_grace=1
            )
            with ProxyProcess(clean_env(**env)) as proxy:
                asyncio.run(_record(proxy.endpoint(), client))
                assert proxy.stop() == 0
            captures[(client, server)] = capture
        yield Demo(servers, captures)


def _replay(
    *args: str | Path, stdin: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    words = ["replay", *(str(a) for a in args)]
    if stdin is None and env is None:
        return run_mcp_proxy(*words, timeout=50)
    return subprocess.run(
        [*proxy_command(), *words],
        cwd=REPO_ROOT,
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=50,
        check=False,
    )


def _lines(done: subprocess.CompletedProcess[str]) -> dict[str, str]:
    """Chain id -> its summary line."""
    out = {}
    for line in done.stdout.splitlines():
        head = line.split(" ", 1)[0]
        if head.startswith("r") and head[1:].isdigit():
            out[head] = line
    return out


def _calls_all_the_same(done: subprocess.CompletedProcess[str]) -> None:
    lines = _lines(done)
    calls = [line for line in lines.values() if "tools/" in line]
    assert len(calls) == 6, done.stdout  # tools/list and the five calls
    assert all(line.endswith(": same") for line in calls), done.stdout
    for line in lines.values():
        assert ": same" in line or "GET stream: skipped" in line or "setup differs (not counted)" in line, (
            line
        )


@pytest.mark.parametrize(("client", "server"), COMBINATIONS)
def test_a_demo_capture_replayed_against_the_same_server_reproduces_every_chain(
    demo: Demo, client: str, server: str
) -> None:
    done = _replay(demo.captures[(client, server)], "--all")

    assert done.returncode == 0, done.stdout + done.stderr
    lines = _lines(done)
    assert all(line.endswith(": same") for line in lines.values() if "GET stream" not in line), done.stdout
    assert f"replaying against {demo.servers[server]} (the upstream the capture recorded" in done.stderr
    _calls_all_the_same(done)


@pytest.mark.parametrize(("client", "server"), COMBINATIONS)
def test_a_demo_capture_replayed_against_the_server_of_the_other_era_reproduces_every_call(
    demo: Demo, client: str, server: str
) -> None:
    done = _replay(demo.captures[(client, server)], "--all", "--upstream", demo.servers[OTHER[server]])

    assert done.returncode == 0, done.stdout + done.stderr
    _calls_all_the_same(done)


@pytest.mark.parametrize(("client", "server"), [("legacy", "legacy"), ("modern", "legacy")])
def test_a_server_that_answers_differently_is_reported_with_the_first_difference_and_both_values(
    demo: Demo, client: str, server: str
) -> None:
    combo = (client, server)
    add = demo.chain(combo, "tools/call add")
    with DemoPeer("changed-legacy") as changed:
        done = _replay(demo.captures[combo], "--chain", add, "--upstream", changed.url)
        as_json = _replay(demo.captures[combo], "--chain", add, "--upstream", changed.url, "--json")
        hidden = _replay(
            demo.captures[combo],
            "--chain",
            add,
            "--upstream",
            changed.url,
            "--ignore",
            "result.content[*].text",
        )

    assert done.returncode == 1, done.stdout + done.stderr
    assert _lines(done)[add] == (
        f"{add} tools/call add: differs: message 2 (tools/call result) result.content[0].text: "
        'recorded "5", replayed "2 + 3 = 5"'
    )
    assert as_json.returncode == 1
    document = json.loads(as_json.stdout)
    assert document["ok"] is False
    assert document["chains"][0]["difference"] == {
        "message": 2,
        "label": "tools/call result",
        "path": "result.content[0].text",
        "recorded": "5",
        "replayed": "2 + 3 = 5",
    }
    assert hidden.returncode == 0, hidden.stdout + hidden.stderr
    assert _lines(hidden)[add].endswith(": same")


@pytest.mark.parametrize("combo", COMBINATIONS, ids=["-".join(c) for c in COMBINATIONS])
def test_a_call_replayed_edited_shows_what_the_edit_changed(demo: Demo, combo: tuple[str, str]) -> None:
    """`--set` is mitmproxy's edit-and-resend: the recorded `add` (2 + 3) sent with a=40 answers 43,
    and the report shows it against the recorded 5; in every era pairing, bridged ones included."""
    add = demo.chain(combo, "tools/call add")
    done = _replay(demo.captures[combo], "--chain", add, "--set", "params.arguments.a=40")
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"{add} tools/call add: sending it edited: params.arguments.a=40" in done.stderr
    assert _lines(done)[add].endswith('result.content[0].text: recorded "5", replayed "43"'), done.stdout
    added = _replay(demo.captures[combo], "--chain", add, "--set", "params.arguments.extra.deep=1")
    assert "message 1 " not in _lines(added)[add], added.stdout  # the edited request is no difference


def test_an_edit_that_does_not_fit_or_names_no_single_chain_exits_2_saying_why(demo: Demo) -> None:
    capture = demo.captures[("legacy", "legacy")]
    add = demo.chain(("legacy", "legacy"), "tools/call add")
    deep = _replay(capture, "--chain", add, "--set", "params.arguments.a.b=1")
    unnamed = _replay(capture, "--all", "--set", "params.arguments.a=1")
    bare = _replay(capture, "--chain", add, "--set", "arguments.a=1")
    assert (deep.returncode, unnamed.returncode, bare.returncode) == (2, 2, 2)
    assert "'b' is not under an object in the request" in deep.stderr
    assert "--set edits one chain" in unnamed.stderr
    assert "PATH is a place under params" in bare.stderr


def test_ignoring_the_index_of_a_tool_the_new_build_added_hides_that_tool_and_no_other_change(
    demo: Demo,
) -> None:
    # The newer build lists a sixth tool (`divide`, at [5]) and describes `add` (at [0]) anew.
    combo = ("legacy", "legacy")
    tools = demo.chain(combo, "tools/list")
    with DemoPeer("changed-legacy") as changed:

        def replay(*ignored: str) -> subprocess.CompletedProcess[str]:
            words = [w for path in ignored for w in ("--ignore", path)]
            return _replay(demo.captures[combo], "--chain", tools, "--upstream", changed.url, *words)

        added_only = replay("result.tools[5]")
        both = replay("result.tools[5]", "result.tools[0].description")
        described_only = replay("result.tools[0].description")

    assert added_only.returncode == 1, added_only.stdout + added_only.stderr
    assert _lines(added_only)[tools] == (
        f"{tools} tools/list: differs: message 2 (tools/list result) result.tools[0].description: "
        f'recorded "Add two integers.", replayed "{ADD_WORDED}"'
    )
    assert both.returncode == 0, both.stdout + both.stderr
    assert _lines(both)[tools].endswith(": same")
    assert described_only.returncode == 1
    line = _lines(described_only)[tools]
    assert line.startswith(
        f"{tools} tools/list: differs: message 2 (tools/list result) result.tools[5]: recorded (none), "
        'replayed {"name":"divide","description":"Divide two integers."'  # named first, however cut
    ), line


@pytest.mark.parametrize(("client", "server"), [("legacy", "modern"), ("modern", "modern")])
def test_a_question_the_capture_holds_no_answer_to_fails_its_chain_naming_it_and_the_nearest(
    demo: Demo, client: str, server: str
) -> None:
    combo = (client, server)
    greet = demo.chain(combo, "tools/call greet")
    with DemoPeer("changed-modern") as changed:
        done = _replay(demo.captures[combo], "--chain", greet, "--upstream", changed.url)

    assert done.returncode == 1, done.stdout + done.stderr
    line = _lines(done)[greet]
    assert line.startswith(f"{greet} tools/call greet: failed: no recorded answer to elicitation/create ")
    assert '"message":"What is your age?"' in line
    assert 'nearest recorded: elicitation/create {"message":"What is your name?"' in line


def test_with_ask_the_user_answers_an_unrecorded_question_and_the_new_result_is_compared(demo: Demo) -> None:
    combo = ("legacy", "legacy")
    greet = demo.chain(combo, "tools/call greet")
    answer = json.dumps({"action": "accept", "content": {"age": "42"}})
    with DemoPeer("changed-legacy") as changed:
        done = _replay(
            demo.captures[combo], "--chain", greet, "--upstream", changed.url, "--ask", stdin=answer
        )

    assert done.returncode == 1, done.stdout + done.stderr
    assert "the server asks elicitation/create" in done.stderr
    assert "What is your age?" in done.stderr
    assert _lines(done)[greet].endswith(
        'differs: message 2 (elicitation/create request) params.message: recorded "What is your name?", '
        'replayed "What is your age?"'
    )


def test_an_unreachable_server_exits_2_with_the_reason(demo: Demo, unused_tcp_port: int) -> None:
    done = _replay(
        demo.captures[("legacy", "legacy")], "--all", "--upstream", f"http://127.0.0.1:{unused_tcp_port}/mcp"
    )

    assert done.returncode == 2
    assert "the server cannot be reached" in done.stderr
    assert "Connection refused" in done.stderr
    assert done.stdout == ""


def test_json_says_why_nothing_could_be_replayed_when_it_exits_2(demo: Demo, unused_tcp_port: int) -> None:
    """`--json > replay.json` in CI: a step that reads `.ok` finds a document with the reason, not an
    empty file."""
    capture = demo.captures[("legacy", "legacy")]

    down = _replay(capture, "--all", "--json", "--upstream", f"http://127.0.0.1:{unused_tcp_port}/mcp")
    typo = _replay(capture, "--chain", "r99", "--json", "--upstream", demo.servers["legacy"])

    assert (down.returncode, typo.returncode) == (2, 2)
    unreachable, unknown = json.loads(down.stdout), json.loads(typo.stdout)
    assert unreachable["ok"] is False
    assert unreachable["error"].startswith("the server cannot be reached: ")
    assert "Connection refused" in unreachable["error"]
    assert unknown["ok"] is False
    assert unknown["error"].startswith("no chain r99 in the capture")


def test_a_chain_the_capture_does_not_hold_and_no_chain_named_are_usage_errors(demo: Demo) -> None:
    capture = demo.captures[("modern", "modern")]
    missing = _replay(capture, "--chain", "r99", "--upstream", demo.servers["modern"])
    unnamed = _replay(capture)

    assert missing.returncode == 2
    assert "no chain r99 in the capture" in missing.stderr
    live = _replay(capture, "--chain", "cb00287-11", "--upstream", demo.servers["modern"])
    assert live.returncode == 2
    assert "a running proxy's chain id; a capture numbers its chains r1, r2, ..." in live.stderr
    assert unnamed.returncode == 2
    assert "--chain ID" in unnamed.stderr
    assert "--all" in unnamed.stderr


def test_a_chain_the_capture_does_not_hold_stops_the_replay_before_any_chain_is_sent(demo: Demo) -> None:
    """A typo in one of several `--chain` ids exits 2 before the others reach the server: a call with
    side effects is not sent by a replay that then says nothing could be replayed."""
    combo = ("legacy", "legacy")
    add = demo.chain(combo, "tools/call add")

    done = _replay(
        demo.captures[combo], "--chain", add, "--chain", "r99", "--upstream", demo.servers["legacy"]
    )

    assert done.returncode == 2, done.stdout + done.stderr
    assert "no chain r99 in the capture" in done.stderr
    assert done.stdout == ""
    assert "speaking" not in done.stderr  # the replay's proxy never started


def test_an_upstream_url_with_a_credential_in_its_query_is_replayed_and_never_printed(demo: Demo) -> None:
    key = "query-s3cret-key"
    upstream = f"{demo.servers['legacy']}?api_key={key}"
    done = _replay(demo.captures[("legacy", "legacy")], "--all", "--json", "--upstream", upstream)

    assert done.returncode == 0, done.stdout + done.stderr
    assert key not in done.stdout + done.stderr
    assert json.loads(done.stdout)["upstream"] == f"{demo.servers['legacy']}?api_key=<redacted>"
    assert "replaying against" in done.stderr


def test_an_upstream_url_with_user_and_password_is_refused_without_printing_the_password(demo: Demo) -> None:
    upstream = demo.servers["legacy"].replace("http://", "http://alice:pa55word@")
    done = _replay(demo.captures[("legacy", "legacy")], "--all", "--upstream", upstream)

    assert done.returncode == 2
    assert "pa55word" not in done.stdout + done.stderr
    assert "credentials (user:password@)" in done.stderr
    assert "--header 'Authorization: VALUE'" in done.stderr


SECRET = "Bearer replay-s3cret-token"


async def _record_with_credentials(endpoint: str) -> None:
    async with client_for(endpoint, "legacy", headers={"Authorization": SECRET}) as client:
        result = await client.call_tool("add", {"a": 2, "b": 3})
    assert normalize_tool_result(result)["content"] == ["5"]


def _recorded_with_credentials(demo: Demo, tmp_path: Path) -> tuple[Path, str]:
    """A capture of a `tools/call add` sent with `SECRET` (held redacted), and that call's chain id."""
    capture = tmp_path / "auth.jsonl"
    env = settings_env(upstream=demo.servers["legacy"], capture=capture, admin_enabled="false", drain_grace=1)
    with ProxyProcess(clean_env(**env)) as proxy:
        asyncio.run(_record_with_credentials(proxy.endpoint()))
        assert proxy.stop() == 0
    add = next(p.chain for p in plans(open_capture([capture])) if p.headline() == "tools/call add")
    return capture, add


def test_a_credential_the_capture_holds_redacted_is_asked_for_by_name_and_sent_when_given(
    demo: Demo, tmp_path: Path
) -> None:
    capture, add = _recorded_with_credentials(demo, tmp_path)

    refused = _replay(capture, "--chain", add, "--upstream", demo.servers["modern"])
    given = _replay(
        capture, "--chain", add, "--upstream", demo.servers["modern"], "--header", f"Authorization: {SECRET}"
    )

    assert refused.returncode == 1
    assert _lines(refused)[add] == (
        f"{add} tools/call add: failed: the capture holds Authorization redacted: give the value to send "
        "with --header 'Authorization: VALUE'"
    )
    assert given.returncode == 0, given.stdout + given.stderr
    assert _lines(given)[add].endswith(": same")
    for done in (refused, given):
        assert "s3cret" not in done.stdout + done.stderr


def test_a_wrong_token_is_reported_as_the_servers_401_naming_the_header_to_give(tmp_path: Path) -> None:
    capture = tmp_path / "bearer.jsonl"
    with PeerServer("legacy-bearer") as server:
        env = settings_env(upstream=server.url, capture=capture, admin_enabled="false", drain_grace=1)
        with ProxyProcess(clean_env(**env)) as proxy:
            asyncio.run(_record_bearer_calls(proxy.endpoint()))
            assert proxy.stop() == 0
        chains = {p.headline(): p.chain for p in plans(open_capture([capture]))}
        handshake, add = chains["initialize"], chains["tools/call add"]

        wrong = _replay(
            capture, "--all", "--upstream", server.url, "--header", "Authorization: Bearer WRONG-tok3n"
        )
        right = _replay(
            capture, "--all", "--upstream", server.url, "--header", f"Authorization: Bearer {TOKEN}"
        )
        alone = _replay(
            capture,
            "--chain",
            handshake,
            "--upstream",
            server.url,
            "--header",
            "Authorization: Bearer WRONG-tok3n",
        )

    refused = "the server refused it with HTTP 401 Unauthorized"
    hint = (
        "the Authorization given with --header is not one it accepts: "
        "give another with --header 'Authorization: VALUE'"
    )
    lines = _lines(wrong)
    assert lines[handshake].startswith(f"{handshake} initialize: failed: {refused}"), wrong.stdout
    assert lines[handshake].endswith(hint), wrong.stdout
    assert lines[add].startswith(
        f"{add} tools/call add: failed: replaying its session's initialize ({handshake}): {refused}"
    ), wrong.stdout
    assert (wrong.returncode, alone.returncode) == (1, 1), wrong.stdout + alone.stdout
    assert right.returncode == 0, right.stdout + right.stderr
    for done in (wrong, right, alone):
        assert "WRONG-tok3n" not in done.stdout + done.stderr
        assert TOKEN not in done.stdout + done.stderr


def test_the_era_probe_of_a_server_that_wants_a_token_carries_the_headers_given(tmp_path: Path) -> None:
    # Without the token the probe gets 401 and learns no era: the replay would then guess it.
    capture = tmp_path / "bearer.jsonl"
    with PeerServer("legacy-bearer") as server:
        env = settings_env(upstream=server.url, capture=capture, admin_enabled="false", drain_grace=1)
        with ProxyProcess(clean_env(**env)) as proxy:
            asyncio.run(_record_bearer_calls(proxy.endpoint()))
            assert proxy.stop() == 0

        done = _replay(
            capture, "--all", "--json", "--upstream", server.url, "--header", f"Authorization: Bearer {TOKEN}"
        )

    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["upstream_era"]["era"] == "legacy", done.stdout
    assert "speaking the legacy era to the server, as probed" in done.stderr, done.stderr
    assert TOKEN not in done.stdout + done.stderr


async def _record_bearer_calls(endpoint: str) -> None:
    async with client_for(endpoint, "legacy", headers={"Authorization": f"Bearer {TOKEN}"}) as client:
        result = await client.call_tool("add", {"a": 2, "b": 3})
    assert normalize_tool_result(result)["content"] == ["5"]


class _GatewayQuotingTheToken(BaseHTTPRequestHandler):
    """A legacy server behind a gateway that refuses calls with a text/plain 401 quoting the token it
    refused (hand-written: no SDK peer answers a call outside JSON-RPC)."""

    lead = "unauthorized: "
    """What the refusal says before the token."""

    def do_POST(self) -> None:
        message = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        method, ident = message.get("method"), message.get("id")
        if method == "tools/call":
            self._send(401, "text/plain", f"{self.lead}{self.headers.get('Authorization')}".encode())
        elif ident is None:
            self._send(202, "text/plain", b"")
        elif method == "initialize":
            result = {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "serverInfo": {"name": "gw", "version": "1"},
            }
            self._send(
                200,
                "application/json",
                json.dumps({"jsonrpc": "2.0", "id": ident, "result": result}).encode(),
            )
        else:
            error = {"code": -32601, "message": "Method not found"}
            self._send(
                200, "application/json", json.dumps({"jsonrpc": "2.0", "id": ident, "error": error}).encode()
            )

    def _send(self, status: int, kind: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Mcp-Session-Id", "gw-session")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


def test_a_refusal_quoting_the_token_it_refused_is_reported_with_the_token_masked(
    demo: Demo, tmp_path: Path
) -> None:
    capture, add = _recorded_with_credentials(demo, tmp_path)

    with serving(_GatewayQuotingTheToken) as gateway:
        done = _replay(capture, "--chain", add, "--upstream", gateway, "--header", f"Authorization: {SECRET}")

    assert done.returncode == 1, done.stdout + done.stderr
    assert (
        "the server refused it with HTTP 401 Unauthorized (it said 'unauthorized: Bearer <redacted len="
        in (_lines(done)[add])
    )
    assert "s3cret" not in done.stdout + done.stderr


class _GatewayQuotingTheTokenAcrossTheCut(_GatewayQuotingTheToken):
    """The same gateway (hand-written, as above), saying so much before the token that the 80
    characters a report quotes of a refusal end inside it."""

    lead = "unauthorized: the credential this request presented was:  "
    """58 characters: the quote ends 15 characters into `replay-s3cret-token`."""


def test_a_refusal_quoting_the_token_where_the_quote_is_cut_shows_no_piece_of_it(
    demo: Demo, tmp_path: Path
) -> None:
    """A token cut at the quote's end is masked before the cut, in the line and the --json document:
    masked after it, the piece before the cut would be no text the redactor knows."""
    capture, add = _recorded_with_credentials(demo, tmp_path)
    given = ("--upstream", "--header", f"Authorization: {SECRET}")

    with serving(_GatewayQuotingTheTokenAcrossTheCut) as gateway:
        line = _replay(capture, "--chain", add, given[0], gateway, *given[1:])
        document = _replay(capture, "--chain", add, given[0], gateway, *given[1:], "--json")

    assert (line.returncode, document.returncode) == (1, 1), line.stdout + document.stdout
    said = "HTTP 401 Unauthorized (it said 'unauthorized: the credential this request presented was:"
    assert said in _lines(line)[add], line.stdout
    assert said in _replayed(document, add)["reason"], document.stdout
    for done in (line, document):
        assert "replay-s3cret" not in done.stdout + done.stderr, done.stdout


PEER_CALLS: list[tuple[str, dict[str, object]]] = [
    ("ask_two_at_once", {}),
    ("ask_twice", {}),
    ("slow_progress", {"steps": 3}),
    ("list_client_roots", {}),
]
"""Calls of the SDK test peers whose questions come together (one in-flight pair, or one MRTR round, or
two rounds when a bridge's round window splits them), in turn, or with progress on the way."""


async def _record_peer_calls(endpoint: str, mode: str) -> None:
    async with client_for(endpoint, mode) as client:
        for name, args in PEER_CALLS:
            result = normalize_tool_result(await client.call_tool(name, args))
            assert not result.get("isError"), result


@pytest.mark.parametrize(
    ("mode", "server"), [("legacy", "legacy"), ("2026-07-28", "legacy"), ("2026-07-28", "modern")]
)
def test_questions_asked_together_replay_the_same_against_sdk_peers_of_both_eras(
    legacy_server: PeerServer, modern_server: PeerServer, tmp_path: Path, mode: str, server: str
) -> None:
    urls = {"legacy": legacy_server.url, "modern": modern_server.url}
    capture = tmp_path / "peers.jsonl"
    env = settings_env(upstream=urls[server], capture=capture, admin_enabled="false", drain_grace=1)
    with ProxyProcess(clean_env(**env)) as proxy:
        asyncio.run(_record_peer_calls(proxy.endpoint(), mode))
        assert proxy.stop() == 0

    for target in ("legacy", "modern"):
        done = _replay(capture, "--all", "--upstream", urls[target])
        assert done.returncode == 0, f"against {target}:\n{done.stdout}{done.stderr}"
        calls = [line for line in _lines(done).values() if "tools/call" in line]
        assert len(calls) == len(PEER_CALLS)
        assert all(line.endswith(": same") for line in calls), done.stdout


def _record_forced_legacy(server: str, capture: Path) -> Path:
    """The peer calls of a 2026-07-28 client, recorded by `mcp-proxy --upstream-era legacy`."""
    env = settings_env(upstream=server, capture=capture, admin_enabled="false", drain_grace=1)
    with ProxyProcess(clean_env(**env), "--upstream-era", "legacy") as proxy:
        asyncio.run(_record_peer_calls(proxy.endpoint(), "2026-07-28"))
        assert proxy.stop() == 0
    return capture


def test_a_capture_recorded_with_the_upstream_era_forced_replays_in_that_era_and_says_why(
    dual_inflight_server: PeerServer, modern_server: PeerServer, tmp_path: Path
) -> None:
    # `mcp-proxy --upstream-era legacy` in front of the SDK's dual-era server bridged the 2026-07-28
    # client's calls to its legacy side; a probe of that server finds both eras.
    server = dual_inflight_server.url
    capture = _record_forced_legacy(server, tmp_path / "forced.jsonl")
    why = "recorded with the upstream era forced to legacy"

    done = _replay(capture, "--all", "--upstream", server)
    as_json = _replay(capture, "--all", "--upstream", server, "--json")
    probed = _replay(capture, "--all", "--upstream", server, "--upstream-era", "auto")
    gone = _replay(capture, "--all", "--upstream", modern_server.url)

    assert done.returncode == 0, done.stdout + done.stderr
    assert "warning" not in done.stderr, done.stderr  # the bridge's own sessions end quietly at its stop
    calls = [line for line in _lines(done).values() if "tools/call" in line]
    assert len(calls) == len(PEER_CALLS)
    assert all(line.endswith(": same") for line in calls), done.stdout
    assert (
        f"speaking the legacy era to the server, forced: {why} (--upstream-era auto probes it instead)"
        in done.stderr
    )
    assert json.loads(as_json.stdout)["upstream_era"] == {"era": "legacy", "forced": True, "why": why}
    spoken = "speaking both eras (each chain in its client's) to the server, as probed: --upstream-era auto"
    assert spoken in probed.stderr
    assert gone.returncode == 2, gone.stdout + gone.stderr
    assert gone.stdout == ""
    assert (
        "mcp-proxy replay: the capture was recorded with the upstream era forced to legacy, and the server "
        "no longer speaks legacy (it speaks modern only); --upstream-era auto replays through the proxy's "
        "bridge instead"
    ) in gone.stderr


def test_the_era_a_recording_proxy_learned_after_its_start_is_spoken_again(
    dual_inflight_server: PeerServer, unused_tcp_port: int, tmp_path: Path
) -> None:
    """A recording proxy started before its server probes nothing at start, so its capture's first
    `proxy_info` says `unknown` and a later one `legacy`: the replay speaks legacy again to a
    dual-era server, as the recording's bridge did, instead of probing and passing the 2026-07-28
    client's calls through to the server's other side."""
    capture = tmp_path / "late.jsonl"
    upstream = f"http://127.0.0.1:{unused_tcp_port}/mcp"
    env = settings_env(upstream=upstream, capture=capture, admin_enabled="false", drain_grace=1)
    with ProxyProcess(clean_env(**env)) as proxy, PeerServer("legacy-inflight", port=unused_tcp_port):
        asyncio.run(_record_peer_calls(proxy.endpoint(), "2026-07-28"))
        assert proxy.stop() == 0
    lines = capture.read_text().splitlines()
    eras = [json.loads(line)["upstream_era"] for line in lines if '"proxy_info"' in line]
    assert eras[:2] == ["unknown", "legacy"], eras

    done = _replay(capture, "--all", "--upstream", dual_inflight_server.url)

    assert (
        "speaking the legacy era to the server, forced: recorded in front of a legacy server; this one "
        "speaks both eras"
    ) in done.stderr
    assert done.returncode == 0, done.stdout + done.stderr
    calls = [line for line in _lines(done).values() if "tools/call" in line]
    assert len(calls) == len(PEER_CALLS)
    assert all(line.endswith(": same") for line in calls), done.stdout


def test_the_tuis_replay_speaks_the_era_the_recording_proxy_was_told_too(
    dual_inflight_server: PeerServer, tmp_path: Path
) -> None:
    """`r` in `tui --open` replays with the capture's `proxy_info`, as `mcp-proxy replay` does: a call
    recorded through the bridge to a dual-era server is bridged again, not passed through and reported
    as differing for the proxy's sake."""
    server = dual_inflight_server.url
    capture = _record_forced_legacy(server, tmp_path / "forced.jsonl")
    recorded = ProxyInfo.model_validate_json(capture.read_text().splitlines()[1])
    asked = next(plan for plan in plans(open_capture([capture])) if "ask_twice" in plan.headline())

    told = asyncio.run(for_tui(None)(asked, None, recorded))
    unforced = recorded.model_copy(update={"upstream_era_forced": False})
    probed = asyncio.run(for_tui(None)(asked, None, unforced))

    assert recorded.upstream_era_forced, recorded
    assert told.status == "same", told
    # What the replay did before it read the recording's era: passed through, the dual-era server asks
    # the client in flight and asks again on the retry, which the recording never answered.
    assert probed.status == "failed", probed
    assert "more often than recorded: the recording answered it once" in str(probed.reason), probed


def test_a_chain_a_fault_changed_when_recorded_is_marked_so_in_the_report(
    legacy_server: PeerServer, tmp_path: Path
) -> None:
    # The recording proxy answered `echo` with an injected error; the replay sends the call as the
    # client sent it, so the server now answers it: the difference is the fault's, and says so.
    capture = tmp_path / "faulted.jsonl"
    env = settings_env(
        upstream=legacy_server.url,
        capture=capture,
        admin_enabled="false",
        drain_grace=1,
        faults="tool:echo dir:client => error=-32603:disk on fire",
    )
    with ProxyProcess(clean_env(**env)) as proxy:
        run = run_peer_client("python-legacy", proxy.endpoint(), ["echo", "add"])
        assert proxy.stop() == 0
    assert "disk on fire" in json.dumps(run.lines["echo"]), run.lines
    done = _replay(capture, "--all", "--upstream", legacy_server.url)
    lines = [line for line in _lines(done).values() if "tools/call" in line]
    (echo,) = [line for line in lines if "tools/call echo" in line]
    (add,) = [line for line in lines if "tools/call add" in line]
    assert ": differs: " in echo, done.stdout
    assert (
        "[recorded with the proxy's changes, so a difference may be expected: fault injected by the proxy:"
        in echo
    )
    assert add.endswith(": same"), done.stdout
    as_json = json.loads(_replay(capture, "--all", "--upstream", legacy_server.url, "--json").stdout)
    marked = {
        c["request"]: c.get("proxy_changes")
        for c in as_json["chains"]
        if c["request"].startswith("tools/call")
    }
    assert marked["tools/call add"] is None
    (note,) = marked["tools/call echo"]
    assert note.startswith("fault injected by the proxy: error")


def test_a_capture_replays_against_a_stdio_server_the_replay_starts_itself(
    legacy_server: PeerServer, tmp_path: Path
) -> None:
    # Recorded over HTTP from the SDK's catalogue server; replayed against the same catalogue served
    # by the SDK on stdio, which `--upstream-cmd` starts (and stops) for the replay.
    capture = tmp_path / "http.jsonl"
    env = settings_env(upstream=legacy_server.url, capture=capture, admin_enabled="false", drain_grace=1)
    with ProxyProcess(clean_env(**env)) as proxy:
        run_peer_client("python-legacy", proxy.endpoint(), ["echo", "add", "ask_name"])
        assert proxy.stop() == 0
    done = _replay(capture, "--all", "--upstream-cmd", python_stdio_command())
    assert done.returncode == 0, done.stdout + done.stderr
    assert "replaying against stdio:" in done.stderr
    calls = [line for line in _lines(done).values() if "tools/call" in line]
    assert len(calls) == 3, done.stdout
    assert all(line.endswith(": same") for line in calls), done.stdout
    missing = _replay(capture, "--all", "--upstream-cmd", "no-such-server --stdio")
    assert missing.returncode == 2
    assert "`no-such-server --stdio`" in missing.stderr
    assert "ENOENT" in missing.stderr


def test_a_credential_the_capture_holds_redacted_is_not_asked_for_by_a_stdio_server(
    legacy_server: PeerServer, tmp_path: Path
) -> None:
    """A stdio server reads no HTTP header: a capture recorded over HTTP with a token replays against
    the same server on stdio without a `--header` nobody could use."""
    capture = tmp_path / "http-token.jsonl"
    env = settings_env(upstream=legacy_server.url, capture=capture, admin_enabled="false", drain_grace=1)
    with ProxyProcess(clean_env(**env)) as proxy:
        asyncio.run(_record_with_credentials(proxy.endpoint()))
        assert proxy.stop() == 0
    assert "Bearer <redacted" in capture.read_text()

    done = _replay(capture, "--all", "--upstream-cmd", python_stdio_command())

    assert done.returncode == 0, done.stdout + done.stderr
    (add,) = [line for line in _lines(done).values() if "tools/call add" in line]
    assert add.endswith(": same"), done.stdout
    assert "--header" not in done.stdout + done.stderr


def test_a_recorded_name_with_control_characters_is_shown_escaped_in_the_report(
    demo: Demo, tmp_path: Path
) -> None:
    combo = ("legacy", "legacy")
    add = demo.chain(combo, "tools/call add")
    crafted = tmp_path / "crafted.jsonl"
    recorded = demo.captures[combo].read_text()
    crafted.write_text(recorded.replace('"add"', '"add\\u001b]0;TITLE\\u0007\\u202e"'))

    done = _replay(crafted, "--chain", add)

    assert _lines(done)[add].startswith(f"{add} tools/call add\\x1b]0;TITLE\\x07\\u202e: "), done.stdout
    assert not any(char in done.stdout + done.stderr for char in "\x1b\x07\u202e"), done.stdout + done.stderr


LONG_STEPS = 300
"""Progress steps of a call whose chain (each notification on both sides of the bridge) holds more
messages than a chain keeps by default (`max_messages_per_chain`, 500)."""


async def _record_long_progress(endpoint: str) -> None:
    log = CallbackLog()
    async with client_for(endpoint, "2026-07-28", log=log) as client:
        result = await client.call_tool(
            "slow_progress", {"steps": LONG_STEPS}, progress_callback=log.on_progress
        )
    assert normalize_tool_result(result)["content"] == [f"done {LONG_STEPS}"]
    assert len(log.progress) == LONG_STEPS


@pytest.fixture(scope="module")
def long_call(legacy_server: PeerServer, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A 2026-07-28 client's `slow_progress` call with `LONG_STEPS` steps, recorded through the bridge
    in front of a legacy server: the capture, and the call's chain id."""
    capture = tmp_path_factory.mktemp("long") / "long.jsonl"
    env = settings_env(upstream=legacy_server.url, capture=capture, admin_enabled="false", drain_grace=1)
    with ProxyProcess(clean_env(**env), "--upstream-era", "legacy") as proxy:
        asyncio.run(_record_long_progress(proxy.endpoint()))
        assert proxy.stop() == 0
    (slow,) = [p for p in plans(open_capture([capture])) if p.headline() == "tools/call slow_progress"]
    assert len(slow.records) > 2 * LONG_STEPS
    return capture, slow.chain


def _replayed(done: subprocess.CompletedProcess[str], chain: str) -> dict[str, Any]:
    """One chain's outcome in a `--json` replay's document."""
    (outcome,) = [c for c in json.loads(done.stdout)["chains"] if c["chain"] == chain]
    return outcome


def test_a_chain_longer_than_a_live_proxy_keeps_is_replayed_and_compared_whole(
    long_call: tuple[Path, str],
) -> None:
    # A live proxy keeps a chain's newest `max_messages_per_chain` messages (500 by default): the
    # replay's proxy keeps what the capture's reader keeps, the call's request and first answers too.
    capture, chain = long_call

    done = _replay(capture, "--all", "--json")

    assert done.returncode == 0, done.stdout + done.stderr
    assert _replayed(done, chain)["status"] == "same"


def test_a_replayed_chain_its_proxy_cut_for_memory_is_still_the_calls_and_says_why_it_is_not_compared(
    long_call: tuple[Path, str],
) -> None:
    capture, chain = long_call
    env = clean_env(MCP_PROXY_MAX_CHAIN_STORE_BYTES=str(256 * 1024))

    done = _replay(capture, "--chain", chain, "--json", env=env)

    assert done.returncode == 1, done.stdout + done.stderr
    outcome = _replayed(done, chain)
    assert outcome["status"] == "failed"
    assert outcome["replayed_chain"], outcome  # found though its request is no longer held
    assert outcome["reason"].startswith("the replayed chain has "), outcome
    assert "of which its proxy kept the newest" in outcome["reason"]
    assert outcome["reason"].endswith("raise that setting (--config, MCP_PROXY_*)"), outcome
    assert "max_chain_store_bytes" in outcome["reason"]


async def _record_a_call_never_retried(endpoint: str, tool: str) -> None:
    """A 2026-07-28 SDK client calls `tool`, is asked the user's name (`input_required`), and stops
    there: its elicitation handler never answers, and the call is given up."""
    asked = anyio.Event()

    async def elicitation(
        context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        asked.set()
        await anyio.sleep_forever()
        raise AssertionError("never answered")

    async with (
        httpx2.AsyncClient(timeout=10) as http,
        Client(
            streamable_http_client(endpoint, http_client=http),
            mode="2026-07-28",
            cache=None,
            elicitation_callback=elicitation,
        ) as client,
        anyio.create_task_group() as tasks,
    ):
        tasks.start_soon(client.call_tool, tool, {})
        with anyio.fail_after(10):
            await asked.wait()
        tasks.cancel_scope.cancel()


def _stopped_call(upstream: str, capture: Path, tool: str) -> str:
    """Record `tool` called by a client that stops at `input_required`, through `mcp-proxy
    --upstream-era legacy`; the chain id of the call."""
    env = settings_env(upstream=upstream, capture=capture, admin_enabled="false", drain_grace=1)
    with ProxyProcess(clean_env(**env), "--upstream-era", "legacy") as proxy:
        asyncio.run(_record_a_call_never_retried(proxy.endpoint(), tool))
        assert proxy.stop() == 0
    (asked,) = [p for p in plans(open_capture([capture])) if p.headline() == f"tools/call {tool}"]
    assert asked.retries == []
    return asked.chain


def test_a_call_whose_client_stopped_at_input_required_replays_to_that_round_and_is_compared(
    legacy_server: PeerServer, tmp_path: Path
) -> None:
    capture = tmp_path / "stopped.jsonl"
    chain = _stopped_call(legacy_server.url, capture, "ask_name")

    done = _replay(capture, "--chain", chain)

    assert done.returncode == 0, done.stdout + done.stderr
    line = _lines(done)[chain]
    assert line.startswith(
        f"{chain} tools/call ask_name: same: stopped where the recording's client did, never answering "
        "elicitation/create "
    ), line
    assert "What is your name?" in line
    assert "the recording was asked nothing" not in line


def test_a_stopped_call_whose_server_now_asks_something_else_differs_in_that_round(
    demo: Demo, tmp_path: Path
) -> None:
    capture = tmp_path / "stopped.jsonl"
    chain = _stopped_call(demo.servers["legacy"], capture, "greet")

    with DemoPeer("changed-legacy") as changed:
        done = _replay(capture, "--chain", chain, "--upstream", changed.url)

    assert done.returncode == 1, done.stdout + done.stderr
    assert _lines(done)[chain] == (
        f"{chain} tools/call greet: differs: message 2 (elicitation/create request) params.message: "
        'recorded "What is your name?", replayed "What is your age?"'
    )
