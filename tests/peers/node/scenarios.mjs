// What the TypeScript test clients (client-v1.mjs, client-v2.mjs) share: the fixed answers, the
// scenarios and their normalized results, and the command line. It mirrors tests/peers/scenarios.py
// and tests/peers/client.py line for line in what it prints, so a Python test compares any client's
// output with `expected_result` the same way:
//
//   node client-vN.mjs --url URL --mode legacy|2026-07-28 [--timeout S] SCENARIO...
//   node client-vN.mjs --url URL --mode legacy|2026-07-28 [--timeout S] --plan JSON
//
// Scenarios: one fresh client each, one JSON line each ({scenario, result, callbacks, progress}, or
// {scenario, error}). A plan: steps on ONE client, one line each ({id, result|error, callbacks,
// progress}) with the raw result, for servers whose results the tests normalize (server-everything).
// The `logging` scenario of scenarios.py is left out: how a client opts in to log messages differs by
// era and SDK, and the matrix does not run it.

export const ANSWERS = { name: 'octocat', color: 'green' };
export const SAMPLED_TEXT = 'Paris';
export const SAMPLED_MODEL = 'test-model';
export const ROOT_URI = 'file:///home/u/proj';
export const ROOT_NAME = 'proj';
export const CAPABILITIES = { elicitation: { form: {}, url: {} }, sampling: {}, roots: {} };
const DEFAULT_TIMEOUT_S = 15;

/** What the callbacks saw, in order: callback kinds and progress values. */
export class CallbackLog {
  callbacks = [];
  progress = [];
}

// ------------------------------------------------------------------------------------------------
// The client's answers to the server (the same fixed answers as scenarios.py's callbacks).
// ------------------------------------------------------------------------------------------------

export function answerElicitation(params, log) {
  if (params.mode === 'url') {
    log.callbacks.push(`elicitation-url:${params.url}`);
    return { action: 'accept' }; // URL mode: consent only, never content
  }
  log.callbacks.push(`elicitation:${params.message}`);
  const properties = params.requestedSchema?.properties ?? {};
  const content = Object.fromEntries(Object.entries(ANSWERS).filter(([key]) => key in properties));
  return { action: 'accept', content };
}

export function answerSampling(params, log) {
  const first = params.messages?.[0]?.content;
  const block = Array.isArray(first) ? first[0] : first;
  log.callbacks.push(`sampling:${block?.type === 'text' ? block.text : ''}`);
  return {
    role: 'assistant',
    content: { type: 'text', text: SAMPLED_TEXT },
    model: SAMPLED_MODEL,
    stopReason: 'endTurn',
  };
}

export function answerRoots(log) {
  log.callbacks.push('roots');
  return { roots: [{ uri: ROOT_URI, name: ROOT_NAME }] };
}

// ------------------------------------------------------------------------------------------------
// Normalization (scenarios.py normalize_*): results as plain JSON, equal across eras and SDKs.
// ------------------------------------------------------------------------------------------------

const contentText = (block) => (block?.type === 'text' ? block.text : `<${block?.type}>`);

export function normalizeToolResult(result) {
  const out = { content: (result.content ?? []).map(contentText), isError: Boolean(result.isError) };
  if (result.structuredContent !== undefined && result.structuredContent !== null) {
    out.structuredContent = result.structuredContent;
  }
  return out;
}

export function normalizePromptResult(result) {
  return {
    description: result.description ?? null,
    messages: result.messages.map((message) => ({ role: message.role, text: contentText(message.content) })),
  };
}

export function normalizeResourceResult(result) {
  return result.contents.map((c) => ({ uri: c.uri, text: typeof c.text === 'string' ? c.text : '<blob>' }));
}

// ------------------------------------------------------------------------------------------------
// Scenarios, on an adapter `api` over either SDK's client:
//   callTool(name, args, onprogress?), listTools(), listPrompts(), getPrompt(name, args?),
//   listResources(), readResource(uri)
// ------------------------------------------------------------------------------------------------

const tool =
  (name, args, { progress = false } = {}) =>
  async (api, log) => {
    const onprogress = progress ? (event) => log.progress.push(event.progress) : undefined;
    return normalizeToolResult(await api.callTool(name, args, onprogress));
  };

const byName = (a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0);

export const SCENARIOS = {
  echo: tool('echo', { text: 'hello' }),
  add: tool('add', { a: 2, b: 3 }),
  ask_name: tool('ask_name'),
  ask_url: tool('ask_url'),
  ask_llm: tool('ask_llm', { question: 'What is the capital of France?' }),
  list_client_roots: tool('list_client_roots'),
  ask_twice: tool('ask_twice'),
  ask_two_at_once: tool('ask_two_at_once'),
  state_only: tool('state_only'),
  slow_progress: tool('slow_progress', { steps: 3 }),
  fail: tool('fail'),
  list_tools: async (api) => (await api.listTools()).tools.map((t) => t.name).sort(),
  prompts: async (api) => ({
    list: (await api.listPrompts()).prompts
      .map((p) => ({ name: p.name, arguments: (p.arguments ?? []).map((a) => a.name) }))
      .sort(byName),
    greet_prompt: normalizePromptResult(await api.getPrompt('greet_prompt')),
    plain_prompt: normalizePromptResult(await api.getPrompt('plain_prompt', { topic: 'otters' })),
  }),
  resources: async (api) => ({
    list: (await api.listResources()).resources.map((r) => r.uri).sort(),
    'res://static': normalizeResourceResult(await api.readResource('res://static')),
    'res://ask': normalizeResourceResult(await api.readResource('res://ask')),
  }),
  progress: tool('slow_progress', { steps: 3 }, { progress: true }),
};

