// SPDX-License-Identifier: Apache-2.0
// example.test.js — the example service (examples/service.js) end to end:
// its demo upstream goes down, the retries fail, the circuit opens in cbd
// and, once the service has read the trip, it answers from its fallback.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Daemon, waitFor } from './helpers.js';
import { Client } from '../index.js';

const SERVICE = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', 'examples', 'service.js');
// Bounds (ms) on the service starting and on each HTTP request.
const START_WAIT_MS = 10_000;
const HTTP_WAIT_MS = 10_000;
// Bound on waiting for a condition (an outcome at cbd, a line of the service).

// The operator's policy for the circuit (the service declares 5 only for
// circuits nobody configured): the third failure, the last attempt of one
// request, opens it. A trip between two attempts of a request would race
// the next attempt (a jittered delay of 0 to 100 ms) against the trip's
// event reaching the service's cache.
const CONFIG = '[circuit "upstream"]\nfailure_threshold = 3\n';

let d;
before(async () => {
  d = await Daemon.start(CONFIG);
});
after(async () => {
  await d?.cleanup();
});

async function get(url) {
  const res = await fetch(url, { signal: AbortSignal.timeout(HTTP_WAIT_MS) });
  return res.text();
}

/** Poll cond (sync or async) every 10 ms until it holds, at most waitMs. */
test('the example service falls back once the circuit opens', async () => {
  const proc = spawn(process.execPath, [SERVICE, '--demo', '--port', '0', '--demo-port', '0'], {
    env: { ...process.env, CBD_SOCKET: d.socket }, stdio: ['ignore', 'ignore', 'pipe'],
  });
  const exited = new Promise((r) => proc.once('exit', r));
  try {
    let err = ''; // the service's stderr, all of it
    proc.stderr.on('data', (chunk) => {
      err += chunk;
    });
    await waitFor(() => err.includes('\n'), 'the service to start', START_WAIT_MS);
    const line = err.split('\n')[0];
    const m = /serving on (\S+), upstream (\S+)/.exec(line);
    assert.ok(m, `no startup line: ${line}`);
    const [service, upstream] = [`http://${m[1]}/`, m[2]];
    const c = new Client(d.socket, { ioTimeoutMs: 2000, connectTimeoutMs: 2000 });
    try {
      assert.equal(await get(service), 'upstream says hello\n');
      // That request's outcomes at cbd: its success (a cached one is
      // written after a timer), after the failure of any attempt that timed
      // out first (on a loaded machine; the success reset its count).
      const totals = async () => (await c.get('upstream')).snapshot.totals;
      await waitFor(async () => (await totals()).successes === 1, 'the first success at cbd');
      const failed = (await totals()).failures;
      assert.equal(await get(`${upstream}toggle`), 'upstream down\n');
      // 3 attempts failed (a 502); the third opened the circuit.
      assert.match(await get(service), /^upstream failed: HTTP 503/);
      // Once the trip's event has reached the service (its stateChange
      // line), it falls back without trying the upstream.
      await waitFor(() => err.includes('circuit upstream: closed -> open'), 'the service to see the circuit open');
      assert.match(await get(service), /^fallback: upstream unavailable, retry in \d+ ms\n$/);
      assert.match(await get(service), /^fallback: upstream unavailable, retry in \d+ ms\n$/);
      const snap = (await c.get('upstream')).snapshot;
      assert.equal(snap.state, 'open');
      assert.equal(snap.totals.failures - failed, 3);
    } finally {
      c.close();
    }
  } finally {
    proc.kill('SIGTERM');
    let timer;
    await Promise.race([exited, new Promise((r) => { timer = setTimeout(r, 10_000); })]);
    clearTimeout(timer);
  }
});
