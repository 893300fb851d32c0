// SPDX-License-Identifier: Apache-2.0
// dashboard-browser.js — the dashboard in a real browser (run by
// tests/dashboard-browser.sh): headless Chromium driven by puppeteer-core
// loads the page from a real cbd; a trip from a client turns its tile open
// without a reload, a hold set with cbctl shows its badge, a deleted
// circuit's tile goes, 10,000 circuits render and the filter finds one,
// the arrow keys move between tiles; a page opened after traffic, without
// its event stream, draws the sparklines and rates at once from cbd's
// history (/api/history); a screenshot is written. Every wait
// is for a condition, with a generous bound; times are printed, not
// asserted.
'use strict';
const net = require('net');
const { execFileSync } = require('child_process');
const puppeteer = require(process.env.PUPPETEER_CORE);

const URL = process.env.DASHBOARD_URL, SOCK = process.env.CBD_SOCKET;
const CBCTL = process.env.CBCTL_BINARY, SHOT = process.env.SCREENSHOT;
const BOUND = 30000, UPDATE = process.env.CBD_UPDATE_SCREENSHOT === '1';
let passed = 0, failed = 0;
const ok = (what) => { passed++; console.log('ok: ' + what); };
const bad = (what, e) => { failed++; console.log('FAILED: ' + what + (e ? ': ' + (e.message || e) : '')); };

// A client of the socket: one request a line, replies in order.
function client() {
  const s = net.connect(SOCK);
  let buf = '';
  const waiting = [];
  s.on('data', (d) => {
    buf += d;
    let i;
    while ((i = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, i);
      buf = buf.slice(i + 1);
      const w = waiting.shift();
      if (w) w(JSON.parse(line));
    }
  });
  return {
    call: (req) => new Promise((resolve) => { waiting.push(resolve); s.write(JSON.stringify(req) + '\n'); }),
    many: (reqs) => Promise.all(reqs.map((r) => new Promise((resolve) => { waiting.push(resolve); s.write(JSON.stringify(r) + '\n'); }))),
    close: () => s.end(),
  };
}
const cbctl = (...args) => execFileSync(CBCTL, ['-s', SOCK, ...args], { encoding: 'utf8' });
const tileState = (name) => `(() => { const t = document.querySelector('#tiles [data-name=${JSON.stringify(JSON.stringify(name)).slice(1, -1)}]'); return t && t.dataset.state; })()`;

async function step(what, fn) {
  const t0 = Date.now();
  try { await fn(); ok(what + ' (' + (Date.now() - t0) + ' ms)'); } catch (e) { bad(what, e); }
}

