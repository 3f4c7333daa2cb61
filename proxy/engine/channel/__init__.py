"""Streamable HTTP served from a message channel: the decisions, sans-IO.

A *message channel* is one ordered, bidirectional stream of JSON-RPC messages for one peer session:
a stdio child's stdin and stdout lines, or an HTTP+SSE server's GET stream (`message` events one
way) and its POST endpoint (the other). The proxy's relay, bridges and probe speak Streamable HTTP
(a POST answered with JSON or an SSE stream, a GET stream, DELETE, `Mcp-Session-Id`). This package
decides, once for every kind of channel, how the one is served as the other:

- `core.ChannelCore` serves the HTTP exchanges of ONE channel. Contract:
  events in (`vocab`): `PostReceived(exchange, body)`, `StreamRequested(exchange)` (GET),
  `DeleteRequested(exchange)`, `HeadDue(exchange)` (the caller waited long enough for a head),
  `ExchangeAbandoned(exchange)` (the caller dropped the response before its end),
  `ChannelReceived(data)` (one message's bytes from the peer), `ChannelOversized(size, head, tail)`,
  `ChannelWriteFailed(exchange, detail)` and `ChannelClosed(reason)`;
  commands out: `WriteChannel(data, exchange)` (one message's JSON bytes, no newline),
  `Answer(exchange, status, headers, body)` (a whole response), `OpenStream(exchange, headers)`,
  `StreamMessage(exchange, data)` (one SSE `message` event), `EndStream(exchange)`,
  `CloseChannel(reason)` and `Log`. Every exchange it is told of ends with exactly one `Answer`, or
  with `OpenStream` ... `EndStream`, unless the caller abandoned it first.
  Its decisions: a POST with no request is answered 202 once written; a request's answer goes back
  on the POST that carried it (by id; an id already in flight on the channel is sent under an alias
  and restored on the way back, and so is a progress token another call in flight uses); the head
  waits for the first message, so an answer that comes alone is plain JSON and anything before it
  makes the response an SSE stream (also when `HeadDue`); a
  server request or notification rides the stream its cues name (`progressToken`, a cancelled
  request's id, a listen subscription's notifications), else the only call in flight, else the GET
  stream (requests: else the newest call of a session channel; on the shared channel, whose calls
  are different clients', they are refused), else waits in a bounded backlog for one; a closed channel
  answers every open call with a JSON-RPC error naming why, and ends the streams.
- `sessions.ChannelSessions` decides which channel an HTTP request goes to: a legacy `initialize`
  opens a channel of its own (one session per channel: a legacy stdio server has one session per
  process), a request naming a session goes to that session's channel (404 when it is gone, as a
  legacy server answers), anything else shares one channel (a 2026-07-28 server is stateless).
- `restarts.Restarts` bounds how often a dying channel is started again.

No asyncio, no clock (times come in as arguments), no I/O, no logging (logging is a command).
"""
