"""Replaying recorded chains against a live server through an in-process proxy, and comparing them.

The replay never speaks the server's era itself. It starts a `proxy.runtime.Proxy` whose upstream is
the target (the proxy probes the server's era as it always does, then is told the era the recording
spoke to the server where that differs, `proxy.replay.era`) and plays each recorded chain to it over
loopback in the era of the client that recorded it (`proxy.replay.player`). A legacy capture
replayed against a 2026-07-28 server goes through the proxy's own legacy->MRTR bridge, and a
2026-07-28 capture against a legacy server through the other one, so the client's side of the new
chain is comparable with the recording's whatever era the server speaks. The proxy's observations
build the new chain (its bus, subscribed to, builds chains as they happen); the comparison is
`proxy.record.replay_compare`.

Chains are replayed one at a time, in recorded order, so each new chain is the proxy's next one.
A legacy chain runs in a session of its own replay: the recorded session's `initialize` (and
`notifications/initialized`) is played first (once), the new session id replaces the recorded one,
and the recorded `DELETE` ends it; sessions still open at the end are ended too.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import aiohttp

from proxy.config import Settings
from proxy.flows.events import ChainOpened, ChainStatus, MessageRecord, ProxyInfo
from proxy.flows.proxy_notes import proxy_changes
from proxy.flows.redact import MIN_ECHOED_SECRET
from proxy.flows.store import Chain
from proxy.record.export import JSON_MESSAGES
from proxy.record.replay_compare import Difference, IgnoreRules, compare_chains, cut_messages
from proxy.record.replay_outcome import ChainOutcome
from proxy.record.replay_plan import ChainPlan, PlanKind
from proxy.replay.era import EraChoice, EraSetting, EraUnspoken, RecordedEra, recorded_era, users_era
from proxy.replay.http import ReplayHttp, ReplayHttpError
from proxy.replay.player import AskUser, Played, Player, Refused, ReplayFailed
from proxy.runtime import Proxy

CHAIN_TIMEOUT: Final = 30.0
"""Default seconds one chain's replay may take, questions and answers included."""

SETTLE: Final = 5.0
"""Seconds the new chain is given to end after its last response was read (its exchange to close)."""

MAX_SESSIONS: Final = 1024
"""Recorded sessions whose handshake is kept, to open them for a chain replayed on its own."""


class Unreachable(Exception):
    """The target server could not be reached at all: nothing can be replayed."""


@dataclass(frozen=True)
class ReplayOptions:
    """What the user chose for a replay."""

    ignore: IgnoreRules = field(default_factory=IgnoreRules)
    headers: Mapping[str, str] = field(default_factory=dict)
    ask: AskUser | None = None
    timeout: float = CHAIN_TIMEOUT
    keep_records: bool = False
    upstream_era: EraSetting | None = None
    """The era to speak to the server in, as the user chose it (None: a non-auto `upstream_era`
    setting, else the recording's, `recorded`)."""
    recorded: RecordedEra = field(default_factory=RecordedEra)
    """The upstream era the capture was recorded with (its `proxy_info`)."""
    settings: Settings | None = None
    """The user's proxy settings (`--config`, `MCP_PROXY_*`): the replay's proxy redacts, bounds and
    bridges as they say, so a difference never shows in clear what a recording showed redacted."""
    upstream_cmd: str | None = None
    """A stdio server's command line to replay against (the replay's proxy starts it), instead of
    the upstream URL."""


def replay_settings(upstream: str, options: ReplayOptions, era: EraSetting | None = None) -> Settings:
    """The replay's own proxy: the user's settings, on a free loopback port, recording nothing,
    injecting no fault, exporting no span, serving no admin API; `era` replaces the user's era.

    A chain keeps as many messages as the capture's reader keeps of the recorded one, so the two are
    compared whole: the user's bound (`max_messages_per_chain`) keeps a chain's newest messages, and
    a long call (hundreds of progress notifications) would lose its request and first answers on the
    replay's side only."""
    base = options.settings or Settings()
    return base.model_copy(
        update={
            "upstream": None if options.upstream_cmd else upstream,
            "upstream_cmd": options.upstream_cmd,
            "upstream_era": era or options.upstream_era or base.upstream_era,
            "upstream_timeout": options.timeout,
            "listen": "127.0.0.1:0",
            "admin_enabled": False,
            "health": None,
            "capture": None,
            "otlp_endpoint": None,
            "faults": [],
            "tui": False,
            "max_chains": 256,
            "max_messages_per_chain": JSON_MESSAGES,
        }
    )


