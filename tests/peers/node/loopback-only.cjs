// Preload for every Node process the tests start: `node --require <this file> ...`.
//
// Each TCP server in the process listens on 127.0.0.1, whatever address the program asked for.
// @modelcontextprotocol/server-everything calls app.listen(PORT) and the conformance CLI starts its
// mock servers with listen(0); left alone, both would listen on every interface of the machine.
//
// Giving listen() a host makes Node resolve it with dns.lookup, asynchronously, even when it is an IP
// literal, so server.address() would still be null when listen() returns; the conformance CLI reads
// it right then. While one of our listen() calls runs, a lookup of an IP literal therefore answers on
// the spot.
//
// With MCP_TEST_PEER_ANNOUNCE=1, the first server that starts listening prints "READY <port>" on
// stdout: the test runner starts servers with PORT=0 and learns the port they got from that line.
'use strict';

const dns = require('node:dns');
const net = require('node:net');

const LOOPBACK = '127.0.0.1';
const realListen = net.Server.prototype.listen;
const realLookup = dns.lookup;
let listenDepth = 0;
let announcePending = process.env.MCP_TEST_PEER_ANNOUNCE === '1';

dns.lookup = function lookup(hostname, options, callback) {
  const done = typeof options === 'function' ? options : callback;
  const wantsAll = options !== null && typeof options === 'object' && options.all === true;
  const family = net.isIP(String(hostname));
  if (listenDepth > 0 && family !== 0 && !wantsAll && typeof done === 'function') {
    done(null, hostname, family);
    return {};
  }
  return realLookup.apply(this, arguments);
};

// The argument list of a TCP listen(), rewritten to the options form with the loopback host; null
// for anything that is not a TCP port (a Unix socket path, a handle, a file descriptor).
function onLoopback(args) {
  const first = args[0];
  if (first !== null && typeof first === 'object') {
    const isHandle = first.fd !== undefined || first.handle !== undefined || first._handle !== undefined;
    if (isHandle || first.path !== undefined) return null;
    return [{ ...first, host: LOOPBACK }, ...args.slice(1)];
  }
  if (typeof first === 'string' && !/^\d+$/.test(first)) return null;
  const portGiven = typeof first === 'number' || typeof first === 'string';
  const rest = portGiven ? args.slice(1) : args.filter((arg) => arg !== undefined);
  const callback = typeof rest[rest.length - 1] === 'function' ? rest.pop() : undefined;
  const options = { port: portGiven ? Number(first) : 0, host: LOOPBACK };
  const backlog = rest.find((arg) => typeof arg === 'number');
  if (backlog !== undefined) options.backlog = backlog;
  return callback === undefined ? [options] : [options, callback];
}

net.Server.prototype.listen = function listen(...args) {
  const rewritten = onLoopback(args);
  if (rewritten === null) return realListen.apply(this, args);
  if (announcePending) {
    announcePending = false;
    this.once('listening', () => process.stdout.write(`READY ${this.address().port}\n`));
  }
  listenDepth += 1;
  try {
    return realListen.apply(this, rewritten);
  } finally {
    listenDepth -= 1;
  }
};
