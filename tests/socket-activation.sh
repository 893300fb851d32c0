#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# socket-activation.sh — cbd started the way cbd.socket starts it: by
# systemd-socket-activate, which listens first and hands cbd the socket on
# the first connection. A client gets an answer, and cbd tells the notify
# socket READY=1 (and STOPPING=1 on SIGTERM). Needs CBD_BINARY and socat.
set -u
passed=0
failed=0
pass() { passed=$((passed + 1)); echo "ok: $1"; }
fail() { failed=$((failed + 1)); echo "FAILED: $1"; }

if [ "${HAVE_SYSTEMD:-yes}" != yes ]; then
	echo "cbd was built without libsystemd (no socket activation): skipping"
	exit 77
fi
for tool in systemd-socket-activate socat; do
	command -v "$tool" >/dev/null 2>&1 || { echo "$tool not installed: skipping"; exit 77; }
done
[ -x "$CBD_BINARY" ] || { echo "no cbd at $CBD_BINARY"; exit 1; }
tmp=$(mktemp -d /tmp/cbd-activation.XXXXXX)
sock="$tmp/cbd.sock"
notify="$tmp/notify.sock"
act_pid=""
recv_pid=""
cleanup() {
	[ -n "$act_pid" ] && kill "$act_pid" 2>/dev/null
	[ -n "$recv_pid" ] && kill "$recv_pid" 2>/dev/null
	wait 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT INT TERM

# The notify listener: every datagram appended to notify.log.
socat -u UNIX-RECV:"$notify" OPEN:"$tmp/notify.log",creat,append 2>"$tmp/socat.log" &
recv_pid=$!
# The daemon's config names another socket: the inherited one must win.
printf '[cbd]\nsocket = %s/unused.sock\n' "$tmp" > "$tmp/cbd.conf"
# systemd-socket-activate passes only the variables named with -E.
systemd-socket-activate -l "$sock" -E NOTIFY_SOCKET="$notify" \
	"$CBD_BINARY" -c "$tmp/cbd.conf" 2>"$tmp/cbd.log" &
act_pid=$!
i=0
while { [ ! -S "$sock" ] || [ ! -S "$notify" ]; } && [ $i -lt 100 ]; do sleep 0.05; i=$((i + 1)); done
[ -S "$sock" ] && pass "systemd-socket-activate listens" || fail "no listening socket"

reply=$(printf '{"id":1,"op":"hello"}\n' | timeout 5 socat -t 2 - UNIX-CONNECT:"$sock")
case "$reply" in
*'"ok": true'* | *'"ok":true'*) pass "a client gets an answer through the inherited socket" ;;
*) fail "hello through the inherited socket: '$reply' (log: $(cat "$tmp/cbd.log"))" ;;
esac
[ ! -e "$tmp/unused.sock" ] && pass "cbd made no socket of its own" ||
	fail "cbd bound its configured socket despite socket activation"

# notified WORD: wait (bounded) until the notify listener has logged WORD.
notified() {
	i=0
	while ! grep -q "$1" "$tmp/notify.log" 2>/dev/null && [ $i -lt 100 ]; do
		sleep 0.05
		i=$((i + 1))
	done
	if grep -q "$1" "$tmp/notify.log" 2>/dev/null; then pass "$1 sent"; else
		fail "no $1 (got: $(cat "$tmp/notify.log" 2>/dev/null))"; fi
}
notified READY=1

kill -TERM "$act_pid"
i=0
while kill -0 "$act_pid" 2>/dev/null && [ $i -lt 100 ]; do sleep 0.05; i=$((i + 1)); done
if kill -0 "$act_pid" 2>/dev/null; then fail "cbd did not exit on SIGTERM"; else
	wait "$act_pid"; rc=$?; act_pid=""
	[ "$rc" -eq 0 ] && pass "clean exit on SIGTERM" || fail "exit status $rc on SIGTERM"
fi
notified STOPPING=1

echo "socket-activation: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
