// SPDX-License-Identifier: Apache-2.0
// policy.test.js — protocol 3 §1 (compact snapshots) in the Node.js client:
// snapshots with and without policy read alike, a compact snapshot of
// another policy_rev makes the cache's rule unknown, the policy event
// refreshes it (a stand-in for cbd), the watch and the synced outcomes ask
// "policy": true, the policy option of the ops, and a cached breaker's rule
// refreshed after a real cbd's config is reloaded (SIGHUP). Passes against
// a v2 cbd too (policy in every snapshot, no policy_rev). Every wait is a
// bounded poll on a condition, never a timing assertion.

import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import readline from 'node:readline';
import { Daemon, uniqueName, sharedDaemon, waitFor } from './helpers.js';
import { Breaker, Client, CircuitOpenError } from '../index.js';
import { Entry, joinCache, leaveCache, policyRev, PERMIT } from '../src/cache.js';
import { snapshotFromReply } from '../src/machine.js';

const OPTS = { ioTimeoutMs: 2000, connectTimeoutMs: 2000 };
const POLICY3 = { failure_threshold: 3, break_ms: 60000, trip: 'consecutive', source: { failure_threshold: 'config' } };
const POLICY5 = { ...POLICY3, failure_threshold: 5 };

let d;
let plain;
sharedDaemon((dd, cc) => {
  d = dd;
  plain = cc;
}, OPTS);

function snap({ rev = null, policy = null, ...members } = {}) {
  const s = { name: 'x', state: 'closed', failure_count: 0, opened_at: null, retry_after_ms: 0, hold: null, current_break_ms: 60000 };
  if (rev !== null) s.policy_rev = rev;
  if (policy !== null) s.policy = policy;
  return { ...s, ...members };
}

/** The first of n own failures that could trip by the rule (1-based), 0
 * when none could (they are counted). */
function couldTripAt(own, n = 10) {
  for (let k = 1; k <= n; k++) if (own.count('failure', 0)) return k;
  return 0;
}

test('snapshots with and without policy read alike', () => {
  // v2: the policy in every snapshot, no rev.
  let e = new Entry('x');
  assert.equal(e.set(snap({ policy: POLICY3 }), true).policy, POLICY3);
  assert.equal(e.policyRev, null);
  assert.ok(e.own.known && e.own.threshold === 3);
  // v3: compact, the policy kept with its rev filled in while the rev stays.
  e = new Entry('x');
  e.set(snap({ rev: 7, policy: POLICY3 }), true);
  const kept = e.set(snap({ rev: 7, failure_count: 1 }), true);
  assert.equal(kept.policy, POLICY3);
  assert.equal(kept.policy_rev, 7);
  assert.ok(e.own.known && e.own.baseFc === 1);
  // The break without current_break_ms: the kept policy's; unknown once stale.
  e.set(snap({ rev: 7, current_break_ms: undefined }));
  assert.equal(e.breakMs, 60000);
  const stale = e.set(snap({ rev: 8, current_break_ms: undefined }));
  assert.equal(e.breakMs, null);
  assert.equal(e.policy, null);
  assert.equal(stale.policy, undefined);
  assert.equal(snapshotFromReply(snap({ policy: POLICY3 })).current_break_ms, 0);
  assert.equal(snapshotFromReply(snap({ rev: 7 }), POLICY3).current_break_ms, 0);
  assert.equal(snapshotFromReply(snap({ rev: 7 })).current_break_ms, 60000);
  assert.equal(policyRev(snap({ rev: 0 })), null);
  assert.equal(policyRev(snap({ rev: '7' })), null);
});

test('a compact snapshot of another policy_rev makes the rule unknown', () => {
  let e = new Entry('x');
  e.set(snap({ rev: 7, policy: POLICY3 }), true);
  assert.equal(couldTripAt(e.own), 3);
  e.set(snap({ rev: 7 }), true);
  assert.equal(couldTripAt(e.own), 3, 'same rev: the rule stands');
  e.set(snap({ rev: 8 }), true);
  assert.equal(e.own.known, false);
  assert.equal(couldTripAt(e.own), 1, 'unknown: every failure could trip');
  // A watch reply (not a reset) with a policy of another rev: unknown too,
  // its policy not taken for the rule (it may be the defaults').
  e = new Entry('x');
  e.set(snap({ rev: 7, policy: POLICY3 }), true);
  e.set(snap({ rev: 9, policy: POLICY5 }));
  assert.equal(e.own.known, false);
  e.set(snap({ rev: 9, policy: POLICY5 }), true); // a synced outcome's reply
  assert.equal(couldTripAt(e.own), 5);
});

