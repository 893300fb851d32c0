#!/bin/sh
# cbctl.sh — cbctl against a real cbd: every command, both output modes,
# colours, holds (open/close --for/--reason, release, --no-hold), the
# policy with its sources, and every exit code (0 ok, 1 refused, 2 usage,
# 3 unreachable).
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
[circuit "cfg"]
failure_threshold = 2
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

run 0 "open --no-hold" open payments --no-hold
expect out '^payments +open .*retry in (59|60)\.[0-9]s$' "open shows the break window"
reject out 'held' "--no-hold does not hold"
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

run 0 "get shows the policy" get payments
expect out '^policy:' "get shows the policy"
expect out '^  break_ms +60000 +defaults$' "break_ms from [defaults]"
expect out '^  failure_threshold +5 +builtin$' "failure_threshold built in"
expect out '^  max_gap_ms +- +builtin$' "a key with no value"
expect out '^totals: 0 successes, 0 failures, 0 ignored, 0 slow, 0 rejected$' "get shows totals"
run 0 "open cfg" open cfg --no-hold
run 0 "get cfg" get cfg
expect out '^  failure_threshold +2 +config$' "failure_threshold from [circuit]"

# Holds: open/close --for DURATION --reason TEXT, release.
run 0 "open --for --reason" open held --for 2s --reason "deploy 42"
expect out '^held +open ' "held open"
expect out '^  held open by [^ ]+ \(uid [0-9]+\) until [0-9-]+ [0-9:]+ \(in [0-9]s\): deploy 42$' \
	"open shows who holds it, until when and why"
run 0 "get held" get held
expect out '^  held open by .*: deploy 42$' "get shows the hold"
run 0 "list shows holds" list
expect out '^  held open by .*: deploy 42$' "list shows the hold"
run 0 "get held --json" --json get held
expect out '"hold": ?\{[^}]*"reason": ?"deploy 42"' "--json passes cbd's hold through"
run 0 "release" release held
expect out '^released held: now half_open$' "release says what it did"
reject out 'held open by' "no hold after release"
run 0 "release again" release held
expect out '^held was not held$' "release of an unheld circuit"
run 0 "open until released" open forever
expect out '^forever +open .* held$' "held open without ttl shows held"
expect out '^  held open by .* until released$' "no ttl: until released"
run 0 "close --for=1h" close kept --for=1h --reason=migration
expect out '^  held closed by .* \((in 59m5[0-9]s|in 1h00m)\): migration$' "held closed for an hour"
run 0 "close --no-hold" close forever --no-hold
reject out 'held' "a plain force clears the hold"
for d in 1 1500 1500ms 90s 10m 2h; do
	run 0 "duration $d" open "d$d" --for "$d"
done
expect out '^  held open by .*\(in (1h59m|2h00m)\)$' "2h is two hours"
for d in 0 -5 10x 1.5s s "" 1d 99999999999999999999 2501999792984h; do
	run 2 "bad duration \"$d\"" open bad --for "$d"
	expect err '--for' "bad duration \"$d\" names --for"
done
run 2 "--for without a value" open bad --for
expect err '--for' "missing value names --for"
run 2 "--no-hold with --for" open bad --no-hold --for 1s
expect err '--no-hold' "--no-hold conflict named"
run 2 "--no-hold with --reason" close bad --reason x --no-hold
run 2 "reason too long" open bad --reason "$(printf '%0257d' 0)"
expect err '--reason' "long reason names --reason"
run 2 "unknown open option" open bad --frobnicate
expect err '--frobnicate' "unknown option named"
run 0 "reason of 256 bytes" open ok256 --reason "$(printf '%0256d' 0)"
run 0 "a reason with an escape" open esc --reason "$(printf 'a\033[31mb')"
reject out "$(printf '\033')" "control characters in a reason are not printed"
expect out '^  held open by .*: a\?\[31mb$' "control characters shown as ?"
run 0 "a name after --" open --for 1m -- -dash
expect out '^-dash +open ' "-- ends the options"

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
run 2 "release without a name" release
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
		env CBD_SOCKET="$sock" "$tmp/cbctl" open payments --no-hold >"$tmp/out" 2>"$tmp/err"
	[ $? -eq 1 ] && pass "nobody may not force (exit 1)" || fail "nobody open not refused"
	expect err 'forbidden' "refusal names the error code"
	setpriv --reuid=nobody --regid=nogroup --clear-groups \
		env CBD_SOCKET="$sock" "$tmp/cbctl" open payments --for 1m --reason x \
		>"$tmp/out" 2>"$tmp/err"
	[ $? -eq 1 ] && pass "nobody may not hold (exit 1)" || fail "nobody hold not refused"
	expect err 'forbidden' "hold refusal names the error code"
	"$CBCTL_BINARY" open nobodys --reason "held by root" >/dev/null 2>&1
	setpriv --reuid=nobody --regid=nogroup --clear-groups \
		env CBD_SOCKET="$sock" "$tmp/cbctl" release nobodys >"$tmp/out" 2>"$tmp/err"
	[ $? -eq 1 ] && pass "nobody may not release (exit 1)" || fail "nobody release not refused"
	expect err 'forbidden' "release refusal names the error code"
	setpriv --reuid=nobody --regid=nogroup --clear-groups \
		env CBD_SOCKET="$sock" "$tmp/cbctl" get nobodys >"$tmp/out" 2>"$tmp/err"
	expect out '^  held open by .*: held by root$' "nobody sees the hold"
fi

echo "cbctl: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
