"""Instructions of OpCounter.observe_all alone: run with N and 0, subtract."""
import sys, os
from proxy.transport.metrics import ProxyMetrics
from proxy.flows.bus import EventBus
from proxy.flows.store import ChainStore
from proxy.flows.events import Channel, Direction, Mode, Side
from proxy.flows.observations import ExchangeOpened, MessageSeen, ResponseHeadSeen, ExchangeClosed
from proxy.wire.jsonrpc import parse_body
from proxy.wire.joined_headers import recorded
from proxy.flows.events import ProxyInfo
from proxy.flows.sink import _scan
n = int(sys.argv[1]); what = sys.argv[2]
REQ = b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"small","arguments":{"text":"hello"}}}'
RES = b'{"jsonrpc":"2.0","id":%d,"result":{"content":[{"type":"text","text":"ok: the canned answer of the benchmark upstream"}],"isError":false}}'
HEAD = [("Host","127.0.0.1:8080"),("Content-Type","application/json"),("Accept","application/json, text/event-stream"),("MCP-Protocol-Version","2025-11-25"),("Mcp-Session-Id","bench-upstream-session"),("Content-Length","100")]
RHEAD = [("Content-Type","application/json"),("Content-Length","130"),("Date","Tue, 01 Dec 2026 23:40:05 GMT"),("Server","Python/3.11 aiohttp/3.14.5")]
m = ProxyMetrics(ChainStore(10), EventBus(10), open_streams=lambda:0, open_exchanges=lambda:0, info=None, continuations=lambda:0, feed_clients=lambda:0, draining=lambda:False)
obs = m.counting.observe_all
if what == "nop":
    obs = lambda b: None
if what == "scan":
    obs = _scan
batches = []
t = 1000.0
for i in range(n):
    ex = f"e{i}"
    req = REQ % i; res = RES % i
    batches.append([ExchangeOpened(t, ex, "POST", "/mcp", recorded(HEAD), "bench-upstream-session", "2025-11-25", "2025-11-25", Mode.PASSTHROUGH, len(req), "http", "http", "k1"),
                       MessageSeen(t, ex, parse_body(req).messages[0], len(req), Direction.TO_SERVER, Channel.POST)])
    batches.append((ResponseHeadSeen(t+0.001, ex, 200, "application/json", recorded(RHEAD)),
                      MessageSeen(t+0.001, ex, parse_body(res).messages[0], len(res), Direction.TO_CLIENT, Channel.JSON, Side.BOTH, None), ExchangeClosed(t+.001, ex, None)))
    t += 0.001
from proxy.flows.sink import _EXCHANGE_KINDS, KEY_FIELDS, _LEG_KINDS, InvalidBody, LegMessageSeen
from proxy.wire.weight import value_weight, SMALL_TEXT, WORST_RATIO
_TEXTS=(str,bytes)
def scan2(batch):
    key = None
    size = 0
    legs = False
    for obs in batch:
        kind = type(obs)
        if kind is MessageSeen:
            s = obs.size
            if s <= SMALL_TEXT and type(obs.msg.raw) is dict:
                size += 64 + WORST_RATIO * s
            else:
                size += value_weight(obs.msg.raw, s)
            this = obs.exchange
        elif kind in _EXCHANGE_KINDS:
            this = obs.exchange
        else:
            return _scan(batch)
        if this is not key:
            if key is None:
                key = this
            elif this != key:
                return None, 0, True
    return key, size, legs
def scan3(batch):
    size = 0
    for obs in batch:
        if type(obs) is MessageSeen:
            size += obs.size
    return size
if what == "scan2": obs = scan2
if what == "scan3": obs = scan3
if what in ("tally", "tallycount"):
    # The round-trip tally alone (what admin off runs too), or with the metrics counting: by the
    # tally's hand-over where the tree has one (`RoundTripTally.counter`), else as a second listener.
    from proxy.flows.redact import Redactor
    from proxy.flows.tally import RoundTripTally
    tally = RoundTripTally(Redactor(key=b"k"))
    read = tally.observe_all
    if what == "tally":
        obs = read
    elif hasattr(tally, "counter"):
        tally.counter = m.counting
        obs = read
    else:
        count = m.counting.observe_all
        def obs(b):
            read(b)
            count(b)
if what == "none":
    for b in batches: pass
else:
    for b in batches: obs(b)
