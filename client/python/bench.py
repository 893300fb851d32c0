#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""bench.py — what the Python client costs per call against a real cbd.
Prints figures, asserts nothing; not run by make check.

    CBD_BINARY=build/src/cbd python3 client/python/bench.py [-n CALLS] [--trips N]

Cached mode: the median and p99 of one protected call (closed cached and
uncached, open cached and uncached), and the propagation delay of a trip
made by one client until a breaker in another process refuses.
"""

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "src"))

from cbdclient import AsyncBreaker, AsyncClient, Breaker, CircuitOpenError, Client  # noqa: E402

# Bound on waiting for cbd to answer at start, and for one propagation
# sample (seconds).
START_WAIT = 10.0
SAMPLE_WAIT = 10.0

# The watcher process of the propagation figure: a cached breaker that
# polls its cache (no report: a cached permit holds nothing) every
# argv[3] seconds, or busily with 0 (its reader thread then waits for the
# GIL: up to the 5 ms switch interval), and prints the wall time at which
# it first sees each change the parent makes.
WATCHER = r"""
import sys, time
sys.path.insert(0, sys.argv[2])
pause = float(sys.argv[3])
from cbdclient import Breaker, CircuitOpenError, Client
b = Breaker("propagation", Client(sys.argv[1], io_timeout=2.0), break_ms=600000)
while b.cache_stats().cached_calls == 0:
    b.call(int)
print("ready", flush=True)
for line in sys.stdin:
    want_open = line.strip() == "open"
    while True:
        try:
            b.acquire()
            seen = not want_open
        except CircuitOpenError:
            seen = want_open
        if seen:
            print(time.time_ns(), flush=True)
            break
        if pause:
            time.sleep(pause)
