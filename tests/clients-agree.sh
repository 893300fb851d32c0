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
#      outcome rejected with a count when the breaker closes).
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
	"os"
	"time"

	cbd "cbd.example/cbdclient"
)

var errNotFound = errors.New("not found")

func main() {
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

test_end
