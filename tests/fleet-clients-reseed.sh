#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# fleet-clients-reseed.sh — what users of each language's cached client
# see when the fleet's Redis loses its data (issue 23): a real
# redis-server on a Unix socket in a temp dir, two fleet-mode cbds (hosts
# a and b) on it, and one long-lived process per language (C: agree-c
# serve; Python, Node.js, Go: programs below) on host b, each with cached
# breakers (the default), answering commands (see tests/agree-c.c).
#   1. FLUSHALL under an operator hold: a 10-minute hold placed on host a
#      is refused (held) by each client on host b; through FLUSHALL and
#      both hosts' re-seeds each client keeps refusing (held, never
#      anything else), both hosts' `get` says held, and `cbctl release`
#      on host a reaches each client's cache: it allows again.
#   2. Redis restarted empty under an open circuit: a circuit tripped on
#      host a is refused (open) by each client on host b; through Redis
#      stopped, started again empty on the same socket and the re-seeds,
#      each client keeps refusing (open), both hosts and Redis say open,
#      and a close on host a afterwards reaches each client's cache.
#   3. A 20-second hold placed on host a before that restart keeps its
#      end on both hosts, and each client refuses (held) until it ends,
#      then allows.
#   A watcher (cbctl watch) on each host sees each hold, trip, release,
#   close and end, and no change in between (the re-seeds change nothing).
# Waits are for settled state (stats counters, the clients' answers), each
# bounded generously; nothing asserts a timing. Skipped (77) without
# redis-server, python3, node or go.
set -u
srcdir=${CBD_SRCDIR:?}
cbd=${CBD_BINARY:?}
cbctl=${CBCTL_BINARY:?}
agree_c=${AGREE_C:?}
. "$srcdir/tests/test-lib.sh"
command -v redis-server >/dev/null 2>&1 && command -v redis-cli >/dev/null 2>&1 || {
	echo "redis-server and redis-cli are needed: skipping"
	exit 77
}
need_python_node_go
test_begin fleet-clients-reseed
langs="c py node go"

# --- Redis and the two hosts ---
redis_pid=
redis_start() {
	redis-server --port 0 --unixsocket "$tmp/redis.sock" --unixsocketperm 700 --save '' \
		--appendonly no --dir "$tmp" --loglevel warning >>"$tmp/redis.log" 2>&1 &
	redis_pid=$!
	test_started "$redis_pid"
	i=0
	until redis-cli -s "$tmp/redis.sock" ping >/dev/null 2>&1 || [ $i -ge 400 ]; do
		sleep 0.05
		i=$((i + 1))
	done
	redis-cli -s "$tmp/redis.sock" ping >/dev/null 2>&1 || {
		echo "redis-server did not start"
		cat "$tmp/redis.log"
		exit 1
	}
}
redis_start

for host in a b; do
	cat >"$tmp/$host.conf" <<CONF
[cbd]
backend = redis
redis = unix:$tmp/redis.sock
redis_timeout_ms = 300
idle_reclaim_ms = 0
[defaults]
break_ms = 600000
CONF
	"$cbd" -c "$tmp/$host.conf" -s "$tmp/$host.sock" 2>"$tmp/$host.log" &
	test_started $!
done

# stat HOST KEY: the value of stats member KEY (dotted) on HOST's cbd.
stat() {
	"$cbctl" -j -s "$tmp/$1.sock" stats 2>/dev/null | "$PY" -c '
import json, sys
v = json.load(sys.stdin)
for k in sys.argv[1].split("."):
    v = v[k]
print(v)' "$2" 2>/dev/null
}
is_up() { [ "$(stat "$1" backend.health)" = up ]; }
is_degraded() { [ "$(stat "$1" backend.health)" = degraded ]; }
# reseeded HOST N: HOST's cbd has re-seeded N times or more and is up.
reseeded() { [ "$(stat "$1" backend.reseeds)" -ge "$2" ] 2>/dev/null && is_up "$1"; }
for host in a b; do
	until_true "host $host reaches Redis" is_up "$host" || { cat "$tmp/$host.log"; exit 1; }
