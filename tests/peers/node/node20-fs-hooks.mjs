// Module resolve hook registered by node20-fs.mjs (Node < 22 only): 'fs' or 'node:fs' imported from
// inside @modelcontextprotocol/conformance resolves to the module below, which is node:fs plus a
// globSync for the only pattern shape the CLI uses, '**/<file name>' (every file of that name under
// `cwd`, as paths relative to it). Anything else it is asked for fails loudly instead of guessing.
const WITH_GLOBSYNC = `
import fs from 'node:fs';
import path from 'node:path';
export * from 'node:fs';
export default fs;
export function globSync(pattern, options = {}) {
  const match = /^\\*\\*\\/([^*?/[\\]{}]+)$/.exec(String(pattern));
  if (match === null) {
    throw new Error('the Node 20 globSync shim only knows "**/<file name>" patterns, not ' + pattern);
  }
  const cwd = options.cwd === undefined ? process.cwd() : String(options.cwd);
  return fs
    .readdirSync(cwd, { recursive: true })
    .map(String)
    .filter((relative) => path.basename(relative) === match[1])
    .filter((relative) => fs.statSync(path.join(cwd, relative)).isFile());
}
`;
const SHIM_URL = `data:text/javascript,${encodeURIComponent(WITH_GLOBSYNC)}`;
const CONFORMANCE = '/node_modules/@modelcontextprotocol/conformance/';

export async function resolve(specifier, context, nextResolve) {
  const fromConformance = context.parentURL !== undefined && context.parentURL.includes(CONFORMANCE);
  if (fromConformance && (specifier === 'fs' || specifier === 'node:fs')) {
    return { url: SHIM_URL, shortCircuit: true };
  }
  return nextResolve(specifier, context);
}
