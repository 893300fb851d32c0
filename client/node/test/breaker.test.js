// SPDX-License-Identifier: Apache-2.0
// breaker.test.js — the Breaker against a real cbd: execute / call / wrap,
// opening and CircuitOpenError with retryAfterMs, fallbacks, classifiers,
// half-open permits handed back whatever the call does (returns, throws, is
// aborted), stateChange events, the duration reported for slow-call rules,
// many concurrent calls on one connection, a private breaker.
// Breakers that check what cbd holds right after a call run uncached
// (cached: false): cached mode learns of its own trips one event later
// (cache.test.js covers it); virtual-clock breakers are never cached.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as delay } from 'node:timers/promises';
import { uniqueName, sharedDaemon } from './helpers.js';
import { Breaker, Client, CircuitOpenError, ServerError, classifyHttp, IGNORE, SUCCESS } from '../index.js';

let d;
let client;
sharedDaemon(async (dd, cc) => {
  d = dd;
  client = cc;
});

const boom = async () => {
  throw new Error('dependency down');
};

async function fails(b, n) {
  for (let i = 0; i < n; i++) await assert.rejects(b.call(boom), /dependency down/);
}

// A breaker in virtual time (ctx.now) on a fresh circuit.
function virtual(policy, options = {}) {
  const clock = { t: 1_700_000_000_000 };
  const b = new Breaker(uniqueName('v'), { client, clock: () => clock.t, policy, ...options });
  return { b, clock };
}

test('execute returns the result and reports a success', async () => {
  const b = new Breaker(uniqueName('ok'), { client, cached: false });
  assert.equal(await b.execute(async () => 42), 42);
  assert.equal(await b.call(async (x, y) => x + y, 1, 2), 3);
  assert.equal(await b.call((x) => x * 2, 4), 8, 'a plain function too');
  const snap = (await client.get(b.name)).snapshot;
  assert.equal(snap.totals.successes, 3);
});

test('failures open the circuit; CircuitOpenError carries retryAfterMs', async () => {
  const b = new Breaker(uniqueName('open'), { client, cached: false, policy: { failure_threshold: 2, break_ms: 60000 } });
  await fails(b, 2);
  assert.equal(b.state, 'open');
  let ran = false;
  await assert.rejects(b.call(async () => { ran = true; }), (e) => {
    assert.ok(e instanceof CircuitOpenError);
    assert.equal(e.code, 'open');
    assert.equal(e.state, 'open');
    assert.ok(e.retryAfterMs > 0 && e.retryAfterMs <= 60000);
    return true;
  });
  assert.equal(ran, false);
  // A fallback answers instead, per call or on the breaker.
  assert.equal(await b.execute(async () => 1, { fallback: (e) => `fallback ${e.state}` }), 'fallback open');
  const fb = new Breaker(b.name, { client, cached: false, fallback: () => 'cached' });
  assert.equal(await fb.call(async () => 1), 'cached');
});

test('a refusal that is an answer (bad_request) is thrown as it is', async () => {
  const b = new Breaker(uniqueName('bad'), { client, policy: { break_ms: 0 } });
  await assert.rejects(b.call(async () => 1), (e) => e instanceof ServerError && e.code === 'bad_request');
});

test('wrap returns a protected async function', async () => {
  const b = new Breaker(uniqueName('wrap'), { client, cached: false, policy: { failure_threshold: 1 } });
  const get = b.wrap(async (id) => {
    if (id < 0) throw new Error('no');
    return { id };
  });
  assert.deepEqual(await get(7), { id: 7 });
  assert.equal(get.breaker, b);
  await assert.rejects(get(-1), /no/);
  await assert.rejects(get(1), CircuitOpenError);
});

test('the classifier: success, failure and ignore; a throwing classifier is a failure', async () => {
  const classify = (e) => (e.message === 'business' ? SUCCESS : e.message === 'cancel' ? IGNORE : e.message === 'weird' ? 'nonsense' : 'failure');
  const b = new Breaker(uniqueName('cls'), { client, cached: false, classify, policy: { failure_threshold: 1000 } });
  for (const msg of ['business', 'cancel', 'real', 'weird']) {
    await assert.rejects(b.call(async () => { throw new Error(msg); }));
  }
  const t = (await client.get(b.name)).snapshot.totals;
  assert.deepEqual([t.successes, t.ignored, t.failures], [1, 1, 2]);
  const thrower = new Breaker(uniqueName('cls2'), { client, classify: () => { throw new Error('x'); }, policy: { failure_threshold: 1 } });
  await assert.rejects(thrower.call(boom));
  assert.equal(thrower.state, 'open');
});

test('classifyResults with the HTTP classifier: a fetch-like 503 Response is a failure', async () => {
  const b = new Breaker(uniqueName('http'), { client, cached: false, classify: classifyHttp, classifyResults: true, policy: { failure_threshold: 2 } });
  const response = (status) => ({ status, ok: status < 400 });
  assert.equal((await b.call(async () => response(404))).status, 404);
  assert.equal(b.state, 'closed');
  await b.call(async () => response(503));
  await b.call(async () => response(503));
  assert.equal(b.state, 'open');
  const t = (await client.get(b.name)).snapshot.totals;
  assert.deepEqual([t.successes, t.failures], [1, 2]);
});

