"""Log messages that arrive on a legacy session's GET stream, given to the call in flight there.

Theory of operation. A legacy server may log on its session's standalone GET stream instead of the
stream of the request it serves: the TypeScript SDK 1.x's `server.sendLoggingMessage(params,
sessionId)`, which its example servers call inside tools, names no request, so its transport sends
the message there. A legacy client hears it because its level is session-wide. A 2026-07-28 client
asks per request (`_meta` `logLevel`) and may be sent a log message only on the stream of a request
that asked, so a `notifications/message` on the GET stream goes to the calls a question on that
stream may be given to (`stream_asks.calls_asking`, whatever their method: any handler may log),
and only on a session that carries one principal's calls (`UpstreamLink.one_principal`: opened
with an `Authorization`, or `anonymous_upstream_sessions` = `per_connection`):

- one such call: the message is its own, streamed on its response if the call's `logLevel` admits
  the level (`exits.for_client`), and filed in its chain;
- several: to none. The message names no request, and the calls may be different clients' (clients
  with the same `Authorization` share one upstream session), so giving it to one or to all could
  show one client's log to another;
- none, or one whose `logLevel` does not admit it: to none.

The shared anonymous session (`anonymous_upstream_sessions` = `shared`) gives none to any call,
even to its only call in flight: the two streams are not ordered, so a log of one client's call
can arrive after that call's answer, while another client's call is the only one left, and that
log may carry the first client's data.

What no call takes stays on the stream (the listen emulator drops it: logs never go on a listen
stream) and in the stream's own chain. A call parked for a retry takes none and is not counted: its
client has its round and no open response, and its server request awaits its own answers. A message
that reaches the proxy after its call's answer is nobody's, even when the server sent it first: the
two streams are not ordered, and a 2026-07-28 response ends with its answer.
"""

from __future__ import annotations

from typing import Any

from proxy.engine.commands import BridgeCommand
from proxy.engine.modern_client.exits import for_client, stream
from proxy.engine.modern_client.state import Call, MrtrContext
from proxy.engine.modern_client.stream_asks import calls_asking
from proxy.wire.jsonrpc import Kind, Message

Commands = list[BridgeCommand]

LOG_METHOD = "notifications/message"


def taker(ctx: MrtrContext, leg: str, msg: Message) -> tuple[Call, dict[str, Any]] | None:
    """The call a log message on the GET stream `leg` goes to, with the message as it sees it;
    None when it is no log message on a session's GET stream or no call takes it."""
    ref = ctx.legs.get(leg)
    if ref is None or ref.purpose != "stream":
        return None
    if msg.kind is not Kind.NOTIFICATION or msg.method != LOG_METHOD:
        return None
    link = ctx.pool.named(ref.owner)
    if link is None or not link.one_principal:
        return None
    waiting = calls_asking(ctx, ref.owner, any_method=True)
    if len(waiting) != 1:
        return None
    shown = for_client(waiting[0], msg.raw)
    return (waiting[0], shown) if shown is not None else None


def on_message(ctx: MrtrContext, leg: str, msg: Message) -> Commands | None:
    """Stream a GET-stream log message to the call that takes it; None when none does."""
    taken = taker(ctx, leg, msg)
    if taken is None:
        return None
    call, shown = taken
    return stream(call, shown)


def placed_on(ctx: MrtrContext, leg: str, msg: Message) -> str | None:
    """The leg of the call a GET-stream log message goes to (its observation joins that call's chain)."""
    taken = taker(ctx, leg, msg)
    return taken[0].leg if taken is not None else None
