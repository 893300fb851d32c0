#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# clients-agree.sh — the C, Python, Node.js and Go clients behave alike
# where issue 25 found them apart, each in a process of its own against one
# cbd:
#   1. a success never reaches a classifier: a classifier written the
#      natural way ("ignore not-found, everything else is a failure") and
#      five successful calls leave cbd with 5 successes, 0 failures, closed;
#   2. a single cached process with failure_threshold 3 whose callback
#      fails at once runs it exactly 3 times in a tight loop of 10 calls;
#   3. cbd counts every call alike: 2 ignored errors, 3 failures
#      (threshold 3) and 4 calls while open, cached and uncached, leave
#      ignored 2, failures 3, rejected 4 (protocol 3 §6: ignored outcomes
#      sent, uncached refusals from allow, cached ones reported as record
#      outcome rejected with a count when the breaker closes);
#   4. the bulkhead (protocol 3 §2) holds across languages: C, Python,
#      Node.js and Go processes calling one circuit with max_concurrent 3
#      at once (each with several calls in flight, waiting up to 10 s for
#      a ticket) never have more than 3 calls in flight at a counting
#      server, every call runs, and cbd counts them all, no refusal, no
#      ticket left;
#   5. the retry helpers agree on the retry budget (protocol 3 §3): 8 runs
#      of 3 attempts of an always-failing call on a circuit that grants 10
#      retries and nothing more make 18 calls, 10 retries and 3 refused
#      retries in each language.
#   (The C side of 5 is tests/check_client_bulkhead's budget case.)
# The C side is tests/agree-c.c ($AGREE_C). Skipped (77) unless python3,
# node and go are all installed.
set -u
srcdir=${CBD_SRCDIR:?}
cbd=${CBD_BINARY:?}
agree_c=${AGREE_C:?}
. "$srcdir/tests/test-lib.sh"
need_python_node_go
test_begin clients-agree
test_cbd_start

# Each program takes a circuit prefix and prints "runs N": the callback
# runs of the tight loop (circuit PREFIX-tight); the five successes go to
# circuit PREFIX-success.
mkdir -p "$tmp/go" "$tmp/gocache" "$tmp/gopath"
cat >"$tmp/go/go.mod" <<MOD
module clientsagree

go 1.19

require cbd.example/cbdclient v0.0.0

replace cbd.example/cbdclient => $srcdir/client/go
MOD
cat >"$tmp/go/main.go" <<'GO'
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	cbd "cbd.example/cbdclient"
)

var errNotFound = errors.New("not found")

func main() {
	switch os.Args[1] {
	case "bulkhead":
		bulkhead(os.Args[2], os.Args[3])
		return
	case "budget":
		budget(os.Args[2])
		return
	}
	prefix := os.Args[1]
	ctx := context.Background()
	c := cbd.NewClient(cbd.Options{ConnectTimeout: 5 * time.Second, IOTimeout: 5 * time.Second})
	defer c.Close()
	natural := func(err error) cbd.Outcome {
		if errors.Is(err, errNotFound) {
			return cbd.Ignore
		}
		return cbd.Failure
	}
	s, _ := cbd.NewBreaker(prefix+"-success", cbd.BreakerOptions{Client: c, Classify: natural,
		Policy: cbd.Ctx{"failure_threshold": 3}})
	for i := 0; i < 5; i++ {
		_ = s.Execute(ctx, func(context.Context) error { return nil })
	}
	b, _ := cbd.NewBreaker(prefix+"-tight", cbd.BreakerOptions{Client: c,
		Policy: cbd.Ctx{"failure_threshold": 3, "break_ms": 60000}})
	runs := 0
	for i := 0; i < 10; i++ {
		_ = b.Execute(ctx, func(context.Context) error { runs++; return errors.New("down") })
	}
	counting := func(err error) cbd.Outcome {
		if errors.Is(err, errNotFound) {
			return cbd.Ignore
		}
		return cbd.Failure
	}
	for _, mode := range []struct {
		suffix string
		cache  cbd.CacheMode
	}{{"-count-cached", cbd.CacheOn}, {"-count-uncached", cbd.CacheOff}} {
		k, _ := cbd.NewBreaker(prefix+mode.suffix, cbd.BreakerOptions{Client: c, Classify: counting,
			Cache: mode.cache, Policy: cbd.Ctx{"failure_threshold": 3, "break_ms": 60000}})
		for i := 0; i < 2; i++ {
			_ = k.Execute(ctx, func(context.Context) error { return errNotFound })
		}
		for i := 0; i < 7; i++ {
			_ = k.Execute(ctx, func(context.Context) error { return errors.New("down") })
		}
		_ = k.Close()
	}
	fmt.Println("runs", runs)
}

