// SPDX-License-Identifier: Apache-2.0
// cache.test.js — cached mode (watch + noreply) against a real cbd: closed
// calls cost no request on the breaker's client and their outcomes reach cbd
// as noreply lines, in order; a trip or an admin hold made on another
// connection is refused locally once its event arrives; half_open trials go
// through cbd (exactly one for half_open_max 1, also across two processes:
// cached-peer.js); cbd killed and restarted; cbd frozen (SIGSTOP) and
// noticed by the probe, then resumed; an idle healthy connection kept, and
// a probe answered while the process was busy; cached: false; close
// writes what is queued, all of it when cbd is frozen at the time (past
// the kernel's socket buffer); breakers dropped without close; the name
// limit; successes folded into counted lines on a cbd that takes them (a
// tight loop exact in few lines, their order before failures kept), none on
// one whose hello lacks outcome_counts (a stand-in proxy).
// Every wait is a bounded poll on a condition, never a timing assertion.

import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as delay } from 'node:timers/promises';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import readline from 'node:readline';
import { fileURLToPath } from 'node:url';
import v8 from 'node:v8';
import vm from 'node:vm';
import { Daemon, uniqueName, sharedDaemon, waitFor } from './helpers.js';
import { Breaker, CACHE_NAMES_MAX, Client, CircuitOpenError, cacheStats } from '../index.js';
import { PROBE_INTERVAL_MS } from '../src/cache.js';

const WAIT_MS = 10_000;
// The bound of waits for cbd to have counted what was sent: it only
// catches a lost line (each wait ends when its condition holds), and a
// loaded machine running cbd under ASan can take seconds.
const COUNTED_WAIT_MS = 60_000;
const OPTS = { ioTimeoutMs: 2000, connectTimeoutMs: 2000 };

let d;
let plain; // another connection: cbd's view, and changes made elsewhere
sharedDaemon((dd, cc) => {
  d = dd;
  plain = cc;
}, OPTS);

/** A client whose requests are counted (sent.n). */
function countedClient(socket = d.socket) {
  const client = new Client(socket, OPTS);
  const sent = { n: 0, ops: [] };
  const request = client.request.bind(client);
  client.request = (op, ...args) => {
    sent.n += 1;
    sent.ops.push(op);
    return request(op, ...args);
  };
  return { client, sent };
}

/** A cached breaker whose first call (through cbd: it creates the circuit)
 * is done and whose cache has read the circuit. */
async function primed(name, policy, socket = d.socket, options = {}) {
  const { client, sent } = countedClient(socket);
  const b = new Breaker(name, { client, policy, ...options });
  assert.equal(b.cached, true);
  assert.equal(await b.call(async () => 'first'), 'first');
  assert.deepEqual(sent.ops, ['allow', 'record'], 'the first call asks cbd');
  await waitFor(() => b.cacheLive, 'the watch reply', COUNTED_WAIT_MS);
  return { b, client, sent };
}

const totals = async (name, client = plain) => (await client.get(name)).snapshot.totals;
/** totals, or null when cbd did not answer in time (a loaded machine):
 * for waits that retry. */
const totalsOrNull = (name, client) => totals(name, client).catch(() => null);
const boom = async () => {
  throw new Error('dependency down');
};
/** A call reported ignore (aborted): its noreply line puts the successes
 * folded before it in the output, as lines. */
const aborted = async () => {
  throw new DOMException('stop', 'AbortError');
};
const ignoredCall = (b) => assert.rejects(b.call(aborted), (e) => e.name === 'AbortError');

test('closed calls make no round trip; their outcomes reach cbd', async () => {
  const name = uniqueName('closed');
  const { b, client, sent } = await primed(name, { failure_threshold: 1000 });
  const before = b.cacheStats();
  const n = 500;
  for (let i = 0; i < n; i++) assert.equal(await b.call(async () => i), i);
  const after = b.cacheStats();
  assert.equal(sent.n, 2, 'no request on the client after the first call');
  assert.equal(after.cachedCalls - before.cachedCalls, n);
  assert.equal(after.uncachedCalls - before.uncachedCalls, 0);
  assert.ok(after.writes - before.writes < n, 'successes are written together');
  // An ignored call (aborted) goes as a noreply record too: totals.ignored.
  await ignoredCall(b);
  // Successes may be folded (PROTOCOL.md §14 item 12): a counted line is
  // one line and N successes folded.
  const lines = b.cacheStats();
  assert.ok(lines.noreplyLines - before.noreplyLines + lines.folded - before.folded >= n + 1);
  await waitFor(async () => {
    const t = await totals(name);
    return t.successes === n + 1 && t.ignored === 1;
  }, `${n + 1} successes and an ignored call at cbd`);
  await b.close();
  client.close();
});

test('a trip made on another connection is refused locally, with retry_after_ms', async () => {
  const name = uniqueName('trip');
  const policy = { failure_threshold: 2, break_ms: 60000 };
  const { b, client, sent } = await primed(name, policy);
  const changes = [];
  b.on('stateChange', (prev, state) => changes.push([prev, state]));
  await plain.recordFailure(name, { ctx: policy });
  await plain.recordFailure(name, { ctx: policy });
  // The change event fires stateChange without any call.
  await waitFor(() => b.state === 'open', 'the change event');
  assert.deepEqual(changes, [['closed', 'open']]);
  const before = b.cacheStats();
  let ran = false;
  await assert.rejects(b.call(async () => { ran = true; }), (e) => {
    assert.ok(e instanceof CircuitOpenError);
    assert.equal(e.state, 'open');
    assert.ok(e.retryAfterMs > 0 && e.retryAfterMs <= 60000, `retryAfterMs ${e.retryAfterMs}`);
    return true;
  });
  assert.equal(ran, false);
  assert.equal(b.cacheStats().refusedCalls - before.refusedCalls, 1);
  assert.equal(sent.n, 2, 'refused without asking cbd');
  // The refusal reaches cbd's totals (protocol 3 §6): batched, sent on
  // close() at the latest.
  await b.close();
  await waitFor(async () => (await totals(name)).rejected === 1, 'the refusal counted by cbd');
  client.close();
});