done

# A watcher on each host (cbctl watch: every circuit), from the start.
for host in a b; do
	"$cbctl" -j -s "$tmp/$host.sock" watch >"$tmp/watch.$host" 2>&1 &
	test_started $!
done
watching() { [ -s "$tmp/watch.a" ] && [ -s "$tmp/watch.b" ]; }
until_true "the watchers start" watching || exit 1
# events HOST NAME: the states of the change events HOST's watcher saw
# for NAME, in order, comma-separated.
events() {
	"$PY" - "$tmp/watch.$1" "$2" <<'PY'
import json, sys
states = []
for line in open(sys.argv[1]):
    try:
        e = json.loads(line)
    except ValueError:
        continue
    if e.get("event") == "change" and e["snapshot"]["name"] == sys.argv[2]:
        states.append(e["snapshot"]["state"])
print(",".join(states))
PY
}
# events_begin HOST NAME STATES: HOST's watcher saw STATES first for NAME.
events_begin() {
	case $(events "$1" "$2") in
	"$3" | "$3",*) return 0 ;;
	*) return 1 ;;
	esac
}

# snap HOST NAME: "STATE HELD" of NAME on HOST (HELD: the hold's state, or -).
snap() {
	"$cbctl" -j -s "$tmp/$1.sock" get "$2" 2>/dev/null | "$PY" -c '
import json, sys
s = json.load(sys.stdin)["snapshot"]
print(s["state"], (s.get("hold") or {}).get("state", "-"))' 2>/dev/null
}

# --- the clients, each on host b ---
mkdir -p "$tmp/go" "$tmp/gocache" "$tmp/gopath"
cat >"$tmp/go/go.mod" <<MOD
module fleetclients

go 1.19

require cbd.example/cbdclient v0.0.0

replace cbd.example/cbdclient => $srcdir/client/go
MOD
cat >"$tmp/go/main.go" <<'GO'
package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	cbd "cbd.example/cbdclient"
)

func main() {
	c := cbd.NewClient(cbd.Options{ConnectTimeout: 5 * time.Second, IOTimeout: 5 * time.Second})
	breakers := map[string]*cbd.Breaker{}
	call := func(name string) string {
		b := breakers[name]
		if b == nil {
			var err error
			if b, err = cbd.NewBreaker(name, cbd.BreakerOptions{Client: c}); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return "error"
			}
			breakers[name] = b
		}
		err := b.Execute(context.Background(), func(context.Context) error { return nil })
		var open *cbd.CircuitOpenError
		switch {
		case err == nil:
			return "allowed"
		case errors.As(err, &open) && open.Reason != "":
			return open.Reason
		default:
			fmt.Fprintln(os.Stderr, name, err)
			return "error"
		}
	}
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		f := strings.Fields(in.Text())
		if len(f) < 2 {
			fmt.Println(in.Text(), "error")
			continue
		}
		name, got := f[1], "error"
		switch {
		case f[0] == "call":
			got = call(name)
		case f[0] == "expect" && len(f) == 3:
			for i := 0; i < 6000; i++ {
				if got = call(name); got == f[2] {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
		case f[0] == "first" && len(f) == 3:
			var seen []string
			var at time.Time
			for i := 0; i < 12000; i++ {
				got = call(name)
				at = time.Now()
				if got == f[2] {
					break
				}
				known := false
				for _, s := range seen {
					known = known || s == got
				}
				if !known {
					seen = append(seen, got)
				}
				time.Sleep(10 * time.Millisecond)
			}
			if len(seen) == 0 {
				seen = []string{"-"}
			}
			got = fmt.Sprintf("%s %d %s", got, at.UnixMilli(), strings.Join(seen, ","))
		case f[0] == "sample" && len(f) == 3:
			var seen []string
			calls := 0
			for i := 0; i < 30000; i++ {
				if _, err := os.Stat(f[2]); err == nil {
					break
				}
				r := call(name)
				calls++
				known := false
				for _, s := range seen {
					known = known || s == r
				}
				if !known {
					seen = append(seen, r)
				}
				time.Sleep(10 * time.Millisecond)
			}
			got = fmt.Sprintf("%d %s", calls, strings.Join(seen, ","))
		}
		fmt.Println(name, got)
	}
}
GO
if (cd "$tmp/go" && HOME="$tmp" GOPATH="$tmp/gopath" GOCACHE="$tmp/gocache" GOFLAGS=-mod=mod \
	GOPROXY=off GOSUMDB=off GOTOOLCHAIN=local go build -o "$tmp/go-serve" .) >"$tmp/go-build.log" 2>&1; then
	:
else
	fail "go build: $(tail -n 5 "$tmp/go-build.log")"
	test_end
	exit 1
fi
cat >"$tmp/serve.py" <<'PY'
import os, sys, time
from cbdclient import Breaker, Client, RefusedError

client = Client(connect_timeout=5.0, io_timeout=5.0)
breakers = {}


def call(name):
    b = breakers.get(name)
    if b is None:
        b = breakers[name] = Breaker(name, client)
    try:
        b.call(lambda: None)
        return "allowed"
    except RefusedError as e:
        return e.reason or "error"
    except Exception as e:  # reported, not hidden
        print(name, repr(e), file=sys.stderr, flush=True)
        return "error"


while True:
    line = sys.stdin.readline()
    if not line:
        break
    f = line.split()
    if len(f) < 2:
        print(line.strip(), "error", flush=True)
        continue
    name, got = f[1], "error"
    if f[0] == "call":
        got = call(name)
    elif f[0] == "expect" and len(f) == 3:
        for _ in range(6000):
            got = call(name)
            if got == f[2]:
                break
            time.sleep(0.01)
    elif f[0] == "first" and len(f) == 3:
        seen, at = [], 0
        for _ in range(12000):
            got = call(name)
            at = int(time.time() * 1000)
            if got == f[2]:
                break
            if got not in seen:
                seen.append(got)
            time.sleep(0.01)
        got = f"{got} {at} {','.join(seen) or '-'}"
    elif f[0] == "sample" and len(f) == 3:
        seen, calls = [], 0
        for _ in range(30000):
            if os.path.exists(f[2]):
                break
            r = call(name)
            calls += 1
            if r not in seen:
                seen.append(r)
            time.sleep(0.01)
        got = f"{calls} {','.join(seen)}"
    print(name, got, flush=True)
