#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""bench-instr.py — the load-independent side of bench-vs-redis: what one
request costs cbd and what one GET costs Redis, counted, not timed.

For each server (cbd with one op, Redis with GET) it starts the server
under a tool, drives exactly N requests through C connections (depth 1,
one request in flight a connection, spread over K circuits or keys),
stops the server and reads the tool's totals; then does it again with
2N requests. The difference over the N extra requests is the cost of a
request, start-up and shut-down subtracted:

  - user-space instructions a request, whole process (valgrind
    --tool=callgrind: the server, libc, libevent, jansson...), split by
    object;
  - system calls a request (strace -c -f), by call; how many requests an
    epoll_wait serves depends on how fast the server runs under strace, so
    read/write are the exact figures, epoll_wait an indication;
  - bytes the server wrote a request (the replies the driver read) and
    read a request (the requests it sent).

Prints figures, asserts nothing; not run by make check. Needs valgrind,
strace and (for the Redis lines) redis-server on PATH.

  CBD_BINARY=build/src/cbd python3 tests/bench-instr.py [-n 20000] [-c 8]
      [-k 8] [--no-strace] [--no-redis] [OP ...]

OP: record_failure (default), record_success, record, get, allow,
noreply_record_success, noreply_record, noreply_record_success_count (400
successes in one line), noreply_record_success_rate and
noreply_record_success_count_rate (the same under the rate rule), hello,
or all. The noreply ops
send what a cached client sends (libcbclient: "noreply": true, the
breaker's ctx, duration_ms); cbd answers none of them, so each goes in
one write with a hello behind it, whose reply paces the connection as
any reply does: their line also gives the figure minus hello's (measured
once in the same run), the cost of one noreply line read with others.
Timers (cbd's housekeeping, Redis's serverCron at hz 10) run by the
clock, so a long run adds a few instructions a request; keep N at 10,000
or more.
"""
import argparse
import os
import re
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

# The line that paces a noreply op (and measured alone: "hello").
HELLO = '{"op":"hello"}\n'
CBD_OPS = {
    "record_failure": '{"op":"record_failure","name":"circuit-%02d"}\n',
    "record_success": '{"op":"record_success","name":"circuit-%02d"}\n',
    "record": '{"op":"record","name":"circuit-%02d","outcome":"success"}\n',
    "get": '{"op":"get","name":"circuit-%02d"}\n',
    "allow": '{"op":"allow","name":"circuit-%02d"}\n',
    "noreply_record_success": '{"op":"record_success","name":"circuit-%02d","noreply":true,'
                              '"ctx":{"failure_threshold":5,"break_ms":30000,"half_open_max":1},'
                              '"duration_ms":12}\n' + HELLO,
    "noreply_record": '{"op":"record","name":"circuit-%02d","noreply":true,'
                      '"ctx":{"failure_threshold":5,"break_ms":30000,"half_open_max":1},'
                      '"outcome":"success","duration_ms":12}\n' + HELLO,
    # 400 successes in one line (a cached client folding them, when
    # hello lists "success" in outcome_counts): compare with 400 x
    # noreply_record_success.
    "noreply_record_success_count": '{"op":"record_success","name":"circuit-%02d",'
                                    '"noreply":true,"count":400,'
                                    '"ctx":{"failure_threshold":5,"break_ms":30000,'
                                    '"half_open_max":1},"duration_ms":12}\n' + HELLO,
    # The same under the rate rule (a count window of 100: the line
    # pushes 100 successes, not 400).
    "noreply_record_success_count_rate": '{"op":"record_success","name":"circuit-%02d",'
                                         '"noreply":true,"count":400,'
                                         '"ctx":{"trip":"rate","window_size":100},'
                                         '"duration_ms":12}\n' + HELLO,
    "noreply_record_success_rate": '{"op":"record_success","name":"circuit-%02d",'
                                   '"noreply":true,"ctx":{"trip":"rate","window_size":100},'
                                   '"duration_ms":12}\n' + HELLO,
    "hello": HELLO,
}
# As bench-vs-redis: GET of keys nobody set (a 5-byte nil reply).
REDIS_GET = "*2\r\n$3\r\nGET\r\n$8\r\nvalue-%02d\r\n"


def resp_end(buf, i=0):
    """The end of the RESP value starting at buf[i], or -1 (incomplete)."""
    nl = buf.find(b"\r\n", i)
    if nl < 0:
        return -1
    kind = buf[i:i + 1]
    if kind in (b"+", b"-", b":"):
        return nl + 2
    n = int(buf[i + 1:nl])
    if kind == b"$":
        end = nl + 2 + n + 2 if n >= 0 else nl + 2
        return end if len(buf) >= end else -1
    j = nl + 2
    for _ in range(max(n, 0)):
        j = resp_end(buf, j)
        if j < 0:
            return -1
    return j


def wait_socket(path, proc, seconds=120):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("server exited before listening (status %d)" % proc.returncode)
        try:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(path)
            s.close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("server did not listen on %s" % path)


def drive(path, fmt, resp, total, conns, keys):
    """Send total requests over conns connections, one in flight each;
    the bytes sent and received."""
    sel = selectors.DefaultSelector()
    socks = []
    sent = done = out_bytes = in_bytes = 0
    for _ in range(min(conns, total)):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(path)
        s.setblocking(False)
        socks.append(s)
        sel.register(s, selectors.EVENT_READ, bytearray())

    def send(s):
        nonlocal sent, out_bytes
        req = (fmt % (sent % keys) if "%" in fmt else fmt).encode()
        sent += 1
        out_bytes += len(req)
        s.sendall(req)

    for s in socks:
        send(s)
    while done < total:
        for key, _ in sel.select(timeout=60):
            s, buf = key.fileobj, key.data
            chunk = s.recv(65536)
            if not chunk:
                raise RuntimeError("server closed a connection")
            buf += chunk
            end = resp_end(bytes(buf)) if resp else (buf.find(b"\n") + 1 or -1)
            if end < 0:
                continue
            if not resp and b'"ok":true' not in buf[:end]:
                raise RuntimeError("error reply: %r" % bytes(buf[:end]))
            if resp and buf[:1] == b"-":
                raise RuntimeError("error reply: %r" % bytes(buf[:end]))
            in_bytes += end
            del buf[:end]
            done += 1
            if sent < total:
                send(s)
    for s in socks:
        sel.unregister(s)
        s.close()
    return out_bytes, in_bytes


def run_once(server, tool, n, args, work):
    """Start server (a list: argv, socket path) under tool, drive n
    requests, stop it; the tool's output file and the bytes."""
    argv, sock, fmt, resp = server
    out = os.path.join(work, "%s.%d.out" % (tool, n))
    if tool == "callgrind":
        prefix = ["valgrind", "--tool=callgrind", "--callgrind-out-file=" + out]
    else:
        # strace passes SIGTERM on to no one: the server writes its pid
        # for the stop below.
        prefix = ["strace", "-f", "-c", "-o", out, "sh", "-c",
                  'echo $$ >"$0"; exec "$@"', os.path.join(work, "pid")]
    if os.path.exists(sock):
        os.unlink(sock)
    proc = subprocess.Popen(prefix + argv, stdout=subprocess.DEVNULL,
                            stderr=open(os.path.join(work, "server.log"), "ab"))
    t0 = time.monotonic()
    try:
        wait_socket(sock, proc)
        t1 = time.monotonic()
        sent, got = drive(sock, fmt, resp, n, args.conns, args.keys)
        t2 = time.monotonic()
    finally:
        if tool == "strace":
            with open(os.path.join(work, "pid")) as f:
                os.kill(int(f.read()), signal.SIGTERM)
        else:
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if args.verbose:
        print("  %s %d: start %.1f s, load %.1f s, stop %.1f s" % (tool, n, t1 - t0, t2 - t1,
              time.monotonic() - t2), file=sys.stderr, flush=True)
    return out, sent, got


