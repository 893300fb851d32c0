// SPDX-License-Identifier: Apache-2.0
// src/dashboard/app.js — the dashboard's script (compiled into cbd, served
// at /app.js): loads /api/circuits and /api/history (the last 5 minutes of
// ticks, so the sparklines are drawn at once), follows /events (change,
// policy, delete, and a stats tick with each circuit's calls since the
// last, appended to the history) and
// draws a tile per circuit, open and held first. Only the tiles in view
// exist in the page (10,000 circuits are 10,000 objects, not 10,000
// elements). Vanilla JS, no dependency, nothing fetched from elsewhere.
'use strict';
(function () {
  const TILE_W = 260, TILE_H = 164, GAP = 12, HISTORY_MS = 5 * 60 * 1000, LOG_MAX = 100;
  const circuits = new Map(); // name -> circuit
  let order = []; // circuits shown, in order
  let tickMs = 2000, loaded = false, queued = [], dirty = true, focusIndex = -1;
  let truncated = false, total = 0, histLast = 0, ticks = 0;
  const $ = (id) => document.getElementById(id);
  const tilesEl = $('tiles'), filterEl = $('filter'), stateEl = $('state');

  // ---- the model ----------------------------------------------------------
  function put(snap) {
    let c = circuits.get(snap.name);
    if (!c) {
      c = { name: snap.name, hist: [], trans: [] };
      circuits.set(snap.name, c);
    }
    c.snap = snap;
    c.retryAt = snap.state !== 'closed' && snap.retry_after_ms > 0 ? Date.now() + snap.retry_after_ms : 0;
    dirty = true;
    return c;
  }
  function held(c) { return !!(c.snap.hold && c.snap.hold.state); }
  function rank(c) {
    const s = c.snap.state;
    return s === 'open' ? 0 : s === 'half_open' ? 1 : held(c) ? 2 : 3;
  }
  // Calls per second, failure and slow rates over the last 30 s of ticks.
  function recent(c) {
    const since = Date.now() - 30000;
    let calls = 0, fails = 0, slow = 0, rejected = 0, ms = 0;
    for (const h of c.hist) {
      if (h.t >= since) { calls += h.calls; fails += h.fails; slow += h.slow; rejected += h.rejected; ms += h.ms; }
    }
    ms = Math.max(ms, tickMs);
    return { perSec: calls * 1000 / ms, fail: calls ? fails / calls : 0, slow: calls ? slow / calls : 0,
      rejectedPerSec: rejected * 1000 / ms };
  }
  function rebuild() {
    const f = filterEl.value.trim().toLowerCase(), st = stateEl.value;
    order = [];
    for (const c of circuits.values()) {
      if (f && !c.name.toLowerCase().includes(f)) continue;
      if (st === 'held' ? !held(c) : st && c.snap.state !== st) continue;
      c.rate = recent(c).perSec;
      order.push(c);
    }
    order.sort((a, b) => rank(a) - rank(b) || b.rate - a.rate || (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    const n = { open: 0, half_open: 0, held: 0, closed: 0 };
    for (const c of circuits.values()) { n[c.snap.state]++; if (held(c)) n.held++; }
    $('counts').replaceChildren(...['open', 'half_open', 'held', 'closed'].map((k) => {
      const li = document.createElement('li');
      li.textContent = k.replace('_', ' ') + ': ' + n[k];
      return li;
    }));
    $('shown').textContent = order.length === circuits.size ? circuits.size + ' circuits'
      : order.length + ' of ' + circuits.size + ' circuits shown';
    const notice = $('notice');
    notice.hidden = !truncated;
    if (truncated) notice.textContent = 'cbd has ' + total + ' circuits; the first list was cut at max_output_bytes (open and held ones come first). Others appear as they change.';
  }

  // ---- drawing ------------------------------------------------------------
  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function shq(s) { return /^[A-Za-z0-9_.:\/@%+=-]+$/.test(s) ? s : "'" + s.replace(/'/g, "'\\''") + "'"; }
  function fmtTime(ms) { return new Date(ms).toLocaleTimeString(); }
  function fmtLeft(ms) {
    const s = Math.ceil(ms / 1000);
    return s >= 3600 ? Math.floor(s / 3600) + 'h' + String(Math.floor(s % 3600 / 60)).padStart(2, '0') + 'm'
      : s >= 60 ? Math.floor(s / 60) + 'm' + String(s % 60).padStart(2, '0') + 's' : s + 's';
  }
  function pct(x) { return (x * 100).toFixed(x > 0 && x < 0.1 ? 1 : 0) + '%'; }
  const SVG = 'http://www.w3.org/2000/svg';
  function sparkline(c) {
    const svg = document.createElementNS(SVG, 'svg');
    svg.setAttribute('class', 'spark');
    svg.setAttribute('viewBox', '0 0 150 28');
    svg.setAttribute('preserveAspectRatio', 'none');
    svg.setAttribute('aria-hidden', 'true');
    const now = Date.now(), slots = 150, per = HISTORY_MS / slots;
    const calls = new Array(slots).fill(0), fails = new Array(slots).fill(0), refused = new Array(slots).fill(0);
    for (const h of c.hist) {
      const i = slots - 1 - Math.floor((now - h.t) / per);
      if (i >= 0 && i < slots) { calls[i] += h.calls; fails[i] += h.fails; refused[i] += h.rejected || 0; }
    }
    // Calls (blue), failures (red), refused while open (grey, dashed).
    const max = Math.max(1, ...calls, ...refused);
    for (const [cls, v] of [['refused', refused], ['fails', fails], ['calls', calls]]) {
      const p = document.createElementNS(SVG, 'polyline');
      p.setAttribute('class', cls);
      p.setAttribute('points', v.map((y, x) => x + ',' + (27 - y * 26 / max).toFixed(1)).join(' '));
      svg.appendChild(p);
    }
    return svg;
  }
  function retryText(c) {
    if (!c.retryAt) return '';
    const left = c.retryAt - Date.now();
    return left > 0 ? 'retry in ' + fmtLeft(left) : 'trial due';
  }
  function command(c) {
    if (held(c)) return 'cbctl release ' + shq(c.name);
    if (c.snap.state === 'open') return 'cbctl half-open ' + shq(c.name);
    return '';
  }
  function tile(c, index) {
    const s = c.snap, t = el('div', 'tile s-' + s.state + (held(c) ? ' held' : ''));
    const r = recent(c);
    t.setAttribute('role', 'listitem');
    t.tabIndex = index === focusIndex ? 0 : -1;
    t.dataset.name = c.name;
    t.dataset.state = s.state;
    t.dataset.index = index;
    const head = el('p', 'name');
    const state = el('span', 'state s-' + s.state, s.state.replace('_', ' '));
    head.append(state, ' ');
    if (held(c)) head.append(el('span', 'badge', 'HELD'), ' ');
    head.append(el('span', 'label', c.name));
    head.title = c.name;
    t.append(head);
    let holdText = '';
    if (held(c)) {
      const h = s.hold;
      holdText = 'held ' + h.state + ' by ' + (h.by_user || 'uid ' + h.by_uid) +
        (h.until ? ' until ' + fmtTime(h.until) : ' until released') + (h.reason ? ': ' + h.reason : '');
      const p = el('p', 'hold', holdText);
      p.title = holdText;
      t.append(p);
    }
    const fig = el('p', 'figures');
    fig.append(el('span', null, ''), el('span', null, ''), el('span', null, ''));
    fig.children[0].append(el('b', null, r.perSec.toFixed(r.perSec < 10 ? 1 : 0)), ' calls/s');
    fig.children[1].append(el('b', null, pct(r.fail)), ' failed');
    fig.children[2].append(el('b', null, pct(r.slow)), ' slow');
    if (r.rejectedPerSec > 0) {
      fig.append(el('span'));
      fig.lastChild.append(el('b', null, r.rejectedPerSec.toFixed(r.rejectedPerSec < 10 ? 1 : 0)), ' refused/s');
    }
    t.append(fig, sparkline(c));
    // Flapping: state changes in the last 5 minutes (seen by this page).
    c.trans = c.trans.filter((x) => x > Date.now() - HISTORY_MS);
    const retry = el('p', 'retry'), countdown = el('span', null, retryText(c));
    countdown.dataset.retry = c.name;
    retry.append(countdown);
    if (c.trans.length >= 2) retry.append(' ', el('span', 'flaps', c.trans.length + ' changes in 5 min'));
    t.append(retry);
    const cmd = command(c);
    if (cmd) t.append(el('code', 'cmd', cmd));
    t.setAttribute('aria-label', c.name + ', ' + s.state.replace('_', ' ') + (holdText ? ', ' + holdText : '') +
      ', ' + r.perSec.toFixed(1) + ' calls per second, ' + pct(r.fail) + ' failed' +
      (retryText(c) ? ', ' + retryText(c) : '') + (c.trans.length >= 2 ? ', ' + c.trans.length + ' state changes in 5 minutes' : '') + (cmd ? ', command: ' + cmd : ''));
    return t;
  }
  function columns() { return Math.max(1, Math.floor((tilesEl.clientWidth + GAP) / (TILE_W + GAP))); }
  function render() {
    if (dirty) { rebuild(); dirty = false; }
    const cols = columns(), rows = Math.ceil(order.length / cols);
    tilesEl.style.height = Math.max(0, rows * (TILE_H + GAP) - GAP) + 'px';
    const top = tilesEl.getBoundingClientRect().top + window.scrollY;
    const first = Math.max(0, Math.floor((window.scrollY - top) / (TILE_H + GAP)) - 1);
    const last = Math.min(rows, Math.ceil((window.scrollY + window.innerHeight - top) / (TILE_H + GAP)) + 1);
    const hadFocus = document.activeElement && document.activeElement.classList.contains('tile');
    const frag = document.createDocumentFragment();
    for (let i = first * cols; i < Math.min(order.length, last * cols); i++) {
      const t = tile(order[i], i);
      t.style.left = (i % cols) * (TILE_W + GAP) + 'px';
      t.style.top = Math.floor(i / cols) * (TILE_H + GAP) + 'px';
      t.style.setProperty('--tile-w', TILE_W + 'px');
      frag.appendChild(t);
    }
    tilesEl.replaceChildren(frag);
    if (focusIndex < 0 && order.length > 0) focusIndex = 0;
    const f = tilesEl.querySelector('[data-index="' + focusIndex + '"]');
    if (f) { f.tabIndex = 0; if (hadFocus) f.focus({ preventScroll: true }); }
    else if (order.length > 0) { const any = tilesEl.querySelector('.tile'); if (any) any.tabIndex = 0; }
  }
  // Redrawing the tiles in view is cheap (scrolling: next frame); sorting
  // 10,000 circuits is not, so the feed's changes are drawn at most every
  // 250 ms however fast events come.
  let scheduled = false, feedTimer = 0;
  function schedule() {
    if (scheduled) return;
    scheduled = true;
    requestAnimationFrame(() => { scheduled = false; render(); });
  }
  function scheduleFeed() {
    if (feedTimer) return;
    feedTimer = setTimeout(() => { feedTimer = 0; schedule(); }, 250);
  }
  // The countdowns tick every second (the tiles in view only).
  setInterval(() => {
    for (const p of tilesEl.querySelectorAll('[data-retry]')) {
      const c = circuits.get(p.dataset.retry);
      if (c) p.textContent = retryText(c);
    }
  }, 1000);
  window.addEventListener('scroll', schedule, { passive: true });
  window.addEventListener('resize', schedule);
  filterEl.addEventListener('input', () => { dirty = true; focusIndex = 0; schedule(); });
  stateEl.addEventListener('change', () => { dirty = true; focusIndex = 0; schedule(); });
  $('controls').addEventListener('submit', (e) => e.preventDefault());
  tilesEl.addEventListener('keydown', (e) => {
    const cols = columns(), n = order.length;
    const moves = { ArrowRight: 1, ArrowLeft: -1, ArrowDown: cols, ArrowUp: -cols, PageDown: cols * 3, PageUp: -cols * 3 };
    let i = focusIndex;
    if (e.key in moves) i += moves[e.key];
    else if (e.key === 'Home') i = 0;
    else if (e.key === 'End') i = n - 1;
    else return;
    e.preventDefault();
    focusIndex = Math.max(0, Math.min(n - 1, i));
    const y = tilesEl.getBoundingClientRect().top + window.scrollY + Math.floor(focusIndex / cols) * (TILE_H + GAP);
    if (y < window.scrollY + 120 || y + TILE_H > window.scrollY + window.innerHeight) window.scrollTo(0, y - window.innerHeight / 2);
    render();
    const t = tilesEl.querySelector('[data-index="' + focusIndex + '"]');
    if (t) t.focus({ preventScroll: true });
  });
  tilesEl.addEventListener('focusin', (e) => {
    if (e.target.dataset && e.target.dataset.index) focusIndex = Number(e.target.dataset.index);
  });

  // ---- the transitions log ------------------------------------------------
  function logLine(text) {
    const li = el('li');
    li.append(el('time', null, fmtTime(Date.now())), text);
    const log = $('log');
    log.prepend(li);
    while (log.children.length > LOG_MAX) log.lastChild.remove();
  }

  // ---- the feed -----------------------------------------------------------
  function apply(type, d) {
    if (type === 'change') {
      const before = circuits.get(d.snapshot.name);
      put(d.snapshot);
      if (d.from !== d.snapshot.state) circuits.get(d.snapshot.name).trans.push(Date.now());
      if (d.from !== d.snapshot.state) logLine(d.snapshot.name + ': ' + d.from + ' → ' + d.snapshot.state + ' (' + d.reason + ')');
      else if (!before || held(before) !== held(circuits.get(d.snapshot.name))) logLine(d.snapshot.name + ': ' + d.reason);
    } else if (type === 'policy') {
      put(d.snapshot);
    } else if (type === 'delete') {
      if (circuits.delete(d.name)) logLine(d.name + ': ' + d.reason);
      dirty = true;
    } else if (type === 'stats') {
      const now = Date.now();
      tickMs = d.interval_ms || tickMs;
      ticks++;
      // A tick the history loaded already holds.
      if (d.now <= histLast) return;
      for (const [name, calls, fails, slow, rejected] of d.rates) {
        const c = circuits.get(name);
        if (c) c.hist.push({ t: d.now || now, ms: d.interval_ms, calls, fails, slow, rejected });
      }
      for (const c of circuits.values()) {
        while (c.hist.length && c.hist[0].t < now - HISTORY_MS) c.hist.shift();
      }
      dirty = true;
    }
    scheduleFeed();
  }
  function onEvent(type) {
    return (e) => {
      let d;
      try { d = JSON.parse(e.data); } catch (err) { return; }
      if (loaded) apply(type, d); else queued.push([type, d]);
    };
  }
  async function load() {
    loaded = false;
    queued = [];
    try {
      const [r, rh] = await Promise.all([fetch('api/circuits', { cache: 'no-store' }),
        fetch('api/history', { cache: 'no-store' }).catch(() => null)]);
      const d = await r.json();
      const hd = rh && rh.ok ? await rh.json().catch(() => null) : null;
      const old = circuits;
      const keep = new Map();
      for (const s of d.circuits) {
        const prev = old.get(s.name);
        keep.set(s.name, prev ? (prev.snap = s, prev) : null);
      }
      circuits.clear();
      for (const s of d.circuits) {
        const prev = keep.get(s.name);
        if (prev) circuits.set(s.name, prev);
        put(s);
      }
      tickMs = d.tick_ms || tickMs;
      // The last 5 minutes as cbd kept them (the ticks it had before this
      // page): they replace what this page saw, live ticks come after.
      if (hd) {
        histLast = hd.last || 0;
        for (const h of hd.circuits) {
          const c = circuits.get(h.name);
          if (!c) continue;
          c.hist = h.samples.map(([t, calls, fails, slow, rejected]) => ({ t, ms: hd.tick_ms || tickMs, calls, fails, slow, rejected }));
        }
      }
      truncated = d.truncated;
      total = d.total;
      loaded = true;
      // Events that came while the list was read: those older than it are
      // in it already (and would take a circuit back).
      for (const [type, ev] of queued) if (type === 'stats' || !(ev.at < d.now)) apply(type, ev);
      queued = [];
      dirty = true;
      schedule();
    } catch (err) {
      $('status').textContent = 'cannot load the circuits: ' + err;
    }
  }
  // The stream; when cbd refuses it (503 past dashboard_max_clients) the
  // browser gives up on it: the list is loaded once and the stream tried
  // again every 5 s.
  function connect() {
    const source = new EventSource('events');
    for (const t of ['change', 'policy', 'delete', 'stats']) source.addEventListener(t, onEvent(t));
    source.onopen = () => {
      $('status').textContent = 'live';
      $('status').className = 'live';
      load();
    };
    source.onerror = () => {
      $('status').className = 'down';
      if (source.readyState === EventSource.CLOSED) {
        $('status').textContent = 'not live (cbd refused the stream: too many dashboards, dashboard_max_clients, or cbd is gone); retrying every 5 s';
        if (!loaded) load();
        setTimeout(connect, 5000);
      } else {
        $('status').textContent = 'reconnecting… (cbd unreachable)';
      }
    };
  }
  connect();
  window.cbdDashboard = { size: () => circuits.size, shown: () => order.length, loaded: () => loaded, ticks: () => ticks };
  schedule();
})();
