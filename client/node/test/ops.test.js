// SPDX-License-Identifier: Apache-2.0
// ops.test.js — every op of PROTOCOL.md §8 through Client against a real
// cbd, cbd's error code and message on refusals, pipelining (many calls in
// flight on one connection, answered in order), noreply, the socket path
// resolution, timeouts and reconnection.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Daemon, uniqueName, sharedDaemon } from './helpers.js';
import { Client, ServerError, UnavailableError, CbdTimeoutError, resolveSocket, DEFAULT_SOCKET } from '../index.js';

let d;
let c;
sharedDaemon(async (dd, cc) => {
  d = dd;
  c = cc;
});

test('hello names cbd and protocol 3', async () => {
  const r = await c.hello('node-test');
  assert.equal(r.ok, true);
  assert.equal(r.server, 'cbd');
  assert.equal(r.protocol, 3);
});

test('the socket: argument, else $CBD_SOCKET, else /run/cbd/cbd.sock', () => {
  const saved = process.env.CBD_SOCKET;
  try {
    process.env.CBD_SOCKET = '/tmp/from-env.sock';
    assert.equal(resolveSocket('/tmp/arg.sock'), '/tmp/arg.sock');
    assert.equal(resolveSocket(), '/tmp/from-env.sock');
    assert.equal(new Client().socketPath, '/tmp/from-env.sock');
    delete process.env.CBD_SOCKET;
    assert.equal(resolveSocket(), DEFAULT_SOCKET);
    assert.equal(DEFAULT_SOCKET, '/run/cbd/cbd.sock');
  } finally {
    if (saved === undefined) delete process.env.CBD_SOCKET;
    else process.env.CBD_SOCKET = saved;
  }
});

test('get reads an unknown name without creating it', async () => {
  const name = uniqueName('get');
  const r = await c.get(name, { failure_threshold: 3 });
  assert.equal(r.stored, false);
  assert.equal(r.snapshot.state, 'closed');
  assert.equal(r.snapshot.policy.failure_threshold, 3);
});

test('record_success, record_failure and record with duration_ms', async () => {
  const name = uniqueName('rec');
  const ctx = { failure_threshold: 2 };
  let r = await c.recordFailure(name, { ctx });
  assert.equal(r.snapshot.failure_count, 1);
  r = await c.recordSuccess(name, { ctx, durationMs: 5 });
  assert.equal(r.snapshot.failure_count, 0);
  r = await c.record(name, 'failure', { durationMs: 12, ctx });
  r = await c.record(name, 'failure', { durationMs: 12, ctx });
  assert.equal(r.snapshot.state, 'open');
  assert.ok(r.snapshot.retry_after_ms > 0);
});

test('allow and record: a half_open permit handed back with record', async () => {
  const name = uniqueName('allow');
  const now = 1_700_000_000_000;
  const ctx = { failure_threshold: 1, break_ms: 1000, half_open_max: 1 };
  let a = await c.allow(name, { ...ctx, now });
  assert.deepEqual([a.allowed, a.state], [true, 'closed']);
  await c.record(name, 'failure', { ctx: { ...ctx, now } });
  a = await c.allow(name, { ...ctx, now: now + 10 });
  assert.deepEqual([a.allowed, a.state, a.retry_after_ms], [false, 'open', 990]);
  a = await c.allow(name, { ...ctx, now: now + 1000 });
  assert.deepEqual([a.allowed, a.state], [true, 'half_open']);
  assert.equal(typeof a.permit, 'string');
  const busy = await c.allow(name, { ...ctx, now: now + 1001 });
  assert.equal(busy.allowed, false);
  const r = await c.record(name, 'ignore', { permit: a.permit, ctx: { ...ctx, now: now + 1002 } });
  assert.equal(r.snapshot.state, 'half_open');
  const again = await c.allow(name, { ...ctx, now: now + 1003 });
  assert.equal(again.allowed, true, 'the permit came back');
  await c.record(name, 'success', { permit: again.permit, ctx: { ...ctx, now: now + 1004 } });
});

test('acquire_slot / release_slot and cas', async () => {
  const name = uniqueName('slot');
  const s = await c.acquireSlot(name);
  assert.equal(s.acquired, true);
  const r = await c.releaseSlot(name, s.token);
  assert.equal(r.released, true);
  const cas = await c.cas(name, 'closed', 'open');
  assert.equal(cas.applied, true);
  assert.equal(cas.snapshot.state, 'open');
});