def callgrind_totals(path):
    """Instructions in total and by object (file name)."""
    text = subprocess.run(["callgrind_annotate", "--inclusive=no", "--threshold=100", path],
                          capture_output=True, text=True, check=True).stdout
    total, by_obj = 0, {}
    for line in text.splitlines():
        m = re.match(r"\s*([\d,]+) \(\s*[\d.]+%\)\s+PROGRAM TOTALS", line)
        if m:
            total = int(m.group(1).replace(",", ""))
            continue
        m = re.match(r"\s*([\d,]+) \(\s*[\d.]+%\)\s+\S.*\[(.*)\]\s*$", line)
        if m:
            obj = os.path.basename(m.group(2))
            obj = re.sub(r"\.so[.\d]*$", "", obj)
            obj = "redis-server" if obj.startswith("redis-") else obj
            obj = "cbd" if obj == os.path.basename(os.environ.get("CBD_BINARY", "")) else obj
            by_obj[obj] = by_obj.get(obj, 0) + int(m.group(1).replace(",", ""))
    return total, by_obj


def strace_totals(path):
    calls = {}
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 5 and parts[0][0].isdigit() and parts[-1] != "syscall":
                try:
                    calls[parts[-1]] = int(parts[3])
                except ValueError:
                    pass
    return calls