def given_texts(headers: Mapping[str, str]) -> tuple[str, ...]:
    """Every value the user gave with `--header`: the replay's proxy masks them wherever they appear,
    whatever the header's name, so a server echoing one (a cookie the live proxy would not remember)
    never puts it in the report. A value made of credentials (`Bearer X`, `a=X; b=Y`) is masked by
    each of them, so an echo of one alone is masked too and the scheme or cookie names stay readable;
    one with a piece too short to be told from a word is masked whole as well."""
    texts: list[str] = []
    for value in headers.values():
        pieces = _credentials_in(value.strip())
        kept = [piece for piece in pieces if len(piece) >= MIN_ECHOED_SECRET]
        texts += kept if pieces and kept == pieces else [value.strip(), *kept]
    return tuple(texts)


def _credentials_in(value: str) -> list[str]:
    """The credentials a header value is made of: the one after an auth scheme (`Bearer X`), or each
    cookie's value (`a=X; b=Y`); empty when it is neither."""
    words = value.split()
    if len(words) == 2 and "=" not in words[0]:
        return [words[1]]
    pairs = [pair.partition("=") for pair in value.split(";")]
    if all(eq and piece.strip() for _name, eq, piece in pairs):
        return [piece.strip() for _name, _eq, piece in pairs]
    return []


