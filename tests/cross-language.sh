#!/bin/sh
# cross-language.sh — one circuit, three languages: a Python process trips
# `payments` through cbd; a Node.js and a Go process fail fast on their
# very next call; after the break, with half_open_max = 1, exactly one of
# three processes (one per language, calling at the same moment) runs the
# trial call. Skipped (77) unless python3, node and go are all installed.
set -u
srcdir=${CBD_SRCDIR:?}
cbd=${CBD_BINARY:?}
PY=/usr/bin/python3
[ -x "$PY" ] || PY=$(command -v python3 || true)
for tool in "$PY" node go; do
	[ -n "$tool" ] && command -v "$tool" >/dev/null 2>&1 || {
		echo "python3, node and go are needed: skipping"
		exit 77
	}
done
passed=0
failed=0
pass() { passed=$((passed + 1)); echo "ok: $1"; }
fail() { failed=$((failed + 1)); echo "FAILED: $1"; }

tmp=$(mktemp -d /tmp/cbd-cross.XXXXXX)
pid=
cleanup() {
	[ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT INT TERM
export CBD_SOCKET="$tmp/cbd.sock"
cat >"$tmp/cbd.conf" <<CONF
[circuit "payments"]
failure_threshold = 3
success_threshold = 1
break_ms = 3000
half_open_max = 1
CONF
"$cbd" -c "$tmp/cbd.conf" -s "$CBD_SOCKET" 2>"$tmp/cbd.log" &
pid=$!
i=0
while [ ! -S "$CBD_SOCKET" ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i + 1)); done
[ -S "$CBD_SOCKET" ] || { echo "cbd did not start"; cat "$tmp/cbd.log"; exit 1; }

# The Go program, built once (no network: the module is the tree's).
mkdir -p "$tmp/go" "$tmp/gocache" "$tmp/gopath"
cat >"$tmp/go/go.mod" <<MOD
module crosslanguage

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
	"strconv"
	"time"

	cbd "cbd.example/cbdclient"
)

func main() {
	b, err := cbd.NewBreaker("payments", cbd.BreakerOptions{})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	if len(os.Args) > 1 {
		at, _ := strconv.ParseInt(os.Args[1], 10, 64)
		time.Sleep(time.Until(time.UnixMilli(at)))
	}
	err = b.Execute(context.Background(), func(context.Context) error {
		time.Sleep(800 * time.Millisecond)
		return nil
	})
	var open *cbd.CircuitOpenError
	switch {
	case err == nil:
		fmt.Println("ran")
	case errors.Is(err, cbd.ErrCircuitOpen) || errors.As(err, &open):
		fmt.Println("refused")
	default:
		fmt.Println("error", err)
	}
}
GO
if (cd "$tmp/go" && HOME="$tmp" GOPATH="$tmp/gopath" GOCACHE="$tmp/gocache" GOFLAGS=-mod=mod \
	GOPROXY=off go build -o "$tmp/go-call" .) >"$tmp/go-build.log" 2>&1; then
	pass "the Go program builds against client/go"
else
	fail "go build: $(tail -n 5 "$tmp/go-build.log")"
fi

# One protected call per language; AT (ms since the epoch) starts them
# together. Each prints ran, refused or error.
py_call() {
	PYTHONPATH="$srcdir/client/python/src" "$PY" - "$@" <<'PY'
import sys, time
from cbdclient import Breaker, CircuitOpenError
b = Breaker("payments")
if len(sys.argv) > 1:
    time.sleep(max(0, int(sys.argv[1]) / 1000 - time.time()))
def work():
    time.sleep(0.8)
try:
    b.call(work)
    print("ran")
except CircuitOpenError:
    print("refused")
except Exception as e:
    print("error", e)
PY
}
node_call() {
	node --input-type=module - "$@" <<NODE
import { Breaker, CircuitOpenError } from '$srcdir/client/node/index.js';
const b = new Breaker('payments');
const at = Number(process.argv[2] || 0);
if (at) await new Promise((r) => setTimeout(r, Math.max(0, at - Date.now())));
try {
  await b.execute(() => new Promise((r) => setTimeout(r, 800)));
  console.log('ran');
} catch (e) {
  console.log(e instanceof CircuitOpenError ? 'refused' : 'error ' + e);
}
process.exit(0);
NODE
}

# 1. Python trips the circuit: three failures.
out=$(PYTHONPATH="$srcdir/client/python/src" "$PY" - <<'PY'
from cbdclient import Breaker, CircuitOpenError
b = Breaker("payments", cached=False)  # reads its own trip at once
def fail():
    raise RuntimeError("payments is down")
for _ in range(3):
    try:
        b.call(fail)
    except RuntimeError:
        pass
print(b.state)
PY
)
case "$out" in *open*) pass "Python tripped payments";; *) fail "Python: $out";; esac

# 2. Node and Go fail fast on their very next call.
out=$(node_call)
[ "$out" = refused ] && pass "Node fails fast" || fail "Node: $out"
out=$("$tmp/go-call" 2>&1)
[ "$out" = refused ] && pass "Go fails fast" || fail "Go: $out"

# 3. After the break, the three call at once: exactly one trial runs.
sleep 3.2
at=$(( $(date +%s%3N) + 1500 ))
py_call "$at" >"$tmp/py.out" 2>&1 &
p1=$!
node_call "$at" >"$tmp/node.out" 2>&1 &
p2=$!
"$tmp/go-call" "$at" >"$tmp/go.out" 2>&1 &
p3=$!
wait $p1 $p2 $p3
ran=$(cat "$tmp/py.out" "$tmp/node.out" "$tmp/go.out" | grep -c '^ran$')
refused=$(cat "$tmp/py.out" "$tmp/node.out" "$tmp/go.out" | grep -c '^refused$')
if [ "$ran" -eq 1 ] && [ "$refused" -eq 2 ]; then
	pass "one trial among three languages (python: $(cat "$tmp/py.out"), node: $(cat "$tmp/node.out"), go: $(cat "$tmp/go.out"))"
else
	fail "trials: python $(cat "$tmp/py.out"), node $(cat "$tmp/node.out"), go $(cat "$tmp/go.out")"
fi
echo "cross-language: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
