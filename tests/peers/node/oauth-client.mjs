// The TypeScript SDK v1's OAuth client logging in and calling, given one URL: the MCP endpoint.
//
//   node oauth-client.mjs URL
//
// Client + StreamableHTTPClientTransport with an OAuthClientProvider, as a user's client is built: it
// finds the 401's challenge, the protected resource metadata and the authorization server's metadata,
// registers, asks for authorization (the "browser" is a fetch of the authorization URL that reads the
// redirect's code instead of following it), trades the code with finishAuth(), reconnects, lists the
// tools and calls `greet`. Prints one JSON line per HTTP request it made (method, URL without its
// query, status, the WWW-Authenticate it got, the body of each discovery document as received: a /.well-known/ path's, or any JSON answer to a GET), then
// {"step": "done", ...} or {"step": "error", ...}, so a test can tell where each step went and what
// bytes the client was given.
const { Client } = await import('@modelcontextprotocol/sdk/client/index.js');
const { StreamableHTTPClientTransport } = await import('@modelcontextprotocol/sdk/client/streamableHttp.js');
const { UnauthorizedError } = await import('@modelcontextprotocol/sdk/client/auth.js');

const url = new URL(process.argv[2]);
const REDIRECT = 'http://127.0.0.1:1/callback'; // never reached: the redirect to it is read, not followed
const emit = (line) => process.stdout.write(JSON.stringify(line) + '\n');

async function logged(input, init) {
  const response = await fetch(input, init);
  const where = new URL(String(input instanceof Request ? input.url : input));
  const line = { step: 'http', method: init?.method ?? 'GET', url: where.origin + where.pathname, status: response.status };
  const challenge = response.headers.get('www-authenticate');
  if (challenge) line.www_authenticate = challenge;
  const json = /json/i.test(response.headers.get('content-type') ?? '');
  if (where.pathname.includes('/.well-known/') || (json && line.method === 'GET')) line.body = await response.clone().text();
  emit(line);
  return response;
}

let code;
const provider = {
  get redirectUrl() { return REDIRECT; },
  get clientMetadata() {
    return {
      client_name: 'ts-oauth-client',
      redirect_uris: [REDIRECT],
      grant_types: ['authorization_code', 'refresh_token'],
      response_types: ['code'],
      token_endpoint_auth_method: 'client_secret_post',
    };
  },
  clientInformation() { return this.info; },
  saveClientInformation(info) { this.info = info; },
  tokens() { return this.saved; },
  saveTokens(tokens) { this.saved = tokens; },
  async redirectToAuthorization(authorizationUrl) {
    emit({ step: 'authorize', url: authorizationUrl.origin + authorizationUrl.pathname, resource: authorizationUrl.searchParams.getAll('resource') });
    const answer = await logged(authorizationUrl, { redirect: 'manual' });
    code = new URL(answer.headers.get('location')).searchParams.get('code');
  },
  saveCodeVerifier(verifier) { this.verifier = verifier; },
  codeVerifier() { return this.verifier; },
};

async function connect(transport) {
  const client = new Client({ name: 'ts-oauth-client', version: '1.0.0' });
  await client.connect(transport);
  return { client, transport };
}

const newTransport = () => new StreamableHTTPClientTransport(url, { authProvider: provider, fetch: logged });

try {
  let connected;
  const challenged = newTransport();
  try {
    connected = await connect(challenged);
  } catch (error) {
    if (!(error instanceof UnauthorizedError)) throw error;
    // The transport that got the 401 trades the code: it keeps the challenge's resource_metadata URL,
    // which a server with its metadata outside /.well-known/ is found by.
    await challenged.finishAuth(code);
    connected = await connect(newTransport());
  }
  const tools = (await connected.client.listTools()).tools.map((tool) => tool.name);
  const greeted = await connected.client.callTool({ name: 'greet', arguments: { name: 'oauth' } });
  await connected.transport.terminateSession().catch(() => {});
  await connected.client.close();
  emit({ step: 'done', tools, greet: greeted.content?.[0]?.text ?? null });
} catch (error) {
  emit({ step: 'error', error: `${error?.constructor?.name}: ${error?.message}`.slice(0, 2000) });
  process.exitCode = 1;
}
