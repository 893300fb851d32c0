#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# bench-watchers.py — cbd's memory under watchers that do not keep up
# (issue 28, item 3): W watchers of everything (default 500: 400 that
# read slowly, 100 that never read) while another client makes C changes
# a second (default 200) for D seconds (default 40), and a third sends
# `get` in a loop. Prints cbd's RSS peak (VmHWM) and its RSS after every
# watcher closed (VmRSS, once the housekeeping tick gave memory back),
# the stats of the host-wide bound, and the get latencies. Not run by
# make check.
#
#   tests/bench-watchers.py build/src/cbd [-w 500] [-s 400] [-c 200] [-d 40]
#       [-r BYTES_PER_SECOND_OF_A_SLOW_READER] [-o CONFIG_LINES]
import argparse
import json
import multiprocessing
import os
import selectors
import shutil
import signal
import socket
import subprocess
import tempfile
import time


def connect(path):
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    return s


def call(s, f, req):
    s.sendall((json.dumps(req) + "\n").encode())
    return json.loads(f.readline())


def watchers(path, total, slow, rate, ready, done):
    """total watchers of everything; the first `slow` read `rate` bytes a
    second each (in 10 reads), the others never read."""
    socks = []
    for i in range(total):
        s = connect(path)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        s.sendall(b'{"op":"watch","all":true}\n')
        socks.append(s)
    ready.set()
    chunk = max(1, rate // 10)
    while not done.is_set():
        t0 = time.monotonic()
        for s in socks[:slow]:
            try:
                s.recv(chunk, socket.MSG_DONTWAIT)
            except (BlockingIOError, ConnectionError):
                pass
        time.sleep(max(0.0, 0.1 - (time.monotonic() - t0)))
    for s in socks:
        s.close()


def changer(path, rate, seconds, ready):
    s = connect(path)
    f = s.makefile("r")
    ready.wait()
    names = ["bench-watched-%03d" % i for i in range(100)]
    n = 0
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        # One change a line: a circuit forced open, then closed again.
        state = "open" if (n // len(names)) % 2 == 0 else "closed"
        s.sendall(('{"op":"set_state","name":"%s","state":"%s","noreply":true}\n'
                   % (names[n % len(names)], state)).encode())
        n += 1
        due = start + n / rate
        if due > time.monotonic():
            time.sleep(due - time.monotonic())
    call(s, f, {"op": "hello"})
    s.close()


def getter(path, ready, done, out):
    s = connect(path)
    f = s.makefile("r")
    ready.wait()
    lat = []
    while not done.is_set():
        t0 = time.monotonic()
        call(s, f, {"op": "get", "name": "bench-other"})
        lat.append((time.monotonic() - t0) * 1000)
        time.sleep(0.001)
    lat.sort()
    out.put((len(lat), lat[len(lat) // 2], lat[int(len(lat) * 0.99)], lat[-1]))


def status(pid):
    vals = {}
    with open("/proc/%d/status" % pid) as st:
        for line in st:
            k, _, v = line.partition(":")
            if k in ("VmHWM", "VmRSS"):
                vals[k] = int(v.split()[0])
    return vals


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cbd")
    ap.add_argument("-w", type=int, default=500, help="watchers")
    ap.add_argument("-s", type=int, default=400, help="of which slow readers")
    ap.add_argument("-c", type=int, default=200, help="changes a second")
    ap.add_argument("-d", type=int, default=40, help="seconds")
    ap.add_argument("-r", type=int, default=20000, help="bytes a second a slow reader reads")
    ap.add_argument("-o", default="", help="more [cbd] lines, \\n-separated")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="cbd-bench-watchers-")
    path = os.path.join(tmp, "cbd.sock")
    conf = os.path.join(tmp, "cbd.conf")
    with open(conf, "w") as f:
        f.write("[cbd]\n" + a.o.replace("\\n", "\n") + "\n")
    proc = subprocess.Popen([a.cbd, "-c", conf, "-s", path], stderr=subprocess.DEVNULL)
    try:
        for _ in range(200):
            if os.path.exists(path):
                break
            time.sleep(0.05)
        admin = connect(path)
        af = admin.makefile("r")
        base = status(proc.pid)
        ready, done = multiprocessing.Event(), multiprocessing.Event()
        out = multiprocessing.Queue()
        pw = multiprocessing.Process(target=watchers, args=(path, a.w, a.s, a.r, ready, done))
        pc = multiprocessing.Process(target=changer, args=(path, a.c, a.d, ready))
        pg = multiprocessing.Process(target=getter, args=(path, ready, done, out))
        for p in (pw, pc, pg):
            p.start()
        ready.wait()
        peak_rss, peak_out = 0, 0
        while pc.is_alive():
            peak_rss = max(peak_rss, status(proc.pid)["VmRSS"])
            time.sleep(0.1)
        during = status(proc.pid)
        st = call(admin, af, {"op": "stats"})
        done.set()
        n, p50, p99, mx = out.get()
        for p in (pw, pg):
            p.join()
        # Every watcher closed: wait until cbd saw it, then for the
        # housekeeping tick to give memory back.
        while call(admin, af, {"op": "stats"})["connections"]["current"] > 1:
            time.sleep(0.1)
        time.sleep(3)
        after = status(proc.pid)
        st2 = call(admin, af, {"op": "stats"})
        lim = st.get("limits", {})
        print("cbd %s: %d watchers (%d slow at %d B/s, %d never reading), %d changes/s, %d s"
              % (a.cbd, a.w, a.s, a.r, a.w - a.s, a.c, a.d))
        print("RSS: at start %.1f MB; peak sampled %.1f MB; VmHWM %.1f MB; after all closed "
              "%.1f MB" % (base["VmRSS"] / 1024, peak_rss / 1024, during["VmHWM"] / 1024,
                           after["VmRSS"] / 1024))
        print("output_bytes_peak %s; dropped: max_total_output_bytes %s, max_output_bytes %s; "
              "watch_events %s; output_bytes after %s"
              % (st.get("output_bytes_peak"), lim.get("max_total_output_bytes"),
                 lim.get("max_output_bytes"), st.get("watch_events"),
                 st2.get("output_bytes")))
        print("get (another client): n=%d median %.2f ms p99 %.2f ms max %.1f ms"
              % (n, p50, p99, mx))
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait()
        shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
