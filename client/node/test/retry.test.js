// SPDX-License-Identifier: Apache-2.0
// retry.test.js — retries, backoff and timeouts in virtual time (injected
// clock, sleep and random): exponential backoff with full jitter, retryOn,
// retryOnResult, the per-attempt timeout (the attempt's signal aborted),
// hooks; with a breaker on a real cbd: asked before every attempt, told
// every outcome, an open-circuit refusal ends the retries at once.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { VirtualClock, uniqueName, sharedDaemon } from './helpers.js';
import { AttemptTimeoutError, Breaker, CircuitOpenError, Client, Retry, RetryableResult, classifyHttp } from '../index.js';

let d;
let client;
sharedDaemon(async (dd, cc) => {
  d = dd;
  client = cc;
});

// A function failing its first n calls, then answering 'ok'.
function flaky(n) {
  const f = async () => {
    f.calls += 1;
    if (f.calls <= n) throw new Error(`failure ${f.calls}`);
    return 'ok';
  };
  f.calls = 0;
  return f;
}

function recorder() {
  const events = [];
  const hook = (name) => (...args) => events.push([name, ...args.map((a) => (a instanceof Error ? a.message : a))]);
  const hooks = Object.fromEntries(['onRetry', 'onTimeout', 'onFailure', 'onCircuitOpen', 'onCircuitHalfOpen', 'onCircuitClosed'].map((n) => [n, hook(n)]));
  return { events, hooks };
}

test('backoff: exponential, capped at maxMs, full jitter', () => {
  const exact = new Retry({ baseMs: 100, maxMs: 1000, jitter: false });
  assert.deepEqual([1, 2, 3, 4, 5, 6, 100].map((n) => exact.delayMs(n)), [100, 200, 400, 800, 1000, 1000, 1000]);
  const half = new Retry({ baseMs: 100, maxMs: 1000, random: () => 0.5 });
  assert.deepEqual([1, 2, 3, 4, 5].map((n) => half.delayMs(n)), [50, 100, 200, 400, 500]);
  const top = new Retry({ baseMs: 100, maxMs: 1000, random: () => 0.999999 });
  assert.ok([1, 2, 3, 4, 5].every((n) => top.delayMs(n) < Math.min(1000, 100 * 2 ** (n - 1))));
  assert.equal(new Retry({ random: () => 0 }).delayMs(3), 0);
  assert.throws(() => new Retry({ attempts: 0 }), /attempts/);
  assert.throws(() => new Retry({ baseMs: 10, maxMs: 5 }), /maxMs/);
  assert.throws(() => new Retry({ attemptTimeoutMs: 0 }), /attemptTimeoutMs/);
});

test('retries until success, sleeping the backoff in virtual time', async () => {
  const vc = new VirtualClock();
  const { events, hooks } = recorder();
  const r = new Retry({ attempts: 4, baseMs: 100, maxMs: 10000, random: () => 0.5, clock: vc.now, sleep: vc.sleep, hooks });
  const f = flaky(2);
  assert.equal(await r.call(f), 'ok');
  assert.equal(f.calls, 3);
  assert.deepEqual(vc.sleeps, [50, 100]);
  assert.deepEqual(events, [
    ['onFailure', 1, 'failure 1'], ['onRetry', 1, 'failure 1', 50],
    ['onFailure', 2, 'failure 2'], ['onRetry', 2, 'failure 2', 100],
  ]);
});

test('the last error once the attempts are spent; retryOn can stop early', async () => {
  const vc = new VirtualClock();
  const f = flaky(10);
  await assert.rejects(new Retry({ attempts: 3, clock: vc.now, sleep: vc.sleep }).call(f), /failure 3/);
  assert.equal(f.calls, 3);
  const g = flaky(10);
  const r = new Retry({ attempts: 5, retryOn: (e) => !e.message.endsWith('2'), clock: vc.now, sleep: vc.sleep });
  await assert.rejects(r.call(g), /failure 2/);
  assert.equal(g.calls, 2);
});

test('retryOnResult retries a returned 503', async () => {
  const vc = new VirtualClock();
  const answers = [{ status: 503 }, { status: 503 }, { status: 200 }];
  let n = 0;
  const { events, hooks } = recorder();
  const r = new Retry({ attempts: 5, retryOnResult: (res) => res.status >= 500, clock: vc.now, sleep: vc.sleep, hooks, random: () => 0 });
  assert.deepEqual(await r.call(async () => answers[n++]), { status: 200 });
  assert.equal(n, 3);
  assert.equal(events.filter(([e]) => e === 'onRetry').length, 2);
});

