// SPDX-License-Identifier: Apache-2.0
// trace.test.js — the local state machine replays the shared trace
// proto/traces/state-machine.json (generated from cbd), every expectation
// checked: allow (allowed, state, retry_after_ms; a permit handed back at
// once), success / failure / ignore (with duration_ms), force; then state,
// counts, times, the break in effect and the window's counts.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { TOP } from './helpers.js';
import { LocalStore } from '../src/local.js';
import { resolvePolicy } from '../src/machine.js';

const trace = JSON.parse(fs.readFileSync(path.join(TOP, 'proto', 'traces', 'state-machine.json'), 'utf8'));

test('the trace file has cases', () => {
  assert.ok(trace.cases.length >= 12);
});

for (const c of trace.cases) {
  test(`trace: ${c.name}`, () => {
    const policy = { ...resolvePolicy(c.policy), min_reporters: 1 };
    const store = new LocalStore();
    let checked = 0;
    c.steps.forEach((step, i) => {
      const where = `${c.name}, step ${i} (${step.op})`;
      const want = step.expect;
      const now = step.now;
      let got;
      if (step.op === 'allow') {
        const a = store.allow('c', policy, now);
        got = { allowed: a.allowed, state: a.state, retry_after_ms: a.retry_after_ms };
        if (a.permit) store.record('c', 'ignore', policy, now, null, a.permit); // handed back at once
      } else {
        let snap;
        if (step.op === 'force') snap = store.setState('c', step.state, policy, now);
        else if (['success', 'failure', 'ignore'].includes(step.op)) snap = store.record('c', step.op, policy, now, step.duration_ms ?? null);
        else assert.fail(`${where}: unknown op`);
        got = { ...snap, window: store.window('c', now) };
      }
      // Every member the trace expects is checked (a new one fails here).
      for (const k of Object.keys(want)) {
        assert.ok(k in got, `${where}: nothing to check ${k} against`);
        assert.deepEqual(got[k], want[k], `${where}: ${k}`);
      }
      checked += 1;
    });
    assert.equal(checked, c.steps.length);
  });
}
