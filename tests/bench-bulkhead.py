#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""bench-bulkhead.py — what the host-wide bulkhead and retry budget are for,
shown with real processes of two languages (prints figures, asserts
nothing; not run by make check):

  CBD_BINARY=build/src/cbd CBD_SRCDIR=. python3 tests/bench-bulkhead.py [-d SECONDS]

1. A slow dependency. 8 service processes (4 Python, 4 Node.js), each with
   8 worker slots, take 40 requests a second each; half of them call
   "slow-dep", half "healthy-dep" (local HTTP servers of this script, 5 ms
   each). After 2 s slow-dep answers in 2 s. Reported: the p99 of the
   healthy requests' time from arrival to answer (queueing for a slot
   included) after the slowdown, without a limit and with
   `max_concurrent = 16` on slow-dep (its calls past 16 in flight on the
   host are refused at once, so they stop holding every slot).
2. A retry storm. The same 8 processes call "fail-dep", which answers 503
   to everything, each call retried 3 times by the client's retry helper.
   Reported: the requests fail-dep received per call made, without a
   budget and with `retry_budget_percent = 20` (the breaker's threshold is
   set out of reach so that only the budget acts).

Starts cbd on a temporary socket and stops everything it started.
"""
import argparse
import http.server
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

SRC = os.environ.get("CBD_SRCDIR", os.path.join(os.path.dirname(__file__), ".."))

PY_WORKER = r'''
import json, sys, threading, time, urllib.request, urllib.error, concurrent.futures
sys.path.insert(0, sys.argv[1])
from cbdclient import Breaker, Client, Retry, RefusedError
sock, port, mode, seconds, rate, slots, t_slow = sys.argv[2:9]
port, seconds, rate, slots, t_slow = int(port), float(seconds), float(rate), int(slots), float(t_slow)
base = "http://127.0.0.1:%d/" % port
def get(path):
    with urllib.request.urlopen(base + path, timeout=10) as r:
        return r.read()
lat, refused, done = [], [0], [0]
lock = threading.Lock()
if mode == "slow":
    slow = Breaker("slow-dep", Client(sock), cached=False)
    healthy = Breaker("healthy-dep", Client(sock), cached=False)
    def job(kind, arrived):
        try:
            if kind == 0:
                slow.call(get, "slow")
            else:
                healthy.call(get, "healthy")
                if arrived >= t_slow:
                    with lock:
                        lat.append(time.time() - arrived)
        except RefusedError:
            with lock:
                refused[0] += 1
        except Exception:
            pass
else:
    fail = Breaker("fail-dep", Client(sock), cached=False)
    retry = Retry(fail, attempts=4, base_ms=0, max_ms=0, sleep=lambda s: None)
    def job(kind, arrived):
        try:
            retry.call(get, "fail")
        except Exception:
            pass
        with lock:
            done[0] += 1
pool = concurrent.futures.ThreadPoolExecutor(max_workers=slots)
start = time.time()
n = 0
while time.time() < start + seconds:
    target = start + n / rate
    now = time.time()
    if target > now:
        time.sleep(target - now)
    pool.submit(job, n % 2, time.time())
    n += 1
pool.shutdown(wait=True, cancel_futures=True)
print(json.dumps({"lat": lat, "refused": refused[0], "calls": n if mode != "slow" else done[0]}))
'''

NODE_WORKER = r'''
const [, , index, sock, port, mode, seconds, rate, slots, tSlow] = process.argv;
const { Breaker, Retry, RefusedError } = await import(index);
import('node:http').then(async ({ default: http }) => {
  const get = (path) => new Promise((resolve, reject) => {
    const req = http.get({ host: '127.0.0.1', port: Number(port), path: '/' + path, agent: false }, (res) => {
      res.resume();
      res.on('end', () => (res.statusCode >= 500 ? reject(new Error('status ' + res.statusCode)) : resolve()));
    });
    req.on('error', reject);
  });
  const lat = []; let refused = 0; let calls = 0;
  const slow = new Breaker('slow-dep', { socketPath: sock, cached: false });
  const healthy = new Breaker('healthy-dep', { socketPath: sock, cached: false });
  const fail = new Breaker('fail-dep', { socketPath: sock, cached: false });
  const retry = new Retry({ breaker: fail, attempts: 4, baseMs: 0, maxMs: 0, sleep: async () => {} });
  let free = Number(slots); const queue = [];
  const run = async (kind, arrived) => {
    try {
      if (mode === 'slow') {
        if (kind === 0) await slow.execute(() => get('slow'));
        else {
          await healthy.execute(() => get('healthy'));
          if (arrived >= Number(tSlow) * 1000) lat.push((Date.now() - arrived) / 1000);
        }
      } else {
        try { await retry.call(() => get('fail')); } catch (e) {}
        calls++;
      }
    } catch (e) {
      if (e instanceof RefusedError) refused++;
    }
    free++;
    if (queue.length > 0) { free--; const [k, a] = queue.shift(); run(k, a); }
  };
  const start = Date.now(); let n = 0;
  await new Promise((resolve) => {
    const tick = () => {
      const now = Date.now();
      while (start + (n * 1000) / Number(rate) <= now && now < start + Number(seconds) * 1000) {
        const k = n % 2; n++;
        if (free > 0) { free--; run(k, Date.now()); } else queue.push([k, Date.now()]);
      }
      if (now >= start + Number(seconds) * 1000) resolve(); else setTimeout(tick, 2);
    };
    tick();
  });
  queue.length = 0;
  while (free < Number(slots)) await new Promise((r) => setTimeout(r, 10));
  console.log(JSON.stringify({ lat, refused, calls }));
  for (const b of [slow, healthy, fail]) await b.close();
});
'''


class Upstream(http.server.ThreadingHTTPServer):
    """slow (its latency settable), healthy (5 ms), fail (503, counted)."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self):
        self.slow_s = 0.005
        self.fail_count = 0
        self.lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), Handler)


class Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        srv = self.server
        if self.path == "/fail":
            with srv.lock:
                srv.fail_count += 1
            self.send_response(503)
        else:
            time.sleep(srv.slow_s if self.path == "/slow" else 0.005)
            self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")


def start_cbd(tmp, config):
    sock = os.path.join(tmp, "cbd.sock")
    conf = os.path.join(tmp, "cbd.conf")
    with open(conf, "w") as f:
        f.write("[cbd]\nlog_level = warning\n" + config)
    proc = subprocess.Popen([os.environ["CBD_BINARY"], "-c", conf, "-s", sock],
                            stderr=subprocess.DEVNULL)
    deadline = time.time() + 30
    while not os.path.exists(sock) and time.time() < deadline:
        time.sleep(0.05)
    return proc, sock


def workers(tmp, sock, port, mode, seconds, rate, slots, t_slow):
    py = os.path.join(tmp, "worker.py")
    js = os.path.join(tmp, "worker.mjs")
    with open(py, "w") as f:
        f.write(PY_WORKER)
    with open(js, "w") as f:
        f.write(NODE_WORKER)
    index = "file://" + os.path.abspath(os.path.join(SRC, "client", "node", "index.js"))
    pysrc = os.path.abspath(os.path.join(SRC, "client", "python", "src"))
    procs = []
    for _ in range(4):
        procs.append(subprocess.Popen([sys.executable, py, pysrc, sock, str(port), mode,
                                       str(seconds), str(rate), str(slots), str(t_slow)],
                                      stdout=subprocess.PIPE))
        if shutil.which("node"):
            procs.append(subprocess.Popen(["node", js, index, sock, str(port), mode,
                                           str(seconds), str(rate), str(slots), str(t_slow)],
                                          stdout=subprocess.PIPE))
    results = []
    for p in procs:
        out, _ = p.communicate(timeout=seconds + 120)
        try:
            results.append(json.loads(out.decode().strip().splitlines()[-1]))
        except (ValueError, IndexError):
            results.append({"lat": [], "refused": 0, "calls": 0})
    return results, len(procs)


def p99(values):
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * 0.99))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-d", type=float, default=8.0, help="seconds a run lasts")
    args = ap.parse_args()
    if "CBD_BINARY" not in os.environ:
        sys.exit("bench-bulkhead: set CBD_BINARY to the cbd to run")
    up = Upstream()
    threading.Thread(target=up.serve_forever, daemon=True).start()
    port = up.server_address[1]
    print("1. a slow dependency: 8 processes (4 Python, 4 Node.js) x 8 slots, 40 requests/s each;"
          " slow-dep goes from 5 ms to 2 s after 2 s")
    for label, config in (("no limit", ""),
                          ("max_concurrent = 16", '[circuit "slow-dep"]\nmax_concurrent = 16\n')):
        tmp = tempfile.mkdtemp(prefix="cbd-bench-bulkhead.")
        proc, sock = start_cbd(tmp, config)
        up.slow_s = 0.005
        t_slow = time.time() + 2
        timer = threading.Timer(2, lambda: setattr(up, "slow_s", 2.0))
        timer.start()
        try:
            results, nproc = workers(tmp, sock, port, "slow", args.d, 40, 8, t_slow)
        finally:
            timer.cancel()
            proc.send_signal(signal.SIGTERM)
            proc.wait()
            shutil.rmtree(tmp, ignore_errors=True)
        lat = [x for r in results for x in r["lat"]]
        refused = sum(r["refused"] for r in results)
        print("  %-22s healthy requests after the slowdown: %5d answered, p99 %7.1f ms;"
              " slow-dep calls refused by the bulkhead: %d (%d processes)"
              % (label, len(lat), p99(lat) * 1000, refused, nproc))
    up.slow_s = 0.005
    print("2. a retry storm: the same processes, fail-dep answers 503, 3 retries a call")
    for label, config in (("no budget", ""),
                          ("retry_budget_percent = 20", "retry_budget_percent = 20\n")):
        tmp = tempfile.mkdtemp(prefix="cbd-bench-bulkhead.")
        proc, sock = start_cbd(tmp, '[circuit "fail-dep"]\nfailure_threshold = 1000000\n'
                               + config)
        before = up.fail_count
        try:
            results, nproc = workers(tmp, sock, port, "retry", args.d, 40, 8, 0)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait()
            shutil.rmtree(tmp, ignore_errors=True)
        calls = sum(r["calls"] for r in results)
        sent = up.fail_count - before
        print("  %-26s %6d calls, fail-dep received %6d requests: %.2f a call"
              % (label, calls, sent, sent / calls if calls else float("nan")))
    up.shutdown()


if __name__ == "__main__":
    main()
