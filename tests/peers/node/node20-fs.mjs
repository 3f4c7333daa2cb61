// `node --import <this file> ...`: lets @modelcontextprotocol/conformance, built for Node >= 22, load
// on Node 20. The CLI imports `globSync` from 'fs', which Node 20 does not export, and a missing named
// export fails the whole module graph when it is linked, although only the CLI's tier-check command
// ever calls it. On Node < 22 this registers node20-fs-hooks.mjs, which hands the conformance
// package's own imports of 'fs' a module with a small globSync added; newer Node is left alone.
import { register } from 'node:module';

const major = Number(process.versions.node.split('.')[0]);
if (major < 22) {
  register(new URL('./node20-fs-hooks.mjs', import.meta.url));
}