test('refusals made from the cache reach cbd at least once a second while refusing', async () => {
  const name = uniqueName('refusing');
  const policy = { failure_threshold: 1, break_ms: 60000 };
  const { b, client } = await primed(name, policy);
  await plain.recordFailure(name, { ctx: policy });
  await waitFor(() => b.state === 'open', 'the change event');
  let refused = 0;
  await waitFor(async () => {
    await b.call(async () => {}).catch(() => { refused += 1; });
    return (await totals(name)).rejected > 0;
  }, 'a batch of refusals before close');
  assert.ok((await totals(name)).rejected <= refused);
  await b.close();
  await waitFor(async () => (await totals(name)).rejected === refused, 'every refusal counted');
  client.close();
});

test('a trip by the breaker itself is refused once its event comes back', async () => {
  const name = uniqueName('self');
  const { b, client, sent } = await primed(name, { failure_threshold: 2, break_ms: 60000 });
  await assert.rejects(b.call(boom), /dependency down/);
  await assert.rejects(b.call(boom), /dependency down/);
  await waitFor(() => b.state === 'open', 'the change event of our own trip');
  await assert.rejects(b.call(async () => 1), CircuitOpenError);
  assert.equal(sent.n, 2);
  const t = await totals(name);
  assert.equal(t.failures, 2);
  await b.close();
  client.close();
});

test('after the break, half_open goes through cbd: one trial for half_open_max 1', async () => {
  const name = uniqueName('half');
  // The trial's slot outlives the gate below (its ttl is break_ms unless set).
  const policy = { failure_threshold: 1, break_ms: 200, half_open_max: 1, success_threshold: 1, slot_ttl_ms: 60000 };
  // Two breakers on two clients.
  const one = await primed(name, policy);
  const two = await primed(name, policy);
  await plain.recordFailure(name, { ctx: policy });
  await waitFor(() => one.b.state === 'open' && two.b.state === 'open', 'both see open');
  await waitFor(async () => (await plain.get(name)).snapshot.retry_after_ms === 0, 'the break to elapse');
  const before = one.b.cacheStats();
  let ran = 0;
  let openGate;
  const gate = new Promise((r) => {
    openGate = r;
  });
  const trial = async () => {
    ran += 1;
    await gate; // the trial holds its slot until both calls have decided
    return 'trial';
  };
  const settled = [];
  const calls = [one.b, two.b].map((b) => b.call(trial).then((v) => ['ran', v], (e) => ['refused', e]).then((r) => {
    settled.push(r);
    return r;
  }));
  try {
    // Both decided: a trial runs (and waits) or the call was refused.
    await waitFor(() => ran + settled.length >= 2, 'both calls to decide');
    assert.equal(ran, 1, 'exactly one trial');
    const [refused] = settled;
    assert.equal(refused[0], 'refused');
    assert.ok(refused[1] instanceof CircuitOpenError && refused[1].state === 'half_open', String(refused[1]));
  } finally {
    openGate();
  }
  const results = await Promise.all(calls);
  assert.deepEqual(results.map(([r]) => r).sort(), ['ran', 'refused']);
  assert.equal(one.b.cacheStats().uncachedCalls - before.uncachedCalls, 2, 'both asked cbd');
  // The trial closed the circuit: cached again once the event arrives.
  await waitFor(() => one.b.state === 'closed' && two.b.state === 'closed', 'the close event');
  const cached = one.b.cacheStats().cachedCalls;
  assert.equal(await one.b.call(async () => 'again'), 'again');
  assert.equal(one.b.cacheStats().cachedCalls, cached + 1);
  for (const { b, client } of [one, two]) {
    await b.close();
    client.close();
  }
});

const PEER = path.join(path.dirname(fileURLToPath(import.meta.url)), 'cached-peer.js');

/** A cached breaker in another process (cached-peer.js). */
class Peer {
  static async start(t, name, policy) {
    const peer = new Peer(name, policy);
    t.after(() => peer.stop());
    await peer.next((m) => m.ready, 'the peer to be ready');
    return peer;
  }

  constructor(name, policy) {
    this.proc = spawn(process.execPath, [PEER, d.socket, name, JSON.stringify(policy)], { stdio: ['pipe', 'pipe', 'inherit'] });
    this.exited = new Promise((r) => this.proc.once('exit', r));
    this.messages = [];
    this.waiters = [];
    readline.createInterface({ input: this.proc.stdout }).on('line', (line) => {
      this.messages.push(JSON.parse(line));
      for (const w of this.waiters.splice(0)) w();
    });
  }

  send(command) {
    this.proc.stdin.write(`${command}\n`);
  }

  /** The first message (not taken yet) matching pred; bounded wait. */
  async next(pred, what) {
    const deadline = Date.now() + WAIT_MS;
    for (;;) {
      const i = this.messages.findIndex(pred);
      if (i >= 0) return this.messages.splice(i, 1)[0];
      if (Date.now() > deadline || this.proc.exitCode !== null) assert.fail(`timed out waiting for ${what}`);
      await Promise.race([new Promise((r) => this.waiters.push(r)), delay(50)]);
    }
  }

  async ask(command) {
    this.send(command);
    return this.next((m) => command in m, `the peer's ${command}`);
  }