test('set_state with hold, ttl_ms and reason; release; delete', async () => {
  const name = uniqueName('hold');
  let r = await c.setState(name, 'open', { hold: true, ttlMs: 60000, reason: 'db failover' });
  assert.equal(r.snapshot.state, 'open');
  assert.equal(r.snapshot.hold.state, 'open');
  assert.equal(r.snapshot.hold.reason, 'db failover');
  assert.ok(r.snapshot.hold.until > r.snapshot.hold.since);
  const a = await c.allow(name);
  assert.equal(a.allowed, false);
  r = await c.release(name);
  assert.equal(r.released, true);
  assert.equal(r.snapshot.state, 'half_open');
  assert.equal(r.snapshot.hold, null);
  r = await c.setState(name, 'closed');
  assert.equal(r.snapshot.state, 'closed');
  const del = await c.delete(name);
  assert.equal(del.existed, true);
  assert.equal((await c.delete(name)).existed, false);
});

test('list (with a state filter), stats, metrics', async () => {
  const name = uniqueName('list');
  await c.setState(name, 'open');
  const all = await c.list();
  assert.ok(all.circuits.some((s) => s.name === name));
  assert.equal(all.truncated, false);
  const open = await c.list('open');
  assert.ok(open.circuits.every((s) => s.state === 'open'));
  assert.ok(open.circuits.some((s) => s.name === name));
  const st = await c.stats();
  assert.ok(st.requests > 0);
  assert.ok(st.ops.list.requests >= 2);
  const m = await c.metrics();
  assert.match(m.text, /cbd_/);
});

test("refusals carry cbd's code and message", async () => {
  await assert.rejects(c.get('x', { break_ms: 0 }), (e) => {
    assert.ok(e instanceof ServerError);
    assert.equal(e.code, 'bad_request');
    assert.match(e.detail, /break_ms/);
    return true;
  });
  await assert.rejects(c.request('no_such_op'), (e) => e instanceof ServerError && e.code === 'unknown_op');
  await assert.rejects(c.setState(uniqueName('x'), 'half_open', { hold: true }), (e) => e.code === 'bad_request');
  // The connection is still good after refusals.
  assert.equal((await c.hello()).ok, true);
});

test('many calls in flight on one connection are answered in order', async () => {
  const name = uniqueName('pipe');
  const ctx = { failure_threshold: 1_000_000 };
  const calls = [];
  for (let i = 0; i < 200; i++) calls.push(c.recordFailure(name, { ctx }));
  const replies = await Promise.all(calls);
  replies.forEach((r, i) => assert.equal(r.snapshot.failure_count, i + 1));
  assert.equal(c.pending.length, 0);
});

test('noreply returns at once and is carried out', async () => {
  const name = uniqueName('noreply');
  assert.equal(await c.recordFailure(name, { noreply: true }), null);
  assert.equal(await c.record(name, 'failure', { noreply: true }), null);
  const r = await c.get(name);
  assert.equal(r.snapshot.failure_count, 2);
});

test('no cbd: UnavailableError, quickly', async () => {
  const dead = new Client(`${d.dir}/nobody.sock`);
  await assert.rejects(dead.hello(), (e) => e instanceof UnavailableError && e.code === 'unavailable');
});

test('a stopped cbd times out within the I/O timeout; the client reconnects', async () => {
  const own = await Daemon.start();
  const k = new Client(own.socket, { ioTimeoutMs: 300, connectTimeoutMs: 2000 });
  try {
    assert.equal((await k.hello()).ok, true);
    own.pause();
    const t0 = performance.now();
    const inflight = [k.stats(), k.hello()];
    await assert.rejects(inflight[0], (e) => e instanceof CbdTimeoutError && e.code === 'timeout');
    await assert.rejects(inflight[1], (e) => e instanceof UnavailableError);
    const took = performance.now() - t0;
    console.log(`# timeout took ${took.toFixed(1)} ms (io timeout 300 ms)`);
    assert.ok(took < 5000, 'bounded');
    own.resume();
    assert.equal((await k.hello()).ok, true, 'reconnected');
    // cbd restarted: the old connection is gone, the next call reconnects.
    await own.stop();
    await own.start();
    let r;
    for (let i = 0; i < 2 && !r; i++) r = await k.hello().catch(() => null);
    assert.equal(r?.ok, true);
  } finally {
    k.close();
    await own.cleanup();
  }
});