// bulkhead: 12 calls, 4 at a time, each a request to the counting server.
func bulkhead(name, server string) {
	ctx := context.Background()
	c := cbd.NewClient(cbd.Options{ConnectTimeout: 5 * time.Second, IOTimeout: 5 * time.Second})
	defer c.Close()
	b, _ := cbd.NewBreaker(name, cbd.BreakerOptions{Client: c, Wait: 10 * time.Second,
		Policy: cbd.Ctx{"max_concurrent": 3}})
	var mu sync.Mutex
	failed := 0
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 3; i++ {
				if err := b.Execute(ctx, func(context.Context) error { return hit(server) }); err != nil {
					mu.Lock()
					failed++
					mu.Unlock()
					fmt.Fprintln(os.Stderr, err)
				}
			}
		}()
	}
	wg.Wait()
	fmt.Println("errors", failed)
}

func hit(server string) error {
	conn, err := net.Dial("unix", server)
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("x")); err != nil {
		return err
	}
	buf, err := io.ReadAll(conn)
	if err != nil || string(buf) != "ok" {
		return fmt.Errorf("counting server: %q %v", buf, err)
	}
	return nil
}

// budget: 8 runs of 3 attempts of a failing call (ignored), in fixed time.
func budget(name string) {
	c := cbd.NewClient(cbd.Options{ConnectTimeout: 5 * time.Second, IOTimeout: 5 * time.Second})
	defer c.Close()
	b, _ := cbd.NewBreaker(name, cbd.BreakerOptions{Client: c,
		Clock:    func() int64 { return 1800000000000 },
		Classify: func(error) cbd.Outcome { return cbd.Ignore },
		Policy:   cbd.Ctx{"retry_budget_percent": 0, "retry_min_per_s": 1}})
	r := cbd.Retry{Breaker: b, Attempts: 3, Sleep: func(context.Context, time.Duration) error { return nil }}
	calls, refused := 0, 0
	for i := 0; i < 8; i++ {
		err := r.Do(context.Background(), func(context.Context) error { calls++; return errors.New("down") })
		if errors.Is(err, cbd.ErrRetryBudget) {
			refused++
		}
	}
	fmt.Println("calls", calls, "refused", refused)
}
GO
if (cd "$tmp/go" && HOME="$tmp" GOPATH="$tmp/gopath" GOCACHE="$tmp/gocache" GOFLAGS=-mod=mod \
	GOPROXY=off GOSUMDB=off GOTOOLCHAIN=local go build -o "$tmp/go-agree" .) >"$tmp/go-build.log" 2>&1; then
	:
else
	fail "go build: $(tail -n 5 "$tmp/go-build.log")"
fi

py_agree() {
	PYTHONPATH="$srcdir/client/python/src" PYTHONDONTWRITEBYTECODE=1 "$PY" - "$1" <<'PY'
import sys
from cbdclient import FAILURE, IGNORE, Breaker, Client

prefix = sys.argv[1]
with Client(connect_timeout=5.0, io_timeout=5.0) as c:
    s = Breaker(prefix + "-success", c, failure_threshold=3,
                classify=lambda e: IGNORE if isinstance(e, KeyError) else FAILURE)
    for _ in range(5):
        s.call(lambda: "ok")
    b = Breaker(prefix + "-tight", c, failure_threshold=3, break_ms=60000)
    runs = 0

    def down():
        global runs
        runs += 1
        raise ConnectionError("down")
    for _ in range(10):
        try:
            b.call(down)
        except Exception:
            pass
    def failing():
        raise ConnectionError("down")
    for suffix, cached in (("-count-cached", True), ("-count-uncached", False)):
        k = Breaker(prefix + suffix, c, failure_threshold=3, break_ms=60000, cached=cached,
                    classify=lambda e: IGNORE if isinstance(e, KeyError) else FAILURE)
        for fn in [lambda: {}["missing"]] * 2 + [failing] * 7:
            try:
                k.call(fn)
            except Exception:
                pass
        k.close()
    print("runs", runs)
PY
}

