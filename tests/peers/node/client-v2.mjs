// The TypeScript SDK v2 (@modelcontextprotocol/client) client as a test command.
//
//   node client-v2.mjs --url URL --mode 2026-07-28|legacy [--timeout S] (SCENARIO... | --plan JSON)
//
// With --mode 2026-07-28 the client is pinned to that revision (`versionNegotiation: {mode: {pin}}`:
// one server/discover probe at connect, no fallback) and drives input_required rounds itself,
// answering the embedded requests through the same handlers a legacy server's in-flight requests
// reach (setRequestHandler), with the fixed answers of scenarios.mjs. With --mode legacy it is a
// plain 2025 client. Output: see scenarios.mjs.
//
// A call's progress is what the server sent: it is recorded as the transport delivers it (see
// progressOnArrival), so the progress event the v2 client makes up for every input_required round it
// fulfils ("Fulfilling input required by '<method>' (round N)"), which never crosses the wire, is not.
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';

import { CAPABILITIES, answerElicitation, answerRoots, answerSampling, main } from './scenarios.mjs';

async function connect(url, mode, log) {
  const versionNegotiation = mode === 'legacy' ? { mode: 'legacy' } : { mode: { pin: mode } };
  const client = new Client(
    { name: 'mcp-debug-proxy-test-client-ts-v2', version: '1.0.0' },
    { capabilities: CAPABILITIES, versionNegotiation },
  );
  client.setRequestHandler('elicitation/create', (request) => answerElicitation(request.params, log));
  client.setRequestHandler('sampling/createMessage', (request) => answerSampling(request.params, log));
  client.setRequestHandler('roots/list', () => answerRoots(log));
  const transport = new StreamableHTTPClientTransport(new URL(url));
  await client.connect(transport);
  const progress = progressOnArrival(transport);
  const api = {
    callTool: (name, args, onprogress, signal) => progress.during(onprogress, (sdkOnprogress) =>
      client.callTool({ name, arguments: args ?? {} }, callOptions(sdkOnprogress, signal))),
    listen: (filter) => client.listen(filter),
    listTools: () => client.listTools(),
    listPrompts: () => client.listPrompts(),
    getPrompt: (name, args) => client.getPrompt({ name, ...(args && { arguments: args }) }),
    listResources: () => client.listResources(),
    readResource: (uri) => client.readResource({ uri }),
  };
  const close = async () => {
    if (mode === 'legacy') await transport.terminateSession().catch(() => {});
    await client.close();
  };
  return { api, close };
}

/** The options of one call: a progress callback and an abort signal (the caller's cancel), if any. */
function callOptions(onprogress, signal) {
  if (!onprogress && !signal) return undefined;
  return { ...(onprogress && { onprogress }), ...(signal && { signal }) };
}

// The SDK hands a progress notification to `onprogress` a microtask after the transport delivers
// it, but retires the request's progress handler at once when the response is delivered: when the
// last progress and the response arrive in one read (a proxy or a busy server may write them
// together, as SSE allows), that progress is dropped as "unknown token". So the progress of a call
// is recorded as the transport delivers it, in arrival order (what came over the wire), and the SDK
// gets a no-op `onprogress` only so that each of the call's requests carries a progressToken. A call
// on a 2026-07-28 server is one request per input_required round, each with a token of its own: the
// call's progress is what carries any of its tokens. Calls run one at a time.
function progressOnArrival(transport) {
  let current;
  const tokens = new Set();
  const send = transport.send.bind(transport);
  transport.send = (message, options) => {
    const sent = message?.params?._meta?.progressToken;
    if (current && message?.method === 'tools/call' && sent !== undefined) tokens.add(sent);
    return send(message, options);
  };
  const deliver = transport.onmessage;
  transport.onmessage = (message, extra) => {
    const params = message?.params;
    if (current && message?.method === 'notifications/progress' && tokens.has(params?.progressToken)) {
      const { progressToken: _token, ...event } = params;
      current(event);
    }
    deliver?.(message, extra);
  };
  return {
    async during(onprogress, call) {
      current = onprogress;
      tokens.clear();
      try {
        return await call(onprogress ? () => {} : undefined);
      } finally {
        current = undefined;
        tokens.clear();
      }
    },
  };
}

await main('client-v2.mjs', connect);
