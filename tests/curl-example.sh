#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# curl-example.sh — the libcurl example (client/examples/curl-breaker.c)
# against a real local HTTP server (python3's http.server on loopback) and
# a real cbd: 200s pass through; 5xx trip the circuit after exactly its
# threshold of requests, and while it is open the example refuses without
# making a request (the server counts them); a 404 is a success (the
# dependency answered); a refused connection is a failure; cbd's totals
# count every call (rejected included). Skipped (77) without libcurl (the
# example is not built) or python3.
set -u
srcdir=${CBD_SRCDIR:?}
example=${CURL_EXAMPLE:?}
cbctl=${CBCTL_BINARY:?}
. "$srcdir/tests/test-lib.sh"
[ -x "$example" ] || { echo "curl-example: SKIP (built without libcurl)"; exit 77; }
PY=$(command -v python3 || true)
[ -n "$PY" ] || { echo "curl-example: SKIP (no python3)"; exit 77; }
test_begin curl-example
printf '[circuit "curl-fail"]\nfailure_threshold = 3\nbreak_ms = 600000\n' >"$tmp/cbd.conf"
test_cbd_start "$tmp/cbd.conf"

# The server: /ok answers 200, /missing 404, anything else 500; each
# request appends its path to $tmp/requests.
"$PY" - "$tmp" <<'PY' >"$tmp/server.log" 2>&1 &
import http.server, sys
tmp = sys.argv[1]
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        with open(tmp + "/requests", "a") as f:
            f.write(self.path + "\n")
        code = 200 if self.path == "/ok" else 404 if self.path == "/missing" else 500
        body = b"hello\n"
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
s = http.server.HTTPServer(("127.0.0.1", 0), H)
with open(tmp + "/port.tmp", "w") as f:
    f.write(str(s.server_address[1]))
import os
os.rename(tmp + "/port.tmp", tmp + "/port")
s.serve_forever()
PY
test_started $!
i=0
while [ ! -s "$tmp/port" ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i + 1)); done
[ -s "$tmp/port" ] || { echo "the HTTP server did not start"; cat "$tmp/server.log"; exit 1; }
url="http://127.0.0.1:$(cat "$tmp/port")"
requests() { grep -c "^$1\$" "$tmp/requests" 2>/dev/null || true; }
# field NAME PATH: a member of cbd's snapshot of NAME (cbctl --json get).
field() {
	"$cbctl" --json get "$1" | "$PY" -c '
import json, sys
v = json.load(sys.stdin)
v = v.get("snapshot", v)
for k in sys.argv[1].split("."):
    v = v[k]
print(v)' "$2"
}

# 200s: every call made, every one a success.
"$example" -c curl-ok -n 5 "$url/ok" >"$tmp/ok.out" 2>&1
if [ "$(grep -c 'status 200 (success)' "$tmp/ok.out")" = 5 ] && [ "$(requests /ok)" = 5 ]; then
	pass "200: 5 calls made, 5 successes"
else
	fail "200: $(cat "$tmp/ok.out"), $(requests /ok) requests"
fi

# 404: the dependency answered: successes, the circuit stays closed.
"$example" -c curl-missing -n 4 "$url/missing" >"$tmp/missing.out" 2>&1
if [ "$(grep -c 'status 404 (success)' "$tmp/missing.out")" = 4 ] &&
	[ "$(field curl-missing state)" = closed ]; then
	pass "404: a success, the circuit stays closed"
else
	fail "404: $(cat "$tmp/missing.out")"
fi

# 500s: exactly 3 requests (the threshold), then 7 refusals without one.
"$example" -c curl-fail -n 10 "$url/fail" >"$tmp/fail.out" 2>&1
made=$(requests /fail)
refused=$(grep -c 'refused: circuit open' "$tmp/fail.out")
if [ "$made" = 3 ] && [ "$(grep -c 'status 500 (failure)' "$tmp/fail.out")" = 3 ] &&
	[ "$refused" = 7 ]; then
	pass "500: trips after exactly 3 requests, 7 calls refused without a request"
else
	fail "500: $made requests, $refused refused: $(cat "$tmp/fail.out")"
fi
state=$(field curl-fail state)
failures=$(field curl-fail totals.failures)
rejected=$(field curl-fail totals.rejected)
if [ "$state" = open ] && [ "$failures" = 3 ] && [ "$rejected" = 7 ]; then
	pass "cbd counts them: open, failures 3, rejected 7"
else
	fail "cbd: state $state, failures $failures, rejected $rejected"
fi

# Nothing listening: a transport error is a failure.
free=$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$example" -c curl-down -n 1 "http://127.0.0.1:$free/" >"$tmp/down.out" 2>&1
if grep -q 'curl error 7: .*(failure)' "$tmp/down.out" && [ "$(field curl-down totals.failures)" = 1 ]; then
	pass "connection refused: a failure"
else
	fail "connection refused: $(cat "$tmp/down.out")"
fi

# A URL libcurl cannot try says nothing about the dependency: ignored.
"$example" -c curl-bad -n 1 "nosuchscheme://x/" >"$tmp/bad.out" 2>&1
if grep -q '(ignored)' "$tmp/bad.out"; then
	pass "unsupported scheme: ignored"
else
	fail "unsupported scheme: $(cat "$tmp/bad.out")"
fi
test_end
