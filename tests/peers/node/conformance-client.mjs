// A plain TypeScript SDK v2 client for the conformance suite's client scenarios.
//
//   node conformance-client.mjs URL   (the CLI appends URL; MCP_CONFORMANCE_PROTOCOL_VERSION picks the era)
//
// It connects (pinned to a 2026 revision, or as a 2025 client), lists the tools and calls each with
// no arguments, then closes: what the header and _meta scenarios look at, and nothing the suite's
// mock servers do not answer.
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';

const url = process.argv[process.argv.length - 1];
const version = process.env.MCP_CONFORMANCE_PROTOCOL_VERSION || '2025-11-25';
const versionNegotiation = version.startsWith('2026') ? { mode: { pin: version } } : { mode: 'legacy' };
const client = new Client({ name: 'mcp-debug-proxy-conformance-client', version: '1.0.0' }, { capabilities: {}, versionNegotiation });
try {
  await client.connect(new StreamableHTTPClientTransport(new URL(url)));
  const { tools } = await client.listTools();
  for (const tool of tools) await client.callTool({ name: tool.name, arguments: {} });
} catch (error) {
  console.error('client error', String(error));
  process.exitCode = 1;
}
await client.close().catch(() => {});
process.exit(process.exitCode ?? 0);
