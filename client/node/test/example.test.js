// example.test.js — the example service (examples/service.js) end to end:
// its demo upstream goes down, the retries fail, the circuit opens in cbd
// and the service answers from its fallback.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Daemon } from './helpers.js';
import { Client } from '../index.js';

const SERVICE = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', 'examples', 'service.js');
// Bounds (ms) on the service starting and on each HTTP request.
const START_WAIT_MS = 10_000;
const HTTP_WAIT_MS = 10_000;

let d;
before(async () => {
  d = await Daemon.start();
});
after(async () => {
  await d?.cleanup();
});

async function get(url) {
  const res = await fetch(url, { signal: AbortSignal.timeout(HTTP_WAIT_MS) });
  return res.text();
}

test('the example service falls back once the circuit opens', async () => {
  const proc = spawn(process.execPath, [SERVICE, '--demo', '--port', '0', '--demo-port', '0'], {
    env: { ...process.env, CBD_SOCKET: d.socket }, stdio: ['ignore', 'ignore', 'pipe'],
  });
  const exited = new Promise((r) => proc.once('exit', r));
  try {
    const line = await new Promise((resolve, reject) => {
      let err = '';
      const t = setTimeout(() => reject(new Error(`the service did not start: ${err}`)), START_WAIT_MS);
      proc.stderr.on('data', (chunk) => {
        err += chunk;
        if (err.includes('\n')) {
          clearTimeout(t);
          resolve(err.split('\n')[0]);
        }
      });
    });
    const m = /serving on (\S+), upstream (\S+)/.exec(line);
    assert.ok(m, `no startup line: ${line}`);
    const [service, upstream] = [`http://${m[1]}/`, m[2]];
    assert.equal(await get(service), 'upstream says hello\n');
    assert.equal(await get(`${upstream}toggle`), 'upstream down\n');
    const answers = [await get(service), await get(service), await get(service)];
    // 3 attempts failed (a 502), then 2 more opened the circuit
    // (failure_threshold 5) and the third attempt fell back.
    assert.match(answers[0], /^upstream failed: HTTP 503/);
    assert.match(answers[1], /^cached answer/);
    assert.match(answers[2], /^cached answer/);
    const c = new Client(d.socket, { ioTimeoutMs: 2000 });
    const snap = (await c.get('upstream')).snapshot;
    c.close();
    assert.equal(snap.state, 'open');
    assert.equal(snap.totals.failures, 5);
  } finally {
    proc.kill('SIGTERM');
    let timer;
    await Promise.race([exited, new Promise((r) => { timer = setTimeout(r, 10_000); })]);
    clearTimeout(timer);
  }
});
