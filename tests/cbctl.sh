#!/bin/sh
# cbctl.sh — cbctl against a real cbd: every command, both output modes,
# colours, and every exit code (0 ok, 1 refused, 2 usage, 3 unreachable).
# Needs CBD_BINARY and CBCTL_BINARY (set by make check).
set -u
passed=0
failed=0
pass() { passed=$((passed + 1)); echo "ok: $1"; }
fail() { failed=$((failed + 1)); echo "FAILED: $1"; }

tmp=$(mktemp -d /tmp/cbctl-test.XXXXXX)
chmod 0755 "$tmp"
sock="$tmp/cbd.sock"
pid=""
cleanup() {
	[ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT INT TERM

# 0666 so that the non-admin case (user nobody) can connect at all.
cat > "$tmp/cbd.conf" <<CONF
[cbd]
socket = $sock
socket_mode = 0666
[defaults]
break_ms = 60000
CONF
"$CBD_BINARY" -c "$tmp/cbd.conf" 2>"$tmp/cbd.log" &
pid=$!
i=0
while [ ! -S "$sock" ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i + 1)); done
[ -S "$sock" ] || { echo "cbd did not start:"; cat "$tmp/cbd.log"; exit 1; }

# run EXPECTED_EXIT DESCRIPTION cbctl-args... ; output in $tmp/out, $tmp/err
run() {
	want=$1; what=$2; shift 2
	"$CBCTL_BINARY" "$@" >"$tmp/out" 2>"$tmp/err" </dev/null
	got=$?
	if [ "$got" -eq "$want" ]; then pass "$what (exit $got)"; else
		fail "$what: exit $got, wanted $want; stdout: $(cat "$tmp/out"); stderr: $(cat "$tmp/err")"; fi
}
# expect FILE PATTERN DESCRIPTION: grep -E PATTERN in FILE
expect() {
	if grep -Eq -- "$2" "$tmp/$1"; then pass "$3"; else
		fail "$3: no /$2/ in $1: $(cat "$tmp/$1")"; fi
}
reject() {
	if grep -Eq -- "$2" "$tmp/$1"; then fail "$3: /$2/ in $1: $(cat "$tmp/$1")"; else
		pass "$3"; fi
}

export CBD_SOCKET="$sock"

run 0 "ping" ping
expect out "protocol 2" "ping names the protocol"
expect out "$sock" "ping names the socket"
run 0 "ping --json" --json ping
expect out '"ok": ?true' "ping --json prints the reply"

run 0 "get unknown" get payments
expect out '^NAME +STATE +FAILURES +SUCCESSES +OPENED AT +RETRY' "table header"
expect out '^payments +closed +0 +0 +- +-$' "unknown circuit reads closed"

run 0 "open" open payments
expect out '^payments +open .*retry in (59|60)\.[0-9]s$' "open shows the break window"
expect out '[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}' "opened at as local time"
run 0 "list" list
expect out '^payments +open' "list shows the open circuit"
run 0 "list --state open" list --state open
expect out '^payments' "state filter keeps open ones"
run 0 "list --state=closed" list --state=closed
expect out 'no circuits in state closed' "state filter drops others"
run 0 "list --json" --json list --state open
expect out '"circuits": ?\[' "list --json prints the daemon's reply"
run 0 "get --json" --json get payments
expect out '"state": ?"open"' "get --json"
reject out 'NAME' "--json prints no table"

run 0 "half-open" half-open payments
expect out '^payments +half_open' "half-open forced"
run 0 "close" -s "$sock" close payments
expect out '^payments +closed +0 +0' "close forced and counts cleared"
run 0 "open again" open inventory
run 0 "delete" delete inventory
expect out 'deleted inventory' "delete says it deleted"
run 0 "delete again" delete inventory
expect out 'inventory did not exist' "delete of an unknown circuit"

run 0 "stats" stats
expect out '^uptime' "stats prints counters"
run 0 "stats --json" --json stats
expect out '"ok": ?true' "stats --json"

# No colours when not a terminal, nor with NO_COLOR on one; colours on one.
run 0 "open for colours" open colour
reject out "$(printf '\033')" "no escapes when stdout is not a terminal"
if command -v script >/dev/null 2>&1; then
	TERM=xterm script -qec "$CBCTL_BINARY get colour" /dev/null >"$tmp/out" 2>&1 </dev/null
	expect out "$(printf '\033')\\[31m" "red for open on a terminal"
	NO_COLOR=1 TERM=xterm script -qec "$CBCTL_BINARY get colour" /dev/null >"$tmp/out" 2>&1 </dev/null
	reject out "$(printf '\033')" "NO_COLOR turns colours off"
fi

# Usage errors: exit 2.
run 2 "no command"
run 2 "unknown command" frobnicate
expect err 'unknown command "frobnicate"' "unknown command named"
run 2 "get without a name" get
run 2 "two names" open a b
run 2 "bad state filter" list --state sideways
expect err 'open, half_open or closed' "state filter message"
run 2 "bad timeout" --timeout 0 ping
run 2 "invalid name" get "$(printf 'a\tb')"
expect err 'name' "invalid name message names the member"
run 0 "--help" --help
expect out 'usage: cbctl' "help text"
run 0 "command --help" open --help
expect out 'usage: cbctl .*open NAME' "command help"

# Unreachable: exit 3, naming the socket.
run 3 "missing socket" -s "$tmp/nothing.sock" ping
expect err "$tmp/nothing.sock" "unreachable names the socket"
CBD_SOCKET="$tmp/env.sock" "$CBCTL_BINARY" ping >/dev/null 2>"$tmp/err"
[ $? -eq 3 ] && pass "CBD_SOCKET used (exit 3)" || fail "CBD_SOCKET ignored"
expect err "$tmp/env.sock" "CBD_SOCKET socket named"

# Refused: a non-admin may read but not force (exit 1, forbidden).
# (A copy of cbctl in the test's directory: the build tree may sit where
# nobody cannot reach it, such as root's home.)
if id nobody >/dev/null 2>&1 && command -v setpriv >/dev/null 2>&1; then
	cp "$CBCTL_BINARY" "$tmp/cbctl" && chmod 0755 "$tmp/cbctl"
	setpriv --reuid=nobody --regid=nogroup --clear-groups \
		env CBD_SOCKET="$sock" "$tmp/cbctl" get payments >"$tmp/out" 2>"$tmp/err"
	[ $? -eq 0 ] && pass "nobody may read" || fail "nobody get: $(cat "$tmp/err")"
	setpriv --reuid=nobody --regid=nogroup --clear-groups \
		env CBD_SOCKET="$sock" "$tmp/cbctl" open payments >"$tmp/out" 2>"$tmp/err"
	[ $? -eq 1 ] && pass "nobody may not force (exit 1)" || fail "nobody open not refused"
	expect err 'forbidden' "refusal names the error code"
fi

echo "cbctl: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