  /** close, then SIGKILL if it has not exited within WAIT_MS. */
  async stop() {
    if (this.proc.exitCode !== null || this.proc.signalCode !== null) return;
    this.send('close');
    this.proc.stdin.end();
    let timer;
    const exited = await Promise.race([this.exited.then(() => true), new Promise((r) => { timer = setTimeout(() => r(false), WAIT_MS); })]);
    clearTimeout(timer);
    if (!exited) {
      this.proc.kill('SIGKILL');
      await this.exited;
    }
  }
}

test('two processes: a trip reaches both caches; after the break one trial in all', async (t) => {
  const name = uniqueName('procs');
  // The trial's slot outlives the gate below (its ttl is break_ms unless set).
  const policy = { failure_threshold: 1, break_ms: 200, half_open_max: 1, success_threshold: 1, slot_ttl_ms: 60000 };
  const local = await primed(name, policy);
  const peer = await Peer.start(t, name, policy);
  await plain.recordFailure(name, { ctx: policy });
  await waitFor(() => local.b.state === 'open', 'the trip in this process');
  await waitFor(async () => (await peer.ask('state')).state === 'open', 'the trip in the other process');
  await waitFor(async () => (await plain.get(name)).snapshot.retry_after_ms === 0, 'the break to elapse');
  let localRan = false;
  let localResult = null;
  let openGate;
  const gate = new Promise((r) => {
    openGate = r;
  });
  const localCall = local.b.call(async () => {
    localRan = true;
    await gate; // the trial holds its slot until both have decided
  }).then(() => 'ran', (e) => (e instanceof CircuitOpenError ? `refused ${e.state}` : String(e)));
  localCall.then((r) => {
    localResult = r;
  });
  peer.send('call');
  let peerRan;
  try {
    const peerFirst = await peer.next((m) => m.ran || m.result, "the peer's call");
    await waitFor(() => localRan || localResult !== null, "this process's call");
    peerRan = peerFirst.ran === true;
    assert.notEqual(localRan, peerRan, 'exactly one trial in the two processes');
    if (!peerRan) assert.deepEqual([peerFirst.result, peerFirst.state], ['refused', 'half_open']);
  } finally {
    openGate();
    peer.send('release');
  }
  assert.equal(await localCall, localRan ? 'ran' : 'refused half_open');
  if (peerRan) assert.equal((await peer.next((m) => m.result, "the peer's trial")).result, 'ran');
  // The trial closed the circuit: both caches decide again.
  await waitFor(async () => (await peer.ask('state')).state === 'closed' && local.b.state === 'closed', 'the close event in both');
  await local.b.close();
  local.client.close();
  await peer.stop();
  assert.equal(peer.proc.exitCode, 0);
});

test('an admin hold open refuses locally; release lets calls through', async () => {
  const name = uniqueName('hold');
  const { b, client, sent } = await primed(name, { break_ms: 1000, success_threshold: 1 });
  await plain.setState(name, 'open', { hold: true, ttlMs: 60000, reason: 'cache test' });
  await waitFor(() => b.state === 'open', 'the hold event');
  const before = b.cacheStats();
  await assert.rejects(b.call(async () => 1), (e) => e instanceof CircuitOpenError && e.retryAfterMs > 0 && e.retryAfterMs <= 60000);
  // Past break_ms the hold still refuses (it is not a break).
  await delay(1100);
  await assert.rejects(b.call(async () => 1), CircuitOpenError);
  assert.equal(b.cacheStats().refusedCalls - before.refusedCalls, 2);
  assert.equal(sent.n, 2);
  // A hold without a ttl: refused until released.
  await plain.setState(name, 'open', { hold: true, reason: 'no ttl' });
  await waitFor(async () => (await plain.get(name)).snapshot.hold?.until === null, 'the ttl-less hold');
  await assert.rejects(b.call(async () => 1), (e) => e instanceof CircuitOpenError && e.retryAfterMs > 0);
  await plain.release(name);
  await waitFor(() => b.state === 'half_open', 'the release event');
  assert.equal(await b.call(async () => 'allowed'), 'allowed', 'the trial after release');
  await b.close();
  client.close();
});

test('a deleted circuit reads as closed; the next cached call creates it again', async () => {
  const name = uniqueName('del');
  const policy = { failure_threshold: 1, break_ms: 60000 };
  const { b, client, sent } = await primed(name, policy);
  await plain.recordFailure(name, { ctx: policy });
  await waitFor(() => b.state === 'open', 'the trip event');
  assert.equal((await plain.delete(name)).existed, true);
  await waitFor(() => b.state === 'closed', 'the delete event');
  assert.equal(await b.call(async () => 'after delete'), 'after delete');
  assert.equal(sent.n, 2);
  // The noreply line carried the breaker's policy (ctx): cbd created it so.
  await waitFor(async () => (await plain.get(name)).stored, 'the circuit created again');
  const snap = (await plain.get(name)).snapshot;
  assert.equal(snap.policy.failure_threshold, 1);
  assert.equal(snap.totals.successes, 1);
  await b.close();
  client.close();
});

