#!/usr/bin/env node
// bench.js — what the Node.js client costs per call against a real cbd.
// Prints figures, asserts nothing; not run by make check.
//
//   CBD_BINARY=build/src/cbd node client/node/bench.js [-n CALLS]

import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { Daemon } from './test/helpers.js';
import { Breaker, Client } from './index.js';

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
  const b = new Breaker('bench-breaker', { client: c });
  await timed('breaker.call (allow + record), one at a time', n, async () => {
    for (let i = 0; i < n; i++) await b.call(() => i);
  });
  await timed('breaker.call, 64 concurrent', n, async () => {
    for (let i = 0; i < n; i += 64) await Promise.all(Array.from({ length: Math.min(64, n - i) }, () => b.call(() => i)));
  });
  const p = Breaker.private('bench');
  await timed('private breaker (no cbd)', n, async () => {
    for (let i = 0; i < n; i++) await p.call(() => i);
  });
  c.close();
} finally {
  await d.cleanup();
}