node_agree() {
	node --input-type=module - "$1" <<NODE
import { Breaker, Client } from '$srcdir/client/node/index.js';
const prefix = process.argv[2];
const c = new Client(undefined, { connectTimeoutMs: 5000, ioTimeoutMs: 5000 });
const natural = (e) => (e?.name === 'NotFound' ? 'ignore' : 'failure');
const s = new Breaker(prefix + '-success', { client: c, classify: natural, policy: { failure_threshold: 3 } });
for (let i = 0; i < 5; i++) await s.call(async () => 'ok');
const b = new Breaker(prefix + '-tight', { client: c, policy: { failure_threshold: 3, break_ms: 60000 } });
let runs = 0;
for (let i = 0; i < 10; i++) {
  await b.call(async () => { runs += 1; throw new Error('down'); }).catch(() => {});
}
for (const [suffix, cached] of [['-count-cached', true], ['-count-uncached', false]]) {
  const k = new Breaker(prefix + suffix, { client: c, classify: natural, cached, policy: { failure_threshold: 3, break_ms: 60000 } });
  const notFound = Object.assign(new Error('not found'), { name: 'NotFound' });
  for (let i = 0; i < 2; i++) await k.call(async () => { throw notFound; }).catch(() => {});
  for (let i = 0; i < 7; i++) await k.call(async () => { throw new Error('down'); }).catch(() => {});
  await k.close();
}
console.log('runs', runs);
await s.close();
await b.close();
c.close();
NODE
}

langs="c py node go"
for lang in $langs; do
	case $lang in
	c) out=$("$agree_c" "$lang" 2>&1) ;;
	py) out=$(py_agree "$lang" 2>&1) ;;
	node) out=$(node_agree "$lang" 2>&1) ;;
	go) out=$("$tmp/go-agree" "$lang" 2>&1) ;;
	esac
	if [ "$out" = "runs 3" ]; then
		pass "$lang: a cached process with threshold 3 and instant failures ran the callback 3 times of 10"
	else
		fail "$lang: tight loop: $out"
	fi
done

# cbd's view of the successes (the cached outcomes land without a reply:
# read until settled, within a generous bound).
out=$(PYTHONPATH="$srcdir/client/python/src" PYTHONDONTWRITEBYTECODE=1 "$PY" - <<'PY'
import time
from cbdclient import Client
with Client(connect_timeout=5.0, io_timeout=5.0) as c:
    for lang in ("c", "py", "node", "go"):
        deadline = time.monotonic() + 10
        while True:
            s = c.get(lang + "-success")["snapshot"]
            t = s["totals"]
            got = (s["state"], t["successes"], t["failures"], t["ignored"])
            if got == ("closed", 5, 0, 0) or time.monotonic() > deadline:
                break
            time.sleep(0.01)
        print(lang, *got)
PY
)
for lang in $langs; do
	line=$(echo "$out" | grep "^$lang ")
	if [ "$line" = "$lang closed 5 0 0" ]; then
		pass "$lang: 5 successes under a natural classifier: cbd counts 5 successes, closed"
	else
		fail "$lang: successes classified: ${line:-$out} (want closed 5 0 0)"
	fi
done

# cbd's totals of the counting sequence, cached and not, in every language
# (noreply lines and batched refusals: read until settled, bounded).
out=$(PYTHONPATH="$srcdir/client/python/src" PYTHONDONTWRITEBYTECODE=1 "$PY" - <<'PY'
import time
from cbdclient import Client
with Client(connect_timeout=5.0, io_timeout=5.0) as c:
    for lang in ("c", "py", "node", "go"):
        for mode in ("cached", "uncached"):
            deadline = time.monotonic() + 10
            while True:
                t = c.get(f"{lang}-count-{mode}")["snapshot"]["totals"]
                got = (t["ignored"], t["failures"], t["rejected"])
                if got == (2, 3, 4) or time.monotonic() > deadline:
                    break
                time.sleep(0.01)
            print(lang, mode, *got)
PY
)
for lang in $langs; do
	for mode in cached uncached; do
		line=$(echo "$out" | grep "^$lang $mode ")
		if [ "$line" = "$lang $mode 2 3 4" ]; then
			pass "$lang $mode: 2 ignored, 3 failures, 4 refused: cbd counts ignored 2, failures 3, rejected 4"
		else
			fail "$lang $mode: cbd counts ${line:-$out} (want ignored 2, failures 3, rejected 4)"
		fi
	done