PY
cat >"$tmp/serve.mjs" <<NODE
import { existsSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { Breaker, Client, RefusedError } from '$srcdir/client/node/index.js';
const client = new Client(undefined, { connectTimeoutMs: 5000, ioTimeoutMs: 5000 });
const breakers = new Map();
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
async function call(name) {
  if (!breakers.has(name)) breakers.set(name, new Breaker(name, { client }));
  try {
    await breakers.get(name).call(async () => {});
    return 'allowed';
  } catch (e) {
    if (e instanceof RefusedError && e.reason) return e.reason;
    console.error(name, String(e));
    return 'error';
  }
}
for await (const line of createInterface({ input: process.stdin })) {
  const f = line.split(/\s+/).filter((x) => x !== '');
  if (f.length < 2) { console.log(line, 'error'); continue; }
  const name = f[1];
  let got = 'error';
  if (f[0] === 'call') {
    got = await call(name);
  } else if (f[0] === 'expect' && f.length === 3) {
    for (let i = 0; i < 6000; i++) {
      got = await call(name);
      if (got === f[2]) break;
      await sleep(10);
    }
  } else if (f[0] === 'first' && f.length === 3) {
    const seen = [];
    let at = 0;
    for (let i = 0; i < 12000; i++) {
      got = await call(name);
      at = Date.now();
      if (got === f[2]) break;
      if (!seen.includes(got)) seen.push(got);
      await sleep(10);
    }
    got = got + ' ' + at + ' ' + (seen.join(',') || '-');
  } else if (f[0] === 'sample' && f.length === 3) {
    const seen = [];
    let calls = 0;
    for (let i = 0; i < 30000 && !existsSync(f[2]); i++) {
      const r = await call(name);
      calls += 1;
      if (!seen.includes(r)) seen.push(r);
      await sleep(10);
    }
    got = calls + ' ' + seen.join(',');
  }
  console.log(name, got);
}
process.exit(0);
NODE

# Each client reads its commands from a FIFO (held open on fd 3..6) and
# answers one line each in $tmp/out.LANG.
fd_of() {
	case $1 in c) echo 3 ;; py) echo 4 ;; node) echo 5 ;; go) echo 6 ;; esac
}
for lang in $langs; do
	mkfifo "$tmp/in.$lang"
	: >"$tmp/out.$lang"
	echo 0 >"$tmp/asked.$lang"
	case $lang in
	c) CBD_SOCKET="$tmp/b.sock" "$agree_c" serve ;;
	py) CBD_SOCKET="$tmp/b.sock" PYTHONPATH="$srcdir/client/python/src" \
		PYTHONDONTWRITEBYTECODE=1 "$PY" -u "$tmp/serve.py" ;;
	node) CBD_SOCKET="$tmp/b.sock" node "$tmp/serve.mjs" ;;
	go) CBD_SOCKET="$tmp/b.sock" "$tmp/go-serve" ;;
	esac <"$tmp/in.$lang" >"$tmp/out.$lang" 2>"$tmp/err.$lang" &
	test_started $!
	eval "exec $(fd_of "$lang")>\"\$tmp/in.\$lang\""
done
# send LANG COMMAND: give LANG's client a command (answered later).
send() {
	eval "echo \"\$2\" >&$(fd_of "$1")"
	echo $(($(cat "$tmp/asked.$1") + 1)) >"$tmp/asked.$1"
}
# answer LANG: the answer to LANG's last command (waits up to 5 minutes:
# an expect or a sample is bounded by the client itself).
answer() {
	want=$(cat "$tmp/asked.$1")
	i=0
	while [ "$(wc -l <"$tmp/out.$1")" -lt "$want" ] && [ $i -lt 6000 ]; do
		sleep 0.05
		i=$((i + 1))
	done
	sed -n "${want}p" "$tmp/out.$1"
}
ask() {
	send "$1" "$2"
	answer "$1"
}

# --- 1. FLUSHALL under an operator hold ---
for lang in $langs; do
	"$cbctl" -s "$tmp/a.sock" open "h-$lang" --for 10m --reason drill >/dev/null ||
		fail "$lang: cbctl open on host a"
done
for lang in $langs; do
	got=$(ask "$lang" "expect h-$lang held")
	if [ "$got" = "h-$lang held" ]; then
		pass "$lang: a hold placed on host a is refused (held) by the cached client on host b"
	else
		fail "$lang: before FLUSHALL: $got (want held); $(tail -n 3 "$tmp/err.$lang")"
	fi
done
# Each client calls every 10 ms from before FLUSHALL until both hosts
# have re-seeded and say held.
rs_a=$(stat a backend.reseeds)
rs_b=$(stat b backend.reseeds)
for lang in $langs; do send "$lang" "sample h-$lang $tmp/stop-flush"; done
sleep 0.2
redis-cli -s "$tmp/redis.sock" flushall >/dev/null
until_true "host a re-seeds after FLUSHALL" reseeded a $((rs_a + 1))
until_true "host b re-seeds after FLUSHALL" reseeded b $((rs_b + 1))
for lang in $langs; do
	for host in a b; do
		got=$(snap "$host" "h-$lang")
		if [ "$got" = "open open" ]; then
			pass "$lang: after FLUSHALL and the re-seeds host $host's get says held open"
		else
			fail "$lang: after FLUSHALL host $host's get: $got (want open open)"
		fi
	done
