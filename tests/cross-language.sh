#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# cross-language.sh — one circuit, three languages: a Python process trips
# `payments` through cbd; a Node.js and a Go process fail fast on their
# very next call; half open (as after the break), with half_open_max = 1,
# exactly one of three processes (one per language, calling at the same
# moment) runs the trial call. Nothing here races the clock: the break is
# long and half_open is set, a trial holds its slot until every process
# has decided, and the clients wait seconds for cbd (a loaded machine).
# Skipped (77) unless python3, node and go are all installed.
set -u
srcdir=${CBD_SRCDIR:?}
cbd=${CBD_BINARY:?}
. "$srcdir/tests/test-lib.sh"
need_python_node_go
test_begin cross-language
cat >"$tmp/cbd.conf" <<CONF
[circuit "payments"]
failure_threshold = 3
success_threshold = 1
break_ms = 60000
half_open_max = 1
slot_ttl_ms = 60000
CONF
test_cbd_start "$tmp/cbd.conf"

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
	"path/filepath"
	"strconv"
	"time"

	cbd "cbd.example/cbdclient"
)

func main() {
	c := cbd.NewClient(cbd.Options{ConnectTimeout: 5 * time.Second, IOTimeout: 5 * time.Second})
	b, err := cbd.NewBreaker("payments", cbd.BreakerOptions{Client: c})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	if len(os.Args) > 1 {
		at, _ := strconv.ParseInt(os.Args[1], 10, 64)
		time.Sleep(time.Until(time.UnixMilli(at)))
	}
	err = b.Execute(context.Background(), func(context.Context) error {
		return trial("go")
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

// trial says it runs ($CROSS_DIR/ran.LANG) and holds its slot until
// $CROSS_DIR/release exists (60 s at most); at once without CROSS_DIR.
func trial(lang string) error {
	dir := os.Getenv("CROSS_DIR")
	if dir == "" {
		return nil
	}
	if err := os.WriteFile(filepath.Join(dir, "ran."+lang), nil, 0o644); err != nil {
		return err
	}
	for end := time.Now().Add(60 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(filepath.Join(dir, "release")); err == nil {
			break
		}
	}
	return nil
}
GO
if (cd "$tmp/go" && HOME="$tmp" GOPATH="$tmp/gopath" GOCACHE="$tmp/gocache" GOFLAGS=-mod=mod \
	GOPROXY=off go build -o "$tmp/go-call" .) >"$tmp/go-build.log" 2>&1; then
	pass "the Go program builds against client/go"
else
	fail "go build: $(tail -n 5 "$tmp/go-build.log")"
fi

# One protected call per language; AT (ms since the epoch) starts them
# together. Each prints ran, refused or error. With CROSS_DIR set, a call
# that runs creates $CROSS_DIR/ran.LANG, then holds its trial slot until
# $CROSS_DIR/release exists (60 s at most).
py_call() {
	PYTHONPATH="$srcdir/client/python/src" "$PY" - "$@" <<'PY'
import os, sys, time
from cbdclient import Breaker, CircuitOpenError, Client
b = Breaker("payments", Client(connect_timeout=5.0, io_timeout=5.0))
if len(sys.argv) > 1:
    time.sleep(max(0, int(sys.argv[1]) / 1000 - time.time()))
def work():
    d = os.environ.get("CROSS_DIR")
    if not d:
        return
    open(os.path.join(d, "ran.python"), "w").close()
    end = time.time() + 60
    while not os.path.exists(os.path.join(d, "release")) and time.time() < end:
        time.sleep(0.01)
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
import fs from 'node:fs';
import { Breaker, CircuitOpenError, Client } from '$srcdir/client/node/index.js';
const b = new Breaker('payments', { client: new Client(undefined, { connectTimeoutMs: 5000, ioTimeoutMs: 5000 }) });
const at = Number(process.argv[2] || 0);
if (at) await new Promise((r) => setTimeout(r, Math.max(0, at - Date.now())));
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
async function trial() {
  const dir = process.env.CROSS_DIR;
  if (!dir) return;
  fs.writeFileSync(dir + '/ran.node', '');
  for (const end = Date.now() + 60000; !fs.existsSync(dir + '/release') && Date.now() < end; ) await sleep(10);
}
try {
  await b.execute(trial);
  console.log('ran');
} catch (e) {
  console.log(e instanceof CircuitOpenError ? 'refused' : 'error ' + e);
}
process.exit(0);
NODE
}

# 1. Python trips the circuit: three failures.
out=$(PYTHONPATH="$srcdir/client/python/src" "$PY" - <<'PY'
from cbdclient import Breaker, CircuitOpenError, Client
# Reads its own trip at once.
b = Breaker("payments", Client(connect_timeout=5.0, io_timeout=5.0), cached=False)
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

# 3. Half open, as after the break (set: the break is long, so that no
# step above races it), the three call at once: exactly one trial runs.
# It holds its slot until the three have decided (the refused ones have
# said so, the trial has started), however late a process starts.
out=$(PYTHONPATH="$srcdir/client/python/src" "$PY" - <<'PY'
from cbdclient import Client
print(Client(connect_timeout=5.0, io_timeout=5.0).set_state("payments", "half_open")["snapshot"]["state"])
PY
)
[ "$out" = half_open ] || fail "set_state half_open: $out"
at=$(( $(date +%s%3N) + 1500 ))
export CROSS_DIR="$tmp"
py_call "$at" >"$tmp/py.out" 2>&1 &
p1=$!
node_call "$at" >"$tmp/node.out" 2>&1 &
p2=$!
"$tmp/go-call" "$at" >"$tmp/go.out" 2>&1 &
p3=$!
unset CROSS_DIR
# Ran (a trial started) or refused or error: decided.
decided() {
	set -- "$tmp"/ran.*
	[ -e "$1" ] || set --
	n=$#
	for f in py node go; do
		grep -qE '^(refused|error)' "$tmp/$f.out" && n=$((n + 1))
	done
	echo "$n"
}
i=0
while [ "$(decided)" -lt 3 ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i + 1)); done
touch "$tmp/release"
wait $p1 $p2 $p3
ran=$(cat "$tmp/py.out" "$tmp/node.out" "$tmp/go.out" | grep -c '^ran$')
refused=$(cat "$tmp/py.out" "$tmp/node.out" "$tmp/go.out" | grep -c '^refused$')
if [ "$ran" -eq 1 ] && [ "$refused" -eq 2 ]; then
	pass "one trial among three languages (python: $(cat "$tmp/py.out"), node: $(cat "$tmp/node.out"), go: $(cat "$tmp/go.out"))"
else
	fail "trials: python $(cat "$tmp/py.out"), node $(cat "$tmp/node.out"), go $(cat "$tmp/go.out")"
fi
test_end