(async () => {
  const c = client();
  // Traffic for the sparklines and rates, all along.
  for (const n of ['payments-api', 'search', 'images-cdn', 'inventory', 'old-batch']) await c.call({ op: 'record_success', name: n });
  let traffic = true;
  (async () => {
    let i = 0;
    while (traffic) {
      // As a client does: ask, then report (an open circuit refuses).
      const reqs = [];
      for (let k = 0; k < 20; k++) reqs.push({ op: 'allow', name: 'payments-api' }, { op: 'record_success', name: 'search' });
      if (i % 3 === 0) reqs.push({ op: 'record_ignore', name: 'search' });
      reqs.push({ op: i % 4 ? 'record_success' : 'record_failure', name: 'images-cdn' });
      const replies = await c.many(reqs);
      const outcomes = replies.filter((r) => r.allowed === true).map(() => ({ op: 'record_success', name: 'payments-api' }));
      if (outcomes.length) await c.many(outcomes);
      i++;
      await new Promise((r) => setTimeout(r, 100));
    }
  })();
  const browser = await puppeteer.launch({
    executablePath: process.env.CHROMIUM,
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--no-first-run'],
  });
  const page = await browser.newPage();
  await page.setViewport({ width: 1280, height: 800 });
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });

  await step('the page loads and lists the circuits', async () => {
    await page.goto(URL, { waitUntil: 'load', timeout: BOUND });
    await page.waitForFunction(() => window.cbdDashboard && window.cbdDashboard.loaded() && window.cbdDashboard.size() >= 5, { timeout: BOUND });
    await page.waitForFunction(() => document.getElementById('status').textContent === 'live', { timeout: BOUND });
  });
  await step('a trip from a client turns its tile open without a reload', async () => {
    const t = Date.now();
    for (let i = 0; i < 100; i++) {
      const r = await c.call({ op: 'record_failure', name: 'payments-api' });
      if (r.snapshot && r.snapshot.state === 'open') break;
    }
    await page.waitForFunction(tileState('payments-api') + " === 'open'", { timeout: BOUND });
    console.log('# tile open ' + (Date.now() - t) + ' ms after the trip began');
    const label = await page.$eval('#tiles [data-name="payments-api"] .state', (e) => e.textContent);
    if (label !== 'open') throw new Error('state label ' + label);
    const cmd = await page.$eval('#tiles [data-name="payments-api"] .cmd', (e) => e.textContent);
    if (cmd !== 'cbctl half-open payments-api') throw new Error('command ' + cmd);
    const first = await page.$eval('#tiles .tile', (e) => e.dataset.name);
    if (first !== 'payments-api') throw new Error('first tile is ' + first);
  });
  await step('a hold set with cbctl shows its badge, who, until and why', async () => {
    cbctl('open', 'inventory', '--for', '15m', '--reason', 'deploy 42');
    await page.waitForFunction(() => {
      const t = document.querySelector('#tiles [data-name="inventory"]');
      return t && t.querySelector('.badge') && /deploy 42/.test(t.querySelector('.hold').textContent) &&
        /until/.test(t.querySelector('.hold').textContent) && /cbctl release inventory/.test(t.textContent) &&
        /retry in 1[45]m/.test(t.querySelector('.retry').textContent);
    }, { timeout: BOUND });
  });
  await step('a flapping circuit says how often it changed', async () => {
    for (const state of ['open', 'closed', 'open', 'closed']) await c.call({ op: 'set_state', name: 'flappy', state });
    await page.waitForFunction(() => {
      const t = document.querySelector('#tiles [data-name="flappy"] .flaps');
      return t && /^[34] changes in 5 min$/.test(t.textContent);
    }, { timeout: BOUND });
    await c.call({ op: 'delete', name: 'flappy' });
  });
  await step('a deleted circuit\'s tile goes', async () => {
    await page.waitForSelector('#tiles [data-name="old-batch"]', { timeout: BOUND });
    cbctl('delete', 'old-batch');
    await page.waitForFunction(() => !document.querySelector('#tiles [data-name="old-batch"]'), { timeout: BOUND });
    await page.waitForFunction(() => /old-batch: deleted/.test(document.getElementById('log').textContent), { timeout: BOUND });
  });
  await step('the transitions log shows the trip', async () => {
    await page.waitForFunction(() => /payments-api: closed → open/.test(document.getElementById('log').textContent), { timeout: BOUND });
  });
  await step('rates and sparklines fill from the stats tick', async () => {
    await page.waitForFunction(() => {
      const t = document.querySelector('#tiles [data-name="search"]');
      return t && parseFloat(t.querySelector('.figures b').textContent) > 0;
    }, { timeout: BOUND });
  });
  await step('arrow keys move between tiles', async () => {
    await page.focus('#tiles .tile[data-index="0"]');
    await page.keyboard.press('ArrowRight');
    const idx = await page.evaluate(() => document.activeElement.dataset.index);
    if (idx !== '1') throw new Error('focused index ' + idx);
    await page.keyboard.press('Home');
  });
  await step('a screenshot is written', async () => {
    // A few ticks of traffic first, for the sparklines.
    await page.waitForFunction((UPDATE) => {
      const t = document.querySelector('#tiles [data-name="search"] .spark .calls');
      // Updating the README's picture: a longer history (20 s).
      return t && t.getAttribute('points').split(' ').filter((p) => !p.endsWith(',27.0')).length >= (UPDATE ? 10 : 3);
    }, { timeout: BOUND }, UPDATE);
    await page.evaluate(() => window.scrollTo(0, 0));
    await page.screenshot({ path: SHOT });
  });
  await step('a page opened after traffic shows the sparklines at once (history, no stream)', async () => {
    const p2 = await browser.newPage();
    await p2.setViewport({ width: 1280, height: 800 });
    p2.on('pageerror', (e) => errors.push(String(e)));
    // No event stream (refused, as past dashboard_max_clients): whatever
    // the tiles show came from /api/circuits and /api/history.
    await p2.setRequestInterception(true);
    p2.on('request', (r) => (/\/events$/.test(r.url())
      ? r.respond({ status: 503, contentType: 'text/plain', body: 'no stream in this test\n' }) : r.continue()));
    await p2.goto(URL, { waitUntil: 'load', timeout: BOUND });
    await p2.waitForFunction(() => window.cbdDashboard && window.cbdDashboard.loaded() && document.querySelector('#tiles [data-name="search"]'), { timeout: BOUND });
    const seen = await p2.evaluate(() => {
      const t = document.querySelector('#tiles [data-name="search"]');
      return { ticks: window.cbdDashboard.ticks(), rate: parseFloat(t.querySelector('.figures b').textContent),
        points: t.querySelector('.spark .calls').getAttribute('points').split(' ').filter((p) => !p.endsWith(',27.0')).length };
    });
    console.log('# history at load: ' + seen.points + ' sparkline points, ' + seen.rate + ' calls/s, ' + seen.ticks + ' live ticks');
    if (seen.ticks !== 0) throw new Error('the page had live ticks: ' + seen.ticks);
    if (seen.points < 3) throw new Error('the sparkline is empty at load: ' + seen.points + ' points');
    if (!(seen.rate > 0)) throw new Error('no calls/s at load');
    await p2.close();
  });
  traffic = false;
  await step('10,000 circuits render and the filter finds one', async () => {
    for (let b = 0; b < 10000; b += 1000) {
      const reqs = [];
      for (let i = b; i < b + 1000; i++) reqs.push({ op: 'record_success', name: 'n' + String(i).padStart(5, '0') });
      await c.many(reqs);
    }
    const t = Date.now();
    await page.reload({ waitUntil: 'load', timeout: BOUND });
    await page.waitForFunction(() => window.cbdDashboard.loaded() && window.cbdDashboard.size() >= 10004, { timeout: BOUND });
    await page.waitForSelector('#tiles .tile', { timeout: BOUND });
    console.log('# 10,004 circuits loaded and drawn in ' + (Date.now() - t) + ' ms');
    const tiles = await page.$$eval('#tiles .tile', (l) => l.length);
    if (tiles > 400) throw new Error(tiles + ' tiles in the page: not only the visible ones');
    const t2 = Date.now();
    await page.type('#filter', 'n04242');
    await page.waitForFunction(() => window.cbdDashboard.shown() === 1 && document.querySelector('#tiles [data-name="n04242"]'), { timeout: BOUND });
    console.log('# filter found n04242 in ' + (Date.now() - t2) + ' ms');
    // The page still answers: a scroll of the whole list draws tiles.
    await page.evaluate(() => { document.getElementById('filter').value = ''; document.getElementById('filter').dispatchEvent(new Event('input')); });
    await page.waitForFunction(() => window.cbdDashboard.shown() >= 10004, { timeout: BOUND });
    await page.evaluate(() => new Promise((r) => requestAnimationFrame(() => { window.scrollTo(0, document.body.scrollHeight); r(); })));
    await page.waitForFunction(() => Array.from(document.querySelectorAll('#tiles .tile')).some((t) => Number(t.dataset.index) > 9000), { timeout: BOUND });
  });
  await step('2,000 trips at once among 10,000 circuits reach the page', async () => {
    const reqs = [];
    for (let i = 0; i < 2000; i++) reqs.push({ op: 'set_state', name: 'n' + String(i * 5).padStart(5, '0'), state: 'open' });
    const t = Date.now();
    await c.many(reqs);
    // How long the page takes to answer meanwhile (printed, not asserted).
    let worst = 0, done = false;
    while (!done && Date.now() - t < BOUND) {
      const t0 = Date.now();
      done = await page.evaluate(() => /open: 200[0-9]/.test(document.getElementById('counts').textContent));
      worst = Math.max(worst, Date.now() - t0);
    }
    if (!done) throw new Error('the counts never showed 2,000 more open');
    console.log('# 2,000 trips shown in ' + (Date.now() - t) + ' ms; the page answered within ' + worst + ' ms at worst');
  });
  if (errors.length) bad('no script errors', errors.join('; ')); else ok('no script errors');
  await browser.close();
  c.close();
  console.log('dashboard-browser: ' + passed + ' passed, ' + failed + ' failed');
  process.exit(failed === 0 && passed > 0 ? 0 : 1);
})().catch((e) => { console.log('FAILED: ' + (e.stack || e)); process.exit(1); });
