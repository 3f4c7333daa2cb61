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
  const api = {
    callTool: (name, args, onprogress) =>
      client.callTool({ name, arguments: args ?? {} }, undefined, onprogress ? { onprogress } : undefined),
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

await main('client-v1.mjs', connect);