test('cbd killed: cache invalid, LOCAL applies; restarted: re-watched, cached again', async (t) => {
  const own = await Daemon.start();
  t.after(() => own.cleanup());
  const name = uniqueName('kill');
  const policy = { failure_threshold: 2, break_ms: 60000 };
  const { b, client } = await primed(name, policy, own.socket);
  const errors = [];
  b.on('storeError', (err, op) => errors.push([err.code, op]));
  assert.equal(await b.call(async () => 'cached'), 'cached');
  const before = b.cacheStats();
  await own.kill();
  await waitFor(() => !b.cacheStats().live, 'the lost watch connection');
  assert.equal(b.cacheLive, false);
  // The store policy (LOCAL): the call runs, then the local copy breaks.
  assert.equal(await b.call(async () => 'local'), 'local');
  assert.ok(errors.some(([code, op]) => code === 'unavailable' && op === 'allow'), JSON.stringify(errors));
  await assert.rejects(b.call(boom), /dependency down/);
  await assert.rejects(b.call(boom), /dependency down/);
  await assert.rejects(b.call(async () => 1), CircuitOpenError);
  assert.equal(b.cacheStats().uncachedCalls - before.uncachedCalls, 4);
  assert.equal(b.cacheStats().cachedCalls, before.cachedCalls);
  await own.start();
  await waitFor(() => b.cacheLive, 're-watched after the restart');
  const back = b.cacheStats();
  assert.ok(back.reconnects >= 1 && back.live);
  // The new cbd has no such circuit: closed, decided by the cache again.
  assert.equal(await b.call(async () => 'cached again'), 'cached again');
  assert.equal(b.cacheStats().cachedCalls, back.cachedCalls + 1);
  assert.equal(b.state, 'closed');
  // Its noreply line created the circuit with the breaker's policy (ctx).
  const fresh = new Client(own.socket, OPTS);
  await waitFor(async () => (await fresh.get(name)).stored, 'the circuit at the new cbd');
  const snap = (await fresh.get(name)).snapshot;
  assert.equal(snap.policy.failure_threshold, 2);
  assert.equal(snap.totals.successes, 1);
  fresh.close();
  await b.close();
  client.close();
});

test('cbd frozen (SIGSTOP): the probe drops the cache, LOCAL applies; SIGCONT: cached again', async (t) => {
  const own = await Daemon.start();
  t.after(() => own.cleanup()); // SIGCONT, then stopped, even if this fails
  const name = uniqueName('frozen');
  const policy = { failure_threshold: 2, break_ms: 60000 };
  // One client timeout, then cbd skipped for the rest of the test: no
  // request of it reaches cbd later to change the circuit there.
  const { b, client } = await primed(name, policy, own.socket, { timeoutBackoffMs: 60000 });
  client.ioTimeoutMs = 100;
  const errors = [];
  b.on('storeError', (err, op) => errors.push([err.code, op]));
  assert.equal(await b.call(async () => 'cached'), 'cached');
  // (Its success written, folded or not: counted as a line.)
  b.cache.flush();
  const before = b.cacheStats();
  own.pause();
  try {
    // The watch connection stays open; only the probe can tell.
    await waitFor(() => b.cacheStats().probeTimeouts > before.probeTimeouts, 'the probe to time out', 5000);
    assert.equal(b.cacheLive, false);
    // The uncached way: one timeout, then the store policy (LOCAL): the
    // call runs, then the local copy breaks after two failures.
    assert.equal(await b.call(async () => 'local'), 'local');
    assert.ok(errors.some(([code, op]) => code === 'timeout' && op === 'allow'), JSON.stringify(errors));
    await assert.rejects(b.call(boom), /dependency down/);
    await assert.rejects(b.call(boom), /dependency down/);
    await assert.rejects(b.call(async () => 1), CircuitOpenError);
    const frozen = b.cacheStats();
    assert.equal(frozen.uncachedCalls - before.uncachedCalls, 4);
    assert.equal(frozen.cachedCalls, before.cachedCalls);
    assert.equal(frozen.noreplyLines, before.noreplyLines, 'no outcome queued for the frozen cbd');
  } finally {
    own.resume();
  }
  await waitFor(() => b.cacheLive, 're-watched after SIGCONT');
  // cbd never saw the local failures: closed there, decided by the cache.
  const back = b.cacheStats();
  assert.equal(await b.call(async () => 'cached again'), 'cached again');
  assert.equal(b.cacheStats().cachedCalls, back.cachedCalls + 1);
  assert.equal(b.state, 'closed');
  await b.close();
  client.close();
});

test('an idle healthy watch connection is kept: probes answered, none timed out', async (t) => {
  const own = await Daemon.start();
  t.after(() => own.cleanup());
  const name = uniqueName('idle');
  const { b, client, sent } = await primed(name, {}, own.socket);
  const before = b.cacheStats();
  // No calls, no events: only probes and their replies (one per 500 ms
  // idle; a fourth is sent only once the third was answered): ~2 s.
  await waitFor(() => b.cacheStats().probes >= before.probes + 4, 'four probes', 5000);
  const idle = b.cacheStats();
  assert.equal(idle.probeTimeouts, 0);
  assert.equal(idle.disconnects, 0);
  assert.equal(idle.connects, 1);
  assert.equal(idle.badLines, 0, "the probes' replies are recognised");
  assert.equal(b.cacheLive, true);
  assert.equal(await b.call(async () => 'still cached'), 'still cached');
  assert.equal(b.cacheStats().cachedCalls, idle.cachedCalls + 1);
  assert.equal(sent.n, 2, 'no request on the client after the first call');
  await b.close();
  client.close();
});

test('a probe answered while this process was busy is not taken for a frozen cbd', async (t) => {
  const own = await Daemon.start();
  t.after(() => own.cleanup()); // SIGCONT, then stopped, even if this fails
  const { b, client } = await primed(uniqueName('busy'), {}, own.socket);
  // The next probe: cbd held until this process is busy (so the answer
  // cannot be read before), then the event loop blocked past
  // PROBE_TIMEOUT_MS: when the loop turns, the timeout's timer is due
  // while the answer waits unread (timers run before sockets are read).
  const write = b.cache.write.bind(b.cache);
  let probe = null;
  b.cache.write = (text, items) => {
    if (probe === null && text.includes('"op":"hello"')) {
      probe = b.cacheStats().probes + 1;
      own.pause();
      setImmediate(() => {
        own.resume();
        const end = performance.now() + 1500;
        while (performance.now() < end);
      });
    }
    write(text, items);
  };
  // The probe after it is sent once this one was judged answered.
  await waitFor(() => probe !== null && b.cacheStats().probes > probe, 'the probe after the busy one', 5000);
  const after = b.cacheStats();
  assert.equal(after.probeTimeouts, 0);
  assert.equal(after.disconnects, 0);
  assert.equal(b.cacheLive, true);
  await b.close();
  client.close();
});

