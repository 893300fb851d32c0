// SPDX-License-Identifier: Apache-2.0
// fallback.test.js — the store policies when cbd is unreachable
// (libcbclient's resilient store): cbd killed and cbd SIGSTOPped (bounded:
// one timeout per backoff window, counted, not timed), then back. The
// breakers run uncached (every call asks cbd first); cache.test.js has the
// cached breaker's fallback.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as delay } from 'node:timers/promises';
import { performance } from 'node:perf_hooks';
import { Daemon } from './helpers.js';
import { ALLOW, REJECT, Breaker, Client, CircuitOpenError, UnavailableError } from '../index.js';

const boom = async () => {
  throw new Error('dependency down');
};

async function fails(b, n) {
  for (let i = 0; i < n; i++) await assert.rejects(b.call(boom), /dependency down/);
}

// A daemon of this test alone, cleaned up at the end.
async function withCbd(t) {
  const d = await Daemon.start();
  t.after(() => d.cleanup());
  return d;
}

function breaker(d, options = {}) {
  const errors = [];
  const client = new Client(d.socket, { ioTimeoutMs: 500, connectTimeoutMs: 2000 });
  const b = new Breaker('payments', { client, cached: false, ...options });
  b.on('storeError', (err, op) => errors.push([err.code, op]));
  return { b, errors, client };
}

test('LOCAL keeps an open circuit open', async (t) => {
  const d = await withCbd(t);
  const { b, errors } = breaker(d, { policy: { failure_threshold: 2, break_ms: 60000 } });
  await fails(b, 2);
  await d.kill();
  await assert.rejects(b.call(async () => 'never'), (e) => e instanceof CircuitOpenError && e.retryAfterMs > 0 && e.retryAfterMs <= 60000);
  assert.deepEqual(errors[0], ['unavailable', 'allow']);
});

test("LOCAL breaks with cbd's policy, from cbd's count", async (t) => {
  const d = await withCbd(t);
  const c = new Client(d.socket);
  await c.recordFailure('payments', { ctx: { failure_threshold: 3 } });
  c.close();
  // Declares 50; cbd's policy (3) rules the circuit and the local copy.
  const { b } = breaker(d, { policy: { failure_threshold: 50, break_ms: 1000 } });
  await fails(b, 1); // failure_count 2 at cbd, its snapshot remembered
  await d.kill();
  await fails(b, 1); // 3 locally: open
  assert.equal(b.state, 'open');
  await assert.rejects(b.call(async () => 'never'), CircuitOpenError);
});

test('LOCAL runs the rate rule in process', async (t) => {
  const d = await withCbd(t);
  const { b } = breaker(d, { policy: { trip: 'rate', window_size: 4, minimum_calls: 4, failure_rate: 50 } });
  await b.call(async () => 1);
  await d.kill();
  await b.call(async () => 1);
  await b.call(async () => 1);
  await fails(b, 1);
  assert.equal(b.state, 'closed'); // 1 of 3 so far: the window starts empty locally
  await fails(b, 1);
  assert.equal(b.state, 'open'); // 2 of 4 = 50 %
});

test('LOCAL keeps a held open circuit open past its break', async (t) => {
  const d = await withCbd(t);
  const c = new Client(d.socket);
  await c.setState('payments', 'open', { hold: true, reason: 'maintenance' });
  c.close();
  const { b } = breaker(d, { policy: { break_ms: 1 } });
  await b.refresh();
  await d.kill();
  await delay(5);
  await assert.rejects(b.call(async () => 'never'), CircuitOpenError);
});

test('ALLOW runs calls as if closed', async (t) => {
  const d = await withCbd(t);
  const { b, errors } = breaker(d, { storePolicy: ALLOW, policy: { failure_threshold: 1 } });
  await d.kill();
  await fails(b, 3);
  assert.equal(await b.call(async () => 'runs'), 'runs');
  assert.ok(errors.some(([code, op]) => code === 'unavailable' && op === 'allow'));
});

test('REJECT rejects with the UnavailableError without running the call', async (t) => {
  const d = await withCbd(t);
  const { b } = breaker(d, { storePolicy: REJECT });
  await d.kill();
  let ran = false;
  await assert.rejects(b.call(async () => { ran = true; }), UnavailableError);
  assert.equal(ran, false);
});

test('back to cbd without latching', async (t) => {
  const d = await withCbd(t);
  const { b } = breaker(d, { policy: { failure_threshold: 1, break_ms: 60000 } });
  await d.kill();
  await fails(b, 1);
  assert.equal(b.state, 'open'); // the local copy opened
  await d.start();
  // cbd answers again and is authoritative: it never saw that failure.
  assert.equal(await b.call(async () => 'ok'), 'ok');
  assert.equal(b.state, 'closed');
});

test('a SIGSTOPped cbd costs one timeout per backoff window', async (t) => {
  const d = await withCbd(t);
  const { b, errors, client } = breaker(d, { timeoutBackoffMs: 60000, policy: { failure_threshold: 3 } });
  let sent = 0;
  const request = client.request.bind(client);
  client.request = (...args) => {
    sent += 1;
    return request(...args);
  };
  await b.call(async () => 1);
  const before = sent;
  d.pause();
  const latencies = [];
  try {
    for (let i = 0; i < 20; i++) {
      const t0 = performance.now();
      await b.call(async () => 1);
      latencies.push(performance.now() - t0);
    }
    await fails(b, 3);
    await assert.rejects(b.call(async () => 'never'), CircuitOpenError); // the local copy broke
  } finally {
    d.resume();
  }
  // Exactly one request waited for the stopped cbd; every later one skipped it.
  assert.equal(sent - before, 1);
  assert.deepEqual(errors.map(([code]) => code), Array(47).fill('timeout'));
  console.log(`# stopped cbd: first call ${latencies[0].toFixed(1)} ms (io timeout 500 ms), later calls max ${Math.max(...latencies.slice(1)).toFixed(3)} ms`);
  // A bound on the wait, not a speed figure: nothing waited far past the timeout.
  assert.ok(Math.max(...latencies) < 500 + 5000);
});

test('the backoff ends and cbd is asked again', async (t) => {
  const d = await withCbd(t);
  const { b, client } = breaker(d, { timeoutBackoffMs: 1000 });
  client.ioTimeoutMs = 300;
  let sent = 0;
  const request = client.request.bind(client);
  client.request = (...args) => {
    sent += 1;
    return request(...args);
  };
  d.pause();
  try {
    await b.call(async () => 1);
    await b.call(async () => 1);
    assert.equal(sent, 1);
  } finally {
    d.resume();
  }
  await delay(1100); // past the backoff
  await b.call(async () => 1);
  assert.equal(sent, 3); // allow and record reached cbd again
  assert.equal((await client.get('payments')).snapshot.totals.successes, 1);
  client.close();
});