done
case $(redis-cli -s "$tmp/redis.sock" exists "cbd:{h-c}") in
1) pass "the hold is back in Redis" ;;
*) fail "after FLUSHALL Redis has no cbd:{h-c}" ;;
esac
sleep 0.5
touch "$tmp/stop-flush"
for lang in $langs; do
	got=$(answer "$lang")
	case $got in
	"h-$lang "[1-9]*" held") pass "$lang: the cached client refused (held) on every call through FLUSHALL ($got)" ;;
	*) fail "$lang: through FLUSHALL the cached client answered: $got (want held only); $(tail -n 3 "$tmp/err.$lang")" ;;
	esac
	got=$(ask "$lang" "call h-$lang")
	[ "$got" = "h-$lang held" ] && pass "$lang: still held after the re-seed" ||
		fail "$lang: after the re-seed: $got (want held)"
done
for lang in $langs; do
	"$cbctl" -s "$tmp/a.sock" release "h-$lang" >/dev/null || fail "$lang: cbctl release on host a"
done
for lang in $langs; do
	got=$(ask "$lang" "expect h-$lang allowed")
	if [ "$got" = "h-$lang allowed" ]; then
		pass "$lang: cbctl release on host a after FLUSHALL: the cached client on host b allows again"
	else
		fail "$lang: after release: $got (want allowed); $(tail -n 3 "$tmp/err.$lang")"
	fi
done

# --- 2. Redis restarted empty under an open circuit ---
for lang in $langs; do
	PYTHONPATH="$srcdir/client/python/src" PYTHONDONTWRITEBYTECODE=1 "$PY" - "$tmp/a.sock" "o-$lang" <<'PY' ||
from cbdclient import Client
import sys
with Client(sys.argv[1], connect_timeout=5.0, io_timeout=5.0) as c:
    for _ in range(5):
        c.record_failure(sys.argv[2])
    assert c.get(sys.argv[2])["snapshot"]["state"] == "open"
PY
		fail "$lang: tripping o-$lang on host a"
done
for lang in $langs; do
	got=$(ask "$lang" "expect o-$lang open")
	[ "$got" = "o-$lang open" ] &&
		pass "$lang: a circuit tripped on host a is refused (open) by the cached client on host b" ||
		fail "$lang: before the restart: $got (want open)"
done
# 3. A hold with an end (20 s) placed on host a before the restart: it
# keeps its end through the re-seed, and each cached client on host b
# refuses (held) until it ends, then allows.
for lang in $langs; do
	"$cbctl" -s "$tmp/a.sock" open "t-$lang" --for 20s >/dev/null || fail "$lang: cbctl open t-$lang --for 20s"
	got=$(ask "$lang" "expect t-$lang held")
	[ "$got" = "t-$lang held" ] || fail "$lang: t-$lang before the restart: $got (want held)"
done
# until HOST NAME: the hold's until on HOST (- when not held).
until_of() {
	"$cbctl" -j -s "$tmp/$1.sock" get "$2" 2>/dev/null | "$PY" -c '
import json, sys
print((json.load(sys.stdin)["snapshot"].get("hold") or {}).get("until", "-"))' 2>/dev/null
}
for lang in $langs; do
	until_of a "t-$lang" >"$tmp/until.$lang"