test('past 1 MiB unwritten (cbd stopped), outcomes go through the client', async (t) => {
  const own = await Daemon.start();
  t.after(() => own.cleanup());
  const name = uniqueName('full');
  const { b, client } = await primed(name, { failure_threshold: 1000, slow_call_ms: 60_000 }, own.socket);
  client.ioTimeoutMs = 100;
  const errors = [];
  b.on('storeError', (err, op) => errors.push([err.code, op]));
  // The probe would notice the stopped cbd ~1.5 s after the watch reply;
  // on a loaded machine filling 1 MiB takes longer, the cache drops the
  // connection (the queue rerouted through the client), the bound is never
  // reached and every later call waits on a timeout. This test is about
  // the bound (the probe has its own tests above): its timer only re-arms.
  b.cache.onProbeTimer = function held() {
    this.armProbe(PROBE_INTERVAL_MS);
  };
  const before = b.cacheStats();
  own.pause();
  try {
    // The socket takes what the kernel buffers, then 1 MiB waits in the
    // client; the loop turns every 1000 calls so Node can write. Bounded
    // by the probe too, should it judge after all: a failure, not a hang.
    // Slow successes (slow_call_ms 60000): lines, never folded (a fold
    // takes no room), and the one past the bound goes through the client
    // with a reply awaited.
    for (let i = 0; i < 200_000 && b.cacheStats().outFull === before.outFull && b.cacheStats().probeTimeouts === before.probeTimeouts; i++) {
      await b.report(await b.acquire(), 'success', 60_000);
      if (i % 1000 === 999) await delay(0);
    }
    const full = b.cacheStats();
    assert.equal(full.probeTimeouts, before.probeTimeouts, 'filled with the probe held');
    assert.ok(full.outFull > before.outFull, 'the 1 MiB limit was reached');
    assert.ok(full.storeReports > before.storeReports);
    await waitFor(() => errors.some(([code, op]) => code === 'timeout' && op === 'record'), 'the outcome through the client');
  } finally {
    own.resume();
  }
  // Every line queued reaches cbd once it runs again (and the requests
  // that timed out in the client may too: cbd reads them late).
  const { noreplyLines, storeReports } = b.cacheStats();
  const queued = noreplyLines - before.noreplyLines;
  await waitFor(async () => (await totals(name, client)).successes >= 1 + queued, `${1 + queued} successes at cbd`);
  assert.ok((await totals(name, client)).successes <= 1 + queued + storeReports - before.storeReports);
  await b.close();
  client.close();
});

test('cached: false keeps two requests per call', async () => {
  const name = uniqueName('off');
  const { client, sent } = countedClient();
  const b = new Breaker(name, { client, cached: false });
  assert.equal(b.cached, false);
  assert.equal(b.cacheStats(), null);
  for (let i = 0; i < 5; i++) await b.call(async () => i);
  assert.deepEqual(sent.ops, Array(5).fill(['allow', 'record']).flat());
  assert.equal((await totals(name)).successes, 5, 'each outcome answered before the call returned');
  client.close();
  assert.throws(() => Breaker.private('p', { cached: true }), /cached/);
  assert.throws(() => new Breaker('v', { client, clock: () => 0, cached: true }), /clock/);
  assert.equal(new Breaker('v', { client, clock: () => 0 }).cached, false, 'a clock: never cached');
});

test('a failure is written before the successes queued after it, after those before it', async () => {
  const name = uniqueName('order');
  // Consecutive failures trip at 2: failure, success, failure in that
  // order leaves it closed; a failure overtaking the success opens it.
  const { b, client } = await primed(name, { failure_threshold: 2, break_ms: 60000 });
  const before = b.cacheStats();
  await assert.rejects(b.call(boom), /dependency down/);
  assert.equal(await b.call(async () => 'ok'), 'ok');
  await assert.rejects(b.call(boom), /dependency down/);
  for (let i = 0; i < 3; i++) await b.call(async () => i);
  assert.equal(b.cacheStats().cachedCalls - before.cachedCalls, 6);
  await waitFor(async () => {
    const t = await totals(name);
    return t.failures === 2 && t.successes === 5;
  }, 'the six outcomes at cbd');
  const snap = (await plain.get(name)).snapshot;
  assert.equal(snap.state, 'closed');
  assert.equal(snap.failure_count, 0);
  await b.close();
  client.close();
});

