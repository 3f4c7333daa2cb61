// The test peers' catalogue (tests/peers/apps.py) on the TypeScript SDK v2, as a 2026-07-28-only server.
//
//   node --require ./loopback-only.cjs server.mjs [--port N]      (0, the default: any free port)
//
// McpServer + createMcpHandler from @modelcontextprotocol/server, mounted on node:http through
// @modelcontextprotocol/node, with `legacy: 'reject'`: a legacy `initialize` gets HTTP 400 -32022, as
// from a server that serves 2026-07-28 only. Every tool, prompt and resource of apps.py is here with
// the same names, schemas and final results for the same client answers, written MRTR style: a handler
// that needs the client returns inputRequired({inputRequests, requestState}) and reads the answers on
// the retry; requestState is sealed with createRequestStateCodec (HMAC, a per-process key). So
// tests/peers/scenarios.py's expected results hold against this server too.
//
// Prints "READY <port>" on stdout once it listens on 127.0.0.1 and serves /mcp (the request target is
// compared as node:http hands it over, as a plain node:http server does) until SIGTERM or SIGINT.
import { randomBytes } from 'node:crypto';
import http from 'node:http';

import { localhostHostValidation, toNodeHandler } from '@modelcontextprotocol/node';
import {
  McpServer,
  ProtocolError,
  ProtocolErrorCode,
  createMcpHandler,
  createRequestStateCodec,
  fromJsonSchema,
  inputRequired,
  inputResponse,
} from '@modelcontextprotocol/server';

const SERVER_NAME = 'mcp-debug-proxy-test-peer';
const NAME_QUESTION = 'What is your name?';
const COLOR_QUESTION = 'What is your favorite color?';
const URL_MESSAGE = 'Please grant consent in your browser';
const ASK_URL = 'https://example.com/consent';
const LLM_QUESTION = 'What is the capital of France?';
const LLM_MAX_TOKENS = 50;

const NO_ARGS = { type: 'object', properties: {} };
const NAME_SCHEMA = { type: 'object', properties: { name: { type: 'string' } }, required: ['name'] };
const COLOR_SCHEMA = { type: 'object', properties: { color: { type: 'string' } }, required: ['color'] };

const codec = createRequestStateCodec({ key: randomBytes(32) });

// ------------------------------------------------------------------------------------------------
// Result builders: the same texts as apps.py's, so equal answers give equal results.
// ------------------------------------------------------------------------------------------------

const text = (value) => ({ content: [{ type: 'text', text: value }] });

// The accepted value of `field`, or "(<action>)" when the user did not accept (apps.py `_field`).
function field(answer, name) {
  if (answer.action === 'accept' && answer.content && name in answer.content) {
    return String(answer.content[name]);
  }
  return `(${answer.action})`;
}

function hello(answer) {
  if (answer.action === 'accept' && answer.content && 'name' in answer.content) {
    return `Hello, ${answer.content.name}!`;
  }
  return `No name (${answer.action})`;
}

function sampledText(result) {
  const content = Array.isArray(result.content) ? result.content[0] : result.content;
  return content?.type === 'text' ? content.text : `<${content?.type}>`;
}

const askName = () => inputRequired.elicit({ message: NAME_QUESTION, requestedSchema: NAME_SCHEMA });
const askColor = () => inputRequired.elicit({ message: COLOR_QUESTION, requestedSchema: COLOR_SCHEMA });
const askLlm = (question) =>
  inputRequired.createMessage({
    messages: [{ role: 'user', content: { type: 'text', text: question } }],
    maxTokens: LLM_MAX_TOKENS,
  });

// The answer the retried request carries under `key`, if it is of the `kind` asked for.
function answer(ctx, key, kind) {
  const view = inputResponse(ctx.mcpReq.inputResponses, key);
  return view.kind === kind ? view : undefined;
}

const invalidParams = (message) => new ProtocolError(ProtocolErrorCode.InvalidParams, message);

// ------------------------------------------------------------------------------------------------
// Tools.
// ------------------------------------------------------------------------------------------------

