// Validates a HAR file with the registry's har-validator (HAR 1.2 JSON schema, ajv):
//   node validate.cjs FILE.har
// Prints {"valid": true} or {"valid": false, "errors": [...]} on stdout; exits 0 either way (2 on
// an unreadable file), so the test reads the verdict and shows every error.
'use strict';
const fs = require('node:fs');
const validate = require('har-validator');

async function main() {
  const text = fs.readFileSync(process.argv[2], 'utf8');
  try {
    await validate.har(JSON.parse(text));
    process.stdout.write(JSON.stringify({ valid: true }) + '\n');
  } catch (err) {
    process.stdout.write(JSON.stringify({ valid: false, errors: err.errors || [String(err)] }) + '\n');
  }
}

main().catch((err) => {
  process.stderr.write(String(err) + '\n');
  process.exit(2);
});