test('close writes the queued outcomes and stops the watch connection', async (t) => {
  const own = await Daemon.start();
  t.after(() => own.cleanup());
  const name = uniqueName('close');
  // Patient (not the default 100 ms): the first call must reach cbd, also
  // on a loaded machine running cbd under ASan, or its success would be
  // recorded locally and never counted there.
  const client = new Client(own.socket, { ioTimeoutMs: 10_000, connectTimeoutMs: 10_000 });
  t.after(() => client.close());
  const b = new Breaker(name, { client });
  await b.call(async () => 'first');
  assert.equal(b.degraded, false, 'the first call went to cbd');
  await waitFor(() => b.cacheLive, 'the watch reply', COUNTED_WAIT_MS);
  const n = 100;
  for (let i = 0; i < n; i++) await b.call(async () => i); // queued: the loop never yields
  // Queued as lines, or counted in open folds (PROTOCOL.md §14 item 12).
  let folded = 0;
  for (const f of b.cache.folds.values()) folded += f.count;
  assert.ok(cacheStats(own.socket).noreplyLines + folded >= n);
  await b.close();
  assert.equal(cacheStats(own.socket), null, 'the last breaker closed the cache');
  assert.equal(b.cached, false);
  const c = new Client(own.socket, OPTS);
  await waitFor(async () => (await totalsOrNull(name, c))?.successes === n + 1, 'every queued success at cbd', COUNTED_WAIT_MS);
  // As noreply lines on the watch connection (folded ones count once).
  const { noreply } = await c.stats();
  assert.ok(noreply >= 1 && noreply <= n, `${noreply} noreply lines for ${n} successes`);
  c.close();
});

test('close with cbd frozen: every outcome and refusal queued before it reaches cbd when it resumes', async (t) => {
  const own = await Daemon.start();
  t.after(() => own.cleanup()); // SIGCONT, then stopped, even if this fails
  const c = new Client(own.socket, OPTS);
  t.after(() => c.close());
  const okName = uniqueName('frozen-close-ok');
  const openName = uniqueName('frozen-close-open');
  const tripAt1 = { failure_threshold: 1, break_ms: 600_000 };
  const ok = await primed(okName, { failure_threshold: 1_000_000 }, own.socket);
  const open = await primed(openName, tripAt1, own.socket);
  t.after(() => {
    ok.client.close();
    open.client.close();
  });
  await c.recordFailure(openName, { ctx: tripAt1 });
  await waitFor(() => open.b.state === 'open', 'the change event', COUNTED_WAIT_MS);
  // The probe is not what this is about (it has its own tests): held, so
  // a stall of this process cannot drop the connection in between.
  ok.b.cache.onProbeTimer = function held() {
    this.armProbe(PROBE_INTERVAL_MS);
  };
  const before = ok.b.cacheStats();
  // More than the kernel's socket buffer takes (~200 KiB) while cbd reads
  // nothing: the tail is still in this process when the cache closes.
  // Nothing below yields to the event loop until both breakers closed. An
  // ignored call after every other success keeps the successes in lines
  // (counted, of 2: folds are queued before the ignored call's line).
  const n = 6000;
  const r = 300;
  own.pause();
  try {
    for (let i = 0; i < n; i++) {
      await ok.b.call(async () => i);
      if (i % 2) await ignoredCall(ok.b);
    }
    for (let i = 0; i < r; i++) await assert.rejects(open.b.call(async () => {}), CircuitOpenError);
    const queued = ok.b.cacheStats();
    assert.equal(queued.cachedCalls - before.cachedCalls, n + n / 2);
    assert.equal(queued.refusedCalls - before.refusedCalls, r);
    assert.equal(queued.storeReports, before.storeReports, 'all of it on the watch connection');
    assert.ok(ok.b.cache.sock.writableLength > 0, 'some of it not yet taken by the kernel');
    await open.b.close(); // its refusals: one line, after the successes
    await ok.b.close(); // the last breaker: the cache closes
    assert.equal(cacheStats(own.socket), null);
  } finally {
    own.resume();
  }
  // Exact: none dropped, none counted twice (nothing went through a client).
  await waitFor(async () => {
    const [a, b] = await Promise.all([totalsOrNull(okName, c), totalsOrNull(openName, c)]);
    return a?.successes === 1 + n && a?.ignored === n / 2 && b?.rejected === r;
  }, `${1 + n} successes, ${n / 2} ignored and ${r} refusals at cbd`, COUNTED_WAIT_MS);
  assert.equal(ok.sent.n, 2, 'no outcome went through the client');
  assert.equal(open.sent.n, 2, 'no refusal went through the client');
});

test('breakers sharing a name share one entry; the cache counts names', async () => {
  const name = uniqueName('shared');
  const one = await primed(name, {});
  const names = one.b.cacheStats().names;
  const two = new Breaker(name, { client: one.client });
  assert.equal(two.cacheStats().names, names, 'same name, same entry');
  await two.close();
  assert.equal(one.b.cacheLive, true, 'still watched for the other breaker');
  await one.b.close();
  one.client.close();
});

test('breakers dropped without close() leave the cache once collected', async () => {
  // The test runner gives no --expose-gc: turn it on for this process.
  v8.setFlagsFromString('--expose-gc');
  const gc = vm.runInNewContext('gc');
  const client = new Client(d.socket, OPTS);
  const name = uniqueName('dropped');
  const keep = new Breaker(uniqueName('kept'), { client });
  const names = keep.cacheStats().names;
  (() => {
    for (let i = 0; i < 100; i++) new Breaker(name, { client });
  })();
  assert.equal(keep.cacheStats().names, names + 1);
  await waitFor(() => {
    gc();
    return keep.cacheStats().names === names;
  }, 'the dropped breakers collected and their name unwatched');
  await keep.close();
  client.close();
});

test('past CACHE_NAMES_MAX names a breaker asks cbd (counted)', async () => {
  const client = new Client(d.socket, OPTS);
  const first = new Breaker(uniqueName('names'), { client });
  const breakers = [first];
  const namesFull = first.cacheStats().namesFull;
  // (Names still watched by earlier tests' breakers count too.)
  let past = null;
  for (let i = 0; i < CACHE_NAMES_MAX && past === null; i++) {
    const b = new Breaker(uniqueName('names'), { client });
    if (b.cached) breakers.push(b);
    else past = b;
  }
  assert.ok(past !== null, 'a breaker past the limit');
  assert.ok(breakers.length <= CACHE_NAMES_MAX);
  const { names } = first.cacheStats();
  assert.ok(names >= breakers.length && names <= CACHE_NAMES_MAX, `${names} names`);
  assert.equal(past.cacheStats(), null);
  assert.equal(first.cacheStats().namesFull, namesFull + 1);
  assert.equal(await past.call(async () => 'asked cbd'), 'asked cbd');
  assert.equal((await totals(past.name)).successes, 1);
  await Promise.all([...breakers, past].map((b) => b.close()));
  client.close();
});

