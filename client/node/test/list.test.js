// SPDX-License-Identifier: Apache-2.0
// list.test.js — list in pages (PROTOCOL.md §8 list, Pages) through
// Client against a real cbd: limit and cursor, listAll following the cursor
// on one connection (every circuit exactly once, a circuit deleted between
// pages not listed after, other lists waiting, a lost connection failing
// rather than starting again), foreign and stale cursors refused by cbd,
// limits out of range refused by the client, and a cbd whose output bound
// cuts one reply well short of its circuits.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Daemon, uniqueName, sharedDaemon } from './helpers.js';
import { Client, ServerError, UnavailableError, LIST_LIMIT_MAX } from '../index.js';

const CIRCUITS = 750;
const PAGE = 300;

let d;
let c;
let created; // the names of the CIRCUITS circuits stored in d
sharedDaemon(async (dd, cc) => {
  d = dd;
  c = cc;
  created = await createCircuits(c, 'page', CIRCUITS);
}, { ioTimeoutMs: 5000, connectTimeoutMs: 2000 });

/** n circuits created with noreply; answered in order, so once the get
 * behind them is answered cbd has stored them all. */
async function createCircuits(client, base, n) {
  const names = Array.from({ length: n }, () => uniqueName(base));
  for (const name of names) await client.recordFailure(name, { noreply: true });
  const last = await client.get(names[n - 1]);
  assert.equal(last.stored, true);
  return names;
}

/** The names of circuits, asserting none appears twice. */
function nameSet(circuits) {
  const names = new Set();
  for (const s of circuits) {
    assert.ok(!names.has(s.name), `${s.name} listed twice`);
    names.add(s.name);
  }
  return names;
}

async function collect(iterator) {
  const out = [];
  for await (const s of iterator) out.push(s);
  return out;
}

test('pages of 300 return every circuit once; the last has no cursor', async () => {
  const pages = [];
  let cursor;
  do {
    const page = await c.list(undefined, undefined, { limit: PAGE, cursor });
    pages.push(page);
    cursor = page.cursor;
    assert.ok(pages.length <= Math.ceil(CIRCUITS / PAGE), 'no more pages than circuits need');
  } while (cursor !== null);
  assert.deepEqual(pages.map((p) => p.circuits.length), [300, 300, 150]);
  assert.deepEqual(pages.map((p) => p.truncated), [true, true, false]);
  assert.equal(typeof pages[0].cursor, 'string');
  assert.deepEqual(nameSet(pages.flatMap((p) => p.circuits)), new Set(created));
});

test('list without options is one reply, as before', async () => {
  const all = await c.list();
  assert.equal(all.truncated, false);
  assert.equal(all.cursor, null);
  assert.deepEqual(nameSet(all.circuits), new Set(created));
});

test('listAll returns every circuit, with pages of 300 and with none set', async () => {
  assert.deepEqual(nameSet(await collect(c.listAll(undefined, undefined, { pageSize: PAGE }))), new Set(created));
  assert.deepEqual(nameSet(await collect(c.listAll())), new Set(created));
  const before = (await c.stats()).ops.list.requests;
  await collect(c.listAll(undefined, undefined, { pageSize: PAGE }));
  assert.equal((await c.stats()).ops.list.requests - before, 3, 'three pages of 300 for 750');
});

test('listAll with a state filter keeps it on every page', async () => {
  const open = created.slice(0, 5);
  for (const name of open) assert.equal((await c.setState(name, 'open')).snapshot.state, 'open');
  try {
    const listed = await collect(c.listAll('open', undefined, { pageSize: 2 }));
    assert.deepEqual(nameSet(listed), new Set(open));
    assert.ok(listed.every((s) => s.state === 'open'));
  } finally {
    for (const name of open) await c.setState(name, 'closed');
  }
});

test('a circuit deleted between two pages is not returned after', async () => {
  const first = await c.list(undefined, undefined, { limit: PAGE });
  const seen = nameSet(first.circuits);
  const victim = created.find((name) => !seen.has(name));
  assert.equal((await c.delete(victim)).existed, true);
  try {
    let cursor = first.cursor;
    const rest = [];
    while (cursor !== null) {
      const page = await c.list(undefined, undefined, { limit: PAGE, cursor });
      rest.push(...page.circuits);
      cursor = page.cursor;
    }
    const names = nameSet(first.circuits.concat(rest));
    assert.ok(!names.has(victim), 'the deleted circuit was not listed');
    assert.equal(names.size, CIRCUITS - 1);

    // The same through listAll: deleted while the loop holds the first page.
    const again = created.find((name) => name !== victim && !seen.has(name));
    const listed = [];
    for await (const s of c.listAll(undefined, undefined, { pageSize: PAGE })) {
      if (listed.length === 0) assert.equal((await c.delete(again)).existed, true);
      listed.push(s);
    }
    const all = nameSet(listed);
    assert.equal(all.size, CIRCUITS - 2);
    assert.ok(!all.has(again) && !all.has(victim));
  } finally {
    // Back for the other tests (a recorded failure stores it again).
    for (const name of created) await c.recordFailure(name, { noreply: true });
    await c.get(created[0]);
  }
});