def measure(name, server, args, work, minus=None):
    """Print the figures of one server and op; its instructions a request
    (None without callgrind). minus: hello's, to subtract."""
    instr = None
    n1, n2 = args.requests, 2 * args.requests
    per = n2 - n1
    line = "%-22s" % name
    if not args.no_callgrind:
        (o1, s1, g1), (o2, s2, g2) = (run_once(server, "callgrind", n, args, work)
                                      for n in (n1, n2))
        t1, b1 = callgrind_totals(o1)
        t2, b2 = callgrind_totals(o2)
        objs = sorted(set(b1) | set(b2), key=lambda o: -(b2.get(o, 0) - b1.get(o, 0)))
        split = ", ".join("%s %.0f" % (o, (b2.get(o, 0) - b1.get(o, 0)) / per) for o in objs
                          if abs(b2.get(o, 0) - b1.get(o, 0)) / per >= 5)
        instr = (t2 - t1) / per
        line += " %7.0f instr/req (%s);" % (instr, split)
        if minus is not None:
            line += " minus hello: %.0f instr/line;" % (instr - minus)
        line += " wrote %.1f B/req, read %.1f B/req" % ((g2 - g1) / per, (s2 - s1) / per)
    if not args.no_strace:
        (o1, _, _), (o2, _, _) = (run_once(server, "strace", n, args, work) for n in (n1, n2))
        c1, c2 = strace_totals(o1), strace_totals(o2)
        diff = {k: (c2.get(k, 0) - c1.get(k, 0)) / per for k in set(c1) | set(c2)}
        total = diff.pop("total", sum(diff.values()))
        calls = ", ".join("%s %.3f" % (k, v) for k, v in sorted(diff.items(), key=lambda kv: -kv[1])
                          if v >= 0.005)
        line += "; %.3f syscalls/req (%s)" % (total, calls)
    print(line, flush=True)
    return instr


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("-n", "--requests", type=int, default=20000)
    p.add_argument("-c", "--conns", type=int, default=8)
    p.add_argument("-k", "--keys", type=int, default=8)
    p.add_argument("--no-strace", action="store_true")
    p.add_argument("--no-callgrind", action="store_true")
    p.add_argument("--no-redis", action="store_true")
    p.add_argument("-v", "--verbose", action="store_true")
    p.add_argument("ops", nargs="*", default=["record_failure"])
    args = p.parse_args()
    ops = list(CBD_OPS) if args.ops == ["all"] else args.ops
    cbd = os.environ.get("CBD_BINARY")
    if not cbd or any(op not in CBD_OPS for op in ops):
        p.error("set CBD_BINARY; ops are %s or all" % ", ".join(CBD_OPS))
    for tool in ["valgrind"] * (not args.no_callgrind) + ["strace"] * (not args.no_strace):
        if shutil.which(tool) is None:
            sys.exit("bench-instr: %s not found" % tool)
    work = tempfile.mkdtemp(prefix="cbd-bench-instr-")
    try:
        conf = os.path.join(work, "cbd.conf")
        with open(conf, "w") as f:
            f.write("[cbd]\nlog_level = warning\n")
        sock = os.path.join(work, "cbd.sock")
        print("%d and %d requests, %d connections, %d circuits/keys; the difference over "
              "the %d extra:" % (args.requests, 2 * args.requests, args.conns, args.keys,
                                  args.requests), flush=True)
        hello = None

        def cbd_op(op, minus=None):
            return measure("cbd " + op, ([os.path.abspath(cbd), "-c", conf, "-s", sock], sock,
                                         CBD_OPS[op], False), args, work, minus)

        for op in ops:
            if op.startswith("noreply_") and hello is None and not args.no_callgrind:
                hello = cbd_op("hello")
            if op != "hello" or hello is None:
                got = cbd_op(op, hello if op.startswith("noreply_") else None)
                hello = got if op == "hello" else hello
        if not args.no_redis and shutil.which("redis-server"):
            rsock = os.path.join(work, "redis.sock")
            measure("redis GET", (["redis-server", "--port", "0", "--unixsocket", rsock,
                                   "--unixsocketperm", "700", "--save", "", "--appendonly",
                                   "no", "--dir", work, "--loglevel", "warning"], rsock,
                                  REDIS_GET, True), args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