test('half_open: the permit goes back when the call returns, throws or is aborted', async () => {
  const { b, clock } = virtual({ failure_threshold: 1, break_ms: 1000, half_open_max: 1, success_threshold: 5 }, {
    classify: (e) => (e.name === 'AbortError' ? IGNORE : e.message === 'fine' ? SUCCESS : 'failure'),
  });
  await fails(b, 1);
  clock.t += 1000;
  // Thrown, classified as a success: the slot is handed back with record.
  await assert.rejects(b.call(async () => { throw new Error('fine'); }), /fine/);
  assert.equal(b.state, 'half_open');
  // Aborted: outcome ignore, the slot handed back.
  const ctl = new AbortController();
  const p = b.call(() => new Promise((_, reject) => ctl.signal.addEventListener('abort', () => reject(ctl.signal.reason))));
  await delay(5);
  ctl.abort();
  await assert.rejects(p, (e) => e.name === 'AbortError');
  // The only slot is free again: a trial may run (it would be refused if not).
  assert.equal(await b.call(async () => 'trial'), 'trial');
  const st = await client.stats();
  assert.equal(st.slots, 0, 'no slot left behind');
  // Two permits in flight at once: the second is refused while the first runs.
  let release;
  const first = b.call(() => new Promise((r) => { release = r; }));
  await delay(5);
  await assert.rejects(b.call(async () => 1), (e) => e instanceof CircuitOpenError && e.state === 'half_open');
  release('done');
  assert.equal(await first, 'done');
});

test('stateChange events: closed -> open -> half_open -> closed', async () => {
  const { b, clock } = virtual({ failure_threshold: 1, break_ms: 500, success_threshold: 1 });
  const seen = [];
  b.on('stateChange', (prev, state, err) => seen.push([prev, state, err?.message ?? null]));
  await fails(b, 1);
  clock.t += 500;
  await b.call(async () => 1);
  assert.deepEqual(seen, [['closed', 'open', 'dependency down'], ['open', 'half_open', null], ['half_open', 'closed', null]]);
  // refresh() sees a change made elsewhere.
  await client.setState(b.name, 'open', { ctx: { now: clock.t } });
  assert.equal(await b.refresh(), 'open');
  assert.deepEqual(seen.at(-1), ['closed', 'open', null]);
});

test('the duration is reported: slow calls open a rate circuit', async () => {
  const b = new Breaker(uniqueName('slow'), { client, cached: false, policy: { trip: 'rate', window_size: 4, minimum_calls: 2, slow_call_ms: 20, slow_call_rate: 50 } });
  await b.call(() => delay(40));
  await b.call(() => delay(40));
  assert.equal(b.state, 'open');
  const snap = (await client.get(b.name)).snapshot;
  assert.equal(snap.totals.successes, 2);
});

test('many calls in flight through one breaker share one connection', async () => {
  const c = new Client(d.socket, { ioTimeoutMs: 2000 });
  const b = new Breaker(uniqueName('conc'), { client: c, cached: false, policy: { failure_threshold: 1000 } });
  const results = await Promise.all(Array.from({ length: 100 }, (_, i) => b.call(async () => { await delay(1); return i; })));
  assert.deepEqual(results, Array.from({ length: 100 }, (_, i) => i));
  assert.equal((await c.get(b.name)).snapshot.totals.successes, 100);
  c.close();
});

test('force and a private breaker (no cbd)', async () => {
  const b = new Breaker(uniqueName('force'), { client });
  assert.equal(await b.forceOpen(), 'open');
  await assert.rejects(b.call(async () => 1), CircuitOpenError);
  assert.equal(await b.forceClose(), 'closed');
  const p = Breaker.private('solo', { policy: { failure_threshold: 2, break_ms: 1000 } });
  assert.equal(p.client, null);
  await fails(p, 2);
  await assert.rejects(p.call(async () => 1), (e) => e instanceof CircuitOpenError && e.retryAfterMs > 0);
});

test('bad options are refused with the field named', () => {
  assert.throws(() => new Breaker('', { client }), /name/);
  assert.throws(() => new Breaker('x', { client, storePolicy: 'maybe' }), /storePolicy/);
  assert.throws(() => new Breaker('x', { client, policy: { failure_treshold: 1 } }), /failure_treshold/);
  assert.throws(() => new Breaker('x', { client, policy: { preset: 'nope' } }), /preset/);
  assert.throws(() => new Breaker('x', { client, timeoutBackoffMs: -1 }), /timeoutBackoffMs/);
});

test('a natural classifier is never asked about a success: 5 successes, closed (breaker and Retry)', async () => {
  const { Retry } = await import('../index.js');
  const asked = [];
  // Written the natural way: "ignore NotFound, everything else is a failure".
  const natural = (e) => {
    asked.push(e);
    return e?.name === 'NotFound' ? IGNORE : 'failure';
  };
  for (const viaRetry of [false, true]) {
    const b = new Breaker(uniqueName('natural'), { client, cached: false, classify: natural, policy: { failure_threshold: 3 } });
    const r = new Retry({ breaker: b, attempts: 1 });
    for (let i = 0; i < 5; i++) assert.equal(await (viaRetry ? r.call(async () => 'ok') : b.call(async () => 'ok')), 'ok');
    const { snapshot } = await client.get(b.name);
    assert.deepEqual([snapshot.state, snapshot.totals.successes, snapshot.totals.failures], ['closed', 5, 0]);
  }
  assert.deepEqual(asked, []);
});