test('the policy event refreshes rule and entry, no state change; unknown events ignored', async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cbd-node-policy.'));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  const sockPath = path.join(dir, 'fake.sock');
  let conn;
  const lines = [];
  const server = net.createServer((c) => {
    conn = c;
    readline.createInterface({ input: c }).on('line', (l) => lines.push(JSON.parse(l)));
  });
  await new Promise((r) => server.listen(sockPath, r));
  t.after(() => server.close());
  const updates = [];
  const fake = { cacheUpdated: (s, fromEvent) => updates.push([s, fromEvent]), cacheDeleted() {} };
  const membership = joinCache(sockPath, 'x', fake);
  t.after(async () => {
    conn?.destroy();
    await leaveCache(membership);
  });
  const { cache, entry } = membership;
  await waitFor(() => lines.some((l) => l.op === 'watch'), 'the watch');
  const watch = lines.find((l) => l.op === 'watch');
  assert.equal(watch.policy, true);
  conn.write(`${JSON.stringify({ ok: true, snapshots: [snap({ rev: 7, policy: POLICY3 })] })}\n`);
  conn.write(`${JSON.stringify({ event: 'change', from: 'closed', snapshot: snap({ rev: 7, failure_count: 1 }) })}\n`);
  await waitFor(() => entry.seq === 1, 'the change event');
  assert.equal(entry.own.threshold, 3);
  conn.write('{"event":"surprise","snapshot":{"name":"x"}}\n');
  conn.write(`${JSON.stringify({ event: 'policy', snapshot: snap({ rev: 8, policy: POLICY5, failure_count: 1 }) })}\n`);
  await waitFor(() => cache.stats.policyEvents === 1, 'the policy event');
  assert.equal(entry.seq, 2);
  assert.equal(entry.state, 'closed');
  assert.equal(cache.decide(entry).verdict, PERMIT);
  assert.ok(entry.own.known && entry.own.threshold === 5 && entry.own.rev === 8);
  assert.equal(couldTripAt(entry.own), 4, 'one failure counted already');
  const [last, fromEvent] = updates.at(-1);
  assert.equal(fromEvent, true);
  assert.deepEqual(last.policy, POLICY5);
  assert.equal(cache.stats.badLines, 0);
  assert.equal(cache.stats.events, 3); // change, surprise, policy
});

const protocol = async (client) => (await client.hello()).protocol;

test('the ops take policy', async () => {
  const name = uniqueName('ops');
  const v3 = (await protocol(plain)) >= 3;
  const rec = (await plain.recordFailure(name)).snapshot;
  assert.equal('policy' in rec, !v3);
  assert.ok((await plain.recordFailure(name, { policy: true })).snapshot.policy.failure_threshold);
  const got = (await plain.get(name)).snapshot;
  assert.ok(got.policy.source);
  if (v3) {
    assert.ok(Number.isInteger(got.policy_rev) && got.policy_rev > 0);
    assert.equal(rec.policy_rev, got.policy_rev);
    assert.equal('policy' in (await plain.get(name, undefined, { policy: false })).snapshot, false);
  }
  const page = await plain.list(undefined, undefined, { policy: true, limit: 100000 });
  assert.ok(page.circuits.every((s) => s.policy));
  let found = false;
  for await (const s of plain.listAll(undefined, undefined, { policy: true })) if (s.name === name) found = !!s.policy;
  assert.ok(found);
  const w = new Client(d.socket, OPTS);
  const reply = await w.watch([name], { policy: true });
  assert.ok(reply.snapshots[0].policy);
  w.close();
});

test('an uncached breaker asks for the policy until it has it', async () => {
  const client = new Client(d.socket, OPTS);
  const sent = [];
  const request = client.request.bind(client);
  client.request = (op, members) => {
    sent.push([op, members?.policy]);
    return request(op, members);
  };
  const b = new Breaker(uniqueName('unc'), { client, cached: false, policy: { failure_threshold: 4 } });
  await b.call(async () => 1);
  await b.call(async () => 1);
  assert.deepEqual(sent.filter(([op]) => op === 'record').map(([, p]) => p), [true, undefined]);
  assert.equal(b.fallbackPolicy().failure_threshold, 4);
  client.close();
});

const conf = (name, n) => `[circuit "${name}"]\nfailure_threshold = ${n}\nbreak_ms = 600000\n`;

test('a cached breaker rule refreshes after a reload: it syncs exactly at the new threshold', async (t) => {
  const name = 'reloaded';
  const own = await Daemon.start(conf(name, 3));
  t.after(() => own.cleanup());
  const client = new Client(own.socket, OPTS);
  const watcher = new Client(own.socket, OPTS);
  t.after(() => {
    client.close();
    watcher.close();
  });
  const events = [];
  watcher.on('event', (e) => events.push(e));
  await watcher.watch([name], { policy: true });
  const b = new Breaker(name, { client });
  t.after(() => b.close());
  const ok = async () => 'ok';
  const boom = async () => {
    throw new Error('dependency down');
  };
  await b.call(ok); // the first call asks cbd
  await waitFor(() => b.cacheLive, 'the watch reply');
  await assert.rejects(b.call(boom), /dependency down/); // the rule unknown: synced, its reply reads it
  await b.call(ok);
  assert.ok(b.cacheEntry.own.known && b.cacheEntry.own.threshold === 3);
  const seen = b.cacheStats().events;
  fs.writeFileSync(path.join(own.dir, 'cbd.conf'), conf(name, 5));
  own.proc.kill('SIGHUP');
  await waitFor(async () => (await client.get(name)).snapshot.policy.failure_threshold === 5, 'the reload');
  await waitFor(() => b.cacheStats().events > seen, "the reload's event in the cache");
  await waitFor(() => b.cacheEntry.own.known && b.cacheEntry.own.threshold === 5, 'the new rule');
  // The client's watchers hear of it too (v3: a policy event; v2: a change).
  await waitFor(() => events.some((e) => (e.event === 'policy' || e.event === 'change') && e.snapshot?.policy?.failure_threshold === 5), "the reload's event on watch");
  // Protocol 3 says it with a policy event (v2: a change event).
  assert.equal(b.cacheStats().policyEvents === 1, (await protocol(client)) >= 3);
  await b.call(ok);
  const syncs = b.cacheStats().syncs;
  for (let k = 1; k <= 4; k++) {
    await assert.rejects(b.call(boom), /dependency down/);
    assert.equal(b.cacheStats().syncs, syncs, `failure ${k} synced`);
  }
  await assert.rejects(b.call(boom), /dependency down/);
  assert.equal(b.cacheStats().syncs, syncs + 1);
  assert.equal(b.state, 'open');
  await assert.rejects(b.call(ok), CircuitOpenError);
  assert.equal((await client.get(name)).snapshot.totals.failures, 6);
});
