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
// The v2 client reports a progress event of its own for every input_required round it fulfils
// ("Fulfilling input required by '<method>' (round N)"): those are the client's, not the server's, so
// they are left out of the recorded progress; server progress always carries a message of its own.
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';

import { CAPABILITIES, answerElicitation, answerRoots, answerSampling, main } from './scenarios.mjs';

const CLIENT_ROUND = /^Fulfilling input required by '/;

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
  const serverProgressOnly = (onprogress) => (event) => {
    if (!CLIENT_ROUND.test(event.message ?? '')) onprogress(event);
  };
  const api = {
    callTool: (name, args, onprogress) =>
      client.callTool({ name, arguments: args ?? {} }, onprogress ? { onprogress: serverProgressOnly(onprogress) } : undefined),
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

await main('client-v2.mjs', connect);