test('a cursor on another connection, or a stale one, is bad_request', async () => {
  const other = new Client(d.socket, { ioTimeoutMs: 5000, connectTimeoutMs: 2000 });
  try {
    const page = await c.list(undefined, undefined, { limit: PAGE });
    assert.equal(typeof page.cursor, 'string');
    await assert.rejects(other.list(undefined, undefined, { limit: PAGE, cursor: page.cursor }),
      (e) => e instanceof ServerError && e.code === 'bad_request');
    // Another list on its own connection ends the cursor.
    await c.list(undefined, undefined, { limit: 1 });
    await assert.rejects(c.list(undefined, undefined, { cursor: page.cursor }),
      (e) => e instanceof ServerError && e.code === 'bad_request');
  } finally {
    other.close();
  }
});

test('limit and pageSize out of range are refused', async () => {
  for (const limit of [0, -1, 1.5, LIST_LIMIT_MAX + 1, '10']) {
    await assert.rejects(c.list(undefined, undefined, { limit }), RangeError, `limit ${limit}`);
    await assert.rejects(c.listAll(undefined, undefined, { pageSize: limit }).next(), RangeError, `pageSize ${limit}`);
  }
  assert.equal(LIST_LIMIT_MAX, 100000);
  const top = await c.list(undefined, undefined, { limit: LIST_LIMIT_MAX });
  assert.equal(top.circuits.length, CIRCUITS);
});

test('other lists on the client wait while listAll walks its pages', async () => {
  const it = c.listAll(undefined, undefined, { pageSize: PAGE });
  const listed = [(await it.next()).value];
  let otherDone = false;
  const other = c.list(undefined, undefined, { limit: 1 }).then((r) => {
    otherDone = true;
    return r;
  });
  const competing = collect(c.listAll(undefined, undefined, { pageSize: 100 }));
  for (let r = await it.next(); !r.done; r = await it.next()) listed.push(r.value);
  assert.deepEqual(nameSet(listed), new Set(created), 'the cursor survived the other lists');
  assert.equal(otherDone, false, 'the other list waited for the end of the pages');
  assert.equal((await other).circuits.length, 1);
  assert.deepEqual(nameSet(await competing), new Set(created));
  // Breaking out of the loop hands the turn on too.
  for await (const s of c.listAll(undefined, undefined, { pageSize: PAGE })) {
    assert.ok(s.name);
    break;
  }
  assert.equal((await c.list()).circuits.length, CIRCUITS);
});

test('a connection lost between pages fails listAll instead of starting again', async () => {
  const it = c.listAll(undefined, undefined, { pageSize: PAGE });
  for (let i = 0; i < PAGE; i++) assert.equal((await it.next()).done, false);
  c.sock.destroy();
  for (let i = 0; i < 500 && c.sock !== null; i++) await new Promise((r) => setTimeout(r, 10));
  assert.equal(c.sock, null, 'the client saw the connection close');
  await assert.rejects(it.next(), (e) => e instanceof UnavailableError && /lost during listAll/.test(e.message));
  assert.equal(c.sock, null, 'no page was sent on a new connection');
  assert.deepEqual(await it.next(), { done: true, value: undefined });
  // The client itself goes on (the next call reconnects).
  assert.equal((await c.list()).circuits.length, CIRCUITS);
});

test('more circuits than one reply may carry: truncated, and listAll reads them all', async () => {
  // cbd at its smallest max_output_bytes: a list reply is cut at 32 KiB,
  // far fewer snapshots than 400.
  const own = await Daemon.start('[cbd]\nmax_output_bytes = 65536\n');
  const small = new Client(own.socket, { ioTimeoutMs: 5000, connectTimeoutMs: 2000 });
  try {
    const names = await createCircuits(small, 'bound', 400);
    const one = await small.list();
    assert.equal(one.truncated, true);
    assert.ok(one.circuits.length > 0 && one.circuits.length < 400, `one reply carried ${one.circuits.length}`);
    assert.equal(typeof one.cursor, 'string');
    const pages = (await small.stats()).ops.list.requests;
    assert.deepEqual(nameSet(await collect(small.listAll())), new Set(names));
    assert.ok((await small.stats()).ops.list.requests - pages > 2, 'listAll needed several pages');
    assert.ok((await small.stats()).limits.list_truncated > 0);
  } finally {
    small.close();
    await own.cleanup();
  }
});
