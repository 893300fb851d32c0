// SPDX-License-Identifier: Apache-2.0
// bulkhead.test.js — the bulkhead and the retry budget (protocol 3 §2, §3)
// through the Breaker and Retry, against a real cbd: never more than N
// calls in flight across processes (a counting server fails on N+1), a
// killed process's ticket handed to a waiter, waitMs expiry
// (BulkheadFullError), the ticket back when the call throws or rejects and
// when an AbortSignal aborts the wait, cached breakers taking the round trip
// on a limited circuit, retries marked and stopped by the retry budget
// (RetryBudgetError), exact totals.

import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import { Daemon, TOP, uniqueName, sharedDaemon } from './helpers.js';
import { Breaker, BulkheadFullError, CircuitOpenError, Client, IGNORE, RefusedError, Retry, RetryBudgetError } from '../index.js';

const INDEX = path.join(TOP, 'client', 'node', 'index.js');
const WAIT_MS = 10_000;

let d;
let client;
let dir;
sharedDaemon(async (dd, cc) => {
  d = dd;
  client = cc;
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cbd-node-bh.'));
});
after(() => {
  fs.rmSync(dir, { recursive: true, force: true });
});

const snapshot = async (name) => (await client.get(name, undefined, { policy: false })).snapshot;

async function until(cond, what) {
  const deadline = Date.now() + WAIT_MS;
  for (;;) {
    if (await cond()) return;
    if (Date.now() > deadline) assert.fail(`not within ${WAIT_MS} ms: ${what}`);
    await delay(5);
  }
}

/** A Unix-socket server counting the requests in flight: each connection
 * is one request, held holdMs and answered "ok"; over counts requests that
 * found limit already in flight. */
function countingServer(limit, holdMs = 10) {
  const s = { path: path.join(dir, `count-${process.pid}-${Math.random()}.sock`), now: 0, peak: 0, over: 0, total: 0 };
  s.server = net.createServer((conn) => {
    conn.once('data', () => {
      s.now += 1;
      s.total += 1;
      if (s.now > limit) s.over += 1;
      s.peak = Math.max(s.peak, s.now);
      setTimeout(() => {
        s.now -= 1;
        conn.end('ok');
      }, holdMs);
    });
    conn.on('error', () => {});
  });
  return new Promise((resolve) => s.server.listen(s.path, () => resolve(s)));
}

// A worker process: CONCURRENCY calls at a time, CALLS in all, through a
// breaker on the circuit (max_concurrent LIMIT, waiting up to 10 s).
const WORKER = `
import net from 'node:net';
import { Breaker, Client } from ${JSON.stringify(INDEX)};
const [sock, name, limit, concurrency, calls, server] = process.argv.slice(1);
const client = new Client(sock, { ioTimeoutMs: 2000, connectTimeoutMs: 2000 });
const b = new Breaker(name, { client, policy: { max_concurrent: Number(limit) }, waitMs: 10000 });
const hit = () => new Promise((resolve, reject) => {
  const c = net.createConnection({ path: server });
  let got = '';
  c.on('connect', () => c.write('x'));
  c.on('data', (x) => { got += x; });
  c.on('end', () => (got === 'ok' ? resolve() : reject(new Error('bad answer'))));
  c.on('error', reject);
});
let left = Number(calls);
const errors = [];
async function lane() {
  while (left > 0) {
    left -= 1;
    try { await b.call(hit); } catch (e) { errors.push(String(e)); }
  }
}
await Promise.all(Array.from({ length: Number(concurrency) }, lane));
console.log('errors', errors.length, errors[0] || '', 'cached', b.cacheStats()?.cachedCalls ?? -1);
await b.close();
client.close();
process.exit(errors.length ? 1 : 0);
`;

// A process that takes a ticket and holds it until killed.
const HOLDER = `
import { Breaker, Client } from ${JSON.stringify(INDEX)};
const [sock, name] = process.argv.slice(1);
const b = new Breaker(name, { client: new Client(sock, { ioTimeoutMs: 2000 }), cached: false, policy: { max_concurrent: 1 } });
const p = await b.acquire();
console.log('held', p.token);
setInterval(() => {}, 1000);
`;