const TOOLS = {
  echo: {
    description: 'Return the text (and log it when the client opted in to logging).',
    inputSchema: { type: 'object', properties: { text: { type: 'string' } }, required: ['text'] },
    async run({ text: value }, ctx) {
      // Deprecated in 2026-07-28 but still served; the SDK sends it only when the request opted in.
      await ctx.mcpReq.log('info', `echo: ${value}`, 'peer');
      return text(value);
    },
  },
  add: {
    description: 'Add two integers.',
    inputSchema: {
      type: 'object',
      properties: { a: { type: 'integer' }, b: { type: 'integer' } },
      required: ['a', 'b'],
    },
    outputSchema: { type: 'object', properties: { result: { type: 'integer' } }, required: ['result'] },
    async run({ a, b }) {
      return { content: [{ type: 'text', text: String(a + b) }], structuredContent: { result: a + b } };
    },
  },
  ask_name: {
    description: "Ask the user's name (form elicitation).",
    async run(args, ctx) {
      const name = answer(ctx, 'name', 'elicit');
      return name ? text(hello(name)) : inputRequired({ inputRequests: { name: askName() } });
    },
  },
  ask_url: {
    description: 'Ask for consent through a URL elicitation.',
    async run(args, ctx) {
      const consent = answer(ctx, 'consent', 'elicit');
      if (consent) return text(`url:${consent.action}`);
      return inputRequired({
        inputRequests: { consent: inputRequired.elicitUrl({ message: URL_MESSAGE, url: ASK_URL }) },
      });
    },
  },
  ask_llm: {
    description: "Ask the client's LLM a question (sampling).",
    inputSchema: { type: 'object', properties: { question: { type: 'string' } }, required: ['question'] },
    async run({ question }, ctx) {
      const sampled = answer(ctx, 'llm', 'sampling');
      if (sampled) return text(`LLM said: ${sampledText(sampled.result)}`);
      return inputRequired({ inputRequests: { llm: askLlm(question) } });
    },
  },
  list_client_roots: {
    description: "List the client's roots.",
    async run(args, ctx) {
      const roots = answer(ctx, 'roots', 'roots');
      if (roots) return text(roots.roots.map((root) => root.uri).join(','));
      return inputRequired({ inputRequests: { roots: inputRequired.listRoots() } });
    },
  },
  ask_twice: {
    description: 'Ask name, then color (two rounds).',
    // Round 1 asks the name (state step 1); round 2 asks the color and carries the name in the state
    // (the final retry holds only the color answer); round 3 completes.
    async run(args, ctx) {
      const state = ctx.mcpReq.requestState() ?? {};
      if (state.step === 2 && typeof state.name === 'string') {
        const color = answer(ctx, 'color', 'elicit');
        if (color) return text(`name=${state.name} color=${field(color, 'color')}`);
        return inputRequired({ inputRequests: { color: askColor() }, requestState: await codec.mint(state) });
      }
      const name = state.step === 1 ? answer(ctx, 'name', 'elicit') : undefined;
      if (!name) {
        return inputRequired({ inputRequests: { name: askName() }, requestState: await codec.mint({ step: 1 }) });
      }
      const next = { step: 2, name: field(name, 'name') };
      return inputRequired({ inputRequests: { color: askColor() }, requestState: await codec.mint(next) });
    },
  },
  ask_two_at_once: {
    description: 'Ask name and sample the LLM concurrently.',
    async run(args, ctx) {
      const name = answer(ctx, 'name', 'elicit');
      const sampled = answer(ctx, 'llm', 'sampling');
      if (name && sampled) return text(`name=${field(name, 'name')} llm=${sampledText(sampled.result)}`);
      const missing = {};
      if (!name) missing.name = askName();
      if (!sampled) missing.llm = askLlm(LLM_QUESTION);
      return inputRequired({ inputRequests: missing });
    },
  },
  state_only: {
    description: 'MRTR: one round carrying only requestState.',
    async run(args, ctx) {
      if (ctx.mcpReq.requestState()?.step === 'resume') return text('state ok');
      // The load-shedding form: no inputRequests, only requestState; the client just retries.
      return inputRequired({ requestState: await codec.mint({ step: 'resume' }) });
    },
  },
  slow_progress: {
    description: 'Report `steps` progress notifications, then finish.',
    inputSchema: { type: 'object', properties: { steps: { type: 'integer', default: 3 } } },
    async run({ steps = 3 }, ctx) {
      if (!Number.isInteger(steps) || steps < 0 || steps > 1000) {
        throw invalidParams("Argument 'steps' must be an integer in 0..1000");
      }
      const progressToken = ctx.mcpReq._meta?.progressToken;
      for (let step = 1; step <= steps; step += 1) {
        if (progressToken !== undefined) {
          await ctx.mcpReq.notify({
            method: 'notifications/progress',
            params: { progressToken, progress: step, total: steps, message: `step ${step}/${steps}` },
          });
        }
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
      return text(`done ${steps}`);
    },
  },
  fail: {
    description: 'Return a tool error result.',
    async run() {
      return { content: [{ type: 'text', text: 'boom' }], isError: true };
    },
  },
};

// ------------------------------------------------------------------------------------------------
// Prompts and resources.
// ------------------------------------------------------------------------------------------------

function registerPrompts(server) {
  server.registerPrompt(
    'greet_prompt',
    { description: 'Greets the client by the name it gives (elicitation).' },
    async (ctx) => {
      const name = answer(ctx, 'name', 'elicit');
      if (!name) return inputRequired({ inputRequests: { name: askName() } });
      return {
        description: 'Greeting',
        messages: [{ role: 'user', content: { type: 'text', text: `Hello, ${field(name, 'name')}` } }],
      };
    },
  );
  server.registerPrompt(
    'plain_prompt',
    {
      description: 'A plain prompt about a topic.',
      argsSchema: fromJsonSchema({
        type: 'object',
        properties: { topic: { type: 'string', description: 'What to talk about' } },
        required: ['topic'],
      }),
    },
    async ({ topic }) => ({
      description: 'Plain prompt',
      messages: [{ role: 'user', content: { type: 'text', text: `Tell me about ${topic}` } }],
    }),
  );
}

const resource = (uri, value) => ({ contents: [{ uri, mimeType: 'text/plain', text: value }] });

function registerResources(server) {
  server.registerResource(
    'static',
    'res://static',
    { mimeType: 'text/plain', description: 'Static text.' },
    async (uri) => resource(uri.href, 'static content'),
  );
  server.registerResource(
    'ask',
    'res://ask',
    { mimeType: 'text/plain', description: 'Asks the name on read.' },
    async (uri, ctx) => {
      const name = answer(ctx, 'name', 'elicit');
      if (!name) return inputRequired({ inputRequests: { name: askName() } });
      return resource(uri.href, `resource for ${field(name, 'name')}`);
    },
  );
}

function buildServer() {
  const server = new McpServer(
    { name: SERVER_NAME, version: '1.0.0' },
    { capabilities: { logging: {} }, requestState: { verify: codec.verify } },
  );
  for (const [name, tool] of Object.entries(TOOLS)) {
    const config = {
      description: tool.description,
      inputSchema: fromJsonSchema(tool.inputSchema ?? NO_ARGS),
      ...(tool.outputSchema && { outputSchema: fromJsonSchema(tool.outputSchema) }),
    };
    server.registerTool(name, config, (args, ctx) => tool.run(args, ctx));
  }
  registerPrompts(server);
  registerResources(server);
  return server;
}

// ------------------------------------------------------------------------------------------------
// HTTP.
// ------------------------------------------------------------------------------------------------

function parsePort(argv) {
  const index = argv.indexOf('--port');
  const port = index === -1 ? 0 : Number(argv[index + 1]);
  if (!Number.isInteger(port) || port < 0 || port > 65535) {
    console.error(`server.mjs: --port needs a TCP port number, got ${argv[index + 1]}`);
    process.exit(2);
  }
  return port;
}

const handler = createMcpHandler(buildServer, { legacy: 'reject', onerror: (error) => console.error(error) });
const serveMcp = toNodeHandler(handler, { onerror: (error) => console.error(error) });
const hostAllowed = localhostHostValidation();

const httpServer = http.createServer((req, res) => {
  if ((req.url ?? '').split('?')[0] !== '/mcp') {
    res.writeHead(404, { 'content-type': 'text/plain' }).end('Not Found');
    return;
  }
  if (!hostAllowed(req, res)) return;
  void serveMcp(req, res);
});

httpServer.listen(parsePort(process.argv.slice(2)), '127.0.0.1', () => {
  process.stdout.write(`READY ${httpServer.address().port}\n`);
});

for (const signal of ['SIGTERM', 'SIGINT']) {
  process.on(signal, () => {
    httpServer.closeAllConnections();
    httpServer.close();
    void handler.close().finally(() => process.exit(0));
  });
}