done


# 4. The bulkhead across languages: a counting server (each connection one
# request, held 20 ms; "s" asks for the counts), and a process of each
# language calling the circuit "bulkhead" (max_concurrent 3) 12 times, 4
# calls at a time, all at once.
"$PY" - "$tmp/count.sock" >"$tmp/count.out" 2>&1 <<'PY' &
import socket, sys, threading, time
path = sys.argv[1]
lock = threading.Lock()
now = peak = over = total = 0
srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
srv.bind(path)
srv.listen(128)
print("listening", flush=True)
def one(conn):
    global now, peak, over, total
    with conn:
        if conn.recv(1) == b"s":
            conn.sendall(f"total {total} over {over} peak {peak}".encode())
            return
        with lock:
            now += 1
            total += 1
            over += now > 3
            peak = max(peak, now)
        time.sleep(0.02)
        with lock:
            now -= 1
        conn.sendall(b"ok")
while True:
    c, _ = srv.accept()
    threading.Thread(target=one, args=(c,), daemon=True).start()
PY
count_pid=$!
test_started "$count_pid"
i=0
while ! grep -q listening "$tmp/count.out" 2>/dev/null && [ $i -lt 1000 ]; do
	sleep 0.01
	i=$((i + 1))
done

PYTHONPATH="$srcdir/client/python/src" PYTHONDONTWRITEBYTECODE=1 "$PY" - "$tmp/count.sock" \
	>"$tmp/bh-py.out" 2>&1 <<'PY' &
import socket, sys, threading
from cbdclient import Breaker, Client
server = sys.argv[1]
b = Breaker("bulkhead", Client(connect_timeout=5.0, io_timeout=5.0), max_concurrent=3,
            wait_ms=10000)
def hit():
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect(server)
        s.sendall(b"x")
        s.shutdown(socket.SHUT_WR)
        assert s.recv(16) == b"ok"
errors = []
def lane():
    for _ in range(3):
        try:
            b.call(hit)
        except Exception as e:
            errors.append(e)
ts = [threading.Thread(target=lane) for _ in range(4)]
for t in ts: t.start()
for t in ts: t.join()
print("errors", len(errors), *errors[:1])
PY
bh_py=$!
node --input-type=module - "$tmp/count.sock" >"$tmp/bh-node.out" 2>&1 <<NODE &
import net from 'node:net';
import { Breaker, Client } from '$srcdir/client/node/index.js';
const server = process.argv[2];
const c = new Client(undefined, { connectTimeoutMs: 5000, ioTimeoutMs: 5000 });
const b = new Breaker('bulkhead', { client: c, waitMs: 10000, policy: { max_concurrent: 3 } });
const hit = () => new Promise((resolve, reject) => {
  const s = net.createConnection({ path: server });
  let got = '';
  s.on('connect', () => s.end('x'));
  s.on('data', (x) => { got += x; });
  s.on('close', () => (got === 'ok' ? resolve() : reject(new Error('counting server: ' + got))));
  s.on('error', reject);
});
let errors = 0;
await Promise.all([0, 1, 2, 3].map(async () => {
  for (let i = 0; i < 3; i++) await b.call(hit).catch((e) => { errors += 1; console.error(String(e)); });
}));
console.log('errors', errors);
await b.close();
c.close();
NODE
bh_node=$!
"$tmp/go-agree" bulkhead bulkhead "$tmp/count.sock" >"$tmp/bh-go.out" 2>&1 &
bh_go=$!
"$AGREE_C" bulkhead bulkhead "$tmp/count.sock" >"$tmp/bh-c.out" 2>"$tmp/bh-c.err" &
bh_c=$!
for job in "py $bh_py" "node $bh_node" "go $bh_go" "c $bh_c"; do
	lang=${job% *}
	wait "${job#* }"
	out=$(cat "$tmp/bh-$lang.out")
	if [ "$out" = "errors 0" ]; then
		pass "$lang: 12 calls through the bulkhead, none refused"
	else
		fail "$lang: bulkhead calls: $out"
	fi