class Replay:
    """An in-process proxy in front of the target server, and the sessions the replay opened there."""

    def __init__(self, upstream: str, options: ReplayOptions | None = None) -> None:
        self.options = options or ReplayOptions()
        self.upstream = upstream
        self.proxy = self._proxy(replay_settings(upstream, self.options))
        self._feed = self.proxy.bus.subscribe("replay")
        base = self.options.settings or Settings()
        chosen = users_era(self.options.upstream_era, base.upstream_era)
        self.era: EraChoice = chosen or EraChoice("auto", "")
        """The era the proxy speaks to the server in, and why (the recording's, once started)."""
        self.era_chosen = chosen is not None
        """The user chose the era (`--upstream-era`, the setting); else the recording does."""
        self._opened: dict[str, tuple[str | None, Any]] = {}
        """Chains the proxy opened while a chain is replayed -> the method and id of the message that
        opened each, as the proxy announced it: a long chain lets its oldest messages go (the store's
        bounds), that request among them, and is still the request's chain."""
        self._http: aiohttp.ClientSession | None = None
        self.player: Player | None = None
        self.handshakes: OrderedDict[str, ChainPlan] = OrderedDict()
        """Recorded session -> its handshake, to open it when a chain of it is replayed alone."""
        self.sessions: dict[str, str] = {}
        """Recorded session -> the session its replay opened."""

    async def start(self) -> None:
        """Start the proxy (it probes the target), in the recording's era unless the user chose one,
        and the client; raises Unreachable or EraUnspoken when nothing can be replayed."""
        await self.proxy.start()
        if self.proxy.router.reachable is False:
            problem = self.proxy.router.problem
            await self.stop()
            raise Unreachable(f"{self.proxy.upstream.shown}: {problem}")
        if not self.era_chosen:
            try:
                self.era = recorded_era(self.options.recorded, self.proxy.router.eras.label)
            except EraUnspoken:
                await self.stop()
                raise
            if self.era.setting != "auto":
                await self._restart_forced(self.era.setting)
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=self.options.timeout)
        self._http = aiohttp.ClientSession(timeout=timeout, auto_decompress=False)
        self.player = Player(
            ReplayHttp(self._http, self.proxy.endpoint(), self._mask),
            self.options.headers,
            self.options.ask,
            stdio=self.options.upstream_cmd is not None,
        )

    def _proxy(self, settings: Settings) -> Proxy:
        """The replay's proxy: it masks the `--header` values wherever they appear, and its era probe
        carries them as every replayed request does, so a server that wants a token is probed with it."""
        headers = self.options.headers
        return Proxy(settings, secret_texts=given_texts(headers), probe_headers=tuple(headers.items()))

    def _mask(self, text: str) -> str:
        """A text the server said, masked by the replay's proxy's redactor: it saw the credentials the
        replay sent (and was given those of `--header`), so a server echoing one shows it masked."""
        return self.proxy.redactor.scrub(text)

    async def _restart_forced(self, era: EraSetting) -> None:
        """Start the proxy again with its era forced (no request has gone through it yet): the router
        picks its engines from the era it is told, keeping the transport the probe found."""
        settings = replay_settings(self.upstream, self.options, era)
        if self.proxy.router.transport == "sse" and settings.upstream_transport == "auto":
            settings = settings.model_copy(update={"upstream_transport": "sse"})
        self._feed.close()
        await self.proxy.stop()
        self.proxy = self._proxy(settings)
        self._feed = self.proxy.bus.subscribe("replay")
        await self.proxy.start()

    async def stop(self) -> None:
        """End the sessions still open, then stop the client and the proxy."""
        if self.player is not None:
            for recorded, session in list(self.sessions.items()):
                handshake = self.handshakes.get(recorded)
                if handshake is not None and handshake.first is not None:
                    with contextlib.suppress(ReplayHttpError, ReplayFailed, TimeoutError):
                        async with asyncio.timeout(self.options.timeout):
                            await self.player.end_session(handshake.first, session)
            self.sessions.clear()
        if self._http is not None:
            await self._http.close()
            self._http = None
        self._feed.close()
        await self.proxy.stop()

    async def __aenter__(self) -> Replay:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def run(
        self, plans: Iterable[ChainPlan], wanted: Callable[[str], bool] = lambda _: True
    ) -> AsyncIterator[ChainOutcome]:
        """Replay each wanted chain in order, yielding how each went."""
        for plan in plans:
            if wanted(plan.chain):
                yield await self.replay(plan)
            else:
                self.keep_handshake(plan)

    def keep_handshake(self, plan: ChainPlan) -> None:
        """Remember a legacy session's handshake, to open that session for a chain of it replayed alone."""
        if plan.kind is not PlanKind.HANDSHAKE or plan.session is None:
            return
        self.handshakes[plan.session] = plan
        self.handshakes.move_to_end(plan.session)
        while len(self.handshakes) > MAX_SESSIONS:
            self.handshakes.popitem(last=False)

    async def replay(self, plan: ChainPlan) -> ChainOutcome:
        """Replay one chain and compare it with its recording."""
        self.keep_handshake(plan)
        outcome = ChainOutcome(plan.chain, plan.headline(), "skipped", setup=plan.kind is PlanKind.HANDSHAKE)
        outcome.proxy_changes = proxy_changes(plan.summary.notes)
        if self.options.keep_records:
            outcome.recorded = list(plan.records)
        if plan.kind is PlanKind.STREAM:
            outcome.reason = "a standalone GET stream carries what the server chooses to send: not replayed"
            return outcome
        if plan.kind is PlanKind.HTTP:
            outcome.reason = "a plain HTTP request beside the MCP endpoint (an OAuth step, say): not replayed"
            return outcome
        if plan.kind is PlanKind.OTHER:
            outcome.reason = plan.problem
            return outcome
        if plan.unrecorded is not None:
            outcome.reason = plan.unrecorded
            return outcome
        try:
            async with asyncio.timeout(self.options.timeout):
                chain, played = await self._play(plan)
        except TimeoutError:
            outcome.status, outcome.reason = "failed", f"no answer within {self.options.timeout:g} s"
            return outcome
        except (ReplayFailed, ReplayHttpError) as exc:
            # A body quoted from a refusal may hold what the request carried (a gateway's 401 saying
            # which token it refused): masked with what the replay's proxy learned from those headers.
            outcome.status, outcome.reason = "failed", self.proxy.redactor.scrub(str(exc))
            return outcome
        return self._judge(plan, outcome, chain, played)

    async def _play(self, plan: ChainPlan) -> tuple[Chain | None, Played]:
        assert self.player is not None
        self._take_events()
        self._opened.clear()
        if plan.kind is PlanKind.DELETE:
            return await self._delete(plan)
        session = await self._session_for(plan) if plan.kind is not PlanKind.HANDSHAKE else None
        played = await self.player.play(plan, session)
        if plan.kind is PlanKind.HANDSHAKE and plan.session is not None and played.session:
            self.sessions[plan.session] = played.session
        sent = plan.first.body if plan.first is not None else {}
        request = (sent.get("method"), played.request_id) if played.request_id is not None else None
        return await self._settled(request, waits=played.stopped is not None), played

    async def _session_for(self, plan: ChainPlan) -> str | None:
        """The replay's session for the chain's recorded one, opened from its handshake if need be."""
        recorded = plan.session
        if plan.era != "legacy" or recorded is None:
            return None
        if recorded in self.sessions:
            return self.sessions[recorded]
        handshake = self.handshakes.get(recorded)
        if handshake is None:
            raise ReplayFailed(
                "its session's initialize is not in the capture (a rotated part read alone?): "
                "give the earlier parts too"
            )
        assert self.player is not None
        try:
            played = await self.player.play(handshake, None)
        except Refused as exc:
            raise Refused(f"replaying its session's initialize ({handshake.chain}): {exc}") from exc
        if not played.session:
            raise ReplayFailed(f"replaying its session's initialize ({handshake.chain}) opened no session")
        self.sessions[recorded] = played.session
        return played.session

    async def _delete(self, plan: ChainPlan) -> tuple[Chain | None, Played]:
        assert self.player is not None
        recorded = plan.session
        session = self.sessions.pop(recorded, None) if recorded else None
        handshake = self.handshakes.get(recorded) if recorded else None
        if session is None or handshake is None or handshake.first is None:
            raise ReplayFailed("its session was not opened by this replay: nothing to end")
        await self.player.end_session(handshake.first, session)
        return await self._settled(None), Played()

    def _take_events(self) -> None:
        while (event := self._feed.get_nowait()) is not None:
            if isinstance(event, ChainOpened):
                self._opened[event.chain.id] = (event.chain.method, event.chain.jsonrpc_id)

    def _find(self, request: tuple[str | None, Any] | None) -> Chain | None:
        """The chain the replayed request (method and id) opened, else the first chain opened: matched
        by what it was opened with (a headline's id is the last retry's by now), never by its
        messages, which a chain past the store's bounds no longer holds from the start."""
        store = self.proxy.store
        opened = (i for i, first in self._opened.items() if request is None or first == request)
        return next((c for c in map(store.get, opened) if c is not None), None)

    async def _settled(self, request: tuple[str | None, Any] | None, *, waits: bool = False) -> Chain | None:
        """The new chain once it has ended (its exchange closed), or, when the replay stopped where the
        recording's client did (`waits`), once it waits on the client (it ends only when the parked
        call expires); else as it is after `SETTLE` seconds."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(SETTLE):
                while True:
                    self._take_events()
                    chain = self._find(request)
                    if chain is not None and (chain.summary.ended is not None or (waits and _waits(chain))):
                        return chain
                    event = await self._feed.get()
                    if isinstance(event, ChainOpened):
                        self._opened[event.chain.id] = (event.chain.method, event.chain.jsonrpc_id)
        return self._find(request)

    def _judge(
        self, plan: ChainPlan, outcome: ChainOutcome, chain: Chain | None, played: Played
    ) -> ChainOutcome:
        if chain is None:
            outcome.status, outcome.reason = "failed", "the proxy recorded no chain for the replayed request"
            return outcome
        outcome.replayed_chain = chain.summary.id
        if self.options.keep_records:
            outcome.replayed = list(chain.messages)
        if played.unanswered:
            outcome.status, outcome.reason = "failed", played.unanswered
            return outcome
        if chain.dropped_messages:
            outcome.status, outcome.reason = "failed", _cut(chain)
            return outcome
        if played.stopped is not None:
            outcome.reason = f"stopped where the recording's client did, never answering {played.stopped}"
        if plan.kind is PlanKind.DELETE:
            outcome.difference = _status_difference(plan.records, list(chain.messages))
        else:
            ignore = self.options.ignore.with_paths(plan.edited) if plan.edited else self.options.ignore
            outcome.difference = compare_chains(plan.records, chain.messages, ignore)
        outcome.status = "differs" if outcome.difference is not None else "same"
        cut = cut_messages(plan.records, self.options.ignore)
        if cut:
            said = (
                f"{', '.join(cut)} cut at the capture's body limit when recorded, so not compared "
                "(record it again with a larger capture_body_limit)"
            )
            outcome.reason = f"{outcome.reason}; {said}" if outcome.reason else said
        return outcome


def _waits(chain: Chain) -> bool:
    return chain.summary.status in (ChainStatus.WAITING_CLIENT, ChainStatus.PARKED)


def _cut(chain: Chain) -> str:
    """Why a replayed chain whose oldest messages its proxy let go is not compared: the recording's
    first messages would be set against later ones, and every difference named would be the cut's."""
    held = len(chain.messages)
    total = held + chain.dropped_messages
    if held >= JSON_MESSAGES:
        why = f"a replay compares at most {JSON_MESSAGES} messages of a chain"
    else:
        why = "its memory passed max_chain_store_bytes: raise that setting (--config, MCP_PROXY_*)"
    kept = f"the replayed chain has {total} messages, of which its proxy kept the newest {held}"
    return f"{kept}: not compared, {why}"


