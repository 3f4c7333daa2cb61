"""Configuration declared once: the `Settings` model and the layers that fill it.

Every setting is one field of `Settings` with a docstring saying what it is for; that docstring is the
field's description, the comment above it in `config.example.toml` and the reference behind
`--print-config`. Values come in layers, each overriding the one before: the field defaults, a flat
TOML file (`--config PATH`, else `MCP_PROXY_CONFIG`), `MCP_PROXY_<FIELD>` environment variables, and
the flags the user actually typed. Every failure is a `ConfigError` whose one-line message names the
setting and the file, variable or flag it came from, so a typo never silently becomes a default.

This module holds the model; beside it, `config_load` fills it from the layers (`load_settings`),
`config_print` writes `--print-config`, and `addresses` checks host:port and URL values. All four are
pure (stdlib and pydantic only): none imports aiohttp, structlog or textual, so the CLI can
validate a configuration before anything heavy loads.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Annotated, Final, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator
from pydantic_core import PydanticCustomError

from proxy.addresses import http_url_parts, otlp_url, parse_host_port
from proxy.engine.gate.intercepts import MAX_TIMEOUT_S, parse_intercept
from proxy.engine.gate.rules import MAX_RULES, parse_rule
from proxy.flows.redact import DEFAULT_HEADER_NAMES, DEFAULT_HEADER_PATTERNS, key_words
from proxy.framing.classify import DEPTH_CEILING
from proxy.framing.http import is_loopback, masked_url

ENV_PREFIX = "MCP_PROXY_"
"""Prefix of the environment variables that set a field: `MCP_PROXY_<FIELD_NAME_UPPER>`."""

CONFIG_ENV = "MCP_PROXY_CONFIG"
"""Environment variable naming the TOML file when `--config` was not given."""

HEADER_TOKEN: Final = re.compile(r"[!#$%&'*+\-.^_`|~0-9a-z]+")
"""A header name as HTTP defines one (a token, lowercased): what a redaction entry must be to match."""

RULE_LISTS = {"faults": "--fault", "intercepts": "--intercept"}
"""List settings whose items are rules (which may hold commas), with their flag: one rule per flag,
repeated (`--fault`), and split on `;` in a variable."""


PositiveInt = Annotated[int, Field(gt=0)]
NonNegativeInt = Annotated[int, Field(ge=0)]
Seconds = Annotated[float, Field(gt=0, allow_inf_nan=False)]
NonNegativeSeconds = Annotated[float, Field(ge=0, allow_inf_nan=False)]


class ConfigError(Exception):
    """A setting could not be loaded; the message names the setting and where its value came from."""

    def __init__(self, setting: str, message: str) -> None:
        super().__init__(message)
        self.setting = setting
        self.message = message


def flag_name(field: str) -> str:
    """The command-line flag that sets `field` (`upstream_timeout` -> `--upstream-timeout`)."""
    return RULE_LISTS.get(field) or "--" + field.replace("_", "-")


class Settings(BaseModel):
    """Every setting of the proxy, validated; built by `load_settings` from defaults, file, env and flags."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    upstream: str | None = None
    """URL of the MCP server endpoint the proxy forwards to (http or https, with a host), connected to
    directly whatever `HTTP_PROXY`, `HTTPS_PROXY` and `NO_PROXY` say (the OTLP exporter follows them):
    a Streamable HTTP endpoint (`/mcp`) or a 2024-11-05 HTTP+SSE one (`/sse`), told apart by the era
    probe."""
    upstream_cmd: str | None = None
    """Command line of a stdio MCP server the proxy starts and serves to HTTP clients, instead of an
    upstream URL (split like a shell would, no shell run): `npx -y @modelcontextprotocol/server-everything`.
    Each legacy client session gets a child process of its own (a stdio server has one session per
    process); 2026-07-28 clients, which have no session, share one. The child's stderr goes to the
    log (`stream=upstream-stderr`); a child that dies is started again at the next request."""
    upstream_transport: Literal["auto", "http", "sse"] = "auto"
    """How the upstream URL is spoken to: auto lets the era probe tell Streamable HTTP from the
    2024-11-05 HTTP+SSE transport; http or sse says which. With upstream_era set there is no probe,
    so an HTTP+SSE upstream then needs sse here."""
    max_upstream_children: PositiveInt = 32
    """Most upstream sessions that need a channel of their own at once: stdio child processes (one
    per legacy client session) or HTTP+SSE streams. Past it a new `initialize` is refused with HTTP
    503 naming this setting; a session ends when its client sends DELETE."""
    upstream_restarts_per_minute: PositiveInt = 5
    """How often a stdio server (or HTTP+SSE stream) that ends on its own is started again within a
    minute, each start waiting longer than the last; past it requests are refused with the reason
    and /readyz answers 503 until the minute has passed."""
    upstream_stop_grace: Seconds = 2.0
    """Seconds a stdio server gets to exit after SIGTERM before SIGKILL (its stdin is closed first)."""
    stdio_discover_timeout: Seconds = 5.0
    """Seconds the era probe waits for a stdio server's answer to `server/discover` before it takes
    the server for a handshake-era one that went silent (some older SDKs stop reading on a method
    they do not know, without answering): that child is stopped, a warning names
    `--upstream-era legacy`, and the probe goes on with a legacy `initialize` on a fresh child. Raise
    it for a server that is slow to start (npx fetching its package on a first run)."""
    listen: str = "127.0.0.1:8080"
    """HOST:PORT the proxy serves MCP clients on (IPv6 as [::1]:8080)."""
    log_format: Literal["auto", "console", "json"] = "auto"
    """Log rendering: console, json, or auto (console on a TTY, JSON otherwise)."""
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    """Lowest log level written: debug, info, warning or error."""
    log_file: Path | None = None
    """File the logs go to instead of stderr (with the TUI, they never go over it); SIGUSR1 reopens it."""
    capture: Path | None = None
    """JSONL file every flow event is recorded to, for `mcp-proxy tui --open` or export later."""
    capture_max_bytes: NonNegativeInt = 0
    """Rotate the capture file once it grows past this many bytes; 0 never rotates."""
    capture_keep: PositiveInt = 5
    """How many rotated capture files are kept before the oldest is deleted."""
    capture_body_limit: PositiveInt = 65536
    """Bytes of one message body kept in captures and the chain store before a truncation marker."""
    otlp_endpoint: str | None = None
    """OpenTelemetry collector (OTLP/HTTP) to send a trace of every chain to, such as
    http://collector:4318 (/v1/traces is joined to its path unless the path ends in it; a query stays
    the query). Unset, the standard OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT
    variable turns tracing on; headers and the rest come from the standard OTEL_EXPORTER_OTLP_*
    variables. Needs the otel extra (pip install -e '.[otel]' in the checkout)."""
    otlp_queue_size: PositiveInt = 2048
    """Finished spans waiting for the OTLP exporter before new ones are dropped (counted in /metrics),
    so a slow or unreachable collector never slows traffic."""
    max_body_bytes: PositiveInt = 8 * 1024 * 1024
    """Largest client request body accepted, in bytes; a larger one is answered HTTP 413 naming it."""
    max_body_bytes_in_flight: PositiveInt = 64 * 1024 * 1024
    """Request body bytes held at once across all clients, from a request's head (its declared length)
    until it is answered; a request whose body would pass it gets 503 with Retry-After naming it. Bodies
    under 64 KiB are not counted (the connection cap and max_pipelined_bytes bound those); a bridged
    body counts three times (a bridge holds it decoded and re-encoded too), unless it is alone.

    Each body in flight costs the proxy a few times its size (the bytes, the parsed message, what
    observers see), so this bounds the memory bodies take however many clients send at once: keep it
    near a quarter of the memory the proxy may use. A request whose declared length would pass it is
    refused before its body is read. At least max_body_bytes, so every body accepted can be served.
    """
    upstream_connect_timeout: Seconds = 5.0
    """Seconds to wait for a connection to the upstream before the request fails. A name with several
    addresses has them raced: each gets 0.25 s before the next is tried beside it (Happy Eyeballs), so
    an address that drops packets (a broken IPv6 route) does not spend this budget alone."""
    upstream_timeout: Seconds = 60.0
    """Seconds to wait for the upstream's response headers before answering the client 504."""
    upstream_body_idle_timeout: Seconds = 60.0
    """Seconds a response body that is not an SSE stream may go without a byte from the upstream.

    Past it the exchange ends: with a 504 carrying the client's JSON-RPC id when none of the body
    went out yet (`upstream_timeout`), else by closing the client's connection, so the client sees a
    cut body rather than waiting for the rest (`upstream_cut`). Time a slow client takes to read
    does not count. SSE streams are not bound by it: a stream is quiet while its server has nothing
    to say.
    """
    upstream_idle_timeout: Seconds = 4.0
    """Seconds an idle keep-alive connection to the upstream is kept before the proxy closes it.

    An upstream that announces its own limit (`Keep-Alive: timeout=N`) has its idle connections
    closed a little before N instead, when that is sooner. The default stays under the 5 s that
    uvicorn, behind most SDK servers, keeps an idle connection without announcing it; a request that
    meets a connection the upstream closed anyway, before any byte of its answer, is sent once more.
    """
    rewrite_oauth_origin: bool = True
    """Move URLs that name the upstream's origin (scheme, host, port) onto the proxy's, as the client
    addressed it, in what an OAuth client discovers through the proxy: the `resource_metadata` of a
    `WWW-Authenticate` challenge, and in the JSON of `/.well-known/oauth-protected-resource`,
    `/.well-known/oauth-authorization-server`, `/.well-known/openid-configuration` and the path a
    moved challenge named as its `resource_metadata` the `resource`,
    `issuer`, `authorization_servers` and every endpoint URL; and move the RFC 8707 `resource` a client
    sends (the authorization request's query, the token request's form) back to the upstream's URL.
    A server that advertises its own URL then works through the proxy as it does directly; URLs on any
    other origin stay as they are. Each rewrite is logged (`origin_rewritten`), captured and noted on
    its chain. Off, these go to the client as the server sent them."""
    # -- secrets, capture completeness and admin access ------------------------------------------
    redact_headers: list[str] = Field(default_factory=list)
    """More header names (compared by their words, in any case or spelling: `x_tenant` masks
    `X-Tenant` and `xTenant`) to mask in logs, captures, the admin feed and exports.

    They add to the built-in names (authorization, proxy-authorization, cookie, set-cookie, x-api-key,
    api-key, x-auth-token, mcp-session-id, and the query parameters code, state and sig), which only
    `unredact_headers` can drop; each source (file, variable, flag) adds to the others.
    """
    redact_header_patterns: list[str] = Field(default_factory=list)
    """More substrings: a header or query parameter whose name contains one (any case) is masked.

    They add to the built-in patterns (auth, token, secret, key, credential, session, password,
    passwd, cookie, pass, pwd, jwt, bearer, dpop, signature), which only `unredact_headers` can drop.
    A server's challenge (`WWW-Authenticate`) carries no credential and stays readable.
    """
    redact_body_keys: list[str] = Field(default_factory=list)
    """JSON keys whose values are masked wherever they occur in a message body, such as a tool
    argument `api_token`: in logs, captures, the admin feed and exports; the message itself goes to
    its peer unchanged. A key matches by its words in any case or spelling (`api_key` masks `apiKey`,
    `API-Key` and `old_api_key`, not `api_keys`). `requestState` is always masked. Like the two lists
    above, each source (file, variable, flag) adds to the others."""
    unredact_headers: list[str] = Field(default_factory=list)
    """Built-in redaction names or patterns to drop (say mcp-session-id and session, to read session
    ids in clear); each must be a built-in entry, and the proxy warns at start-up, whatever
    `log_level`, that those values now reach logs, captures, the feed and exports in clear."""
    redact_key: SecretStr | None = None
    """Key of the HMAC behind every mask and principal fingerprint; random per process when unset.

    Set it (a long random string, shared by replicas) to compare masks across restarts and sidecars;
    without the key nobody can confirm a guessed secret against a mask.
    """
    max_unfinished_chains: NonNegativeInt = 10000
    """Chains still open that the store keeps after the ring (max_chains) let them go, so a long
    call's later messages still join its chain in the admin API and the TUI; past it the oldest is
    let go and counted. The capture records every observation whatever this is."""
    max_chains: PositiveInt = 2000
    """How many chains the in-memory ring buffer keeps; the oldest is dropped first."""
    max_messages_per_chain: PositiveInt = 500
    """How many messages one chain keeps before further ones are counted but not stored."""
    max_chain_store_bytes: PositiveInt = 64 * 1024 * 1024
    """Memory the chain store's messages may take, estimated as the Python objects their bodies
    decode to (64 KiB of JSON can be over a megabyte of them); past it the oldest chains go first, as
    past max_chains, and a chain alone past it keeps its newest messages. The observations waiting
    to be built into chains (the admin API on, nobody looking yet) are bounded at half of it."""
    unwatched_history_rate: NonNegativeInt = 100
    """Calls a second (averaged over ten seconds) that succeed plainly which the chains keep while
    nobody watches them live (the admin API on, no TUI attached); past it such a call is left out of
    the chains, where a `(dropped)` chain stands for each run of them, and counted everywhere else as
    always (metrics, log lines, a capture). Calls that fail, are refused or cut, ask the client a
    question or for input, or stream more than a few dozen messages are always kept. 0 leaves none
    out.

    Keeping every call's observations until someone reads them costs a large share of a small call's
    CPU under load (each new call's objects land in memory no cache holds), for a history that covers
    less than a second there. A watcher (`tui --attach`, the admin feed) sees every call whatever this
    is."""
    bus_queue_size: PositiveInt = 10000
    """Bound of each event-bus subscriber's queue; a slow subscriber lags, traffic never waits."""
    bridge: Literal["auto", "off"] = "auto"
    """auto converts between protocol eras when client and upstream differ; off always passes through."""
    upstream_era: Literal["auto", "legacy", "modern"] = "auto"
    """Protocol era of the upstream: auto probes it, legacy or modern skips the probe."""
    max_rounds: PositiveInt = 10
    """MRTR rounds allowed for one call before the bridge gives up with an error."""
    state_key: SecretStr | None = None
    """Key that seals requestState tokens; random per process if unset (set it to share between restarts)."""
    continuation_ttl: Seconds = 300.0
    """Seconds a parked upstream call waits for the client's retry before it is cancelled; a
    pass-through call answered `input_required` is shown waiting that long, then ends `incomplete` (within
    about a second, with or without traffic); a SIGTERM drain waits for either's retry that long at most."""
    round_window: NonNegativeSeconds = 0.001
    """Seconds the MRTR-client bridge waits for more in-flight requests before answering one round.

    A server's concurrent requests leave it as separate writes, a few hundred microseconds apart on
    loopback; the default millisecond holds them in one round, as the server sent them together.
    A round closes when its timer fires or when the call ends, and holds every request that reached
    the proxy before then; 0 holds the requests that had already reached it when the round opened (a
    later one comes as a round of its own). Raise it for a server whose concurrent requests are
    spread out further; every bridged round waits that long.
    """
    max_continuations: PositiveInt = 1000
    """Most parked upstream calls held at once; beyond it new ones are refused."""
    max_continuations_per_principal: PositiveInt = 100
    """Most parked upstream calls held at once for one principal (client identity)."""
    max_upstream_sessions: PositiveInt = 400
    """Most legacy sessions the MRTR-client bridge holds with the upstream (one per principal and
    declared capability set; see `anonymous_upstream_sessions` for callers without credentials). When
    full, the least recently used idle one is closed to make room; a request that finds every session
    busy is refused with an error naming this setting.
    """
    upstream_session_ttl: Seconds = 300.0
    """Seconds an upstream session of the MRTR-client bridge may stay unused before it is closed.

    It is checked once per this many seconds, so an unused session is closed (DELETE upstream)
    between one and two of these periods after its last use.
    """
    anonymous_upstream_sessions: Literal["shared", "per_connection"] = "shared"
    """Upstream sessions of the MRTR-client bridge for 2026-07-28 callers without `Authorization`.

    shared: every such caller shares one legacy session per declared capability set, so a client keeps
    what a server holds per session (a toggle, a page a browser tool opened) from one call to the
    next, whatever connections its SDK spreads them over; but anonymous clients then share all of that
    state (one's roots, log level or subscriptions are the others'), and a warning says so the first
    time two open client connections use one such session. per_connection: each client connection
    gets sessions of its own, closed (DELETE upstream) once it closed and nothing uses them; use it
    for a proxy serving several anonymous clients (or have them send `Authorization`). Each new
    connection then costs an upstream handshake and a DELETE, and takes one of
    `max_upstream_sessions` while open.
    """
    # -- what goes upstream, and the engines' bounds ------------------------------------------------
    max_method_length: Annotated[int, Field(gt=0, le=4096)] = 256
    """Longest JSON-RPC method accepted, in characters; a method must also be visible ASCII (no spaces
    or control characters). Past it, or outside that set, the request is refused with -32600 (HTTP 400)
    in every mode, since the 2026-07-28 `Mcp-Method` header carries the method as it is."""
    max_batch_messages: PositiveInt = 256
    """Most messages in one JSON-RPC batch (2025-03-26); a longer batch is refused with -32600 (HTTP 400)
    before it is parsed, so a huge batch never holds up other clients."""
    max_json_depth: Annotated[int, Field(gt=0, le=DEPTH_CEILING)] = 64
    """Deepest JSON nesting accepted in a request body (at most 250, the deepest the proxy can
    re-encode); deeper JSON is refused with -32600 (HTTP 400) carrying the request's id."""
    max_bridged_message_bytes: PositiveInt = 32 * 1024 * 1024
    """Largest upstream message a bridge holds to re-encode it for the client (a JSON body, or one SSE
    event); past it the leg fails and the client gets a JSON-RPC error naming this setting. What all
    bridged calls hold at once is bounded by max_response_bytes_in_flight. Pass-through streams and
    holds nothing whole (what it reads for the chains is bounded by max_inspected_bytes)."""
    max_inspected_bytes: PositiveInt = 16 * 1024 * 1024
    """Largest response body (a JSON answer) or single SSE event the proxy reads to show its messages
    in pass-through. A larger one is still relayed whole, byte for byte; it is recorded as not
    inspected, naming this setting (a chain note, `not_inspected` on the log line, a
    `body_not_inspected` capture line), and a call it may have answered ends `incomplete`, not failed.
    After an SSE event over it the rest of that stream goes unread. What all responses in flight keep
    to read is bounded by max_response_bytes_in_flight."""
    max_response_bytes_in_flight: PositiveInt = 64 * 1024 * 1024
    """Upstream response bytes the proxy holds at once across all clients: what pass-through keeps to
    read a body or SSE event for the chains (up to max_inspected_bytes each) and the messages bridges
    hold whole to re-encode (up to max_bridged_message_bytes each). Past it, pass-through relays the
    rest of a response whole but unread (recorded as not inspected, naming this setting), and a bridge
    refuses the message with a JSON-RPC error naming it (a retry may find room). Holdings under 64 KiB
    are not counted.

    Each byte held costs the proxy a few times its size (the bytes, the parsed message, its
    re-encoding), so keep it near a quarter of the memory the proxy may use; /metrics shows the bytes
    held now (mcp_proxy_response_bytes_in_flight). At least max_bridged_message_bytes, so every
    message a bridge accepts can be carried.
    """
    upstream_max_head_bytes: PositiveInt = 64 * 1024
    """Largest upstream response head (status line and headers) accepted, in bytes; past it the
    client gets HTTP 502 naming this setting and the connection to the upstream is closed."""
    max_legacy_sessions: PositiveInt = 10000
    """Most sessions the legacy-client bridge mints and holds at once; when full, the one unused the
    longest (with no call in flight) is forgotten and its client gets HTTP 404 on its next request,
    which tells a legacy client to initialize again."""
    max_legacy_sessions_per_client: PositiveInt = 1000
    """Most sessions the legacy-client bridge holds for one client address; past it that address's own
    least recently used idle session makes room (503 naming this setting when all are busy), so one
    client opening sessions without end cannot push everyone else's out of `max_legacy_sessions`."""
    legacy_session_idle_timeout: Seconds = 3600.0
    """Seconds a session minted by the legacy-client bridge may go unused before it is forgotten
    (checked once per this many seconds, so between one and two of them); its client then gets
    HTTP 404 and initializes again, as the spec tells it to."""
    max_continuations_per_client: PositiveInt = 100
    """Most parked upstream calls held at once for one client address, whatever `Authorization` its
    requests carry (a client cannot claim more by inventing principals); past it new ones are refused
    with an error naming this setting. Each parked call of a new principal keeps an upstream session
    busy, so this stays well below `max_upstream_sessions`: one address cannot take them all. Clients
    behind one load balancer or NAT share an address, and so this bound: a sidecar behind an ingress
    or a mesh sees every client at one address, so set it to `max_continuations` there and let
    `max_continuations_per_principal` keep clients apart."""
    admin: str = "127.0.0.1:9901"
    """HOST:PORT of the admin API (health, readiness, metrics, chains, live feed).

    Left unset (no flag, variable or file key) and its port taken, say by another proxy on this host,
    the admin API takes a free port on the same host and logs where it listens. An address that was
    set, even to this default, must be free, or the proxy exits naming it.
    """
    admin_enabled: bool = True
    """Whether the admin API is served at all."""
    admin_token: SecretStr | None = None
    """Bearer token the admin API requires; without one the admin API may listen on loopback only.

    White space around it (the newline a file read with `$(cat ...)` or a secret mount keeps) is not
    part of it."""
    health: str | None = None
    """HOST:PORT of a listener serving only /healthz and /readyz, never asking for a token (probes).

    It answers whether the admin API is on or off, so Docker's HEALTHCHECK and Kubernetes probes keep
    working either way. Both paths reveal status only, never the upstream's credentials, so it may
    listen beyond loopback. Unset: no such listener (the admin API still answers both paths).
    """
    head_read_timeout: Seconds = 10.0
    """Seconds a client has to send a whole request head, from its first byte (or from connecting).

    Past it the client gets 408 and the connection closes, so half-sent heads cannot hold sockets.
    On a connection serving the bridges, an unfinished head is closed after keepalive_timeout instead.
    """
    body_read_timeout: Seconds = 30.0
    """Seconds a client has to send a whole request body once its head has ended; past it, 408 and close."""
    keepalive_timeout: Seconds = 30.0
    """Seconds an idle client connection stays open between requests before the proxy closes it."""
    max_client_connections: PositiveInt = 4096
    """Most MCP client connections open at once; past it a new one gets 503 with Retry-After and is closed.

    The admin API and the health listener are separate listeners and stay reachable. At start the
    proxy raises its open-file limit to fit (two descriptors a connection, client and upstream) where
    the hard limit allows, and warns naming this setting where it does not.
    """
    max_streams_per_client: PositiveInt | None = None
    """Most long-lived streams one client address holds open at once on the MCP listener: GET streams
    (a Streamable HTTP session's, passed through or bridged, and HTTP+SSE streams) and 2026-07-28
    `subscriptions/listen` streams. Each holds a client connection for as long as the client keeps it,
    with no deadline; past this bound a new one gets 429 naming this setting, so one client cannot
    hold every connection. Unset: a quarter of max_client_connections. Clients behind one NAT, load
    balancer or mesh share an address, and so this bound."""
    max_pipelined_bytes: PositiveInt = 1024 * 1024
    """Bytes of complete requests a client connection may queue behind the one being served.

    Past it the proxy stops reading from that client until the queue empties (nothing is refused).
    """
    # -- HTTP+SSE clients (2024-11-05) ---------------------------------------------------------------
    sse_path: str | None = None
    """Where HTTP+SSE (2024-11-05) clients open their stream (`GET`); the stream's first event names
    the proxy's own `sse_messages_path` to POST to. Unset: `sse` beside the upstream's MCP endpoint
    (`/mcp` -> `/sse`, `/api/mcp` -> `/api/sse`). `off` serves no HTTP+SSE clients. A GET there that
    names a session (`Mcp-Session-Id`) is a Streamable HTTP client's and goes upstream as usual.
    """
    sse_messages_path: str | None = None
    """Where HTTP+SSE clients POST their messages (`?sessionId=...`). Unset: `messages` beside the
    upstream's MCP endpoint (`/mcp` -> `/messages`)."""
    max_sse_sessions: PositiveInt = 1000
    """Most HTTP+SSE client streams open at once; past it a new one gets 503 naming this setting."""
    max_sse_sessions_per_client: PositiveInt | None = None
    """Most HTTP+SSE client streams one client address holds open at once; past it a new one from that
    address gets 429 naming this setting, so one client cannot take every one of max_sse_sessions.
    Unset: a quarter of max_sse_sessions."""
    sse_queue_bytes: PositiveInt = 8 * 1024 * 1024
    """Bytes of messages waiting on one HTTP+SSE client's stream; a client reading more slowly than its
    messages come is cut off past it (logged, naming this setting), never slowing anyone else."""
    drain_grace: NonNegativeSeconds = 10.0
    """Seconds a SIGTERM drain gives the conversations under way before the proxy exits. Meanwhile the
    listener stays open for their next steps (answers, a legacy session's requests, MRTR retries) and
    new work gets 503 with Retry-After; the drain ends sooner once nothing is in flight or connected
    and no call answered `input_required` (parked in a bridge, or in pass-through) waits for its retry.
    Also how long `mcp-proxy stdio` waits, once stdin has ended, for the answers to what the client sent."""
    tui: bool = False
    """Show the live TUI in this terminal (logs then go to log_file)."""
    # -- fault injection (staging) -------------------------------------------------------------------
    faults: list[str] = Field(default_factory=list)
    """Fault rules for staging, each `MATCH => ACTION [p=P] [count=N]` (docs/faults.md), such as
    `method:tools/call tool:slow_* => delay=200ms p=0.5`. Off (none) by default. As a flag, one rule
    per `--fault`; in MCP_PROXY_FAULTS, rules separated by `;`. Every fault injected is marked in
    its chain, the log line and /metrics. Bridged exchanges take delay, error and drop on
    the client's messages only.
    """
    fault_seed: int | None = None
    """Seed of the draws behind rules with p below 1: the same seed and traffic inject the same
    faults. Unset, a fresh seed each run."""
    # -- intercept (hold, edit, drop, answer) --------------------------------------------------------
    intercepts: list[str] = Field(default_factory=list)
    """Intercept rules, each `MATCH [timeout=30s]` (docs/intercept.md), such as
    `method:tools/call tool:delete_*`: every message a rule picks is held until someone forwards,
    edits, drops or answers it (admin API `/api/intercepts`, or the TUI), or its timeout passes. None
    by default. As a flag, one rule per `--intercept`; in MCP_PROXY_INTERCEPTS, rules separated by `;`.
    """
    intercept_timeout: Annotated[float, Field(gt=0, le=MAX_TIMEOUT_S, allow_inf_nan=False)] = 60.0
    """Seconds a held message waits for a decision when its rule names no timeout; then it goes on
    unchanged, so a forgotten breakpoint never wedges the traffic (at most 3600)."""
    intercept_max_held: PositiveInt = 100
    """Most messages held at once; past it a picked message goes on unchanged, recorded as not held."""

    @field_validator("upstream")
    @classmethod
    def _upstream_is_http_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        parts = http_url_parts(value, "an http(s) URL")
        if "@" in parts.netloc:
            # Refused rather than sent: the proxy relays each client's own Authorization, and silently
            # adding or dropping credentials would change who the upstream thinks is calling.
            shown = masked_url(value.replace(parts.netloc, parts.netloc.rpartition("@")[2], 1))
            raise ValueError(
                f"the URL carries credentials (user:password@) that the proxy would not send: "
                f"{shown!r}; remove them and let clients send their own Authorization"
            )
        return value

    @field_validator("sse_path", "sse_messages_path")
    @classmethod
    def _sse_path(cls, value: str | None) -> str | None:
        if value is None or value == "off":
            return value
        if not value.startswith("/") or any(c in value for c in "?# ") or not value.isascii():
            raise ValueError(f"expected a path starting with / (no query), or off; got {value!r}")
        return value

    @field_validator("upstream_cmd")
    @classmethod
    def _command_words(cls, value: str | None) -> str | None:
        if value is None:
            return None
        try:
            words = shlex.split(value)
        except ValueError as exc:
            raise ValueError(f"cannot split the command line: {exc}") from None
        if not words:
            raise ValueError("is empty: name the stdio MCP server's command")
        return value

    @field_validator("otlp_endpoint")
    @classmethod
    def _otlp_is_http_url(cls, value: str | None) -> str | None:
        return None if value is None else otlp_url(value)

    @field_validator("listen", "admin", "health")
    @classmethod
    def _is_host_port(cls, value: str | None) -> str | None:
        if value is not None:
            parse_host_port(value)
        return value

    @field_validator("log_format", "log_level", "bridge", "upstream_era", mode="before")
    @classmethod
    def _lowercase(cls, value: object) -> object:
        return value.lower() if isinstance(value, str) else value

    @field_validator("redact_headers", "redact_header_patterns", "unredact_headers")
    @classmethod
    def _header_names(cls, value: list[str]) -> list[str]:
        names = [name.strip().lower() for name in value]
        if "" in names:
            raise ValueError("an empty entry would match every header")
        for name in names:
            if not HEADER_TOKEN.fullmatch(name):
                raise ValueError(
                    f"{name!r} is not a header name (letters, digits and !#$%&'*+-.^_`|~ only): no "
                    "header would match it; in a variable, list names with commas (x-a,x-b) or as a "
                    'JSON array (["x-a", "x-b"])'
                )
        return names

    @field_validator("redact_body_keys")
    @classmethod
    def _body_keys(cls, value: list[str]) -> list[str]:
        keys = [key.strip() for key in value]
        if "" in keys:
            raise ValueError("an empty key names nothing to mask; give a key such as api_token")
        for key in keys:
            if not key_words(key):
                raise ValueError(
                    f"{key!r} has no letter or digit, so no key would match it; give one such as api_token"
                )
        return keys

    @field_validator("faults")
    @classmethod
    def _fault_rules(cls, value: list[str]) -> list[str]:
        if any(not rule.strip() for rule in value):  # an empty --fault '' is a slip, not "no rule"
            raise ValueError(
                "a fault rule is empty; write a rule such as 'tool:search => delay=500ms', or give no rule"
            )
        rules = [rule.strip() for rule in value]
        if len(rules) > MAX_RULES:
            raise ValueError(f"at most {MAX_RULES} fault rules, got {len(rules)}")
        for rule in rules:
            try:
                parse_rule(rule)
            except ValueError as exc:
                raise ValueError(f"fault rule {rule!r}: {exc}") from None
        return rules

    @field_validator("intercepts")
    @classmethod
    def _intercept_rules(cls, value: list[str]) -> list[str]:
        if any(not rule.strip() for rule in value):  # an empty --intercept '' is a slip, not "no rule"
            raise ValueError(
                "an intercept rule is empty; write a match such as 'tool:delete_*' (or * for every "
                "message), or give no rule"
            )
        rules = [rule.strip() for rule in value]
        if len(rules) > MAX_RULES:
            raise ValueError(f"at most {MAX_RULES} intercept rules, got {len(rules)}")
        for rule in rules:
            try:
                parse_intercept(rule)
            except ValueError as exc:
                raise ValueError(f"intercept rule {rule!r}: {exc}") from None
        return rules

    @field_validator("log_file", "capture")
    @classmethod
    def _expand_user(cls, value: Path | None) -> Path | None:
        return None if value is None else value.expanduser()

    @field_validator("unredact_headers")
    @classmethod
    def _built_in_entries(cls, value: list[str]) -> list[str]:
        built_in = set(DEFAULT_HEADER_NAMES) | set(DEFAULT_HEADER_PATTERNS)
        unknown = [name for name in value if name not in built_in]
        if unknown:
            raise ValueError(
                f"{', '.join(unknown)} is not a built-in redaction entry; the built-in ones are "
                + ", ".join(sorted(built_in))
            )
        return value

    @field_validator("admin_token", "redact_key", "state_key")
    @classmethod
    def _not_empty(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and not value.get_secret_value().strip():
            # An unset variable in a script (`--admin-token "$TOKEN"`) must not become "no token".
            raise ValueError(
                "is empty: an empty secret protects nothing; set a long random string, or leave the "
                "setting out entirely"
            )
        return value

    @field_validator("admin_token")
    @classmethod
    def _token_as_sent(cls, value: SecretStr | None) -> SecretStr | None:
        """The token without the newline `echo tok > file` leaves (a header cannot carry one, so a
        token kept with it could never be matched)."""
        if value is None:
            return None
        token = value.get_secret_value()
        return value if token == token.strip() else SecretStr(token.strip())

    @model_validator(mode="after")
    def _one_upstream(self) -> Self:
        if self.upstream and self.upstream_cmd:
            raise PydanticCustomError(
                "two_upstreams",
                "upstream and upstream_cmd are both set: the proxy serves one upstream, a URL "
                "(--upstream) or a stdio command (--upstream-cmd); drop one",
                {"setting": "upstream_cmd"},
            )
        if self.upstream_cmd and self.upstream_transport != "auto":
            raise PydanticCustomError(
                "transport_of_a_command",
                "upstream_transport names how an upstream URL is spoken to; a stdio command "
                "(--upstream-cmd) is always spoken to over stdio: drop upstream_transport",
                {"setting": "upstream_transport"},
            )
        return self

    @model_validator(mode="after")
    def _bodies_in_flight_fit_one_body(self) -> Self:
        if self.max_body_bytes_in_flight < self.max_body_bytes:
            raise PydanticCustomError(
                "in_flight_below_one_body",
                "max_body_bytes_in_flight ({in_flight}) is below max_body_bytes ({one}): a body the "
                "proxy accepts could never be served; raise it, or lower max_body_bytes",
                {
                    "setting": "max_body_bytes_in_flight",
                    "in_flight": self.max_body_bytes_in_flight,
                    "one": self.max_body_bytes,
                },
            )
        return self

    @model_validator(mode="after")
    def _responses_in_flight_fit_one_message(self) -> Self:
        if self.max_response_bytes_in_flight < self.max_bridged_message_bytes:
            raise PydanticCustomError(
                "in_flight_below_one_message",
                "max_response_bytes_in_flight ({in_flight}) is below max_bridged_message_bytes ({one}): "
                "a message a bridge accepts could never be carried; raise it, or lower "
                "max_bridged_message_bytes",
                {
                    "setting": "max_response_bytes_in_flight",
                    "in_flight": self.max_response_bytes_in_flight,
                    "one": self.max_bridged_message_bytes,
                },
            )
        return self

    @model_validator(mode="after")
    def _admin_beyond_loopback_needs_token(self) -> Self:
        if self.admin_enabled and self.admin_token is None:
            host, _ = parse_host_port(self.admin)
            if not is_loopback(host):
                raise PydanticCustomError(
                    "admin_exposed",
                    "the admin API listens beyond loopback ({host}) only with a token: set --admin-token "
                    "or MCP_PROXY_ADMIN_TOKEN (or listen on 127.0.0.1, or turn it off: --no-admin-enabled, "
                    "MCP_PROXY_ADMIN_ENABLED=false)",
                    {"setting": "admin", "host": host},
                )
        return self

    @property
    def streams_per_client(self) -> int:
        """`max_streams_per_client` in force: as set, else a quarter of `max_client_connections`."""
        return self.max_streams_per_client or _quarter(self.max_client_connections)

    @property
    def sse_sessions_per_client(self) -> int:
        """`max_sse_sessions_per_client` in force: as set, else a quarter of `max_sse_sessions`."""
        return self.max_sse_sessions_per_client or _quarter(self.max_sse_sessions)


def _quarter(whole: int) -> int:
    """The share of a global bound one client address gets by default: enough for one IDE with many
    sessions, while three quarters stay for everyone else."""
    return max(1, whole // 4)
