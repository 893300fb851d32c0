#!/usr/bin/env python3
"""bench.py — what the Python client costs per call against a real cbd.
Prints figures, asserts nothing; not run by make check.

    CBD_BINARY=build/src/cbd python3 client/python/bench.py [-n CALLS]
"""

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "src"))

from cbdclient import AsyncClient, Breaker, Client  # noqa: E402

# Bound on waiting for cbd to answer at start (seconds).
START_WAIT = 10.0


def figure(label, n, seconds):
    print(f"{label:<44} {seconds / n * 1e6:9.1f} µs/call {n / seconds:10.0f} calls/s")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=20000)
    n = ap.parse_args().n
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
        b = Breaker("bench", c)
        t = time.perf_counter()
        for _ in range(n):
            b.call(int)
        figure("Breaker.call, closed (allow + record)", n, time.perf_counter() - t)
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
        b2 = Breaker("bench", Client(sock, io_timeout=0.1))
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
    finally:
        proc.terminate()
        proc.wait(10)
        for f in os.listdir(d):
            os.unlink(os.path.join(d, f))
        os.rmdir(d)


if __name__ == "__main__":
    main()