def _status_difference(recorded: list[MessageRecord], replayed: list[MessageRecord]) -> Difference | None:
    """A DELETE carries no JSON-RPC message: its HTTP status is what is compared."""

    def status(records: list[MessageRecord]) -> int | None:
        return next((r.http.status for r in reversed(records) if r.http and r.http.status), None)

    old, new = status(recorded), status(replayed)
    if old == new:
        return None
    return Difference(1, "HTTP response", "status", old, new)


async def replay_one(
    upstream: str, plan: ChainPlan, handshake: ChainPlan | None, options: ReplayOptions | None = None
) -> ChainOutcome:
    """Replay one chain (the TUI's `r`) with its session's handshake at hand; both chains kept.

    Raises Unreachable when the server cannot be reached at all.
    """
    kept = ReplayOptions(**{**(options or ReplayOptions()).__dict__, "keep_records": True})
    async with Replay(upstream, kept) as replay:
        if handshake is not None:
            replay.keep_handshake(handshake)
        return await replay.replay(plan)


class TuiReplayer:
    """The TUI's `r`: replays against `fixed` (`--upstream`, the in-process proxy's), else the upstream
    the TUI's feed names (an attached proxy's, or the one a capture recorded), in the era that proxy
    spoke there; `settings` are the in-process proxy's, when there is one."""

    def __init__(self, fixed: str | None, settings: Settings | None = None) -> None:
        self.fixed = fixed
        self.settings = settings

    def target(self, recorded: ProxyInfo | None) -> str | None:
        """Where a replay would send its requests, so the TUI can name it before anything is sent."""
        return self.fixed or (recorded.upstream if recorded is not None else None)

    async def __call__(
        self, plan: ChainPlan, handshake: ChainPlan | None, recorded: ProxyInfo | None
    ) -> ChainOutcome:
        """Replay the chain (and its session's handshake) against the target; raises saying why not."""
        upstream = self.target(recorded)
        if not upstream:
            raise ReplayFailed("no upstream known: open the capture with tui --open FILE --upstream URL")
        if not upstream.startswith(("http://", "https://")):
            raise ReplayFailed(f"replay sends to an HTTP server, not {upstream}: give tui --upstream URL")
        if "<redacted" in upstream:
            raise ReplayFailed(f"the upstream's credentials are masked ({upstream}): give --upstream URL")
        era = RecordedEra()
        if recorded is not None:
            era = RecordedEra(recorded.upstream_era, recorded.upstream_era_forced)
        options = ReplayOptions(settings=self.settings, recorded=era)
        return await replay_one(upstream, plan, handshake, options)


def for_tui(fixed: str | None, settings: Settings | None = None) -> TuiReplayer:
    """The TUI's replayer: against `fixed` when given, else the upstream the TUI's feed names."""
    return TuiReplayer(fixed, settings)
