#!/usr/bin/env node
// SPDX-License-Identifier: Apache-2.0
// bench.js — what the Node.js client costs per call against a real cbd.
// Prints figures, asserts nothing; not run by make check. Cached mode: the
// median and p99 of one protected call closed (cached, uncached) and open
// (cached), and of a trip's propagation to a cached breaker.
//
//   CBD_BINARY=build/src/cbd node client/node/bench.js [-n CALLS]

import { spawn } from 'node:child_process';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import readline from 'node:readline';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { Daemon } from './test/helpers.js';
import { Breaker, CircuitOpenError, Client } from './index.js';

// A cached breaker in another process, driven over stdin/stdout.
const PEER = path.join(path.dirname(fileURLToPath(import.meta.url)), 'test', 'cached-peer.js');
const { values } = parseArgs({ options: { n: { type: 'string', short: 'n', default: '20000' } } });
const n = Number(values.n);

function figure(label, calls, ms) {
  const us = (ms * 1000) / calls;
  console.log(`${label.padEnd(48)} ${us.toFixed(1).padStart(9)} µs/call ${Math.round(calls / (ms / 1000)).toString().padStart(10)} calls/s`);
}

async function timed(label, calls, fn) {
  const t0 = performance.now();
  await fn();
  figure(label, calls, performance.now() - t0);
}

/** The median and p99 of samples (ms), printed in µs. */
function percentiles(label, samples) {
  const sorted = Float64Array.from(samples).sort();
  const at = (q) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] * 1000;
  console.log(`${label.padEnd(48)} p50 ${at(0.5).toFixed(1).padStart(8)} µs  p99 ${at(0.99).toFixed(1).padStart(8)} µs  (${sorted.length} samples)`);
}

/** Each call timed on its own: fn(i) is one protected call; with yielding,
 * the event loop turns between calls (untimed), as in a server. */
async function perCall(label, calls, fn, yielding = false) {
  const samples = new Float64Array(calls);
  for (let i = 0; i < calls; i++) {
    if (yielding) await new Promise(setImmediate);
    const t0 = performance.now();
    await fn(i);
    samples[i] = performance.now() - t0;
  }
  percentiles(label, samples);
}

const waitUntil = async (cond) => {
  for (let i = 0; !cond(); i++) {
    if (i > 10000) throw new Error('bench: a condition never held (10 s)');
    await new Promise((r) => setTimeout(r, 1));
  }
};

/** Cached mode: the cost of a protected call closed (cached, uncached)
 * and open (refused from the cache), and how long a trip made on another
 * connection takes to reach a cached breaker's stateChange. */
async function cachedFigures(c) {
  const empty = () => undefined;
  const cached = new Breaker('bench-cached', { client: c, policy: { failure_threshold: 1e9 } });
  await cached.call(empty);
  await waitUntil(() => cached.cacheLive);
  await perCall('closed, cached (back to back)', n, () => cached.call(empty));
  await perCall('closed, cached (the loop turns between calls)', n, () => cached.call(empty), true);
  const uncached = new Breaker('bench-uncached', { client: c, cached: false });
  await perCall('closed, uncached (allow + record)', Math.min(n, 5000), () => uncached.call(empty));
  const refuse = () => cached.call(empty).catch((e) => {
    if (!(e instanceof CircuitOpenError)) throw e;
  });
  await c.setState('bench-cached', 'open', { hold: true });
  await waitUntil(() => cached.state === 'open');
  await perCall('open, cached (refused locally)', n, refuse);
  await c.release('bench-cached');
  await c.setState('bench-cached', 'closed');
  await waitUntil(() => cached.state === 'closed');
  const stats = cached.cacheStats();
  console.log(`cached: ${stats.noreplyLines} noreply lines in ${stats.writes} writes, ${stats.storeReports} through the client, ${stats.outFull} past 1 MiB`);

  // Propagation: set_state open on another connection until the cached
  // breaker's stateChange (its watch connection applied the event).
  const samples = [];
  let opened = null;
  cached.on('stateChange', (prev, state) => {
    if (state === 'open' && opened) opened(performance.now());
  });
  for (let i = 0; i < 1000; i++) {
    const seen = new Promise((r) => {
      opened = r;
    });
    const t0 = performance.now();
    c.setState('bench-cached', 'open');
    samples.push((await seen) - t0);
    opened = null;
    await c.setState('bench-cached', 'closed');
    await waitUntil(() => cached.state === 'closed');
  }
  percentiles('propagation, same process', samples);
  await cached.close();
  await propagationToPeer(c);
}

/** Propagation to another process (test/cached-peer.js): set_state open
 * here until that process's cached breaker fires stateChange (times from
 * performance.timeOrigin + now() in each process). */
async function propagationToPeer(c) {
  const name = 'bench-peer';
  const peer = spawn(process.execPath, [PEER, d.socket, name, '{}'], { stdio: ['pipe', 'pipe', 'inherit'] });
  const messages = [];
  let wake = null;
  readline.createInterface({ input: peer.stdout }).on('line', (line) => {
    messages.push(JSON.parse(line));
    wake?.();
  });
  const next = async (pred) => {
    for (let waited = 0; ; waited += 1) {
      const i = messages.findIndex(pred);
      if (i >= 0) return messages.splice(i, 1)[0];
      if (waited > 10000) throw new Error('bench: the peer did not answer (10 s)');
      await Promise.race([new Promise((r) => { wake = r; }), new Promise((r) => setTimeout(r, 1))]);
    }
  };
  try {
    await next((m) => m.ready);
    peer.stdin.write('changes\n');
    await next((m) => m.changes);
    const samples = [];
    for (let i = 0; i < 1000; i++) {
      const t0 = performance.timeOrigin + performance.now();
      c.setState(name, 'open');
      samples.push((await next((m) => m.change === 'open')).at - t0);
      await c.setState(name, 'closed');
      await next((m) => m.change === 'closed');
    }
    percentiles('propagation, to another process', samples);
  } finally {
    peer.stdin.end('close\n');
    await new Promise((r) => (peer.exitCode !== null ? r() : peer.once('exit', r)));
  }
}

const d = await Daemon.start();
try {
  const c = new Client(d.socket, { ioTimeoutMs: 5000 });
  await c.hello();
  await timed('get, one at a time', n, async () => {
    for (let i = 0; i < n; i++) await c.get('bench');
  });
  await timed('get, all in flight (1024 on the wire)', n, async () => {
    await Promise.all(Array.from({ length: n }, () => c.get('bench')));
  });
  await timed('get, 64 in flight at a time', n, async () => {
    for (let i = 0; i < n; i += 64) await Promise.all(Array.from({ length: Math.min(64, n - i) }, () => c.get('bench')));
  });
  const b = new Breaker('bench-breaker', { client: c, cached: false });
  await timed('breaker.call (uncached: allow + record), one at a time', n, async () => {
    for (let i = 0; i < n; i++) await b.call(() => i);
  });
  await timed('breaker.call (uncached), 64 concurrent', n, async () => {
    for (let i = 0; i < n; i += 64) await Promise.all(Array.from({ length: Math.min(64, n - i) }, () => b.call(() => i)));
  });
  const p = Breaker.private('bench');
  await timed('private breaker (no cbd)', n, async () => {
    for (let i = 0; i < n; i++) await p.call(() => i);
  });
  await cachedFigures(c);
  c.close();
} finally {
  await d.cleanup();
}