"""


def figure(label, n, seconds):
    print(f"{label:<44} {seconds / n * 1e6:9.1f} µs/call {n / seconds:10.0f} calls/s")


def percentiles(label, samples_ns, unit="µs"):
    s = sorted(samples_ns)
    scale = 1e3 if unit == "µs" else 1e6
    p50 = statistics.median(s) / scale
    p99 = s[min(len(s) - 1, int(len(s) * 0.99))] / scale
    print(f"{label:<62} p50 {p50:9.2f} {unit}   p99 {p99:9.2f} {unit}   ({len(s)} samples)")


def per_call(fn, n):
    """The cost of each of n calls of fn (ns)."""
    out = []
    clock = time.perf_counter_ns
    for _ in range(n):
        t = clock()
        fn()
        out.append(clock() - t)
    return out


def refused():
    raise AssertionError("the circuit should refuse")


def bench_cached(sock, n, trips):
    admin = Client(sock, io_timeout=2.0)
    cached = Breaker("cached", Client(sock, io_timeout=2.0))
    uncached = Breaker("uncached", Client(sock, io_timeout=2.0), cached=False)
    while cached.cache_stats().cached_calls == 0:
        cached.call(int)
    percentiles("closed, cached (no round trip)", per_call(lambda: cached.call(int), n))
    percentiles("closed, uncached (allow + record)", per_call(lambda: uncached.call(int), n))
    fb = {"fallback": lambda e: None}
    for name in ("cached", "uncached"):
        admin.set_state(name, "open", hold=True, reason="bench")
    while True:  # until the hold's event reached the cache
        try:
            cached.acquire()
        except CircuitOpenError:
            break
    percentiles("open, cached (refused locally)",
                per_call(lambda: cached.execute(refused, **fb), n))
    percentiles("open, uncached (allow refused by cbd)",
                per_call(lambda: uncached.execute(refused, **fb), n))
    stats = cached.cache_stats()
    print(f"cache: {stats.cached_calls} cached calls, {stats.local_refusals} local refusals, "
          f"{stats.uncached} uncached, {stats.noreply_lines} noreply lines in "
          f"{stats.sends} writes, {stats.store_reports} reported uncached")
    cached.client.close()
    uncached.client.close()

    asyncio.run(bench_async(sock, n))
    for pause, label in ((0.0001, "polling every 100 µs"), (0, "polling busily")):
        propagation(sock, admin, trips, pause, label)
    admin.close()


async def bench_async(sock, n):
    """AsyncBreaker on an AsyncClient: the cache the event loop owns."""
    async def nothing():
        return None

    clock = time.perf_counter_ns
    for label, cached in (("cached", None), ("uncached", False)):
        ac = AsyncClient(sock, io_timeout=2.0)
        ab = AsyncBreaker(Breaker(f"async-{label}", ac, cached=cached))
        await ab.call(nothing)
        while cached is None and ab.breaker.cache_stats().cached_calls == 0:
            await ab.call(nothing)
            await asyncio.sleep(0.001)
        samples = []
        for _ in range(n):
            t = clock()
            await ab.call(nothing)
            samples.append(clock() - t)
        percentiles(f"closed, {label}, AsyncBreaker on an AsyncClient", samples)
        await ac.close()


def propagation(sock, admin, trips, pause, label):
    """This process trips (then closes) the circuit, another process's
    cached breaker sees it."""
    w = subprocess.Popen([sys.executable, "-c", WATCHER, sock, os.path.join(HERE, "src"),
                          str(pause)],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        if w.stdout.readline().strip() != "ready":
            raise RuntimeError("the watcher did not start")
        delays = []
        for _ in range(trips):
            for state in ("open", "closed"):
                w.stdin.write(state + "\n")
                w.stdin.flush()
                time.sleep(0.002)  # the watcher is polling now
                t = time.time_ns()
                admin.set_state("propagation", state)
                seen = int(w.stdout.readline())
                if state == "open":
                    delays.append(seen - t)
        percentiles(f"propagation, trip -> refusal elsewhere ({label})", delays, "ms")
    finally:
        w.stdin.close()
        w.wait(SAMPLE_WAIT)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=20000)
    ap.add_argument("--trips", type=int, default=200)
    args = ap.parse_args()
    n = args.n
    d = tempfile.mkdtemp(prefix="cbd-pybench.")
    sock = os.path.join(d, "cbd.sock")
    proc = subprocess.Popen([os.environ["CBD_BINARY"], "-s", sock],
                            stderr=subprocess.DEVNULL)
    try:
        c = Client(sock, io_timeout=2.0)
        deadline = time.monotonic() + START_WAIT
        while True:
            try:
                c.hello()
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.01)
        t = time.perf_counter()
        for _ in range(n):
            c.get("bench")
        figure("Client.get (one round trip)", n, time.perf_counter() - t)
        b = Breaker("bench", c, cached=False)
        t = time.perf_counter()
        for _ in range(n):
            b.call(int)
        figure("Breaker.call, closed (allow + record)", n, time.perf_counter() - t)
        bc = Breaker("bench-cached", Client(sock, io_timeout=2.0))
        while bc.cache_stats().cached_calls == 0:
            bc.call(int)
        t = time.perf_counter()
        for _ in range(n):
            bc.call(int)
        figure("Breaker.call, closed, cached (noreply)", n, time.perf_counter() - t)
        bc.client.close()
        p = Breaker.private("bench")
        t = time.perf_counter()
        for _ in range(n):
            p.call(int)
        figure("Breaker.private call (in-process)", n, time.perf_counter() - t)

        async def pipelined():
            async with AsyncClient(sock, io_timeout=10.0) as ac:
                t = time.perf_counter()
                for i in range(0, n, 1000):
                    await asyncio.gather(*(ac.get("bench") for _ in range(1000)))
                figure("AsyncClient.get, 1000 in flight", n, time.perf_counter() - t)
        asyncio.run(pipelined())
        proc.send_signal(subprocess.signal.SIGSTOP)
        b2 = Breaker("bench", Client(sock, io_timeout=0.1), cached=False)
        t = time.perf_counter()
        b2.call(int)
        first = time.perf_counter() - t
        t = time.perf_counter()
        for _ in range(1000):
            b2.call(int)
        later = (time.perf_counter() - t) / 1000
        proc.send_signal(subprocess.signal.SIGCONT)
        print(f"stopped cbd, LOCAL: first call {first * 1e3:.1f} ms (io_timeout 100 ms), "
              f"then {later * 1e6:.1f} µs/call within the backoff")
        bench_cached(sock, n, args.trips)
    finally:
        proc.terminate()
        proc.wait(10)
        for f in os.listdir(d):
            os.unlink(os.path.join(d, f))
        os.rmdir(d)


if __name__ == "__main__":
    main()
