// The TypeScript SDK v1 (@modelcontextprotocol/sdk) client, legacy era, as a test command.
//
//   node client-v1.mjs --url URL --mode legacy [--timeout S] (SCENARIO... | --plan JSON)
//
// With MCP_TEST_CLIENT_TRANSPORT=sse in its environment it speaks the 2024-11-05 HTTP+SSE transport
// (SSEClientTransport: URL is the stream to GET), otherwise Streamable HTTP.
//
// A v1 client offers its newest handshake version in `initialize` and gets server requests in flight
// (elicitation, sampling, roots) through handlers registered per request schema; it answers them with
// the fixed answers of scenarios.mjs. Output: see scenarios.mjs.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { SSEClientTransport } from '@modelcontextprotocol/sdk/client/sse.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import {
  CreateMessageRequestSchema,
  ElicitRequestSchema,
  ListRootsRequestSchema,
} from '@modelcontextprotocol/sdk/types.js';

import { CAPABILITIES, answerElicitation, answerRoots, answerSampling, main } from './scenarios.mjs';

async function connect(url, mode, log) {
  if (mode !== 'legacy') throw new Error(`the TypeScript SDK v1 client speaks the legacy era only, not ${mode}`);
  const client = new Client({ name: 'mcp-debug-proxy-test-client-ts-v1', version: '1.0.0' }, { capabilities: CAPABILITIES });
  client.setRequestHandler(ElicitRequestSchema, (request) => answerElicitation(request.params, log));
  client.setRequestHandler(CreateMessageRequestSchema, (request) => answerSampling(request.params, log));
  client.setRequestHandler(ListRootsRequestSchema, () => answerRoots(log));
  const target = new URL(url);
  const transport = process.env.MCP_TEST_CLIENT_TRANSPORT === 'sse'
    ? new SSEClientTransport(target)
    : new StreamableHTTPClientTransport(target);
  await client.connect(transport);
  const progress = progressOnArrival(transport);
  const api = {
    callTool: (name, args, onprogress, signal) => progress.during(onprogress, (sdkOnprogress) =>
      client.callTool({ name, arguments: args ?? {} }, undefined, callOptions(sdkOnprogress, signal))),
    listTools: () => client.listTools(),
    listPrompts: () => client.listPrompts(),
    getPrompt: (name, args) => client.getPrompt({ name, ...(args && { arguments: args }) }),
    listResources: () => client.listResources(),
    readResource: (uri) => client.readResource({ uri }),
  };
  const close = async () => {
    if (transport.terminateSession) await transport.terminateSession().catch(() => {});
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
// gets a no-op `onprogress` only so that the request carries a progressToken. Calls run one at a time.
function progressOnArrival(transport) {
  let current;
  let token;
  const send = transport.send.bind(transport);
  transport.send = (message, options) => {
    const sent = message?.params?._meta?.progressToken;
    if (current && message?.method === 'tools/call' && sent !== undefined) token = sent;
    return send(message, options);
  };
  const deliver = transport.onmessage;
  transport.onmessage = (message, extra) => {
    const params = message?.params;
    if (current && message?.method === 'notifications/progress' && params?.progressToken === token) {
      const { progressToken: _token, ...event } = params;
      current(event);
    }
    deliver?.(message, extra);
  };
  return {
    async during(onprogress, call) {
      current = onprogress;
      token = undefined;
      try {
        return await call(onprogress ? () => {} : undefined);
      } finally {
        current = undefined;
      }
    },
  };
}

await main('client-v1.mjs', connect);