/** Scenarios whose callbacks run concurrently: their callback list is sorted. */
const CONCURRENT = new Set(['ask_two_at_once']);

// ------------------------------------------------------------------------------------------------
// Command line.
// ------------------------------------------------------------------------------------------------

/** `{code, message}` of a JSON-RPC error (`code` null when the failure was not one). */
export function errorOf(error) {
  const code = typeof error?.code === 'number' ? error.code : null;
  return { code, message: String(error?.message ?? error) };
}

function withTimeout(promise, seconds, what) {
  let timer;
  const expired = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} timed out after ${seconds}s`)), seconds * 1000);
  });
  return Promise.race([promise, expired]).finally(() => clearTimeout(timer));
}

const emit = (line) => process.stdout.write(`${JSON.stringify(line)}\n`);

function parseArgs(argv, program) {
  const args = { url: undefined, mode: undefined, timeout: DEFAULT_TIMEOUT_S, plan: undefined, scenarios: [] };
  for (let i = 0; i < argv.length; i += 1) {
    const flag = argv[i];
    if (flag === '--url') args.url = argv[++i];
    else if (flag === '--mode') args.mode = argv[++i];
    else if (flag === '--timeout') args.timeout = Number(argv[++i]);
    else if (flag === '--plan') args.plan = JSON.parse(argv[++i]);
    else if (flag.startsWith('--')) throw new Error(`${program}: unknown option ${flag}`);
    else args.scenarios.push(flag);
  }
  const unknown = args.scenarios.filter((name) => !(name in SCENARIOS));
  if (!args.url || !['legacy', '2026-07-28'].includes(args.mode) || unknown.length > 0) {
    throw new Error(
      `usage: ${program} --url URL --mode legacy|2026-07-28 [--timeout S] (SCENARIO... | --plan JSON)` +
        (unknown.length > 0 ? `; unknown scenario(s) ${unknown.join(', ')}; known: ${Object.keys(SCENARIOS)}` : ''),
    );
  }
  return args;
}

async function closeQuietly(connection, seconds) {
  await withTimeout(connection.close(), seconds, 'close').catch(() => {});
}

async function runScenarios(connect, args) {
  for (const scenario of args.scenarios) {
    const log = new CallbackLog();
    let connection;
    try {
      connection = await withTimeout(connect(args.url, args.mode, log), args.timeout, 'connect');
      const result = await withTimeout(SCENARIOS[scenario](connection.api, log), args.timeout, scenario);
      const callbacks = CONCURRENT.has(scenario) ? [...log.callbacks].sort() : log.callbacks;
      emit({ scenario, result, callbacks, progress: log.progress });
    } catch (error) {
      emit({ scenario, error: errorOf(error) });
    } finally {
      if (connection) await closeQuietly(connection, args.timeout);
    }
  }
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// Plan ops: `list_tools`; `call` (`tool`, `arguments`, `progress`, and `cancelAfterMs`: the caller
// aborts the call that long after it began, the SDK's own cancel); `listen` (a 2026-07-28
// `subscriptions/listen` with `filter`, closed by the SDK after `holdMs`); `sleep` (`ms`: lets what
// the SDK sends after a cancel go out before the next step or the exit).
async function runStep(api, step, log) {
  if (step.op === 'list_tools') return (await api.listTools()).tools.map((t) => t.name).sort();
  if (step.op === 'call') {
    const onprogress = step.progress ? (event) => log.progress.push(event.progress) : undefined;
    const abort = step.cancelAfterMs === undefined ? undefined : new AbortController();
    const timer = abort && setTimeout(() => abort.abort('cancelled by the test'), step.cancelAfterMs);
    try {
      return await api.callTool(step.tool, step.arguments, onprogress, abort?.signal);
    } finally {
      clearTimeout(timer);
    }
  }
  if (step.op === 'listen') {
    const subscription = await api.listen(step.filter);
    await sleep(step.holdMs ?? 100);
    await subscription.close();
    return 'closed';
  }
  if (step.op === 'sleep') {
    await sleep(step.ms);
    return 'slept';
  }
  throw new Error(`unknown plan op ${step.op}`);
}

// Roots answers are left out of a step's callbacks: a legacy server may ask for them at any time on
// its own stream (server-everything does right after the handshake), not only inside a step.
async function runPlan(connect, args) {
  const log = new CallbackLog();
  const connection = await withTimeout(connect(args.url, args.mode, log), args.timeout, 'connect');
  try {
    for (const step of args.plan) {
      log.callbacks = [];
      log.progress = [];
      const line = { id: step.id };
      try {
        line.result = await withTimeout(runStep(connection.api, step, log), args.timeout, step.id);
      } catch (error) {
        line.error = errorOf(error);
      }
      emit({ ...line, callbacks: log.callbacks.filter((c) => c !== 'roots'), progress: log.progress });
    }
  } finally {
    await closeQuietly(connection, args.timeout);
  }
}

/** Run the command line with `connect(url, mode, log) -> {api, close}`; exits the process when done. */
export async function main(program, connect) {
  let status = 0;
  try {
    const args = parseArgs(process.argv.slice(2), program);
    await (args.plan === undefined ? runScenarios(connect, args) : runPlan(connect, args));
  } catch (error) {
    process.stderr.write(`${error?.stack ?? error}\n`);
    status = 2;
  }
  // Open streams (a legacy session's GET stream) must not keep the process alive.
  process.exit(status);
}
