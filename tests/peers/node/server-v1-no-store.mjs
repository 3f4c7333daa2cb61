// A legacy-era server on the TypeScript SDK 1.x (@modelcontextprotocol/sdk), with sessions and no
// event store: the SSE events of its answers carry no id, so a client that closes a call's stream has
// nothing to resume, as with most servers (the SDK's own example with sessions keeps one).
//
//   node --require ./loopback-only.cjs server-v1-no-store.mjs [--json]   (any free port)
//
// With --json it answers plain JSON (`enableJsonResponse`), a batch of requests with one JSON array.
//
// Its one tool, `slow` ({ms}), logs on the call's stream every 50 ms and answers after `ms`
// milliseconds (unless cancelled). Prints
// "READY <port>" on stdout once it listens on 127.0.0.1 and serves /mcp, until SIGTERM or SIGINT.
import { randomUUID } from 'node:crypto';
import http from 'node:http';

import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { isInitializeRequest } from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';

const MAX_SESSIONS = 100;
const JSON_RESPONSE = process.argv.includes('--json');
const TICK_MS = 50;

function newServer() {
  const server = new McpServer(
    { name: 'mcp-debug-proxy-no-event-store', version: '1.0.0' },
    { capabilities: { logging: {} } },
  );
  server.registerTool(
    'slow',
    { description: 'Answers after `ms` milliseconds', inputSchema: { ms: z.number().int().min(0).max(60000) } },
    async ({ ms }, extra) => {
      const tick = { method: 'notifications/message', params: { level: 'info', data: 'still working' } };
      for (let waited = 0; waited < ms && !extra.signal.aborted; waited += TICK_MS) {
        await extra.sendNotification(tick).catch(() => {});
        await new Promise((resolve) => setTimeout(resolve, Math.min(TICK_MS, ms - waited)));
      }
      return { content: [{ type: 'text', text: `waited ${ms} ms` }] };
    },
  );
  return server;
}

const transports = new Map();

async function readJson(req) {
  const chunks = [];
  for await (const chunk of req) chunks.push(chunk);
  const text = Buffer.concat(chunks).toString('utf8');
  return text ? JSON.parse(text) : undefined;
}

async function handle(req, res) {
  if (new URL(req.url, 'http://localhost').pathname !== '/mcp') {
    res.writeHead(404).end();
    return;
  }
  const sessionId = req.headers['mcp-session-id'];
  const body = req.method === 'POST' ? await readJson(req) : undefined;
  let transport = sessionId ? transports.get(sessionId) : undefined;
  if (!transport && !sessionId && req.method === 'POST' && isInitializeRequest(body)) {
    if (transports.size >= MAX_SESSIONS) {
      res.writeHead(503).end();
      return;
    }
    transport = new StreamableHTTPServerTransport({
      sessionIdGenerator: () => randomUUID(),
      enableJsonResponse: JSON_RESPONSE,
      onsessioninitialized: (id) => transports.set(id, transport),
    });
    transport.onclose = () => transport.sessionId && transports.delete(transport.sessionId);
    await newServer().connect(transport);
  }
  if (!transport) {
    res.writeHead(sessionId ? 404 : 400, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ jsonrpc: '2.0', error: { code: -32000, message: 'no such session' }, id: null }));
    return;
  }
  await transport.handleRequest(req, res, body);
}

const httpServer = http.createServer((req, res) => {
  handle(req, res).catch((error) => {
    console.error(error);
    if (!res.headersSent) res.writeHead(500);
    res.end();
  });
});
httpServer.listen(0, () => process.stdout.write(`READY ${httpServer.address().port}\n`));
for (const signal of ['SIGTERM', 'SIGINT']) {
  process.on(signal, () => {
    for (const transport of transports.values()) transport.close();
    httpServer.close(() => process.exit(0));
    setTimeout(() => process.exit(0), 1000).unref();
  });
}
