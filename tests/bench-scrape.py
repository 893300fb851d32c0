#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# bench-scrape.py — how long one big scrape holds cbd's loop: a cbd with
# N circuits (default 200,000) and metrics_max_circuits raised to cover
# them; a client on the Unix socket sends `get` in a loop (one at a time)
# while curl scrapes /metrics (or /api/circuits) over and over. Prints
# each scrape's size and time and the get latencies during the scrapes
# (max, p99, median) against those without one. Not run by make check.
#
#   tests/bench-scrape.py build/src/cbd [circuits] [scrapes] [path]
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


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def call(sock, f, req):
    sock.sendall((json.dumps(req) + "\n").encode())
    return json.loads(f.readline())


def pct(values, p):
    v = sorted(values)
    return v[min(len(v) - 1, int(len(v) * p))] if v else 0.0


def main():
    cbd = sys.argv[1]
    circuits = int(sys.argv[2]) if len(sys.argv) > 2 else 200000
    scrapes = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    path = sys.argv[4] if len(sys.argv) > 4 else "/metrics"
    tmp = tempfile.mkdtemp(prefix="cbd-bench-scrape-")
    sock_path = os.path.join(tmp, "cbd.sock")
    port = free_port()
    conf = os.path.join(tmp, "cbd.conf")
    with open(conf, "w") as f:
        f.write("[cbd]\nmetrics_listen = 127.0.0.1:%d\nmetrics_max_circuits = %d\n"
                "max_output_bytes = 268435456\nmax_total_output_bytes = 1073741824\n"
                % (port, circuits))
    proc = subprocess.Popen([cbd, "-c", conf, "-s", sock_path], stderr=subprocess.DEVNULL)
    try:
        for _ in range(200):
            if os.path.exists(sock_path):
                break
            time.sleep(0.05)
        s = socket.socket(socket.AF_UNIX)
        s.connect(sock_path)
        f = s.makefile("r")
        # Fill the table: noreply lines in batches, then wait for the count.
        batch = []
        for i in range(circuits):
            batch.append('{"op":"record_success","name":"bench-circuit-%07d","noreply":true}\n' % i)
            if len(batch) == 2000:
                s.sendall("".join(batch).encode())
                batch = []
        s.sendall("".join(batch).encode())
        while call(s, f, {"op": "stats"})["circuits"] < circuits:
            time.sleep(0.1)
        stop = threading.Event()
        busy = threading.Event()
        during, quiet = [], []

        def scraper():
            time.sleep(1.0)
            for _ in range(scrapes):
                busy.set()
                t0 = time.monotonic()
                out = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w",
                                      "%{size_download} %{http_code}",
                                      "http://127.0.0.1:%d%s" % (port, path)],
                                     capture_output=True, text=True).stdout
                t1 = time.monotonic()
                busy.clear()
                print("scrape: %s bytes/code, %.0f ms" % (out, (t1 - t0) * 1000), flush=True)
                time.sleep(0.5)
            stop.set()

        th = threading.Thread(target=scraper)
        th.start()
        while not stop.is_set():
            b = busy.is_set()
            t0 = time.monotonic()
            call(s, f, {"op": "get", "name": "bench-circuit-0000001"})
            ms = (time.monotonic() - t0) * 1000
            (during if b and busy.is_set() else quiet).append(ms)
        th.join()
        for name, v in (("during scrapes", during), ("without", quiet)):
            print("get %s: n=%d max %.1f ms p99 %.1f ms median %.2f ms"
                  % (name, len(v), max(v) if v else 0, pct(v, 0.99), pct(v, 0.5)))
        with open("/proc/%d/status" % proc.pid) as st:
            for line in st:
                if line.startswith(("VmHWM", "VmRSS")):
                    print("cbd " + line.strip())
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait()
        shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