test('the per-attempt timeout aborts the attempt and counts as a failure', async () => {
  const vc = new VirtualClock();
  const { events, hooks } = recorder();
  const signals = [];
  const r = new Retry({ attempts: 3, attemptTimeoutMs: 500, random: () => 0, clock: vc.now, sleep: vc.sleep, hooks });
  const hang = ({ signal, attempt }) => {
    signals.push(signal);
    if (attempt === 3) return 'third';
    return new Promise(() => {}); // never answers
  };
  assert.equal(await r.call(hang), 'third');
  assert.deepEqual(signals.map((s) => s.aborted), [true, true, false]);
  assert.ok(signals[0].reason instanceof AttemptTimeoutError);
  assert.deepEqual(events.filter(([e]) => e === 'onTimeout'), [['onTimeout', 1], ['onTimeout', 2]]);
  assert.equal(vc.t, 1_700_000_000_000 + 1000, 'two timeouts of 500 ms, no backoff');
});

test('the breaker is asked before every attempt; an open circuit ends the retries at once', async () => {
  const vc = new VirtualClock();
  const b = new Breaker(uniqueName('retry'), { client, clock: vc.now, policy: { failure_threshold: 2, break_ms: 60000 } });
  const { events, hooks } = recorder();
  const r = new Retry({ breaker: b, attempts: 10, random: () => 0, clock: vc.now, sleep: vc.sleep, hooks });
  const f = flaky(100);
  await assert.rejects(r.call(f), (e) => e instanceof CircuitOpenError && e.retryAfterMs === 60000);
  assert.equal(f.calls, 2, 'no attempt once open');
  assert.deepEqual(events.filter(([e]) => e === 'onCircuitOpen'), [['onCircuitOpen', 60000], ['onCircuitOpen', 60000]]);
  const snap = (await client.get(b.name)).snapshot;
  assert.equal(snap.totals.failures, 2, 'every attempt reported');
  // With a fallback the refusal answers instead.
  const withFallback = new Retry({ breaker: b, clock: vc.now, sleep: vc.sleep, fallback: (e) => `later (${e.retryAfterMs} ms)` });
  assert.equal(await withFallback.call(f), 'later (60000 ms)');
  assert.equal(f.calls, 2);
});

test('half_open and closed hooks as the circuit recovers during a run', async () => {
  const vc = new VirtualClock();
  const b = new Breaker(uniqueName('recover'), { client, clock: vc.now, policy: { failure_threshold: 1, break_ms: 1000, success_threshold: 1 } });
  await assert.rejects(b.call(async () => { throw new Error('x'); }));
  assert.equal(b.state, 'open');
  vc.t += 1000;
  const { events, hooks } = recorder();
  const r = new Retry({ breaker: b, clock: vc.now, sleep: vc.sleep, hooks });
  assert.equal(await r.call(async () => 'fine'), 'fine');
  assert.deepEqual(events, [['onCircuitHalfOpen'], ['onCircuitClosed']]);
});

test('timeouts reported to the breaker as failures; HTTP results classified', async () => {
  const vc = new VirtualClock();
  const b = new Breaker(uniqueName('rt'), { client, clock: vc.now, classify: classifyHttp, classifyResults: true, policy: { failure_threshold: 100 } });
  const r = new Retry({ breaker: b, attempts: 3, attemptTimeoutMs: 50, random: () => 0, clock: vc.now, sleep: vc.sleep, retryOnResult: (res) => res.status === 503 });
  let n = 0;
  const res = await r.call(() => (++n === 1 ? new Promise(() => {}) : n === 2 ? { status: 503 } : { status: 200 }));
  assert.equal(res.status, 200);
  const t = (await client.get(b.name)).snapshot.totals;
  assert.deepEqual([t.failures, t.successes], [2, 1]);
});

test('wrap: a retried async function', async () => {
  const vc = new VirtualClock();
  const f = flaky(1);
  const wrapped = new Retry({ clock: vc.now, sleep: vc.sleep }).wrap(async (x) => `${await f()} ${x}`);
  assert.equal(await wrapped('there'), 'ok there');
  assert.ok(new RetryableResult(1) instanceof Error);
});