/** n calls back to back on b, the k-th failing when fail(k); how many ran. */
async function tight(b, n, fail) {
  let ran = 0;
  for (let i = 0; i < n; i++) {
    await b
      .call(async () => {
        ran += 1;
        if (fail(ran)) throw new Error('down');
      })
      .catch(() => {});
  }
  return ran;
}

test('one process alone stops exactly at its own threshold (consecutive and rate rules)', async () => {
  const rate = { trip: 'rate', window: 'count', window_size: 10, minimum_calls: 4, failure_rate: 50, break_ms: 60000 };
  for (const prime of [false, true]) {
    // Fresh: the first call asks cbd; primed: one success already (in the
    // rate window too: 3 failures trip it).
    let b = prime ? (await primed(uniqueName('own'), { failure_threshold: 3, break_ms: 60000 })).b : new Breaker(uniqueName('own'), { client: new Client(d.socket, OPTS), policy: { failure_threshold: 3, break_ms: 60000 } });
    assert.equal(await tight(b, 10, () => true), 3, `consecutive, primed ${prime}`);
    await b.close();
    b.client.close();
    b = prime ? (await primed(uniqueName('own'), rate)).b : new Breaker(uniqueName('own'), { client: new Client(d.socket, OPTS), policy: rate });
    assert.equal(await tight(b, 10, (k) => prime || k % 2 === 0), prime ? 3 : 4, `rate, primed ${prime}`);
    if (prime) assert.ok(b.cacheStats().syncs > 0, 'the outcome that could trip was synced');
    await b.close();
    b.client.close();
  }
});

test('a hold placed between an outage and cbd death stays held (LOCAL)', async (t) => {
  const own = await Daemon.start();
  t.after(() => own.cleanup());
  const { b, client } = await primed('payments', { failure_threshold: 3 }, own.socket);
  client.ioTimeoutMs = 200;
  own.pause();
  try {
    // Past the probe (1.5 s): the cache gives up, calls fall back to the
    // local copy. Called until one has (a minute only bounds a hang: a
    // loaded machine took more than 3 s).
    const until = Date.now() + 60000;
    while (!b.degraded && Date.now() < until) {
      await b.call(async () => 'ok');
      await delay(50);
    }
    assert.ok(b.degraded, 'no call fell back while cbd was stopped');
  } finally {
    own.resume();
  }
  await waitFor(() => b.cacheLive, 'the cache to read cbd again');
  const admin = new Client(own.socket, OPTS);
  await admin.setState('payments', 'open', { hold: true, reason: 'failover' });
  admin.close();
  await waitFor(async () => {
    const refusals = b.cacheStats().refusedCalls;
    await b.call(async () => 'ok').catch(() => {});
    return b.cacheStats().refusedCalls > refusals;
  }, 'a refusal from the cache');
  await own.kill();
  for (let i = 0; i < 20; i++) {
    let ran = false;
    await assert.rejects(b.call(async () => { ran = true; }), CircuitOpenError, `call ${i}`);
    assert.equal(ran, false);
    await delay(10);
  }
  await b.close();
  client.close();
});

test('a frozen cbd is noticed (about 1.5 s) and a reconnect to it is not live', async (t) => {
  const own = await Daemon.start();
  t.after(() => own.cleanup());
  const { b, client } = await primed(uniqueName('frozen'), {}, own.socket);
  own.pause();
  try {
    const paused = Date.now();
    await waitFor(() => b.cacheStats().probeTimeouts >= 1, 'the probe to time out', 60000);
    t.diagnostic(`frozen cbd noticed after ${Date.now() - paused} ms`);
    // Sampled for 1.2 s and until a reconnect was tried (a minute only
    // bounds a hang): never live.
    const until = Date.now() + 1200;
    const bound = Date.now() + 60000;
    while (Date.now() < until || (b.cacheStats().connects < 2 && Date.now() < bound)) {
      assert.equal(b.cacheStats().live, false, JSON.stringify(b.cacheStats()));
      await delay(2);
    }
    assert.ok(b.cacheStats().connects >= 2, 'reconnects were tried');
  } finally {
    own.resume();
  }
  await waitFor(() => b.cacheStats().live, 'live again');
  await b.close();
  client.close();
});

test('a cached breaker waits out the break: the next call is the half-open trial', async () => {
  const name = uniqueName('break');
  const { b, client } = await primed(name, { failure_threshold: 2, success_threshold: 1, break_ms: 300 });
  await assert.rejects(b.call(boom), /dependency down/);
  await assert.rejects(b.call(boom), /dependency down/);
  await assert.rejects(b.call(async () => 1), CircuitOpenError);
  assert.ok(b.cacheStats().refusedCalls > 0);
  await delay(600);
  const asked = b.cacheStats().uncachedCalls;
  assert.equal(await b.call(async () => 'trial'), 'trial');
  assert.equal(b.cacheStats().uncachedCalls, asked + 1);
  assert.equal((await plain.get(name)).snapshot.state, 'closed');
  await b.close();
  client.close();
});

/** Until the breaker's cache read its connection's hello reply: cbd takes
 * counted successes (PROTOCOL.md §14 item 12). */
const countsOk = (b) => waitFor(() => b.cache.countsOk, "the hello's reply", COUNTED_WAIT_MS);