done
rs_a=$(stat a backend.reseeds)
rs_b=$(stat b backend.reseeds)
for lang in $langs; do send "$lang" "sample o-$lang $tmp/stop-restart"; done
sleep 0.2
kill "$redis_pid"
wait "$redis_pid" 2>/dev/null
until_true "host a degraded with Redis stopped" is_degraded a
until_true "host b degraded with Redis stopped" is_degraded b
rm -f "$tmp/redis.sock"
redis_start
until_true "host a re-seeds the restarted Redis" reseeded a $((rs_a + 1))
until_true "host b re-seeds the restarted Redis" reseeded b $((rs_b + 1))
for lang in $langs; do
	for host in a b; do
		got=$(snap "$host" "o-$lang")
		[ "$got" = "open -" ] && pass "$lang: after Redis restarted empty host $host's get says open" ||
			fail "$lang: after the restart host $host's get: $got (want open -)"
	done
	got=$(redis-cli -s "$tmp/redis.sock" hget "cbd:{o-$lang}" state)
	[ "$got" = open ] && pass "$lang: the open circuit is back in Redis" ||
		fail "$lang: Redis's cbd:{o-$lang} state: $got (want open)"
done
sleep 0.5
touch "$tmp/stop-restart"
for lang in $langs; do
	got=$(answer "$lang")
	case $got in
	"o-$lang "[1-9]*" open") pass "$lang: the cached client refused (open) on every call through the restart ($got)" ;;
	*) fail "$lang: through the restart the cached client answered: $got (want open only); $(tail -n 3 "$tmp/err.$lang")" ;;
	esac
done
# The clients' caches still hear the fleet: a close on host a reaches them.
for lang in $langs; do
	"$cbctl" -s "$tmp/a.sock" close "o-$lang" --no-hold >/dev/null || fail "$lang: cbctl close on host a"
done
for lang in $langs; do
	got=$(ask "$lang" "expect o-$lang allowed")
	[ "$got" = "o-$lang allowed" ] &&
		pass "$lang: a close on host a after the restart: the cached client on host b allows" ||
		fail "$lang: after the close: $got (want allowed)"
done
# The timed holds: the same end on both hosts after the re-seed (unless a
# slow machine got past it already), and no call allowed before it.
now_ms() { "$PY" -c 'import time; print(int(time.time() * 1000))'; }
for lang in $langs; do
	until=$(cat "$tmp/until.$lang")
	for host in a b; do
		got=$(until_of "$host" "t-$lang")
		if [ "$got" = "$until" ]; then
			pass "$lang: after the restart host $host's hold on t-$lang ends when it did ($until)"
		elif [ "$got" = - ] && [ "$(now_ms)" -ge "$until" ]; then
			pass "$lang: host $host: the 20 s hold on t-$lang has ended already (slow machine)"
		else
			fail "$lang: after the restart host $host's hold on t-$lang ends at $got (want $until)"
		fi
	done
	send "$lang" "first t-$lang allowed"
done
for lang in $langs; do
	until=$(cat "$tmp/until.$lang")
	# shellcheck disable=SC2046 # four words
	set -- $(answer "$lang")
	if [ "$#" -eq 4 ] && [ "$2" = allowed ] && [ "$4" = held ] && [ "$3" -ge "$until" ]; then
		pass "$lang: the cached client refused (held) until the hold ended, then allowed"
	else
		fail "$lang: t-$lang: $* (want allowed at or after $until, held before)"
	fi
done

# What each host's watcher saw: the hold and its release (never a change
# in between: the re-seeds changed nothing), the trip and the close, the
# timed hold and its end.
for host in a b; do
	for lang in $langs; do
		for want in "h-$lang open,half_open" "o-$lang open,closed" "t-$lang open,half_open"; do
			name=${want% *}
			if until_true "host $host's watcher on $name" events_begin "$host" "$name" "${want#* }"; then
				pass "host $host's watcher saw $name ${want#* }"
			else
				echo "  (saw: $(events "$host" "$name"))"
			fi
		done
	done
done

for host in a b; do
	[ "$(stat "$host" backend.data_lost)" -ge 2 ] 2>/dev/null &&
		pass "host $host counted both losses (stats.backend.data_lost)" ||
		fail "host $host: data_lost $(stat "$host" backend.data_lost) (want 2 or more)"
done

for fd in 3 4 5 6; do eval "exec $fd>&-"; done
test_end
