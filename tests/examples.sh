#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# examples.sh — the three example services (client/python/examples/
# service.py, client/node/examples/service.js, client/go/examples/service)
# fall back the same way: with their circuit open in cbd, each answers the
# same status (503), a Retry-After header that agrees with its body, and
# the same body ("fallback: upstream unavailable, retry in N ms", N aside).
# Each polls until its breaker has seen the circuit open (bounded).
# Skipped (77) unless python3, node and go are all installed.
set -u
srcdir=${CBD_SRCDIR:?}
cbd=${CBD_BINARY:?}
cbctl=${CBCTL_BINARY:?}
. "$srcdir/tests/test-lib.sh"
need_python_node_go
test_begin examples
printf '[circuit "upstream"]\nbreak_ms = 600000\n' >"$tmp/cbd.conf"
test_cbd_start "$tmp/cbd.conf"
"$cbctl" open upstream --no-hold >/dev/null || { echo "cbctl open failed"; exit 1; }

# A loopback port nothing listens on: the upstream, never reached while
# the circuit is open (a call that does reach it fails: 502, polled past).
free_port() {
	"$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
upstream="http://127.0.0.1:$(free_port)/"

# answer URL: "STATUS|RETRY-AFTER|BODY" once the answer is a 503 (at most
# 20 s of polling), else the last answer.
answer() {
	"$PY" - "$1" <<'PY'
import sys, time, urllib.error, urllib.request
deadline = time.monotonic() + 20
while True:
    try:
        with urllib.request.urlopen(sys.argv[1], timeout=10) as r:
            status, ra, body = r.status, r.headers.get("Retry-After"), r.read().decode()
    except urllib.error.HTTPError as e:
        status, ra, body = e.code, e.headers.get("Retry-After"), e.read().decode()
    except OSError:
        status, ra, body = 0, None, ""
    if status == 503 or time.monotonic() > deadline:
        break
    time.sleep(0.05)
print(f"{status}|{ra}|{body}", end="")
PY
}

# wait_line FILE PATTERN: the first line of FILE matching PATTERN (10 s).
wait_line() {
	i=0
	while ! grep -q "$2" "$1" 2>/dev/null && [ $i -lt 200 ]; do sleep 0.05; i=$((i + 1)); done
	grep -m 1 "$2" "$1"
}

# The Go example, built once (no network: the module is the tree's).
mkdir -p "$tmp/home" "$tmp/gopath" "$tmp/gocache"
if (cd "$srcdir/client/go" && HOME="$tmp/home" GOPATH="$tmp/gopath" GOCACHE="$tmp/gocache" \
	GOFLAGS=-mod=mod GOPROXY=off GOSUMDB=off GOTOOLCHAIN=local \
	go build -o "$tmp/go-service" ./examples/service) >"$tmp/go-build.log" 2>&1; then
	pass "go build ./examples/service"
else
	fail "go build: $(tail -n 5 "$tmp/go-build.log")"
fi

PYTHONDONTWRITEBYTECODE=1 "$PY" "$srcdir/client/python/examples/service.py" --port 0 \
	--cbd-timeout-ms 2000 --upstream "$upstream" 2>"$tmp/python.log" &
test_started $!
node "$srcdir/client/node/examples/service.js" --port 0 --upstream "$upstream" \
	2>"$tmp/node.log" &
test_started $!
goport=$(free_port)
if [ -x "$tmp/go-service" ]; then
	"$tmp/go-service" -listen "127.0.0.1:$goport" -upstream "$upstream" \
		-socket "$CBD_SOCKET" 2>"$tmp/go.log" &
	test_started $!
fi

for lang in python node go; do
	line=$(wait_line "$tmp/$lang.log" 'serving on')
	addr=$(echo "$line" | sed -n 's/.*serving on \([^,]*\),.*/\1/p')
	if [ -z "$addr" ]; then
		fail "$lang: the service did not start: $(cat "$tmp/$lang.log")"
		continue
	fi
	answer "http://$addr/" >"$tmp/$lang.answer"
	got=$(cat "$tmp/$lang.answer")
	status=${got%%|*}
	rest=${got#*|}
	ra=${rest%%|*}
	body=${rest#*|}
	ms=$(echo "$body" | sed -n 's/^fallback: upstream unavailable, retry in \([0-9]*\) ms$/\1/p')
	if [ "$status" = 503 ] && [ -n "$ms" ]; then
		pass "$lang: 503 and the fallback body"
	else
		fail "$lang: answered $got"
		continue
	fi
	[ "$ra" = "$((ms / 1000 + 1))" ] && pass "$lang: Retry-After $ra agrees with $ms ms" ||
		fail "$lang: Retry-After $ra for $ms ms"
	# What must be equal across languages: all but the milliseconds.
	echo "$status|$(echo "$body" | sed 's/[0-9][0-9]*/N/')" >"$tmp/$lang.shape"
done
if [ -f "$tmp/python.shape" ] && cmp -s "$tmp/python.shape" "$tmp/node.shape" &&
	cmp -s "$tmp/python.shape" "$tmp/go.shape"; then
	pass "the three services answer alike: $(cat "$tmp/python.shape")"
else
	fail "the services differ: python $(cat "$tmp/python.shape" 2>/dev/null)," \
		"node $(cat "$tmp/node.shape" 2>/dev/null), go $(cat "$tmp/go.shape" 2>/dev/null)"
fi

test_end