function run(script, args) {
  const child = spawn(process.execPath, ['--input-type=module', '-e', script, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  child.out = '';
  child.stdout.on('data', (x) => { child.out += x; });
  child.stderr.on('data', (x) => { child.out += x; });
  child.done = new Promise((resolve) => child.on('exit', (code) => resolve(code)));
  return child;
}

test('never more than max_concurrent calls in flight across processes', async () => {
  const name = uniqueName('bh-n');
  const limit = 3;
  const procs = 3;
  const calls = 40;
  const server = await countingServer(limit);
  try {
    const workers = Array.from({ length: procs }, () => run(WORKER, [d.socket, name, String(limit), '6', String(calls), server.path]));
    const codes = await Promise.all(workers.map((w) => w.done));
    for (const [i, w] of workers.entries()) {
      assert.equal(codes[i], 0, w.out);
      assert.match(w.out, /cached 0\b/, `a ticket is never granted from a cache: ${w.out}`);
    }
  } finally {
    server.server.close();
  }
  assert.equal(server.total, procs * calls);
  assert.equal(server.over, 0, `${server.peak} calls in flight, limit ${limit}`);
  const snap = await snapshot(name);
  assert.equal(snap.in_flight, 0);
  assert.equal(snap.totals.successes, procs * calls);
  assert.equal(snap.totals.rejected_concurrency, 0);
});

test("a killed process's ticket goes to a waiter", async () => {
  const name = uniqueName('bh-kill');
  const holder = run(HOLDER, [d.socket, name]);
  try {
    await until(() => holder.out.startsWith('held '), 'the holder takes its ticket');
    assert.equal((await snapshot(name)).in_flight, 1);
    const b = new Breaker(name, { client: new Client(d.socket, { ioTimeoutMs: 2000 }), cached: false, waitMs: 30000, policy: { max_concurrent: 1 } });
    const waiting = b.acquire();
    await until(async () => (await client.stats()).waiters === 1, 'the acquire waits');
    holder.kill('SIGKILL');
    const permit = await waiting;
    assert.ok(permit.token, 'the waiter got the freed ticket');
    assert.equal((await snapshot(name)).in_flight, 1);
    await b.report(permit, 'success');
    const snap = await snapshot(name);
    assert.equal(snap.in_flight, 0);
    assert.equal(snap.totals.rejected_concurrency, 0);
    await b.close();
    b.client.close();
  } finally {
    holder.kill('SIGKILL');
    await holder.done;
  }
});

test('waitMs expiry and no wait reject with BulkheadFullError; a fallback gets it', async () => {
  const name = uniqueName('bh-full');
  const holderClient = new Client(d.socket, { ioTimeoutMs: 2000 });
  const holder = new Breaker(name, { client: holderClient, cached: false, policy: { max_concurrent: 1 } });
  const p = await holder.acquire();
  assert.ok(p.token);
  for (const waitMs of [0, 50]) {
    const c = new Client(d.socket, { ioTimeoutMs: 2000 });
    const b = new Breaker(name, { client: c, waitMs, policy: { max_concurrent: 1 } });
    await assert.rejects(b.call(() => assert.fail('ran without a ticket')), (e) => {
      assert.ok(e instanceof BulkheadFullError && e instanceof RefusedError);
      assert.ok(!(e instanceof CircuitOpenError));
      assert.equal(e.reason, 'concurrency');
      assert.equal(e.inFlight, 1);
      assert.equal(e.retryAfterMs, 0);
      assert.equal(e.state, 'closed');
      return true;
    });
    await b.close();
    c.close();
  }
  const b = new Breaker(name, { client: holderClient, cached: false, policy: { max_concurrent: 1 }, fallback: (e) => e });
  assert.ok((await b.call(() => 1)) instanceof BulkheadFullError);
  await holder.report(p, 'success');
  assert.equal(await b.call(() => 7), 7);
  const snap = await snapshot(name);
  assert.equal(snap.in_flight, 0);
  assert.equal(snap.totals.rejected_concurrency, 3);
  assert.equal(snap.totals.rejected, 0);
  assert.equal(snap.state, 'closed');
  holderClient.close();
});

test('an open circuit is CircuitOpenError, not BulkheadFullError', async () => {
  const name = uniqueName('bh-open');
  const b = new Breaker(name, { client, cached: false, policy: { max_concurrent: 2, failure_threshold: 1 } });
  await assert.rejects(b.call(() => { throw new Error('down'); }), /down/);
  await assert.rejects(b.call(() => 1), (e) => e instanceof CircuitOpenError && e.reason === 'open' && e.retryAfterMs > 0);
  assert.equal((await snapshot(name)).in_flight, 0);
});

test('the ticket goes back when the call throws, rejects or is aborted', async () => {
  const name = uniqueName('bh-back');
  const c = new Client(d.socket, { ioTimeoutMs: 2000 });
  const b = new Breaker(name, { client: c, policy: { max_concurrent: 1 }, waitMs: 30000 });
  await assert.rejects(b.call(async () => {
    assert.equal((await snapshot(name)).in_flight, 1);
    throw new Error('boom');
  }), /boom/);
  assert.equal((await snapshot(name)).in_flight, 0);
  await assert.rejects(b.call(() => { throw new TypeError('sync throw'); }), TypeError);
  const abort = new AbortController();
  await assert.rejects(b.call(() => new Promise((_, reject) => {
    abort.signal.addEventListener('abort', () => reject(abort.signal.reason));
    abort.abort();
  })), { name: 'AbortError' });
  assert.equal((await snapshot(name)).in_flight, 0);
  // Aborted while waiting for a ticket: the ticket granted later goes back.
  let release;
  const running = b.call(() => new Promise((r) => { release = r; }));
  await until(async () => (await snapshot(name)).in_flight === 1, 'the first call holds the ticket');
  const ctl = new AbortController();
  const waiting = b.execute(() => assert.fail('ran after its abort'), { signal: ctl.signal });
  await until(async () => (await client.stats()).waiters === 1, 'the second call waits');
  ctl.abort();
  await assert.rejects(waiting, { name: 'AbortError' });
  release('done');
  assert.equal(await running, 'done');
  await until(async () => (await snapshot(name)).in_flight === 0, 'the late ticket is handed back');
  const snap = await snapshot(name);
  assert.equal(snap.totals.failures, 2);
  assert.equal(snap.totals.ignored, 2, 'the aborted call and the late grant');
  assert.equal(snap.totals.successes, 1);
  await b.close();
  c.close();
});

test('a cached breaker takes the round trip on a limited circuit', async () => {
  const name = uniqueName('bh-cached');
  const c = new Client(d.socket, { ioTimeoutMs: 2000 });
  const b = new Breaker(name, { client: c, policy: { max_concurrent: 2 } });
  assert.ok(b.cached);
  for (let i = 0; i < 20; i++) await b.call(() => 1);
  assert.equal(b.cacheStats().cachedCalls, 0);
  const snap = await snapshot(name);
  assert.equal(snap.totals.successes, 20);
  assert.equal(snap.in_flight, 0);
  await b.close();
  c.close();
});

test("a limit from cbd's config is honoured by a cached breaker", async () => {
  const own = await Daemon.start('[circuit "cfg"]\nmax_concurrent = 1\n');
  const c = new Client(own.socket, { ioTimeoutMs: 2000 });
  try {
    const b = new Breaker('cfg', { client: c });
    await b.call(() => 1); // the first call asks cbd
    await until(() => b.cacheLive, 'the cache reads the circuit');
    const held = await b.acquire();
    assert.ok(held.token);
    await assert.rejects(b.acquire(), BulkheadFullError);
    await b.report(held, 'success');
    assert.equal(b.cacheStats().cachedCalls, 0);
    const snap = (await c.get('cfg')).snapshot;
    assert.equal(snap.in_flight, 0);
    assert.equal(snap.totals.rejected_concurrency, 1);
    await b.close();
  } finally {
    c.close();
    await own.cleanup();
  }
});

const FIXED_NOW = 1_800_000_000_000;

test('Retry marks retries and stops at the retry budget', async () => {
  const name = uniqueName('bh-budget');
  // 10 retries in 10 s (retry_min_per_s 1), 0 % of first attempts; the
  // errors are ignored so the breaker stays closed.
  const b = new Breaker(name, { client, clock: () => FIXED_NOW, classify: () => IGNORE, policy: { retry_budget_percent: 0, retry_min_per_s: 1 } });
  let calls = 0;
  const r = new Retry({ breaker: b, attempts: 3, baseMs: 0, maxMs: 0, sleep: async () => {} });
  const outcomes = [];
  for (let i = 0; i < 8; i++) {
    try {
      await r.call(() => {
        calls += 1;
        throw new Error('down');
      });
    } catch (e) {
      if (e instanceof RetryBudgetError) {
        assert.equal(e.reason, 'retry_budget');
        assert.ok(e.retryAfterMs > 0);
        outcomes.push('budget');
      } else {
        assert.match(String(e), /down/);
        outcomes.push('failed');
      }
    }
  }
  assert.deepEqual(outcomes, [...Array(5).fill('failed'), ...Array(3).fill('budget')]);
  assert.equal(calls, 5 * 3 + 3);
  const { totals } = (await client.get(name, { now: FIXED_NOW }, { policy: false })).snapshot;
  assert.equal(totals.retries, 10);
  assert.equal(totals.rejected_retry, 3);
  assert.equal(totals.rejected, 0);
  assert.equal(totals.rejected_concurrency, 0);
  assert.equal(totals.ignored, calls);
});

test('a cached breaker marks its retries', async () => {
  const name = uniqueName('bh-cretry');
  const c = new Client(d.socket, { ioTimeoutMs: 2000 });
  const b = new Breaker(name, { client: c, classify: () => IGNORE });
  assert.ok(b.cached);
  let n = 0;
  const r = new Retry({ breaker: b, attempts: 3, baseMs: 0, maxMs: 0, sleep: async () => {} });
  assert.equal(await r.call(() => {
    n += 1;
    if (n < 3) throw new Error('flaky');
    return 'ok';
  }), 'ok');
  const { totals } = await snapshot(name);
  assert.equal(totals.retries, 2);
  assert.equal(totals.rejected_retry, 0);
  await b.close();
  c.close();
});

test('refusals say why, from cbd and from the cache', async () => {
  const name = uniqueName('bh-why');
  const c = new Client(d.socket, { ioTimeoutMs: 2000 });
  const b = new Breaker(name, { client: c });
  await b.call(() => 1); // the first call asks cbd, creating the circuit
  // Call until the cache refused one (its event comes a little later than
  // cbd's state): the refusals' reasons.
  const reasonsUntilCached = async () => {
    const reasons = new Set();
    const before = b.cacheStats().refusedCalls;
    await until(async () => {
      await b.call(() => 1).catch((e) => {
        assert.ok(e instanceof CircuitOpenError, String(e));
        reasons.add(e.reason);
      });
      return b.cacheStats().refusedCalls > before;
    }, 'the cache refuses');
    return [...reasons];
  };
  await client.setState(name, 'open', { hold: true });
  assert.deepEqual(await reasonsUntilCached(), ['held']);
  await client.release(name);
  await client.setState(name, 'closed');
  const cached = b.cacheStats().cachedCalls;
  await until(async () => {
    await b.call(() => 1).catch(() => {});
    return b.cacheStats().cachedCalls > cached;
  }, 'the cache sees it closed');
  await client.setState(name, 'open');
  assert.deepEqual(await reasonsUntilCached(), ['open']);
  await b.close();
  c.close();
});