test('a tight loop of successes reaches cbd exact, in far fewer lines (counted)', async () => {
  const name = uniqueName('folded');
  const { b, client, sent } = await primed(name, { failure_threshold: 1000 });
  await countsOk(b);
  const before = b.cacheStats();
  const readBefore = (await plain.stats()).ops.record_success.requests;
  const n = 5000;
  for (let i = 0; i < n; i++) await b.call(async () => i);
  await waitFor(async () => (await totals(name)).successes === 1 + n, `${1 + n} successes at cbd`, COUNTED_WAIT_MS);
  const after = b.cacheStats();
  const lines = after.noreplyLines - before.noreplyLines;
  assert.equal(after.cachedCalls - before.cachedCalls, n);
  assert.equal(sent.n, 2, 'no request on the client after the first call');
  assert.ok(after.folded - before.folded > 0 && lines < n / 10, `${lines} lines, ${after.folded - before.folded} folded`);
  // (Other tests may share the cbd: far fewer, not exactly these.)
  const read = (await plain.stats()).ops.record_success.requests - readBefore;
  assert.ok(read < n / 2, `cbd read ${read} record_success lines for ${n} successes`);
  await b.close();
  client.close();
});

test('folded successes keep their place: (100 successes, 2 failures) x 20 never trips threshold 3', async () => {
  const name = uniqueName('fold-order');
  const { b, client } = await primed(name, { failure_threshold: 3, break_ms: 60000 });
  await countsOk(b);
  const folded = b.cacheStats().folded;
  for (let round = 0; round < 20; round++) assert.equal(await tight(b, 102, (k) => k > 100), 102, `round ${round}`);
  await waitFor(async () => (await totals(name)).failures === 40, 'the 40 failures at cbd', COUNTED_WAIT_MS);
  const snap = (await plain.get(name)).snapshot;
  assert.equal(snap.state, 'closed');
  assert.equal(snap.totals.successes, 1 + 2000);
  assert.ok(b.cacheStats().folded > folded, 'successes were folded');
  assert.equal(await tight(b, 100, () => false), 100);
  assert.equal(await tight(b, 10, () => true), 3, '3 failures in a row after successes trip');
  assert.equal((await plain.get(name)).snapshot.state, 'open');
  await b.close();
  client.close();
});

test('a cbd whose hello lacks outcome_counts (older) gets no line with a count', async (t) => {
  // A stand-in: a proxy to the real cbd that drops outcome_counts from its
  // replies, keeping every line the clients sent.
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cbd-old-'));
  const sockPath = path.join(dir, 'old.sock');
  const lines = [];
  const conns = [];
  const server = net.createServer((conn) => {
    const up = net.createConnection({ path: d.socket });
    conns.push(conn, up);
    readline.createInterface({ input: conn }).on('line', (line) => {
      lines.push(line);
      up.write(`${line}\n`);
    });
    readline.createInterface({ input: up }).on('line', (line) => {
      const msg = JSON.parse(line);
      if (msg && typeof msg === 'object' && 'outcome_counts' in msg) {
        delete msg.outcome_counts;
        line = JSON.stringify(msg);
      }
      conn.write(`${line}\n`);
    });
    const end = () => {
      conn.destroy();
      up.destroy();
    };
    conn.on('close', end).on('error', end);
    up.on('close', end).on('error', end);
  });
  await new Promise((resolve) => server.listen(sockPath, resolve));
  t.after(() => {
    for (const c of conns) c.destroy();
    server.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });
  const name = uniqueName('old-cbd');
  const { b, client } = await primed(name, { failure_threshold: 1000 }, sockPath);
  await waitFor(() => lines.some((l) => l.includes('"op":"hello"')), 'a hello on the connection', COUNTED_WAIT_MS);
  const n = 2000;
  for (let i = 0; i < n; i++) {
    if (i % 500 === 499) await assert.rejects(b.call(boom), /dependency down/);
    else await b.call(async () => i);
  }
  await waitFor(async () => {
    const tt = await totals(name);
    return tt.failures === n / 500 && tt.successes === 1 + n - n / 500;
  }, 'every outcome at cbd', COUNTED_WAIT_MS);
  assert.equal(b.cacheStats().folded, 0);
  const counted = lines.filter((l) => l.includes('"count"'));
  assert.deepEqual(counted.slice(0, 3), [], 'no line with a count');
  await b.close();
  client.close();
});

test('more breakers than open folds, interleaved in runs: every success reaches cbd once', async () => {
  const { FOLDS_MAX } = await import('../src/cache.js');
  const client = new Client(d.socket, OPTS);
  const bs = [];
  for (let i = 0; i < FOLDS_MAX + 6; i++) {
    const b = new Breaker(uniqueName('folds'), { client, policy: { failure_threshold: 1000 } });
    await b.call(async () => 'first');
    bs.push(b);
  }
  await waitFor(() => bs.every((b) => b.cacheLive), 'the watch replies', COUNTED_WAIT_MS);
  await countsOk(bs[0]);
  const before = bs[0].cacheStats();
  const rounds = 20;
  for (let r = 0; r < rounds; r++) for (const b of bs) for (let k = 0; k < 3; k++) await b.call(async () => k);
  assert.equal(bs[0].cacheStats().cachedCalls - before.cachedCalls, bs.length * rounds * 3, 'all from the cache');
  for (const b of bs) {
    await waitFor(async () => (await totals(b.name)).successes === 1 + 3 * rounds, `${b.name}'s successes at cbd`, COUNTED_WAIT_MS);
  }
  assert.ok(bs[0].cacheStats().folded > before.folded, 'successes were folded');
  await Promise.all(bs.map((b) => b.close()));
  client.close();
});