done
counts=$("$PY" - "$tmp/count.sock" <<'PY'
import socket, sys
with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
    s.connect(sys.argv[1])
    s.sendall(b"s")
    print(s.recv(200).decode())
PY
)
case $counts in
"total 48 over 0 peak "[123]) pass "48 calls of four languages, never more than 3 in flight ($counts)" ;;
*) fail "counting server: $counts (want 48 calls, none past 3 in flight)" ;;
esac
out=$(PYTHONPATH="$srcdir/client/python/src" PYTHONDONTWRITEBYTECODE=1 "$PY" - <<'PY'
from cbdclient import Client
with Client(connect_timeout=5.0, io_timeout=5.0) as c:
    s = c.get("bulkhead", policy=False)["snapshot"]
    t = s["totals"]
    print(s.get("in_flight"), t["successes"], t["rejected_concurrency"], t["rejected"])
PY
)
if [ "$out" = "0 48 0 0" ]; then
	pass "cbd counts 48 successes, no ticket left, no refusal"
else
	fail "bulkhead circuit: in_flight successes rejected_concurrency rejected = $out (want 0 48 0 0)"
fi

# 5. The retry helpers and the retry budget, each language on a circuit
# of its own in fixed time: retry_min_per_s 1 grants 10 retries in 10 s.
for lang in py node go; do
	case $lang in
	py) out=$(PYTHONPATH="$srcdir/client/python/src" PYTHONDONTWRITEBYTECODE=1 "$PY" - <<'PY' 2>&1
from cbdclient import IGNORE, Breaker, Client, Retry, RetryBudgetError
b = Breaker("py-budget", Client(connect_timeout=5.0, io_timeout=5.0), retry_budget_percent=0,
            retry_min_per_s=1, classify=lambda e: IGNORE, clock=lambda: 1800000000000)
calls = refused = 0
def down():
    global calls
    calls += 1
    raise ConnectionError("down")
for _ in range(8):
    try:
        Retry(b, attempts=3, base_ms=0, max_ms=0, sleep=lambda s: None).call(down)
    except RetryBudgetError:
        refused += 1
    except ConnectionError:
        pass
print("calls", calls, "refused", refused)
PY
) ;;
	node) out=$(node --input-type=module - <<NODE 2>&1
import { Breaker, Client, IGNORE, Retry, RetryBudgetError } from '$srcdir/client/node/index.js';
const c = new Client(undefined, { connectTimeoutMs: 5000, ioTimeoutMs: 5000 });
const b = new Breaker('node-budget', { client: c, clock: () => 1800000000000, classify: () => IGNORE,
  policy: { retry_budget_percent: 0, retry_min_per_s: 1 } });
let calls = 0;
let refused = 0;
const r = new Retry({ breaker: b, attempts: 3, baseMs: 0, maxMs: 0, sleep: async () => {} });
for (let i = 0; i < 8; i++) {
  await r.call(() => { calls += 1; throw new Error('down'); }).catch((e) => { if (e instanceof RetryBudgetError) refused += 1; });
}
console.log('calls', calls, 'refused', refused);
c.close();
NODE
) ;;
	go) out=$("$tmp/go-agree" budget go-budget 2>&1) ;;
	esac
	if [ "$out" = "calls 18 refused 3" ]; then
		pass "$lang: 8 runs of 3 attempts under a budget of 10 retries: 18 calls, the helper stopped 3 times"
	else
		fail "$lang: retry budget: $out (want calls 18 refused 3)"
	fi
done
out=$(PYTHONPATH="$srcdir/client/python/src" PYTHONDONTWRITEBYTECODE=1 "$PY" - <<'PY'
from cbdclient import Client
with Client(connect_timeout=5.0, io_timeout=5.0) as c:
    for lang in ("py", "node", "go"):
        t = c.get(lang + "-budget", {"now": 1800000000000}, policy=False)["snapshot"]["totals"]
        print(lang, t["retries"], t["rejected_retry"], t["ignored"])
PY
)
for lang in py node go; do
	line=$(echo "$out" | grep "^$lang ")
	if [ "$line" = "$lang 10 3 18" ]; then
		pass "$lang: cbd counts 10 retries, 3 refused by the budget, 18 calls"
	else
		fail "$lang: retry budget totals: ${line:-$out} (want retries 10, rejected_retry 3, ignored 18)"
	fi
done

test_end