test('watch: snapshots, then change events (after their reply); unwatch', async () => {
  const name = uniqueName('watch');
  const w = new Client(d.socket, { ioTimeoutMs: 2000 });
  const events = [];
  w.on('event', (e) => events.push(e));
  try {
    const r = await w.watch([name]);
    assert.equal(r.snapshots.length, 1);
    assert.equal(r.snapshots[0].state, 'closed');
    // A change made on the watching connection: its event comes after the reply.
    const set = await w.setState(name, 'open');
    assert.equal(set.snapshot.state, 'open');
    assert.equal((await w.hello()).ok, true, 'replies still pair with requests');
    assert.equal(events.length, 1);
    assert.deepEqual([events[0].event, events[0].from, events[0].snapshot.state], ['change', 'closed', 'open']);
    // A change made elsewhere reaches the watcher too.
    await c.delete(name);
    for (let i = 0; i < 200 && events.length < 2; i++) await new Promise((res) => setTimeout(res, 5));
    assert.deepEqual([events[1]?.event, events[1]?.name], ['delete', name]);
    await w.unwatch([name]);
    await w.setState(name, 'open');
    await w.hello();
    assert.equal(events.length, 2, 'no event after unwatch');
  } finally {
    w.close();
  }
});

test('maxInFlight keeps a long pipeline within cbd max_output_bytes', async () => {
  // cbd at its smallest max_output_bytes (64 KiB); 2000 get replies are
  // about 1 MB. The client stops reading while cbd answers (as a busy event
  // loop would): with 32 requests on the wire cbd never holds more than 32
  // replies for it; with no bound it holds them all and drops the client.
  const own = await Daemon.start('[cbd]\nmax_output_bytes = 65536\n');
  const probe = new Client(own.socket, { ioTimeoutMs: 5000 });
  // Wait (bounded) until cbd has answered n requests on other connections.
  const answered = async (n) => {
    for (let i = 0; i < 1000; i++) {
      const st = await probe.stats();
      if (st.ops.get.requests >= n || st.limits.max_output_bytes > 0) return st;
      await new Promise((res) => setTimeout(res, 10));
    }
    assert.fail('cbd did not answer in time');
  };
  try {
    const name = uniqueName('flight');
    const bounded = new Client(own.socket, { ioTimeoutMs: 10000, maxInFlight: 32 });
    const all = Promise.all(Array.from({ length: 2000 }, () => bounded.get(name)));
    bounded.sock.pause();
    await answered(32);
    bounded.sock.resume();
    const replies = await all;
    assert.ok(replies.every((r) => r.snapshot.name === name));
    assert.ok(bounded.limitHits.maxInFlight > 0, 'the limit was hit and counted');
    assert.equal((await probe.stats()).limits.max_output_bytes, 0, 'never dropped');
    // noreply behind waiting requests keeps its place.
    const order = [];
    for (let i = 0; i < 100; i++) order.push(bounded.get(name));
    await bounded.recordFailure(name, { noreply: true });
    const after = await bounded.get(name);
    assert.ok((await Promise.all(order)).every((r) => r.snapshot.failure_count === 0));
    assert.equal(after.snapshot.failure_count, 1);
    bounded.close();
    // Without the bound (what the default of 1024 prevents for get replies).
    const unbounded = new Client(own.socket, { ioTimeoutMs: 10000, maxInFlight: 1e9 });
    // Settled at once (cbd may drop the client before we look).
    const lost = Promise.all(Array.from({ length: 2000 }, () => unbounded.get(name))).then(() => null, (e) => e);
    unbounded.sock.pause();
    const st = await answered(1e9);
    assert.equal(st.limits.max_output_bytes, 1, 'cbd dropped the unbounded client');
    unbounded.sock?.resume(); // null if already dropped
    assert.ok((await lost) instanceof UnavailableError);
    unbounded.close();
  } finally {
    probe.close();
    await own.cleanup();
  }
});
