#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# cbctl-top.sh — `cbctl top` against a real cbd: the plain table (stdout
# not a terminal, --once) lists circuits open and held first, then by
# traffic, each with its state, hold and retry time; and, under tmux (an
# 80x24 detached session; skipped when tmux is missing), the live screen
# shows a circuit tripped by another client, filters with /, follows a
# resize, and q (and SIGTERM) leave the alternate screen with the shell
# back. Writes the screen it saw to tests/cbctl-top-screen.txt in the build
# tree (README's picture of cbctl top).
# Needs CBD_BINARY and CBCTL_BINARY (set by make check).
set -u
passed=0
failed=0
pass() { passed=$((passed + 1)); echo "ok: $1"; }
fail() { failed=$((failed + 1)); echo "FAILED: $1"; }

command -v socat >/dev/null 2>&1 || { echo "socat not installed: skipping"; exit 77; }

tmp=$(mktemp -d /tmp/cbctl-top-test.XXXXXX)
sock="$tmp/cbd.sock"
tsock="$tmp/tmux.sock"
pid=""
traffic=""
cleanup() {
	rm -f "$tmp/traffic-on"
	[ -n "$traffic" ] && wait "$traffic" 2>/dev/null
	[ -S "$tsock" ] && tmux -S "$tsock" kill-server 2>/dev/null
	[ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT INT TERM

cat > "$tmp/cbd.conf" <<CONF
[cbd]
socket = $sock
[defaults]
break_ms = 60000
[circuit "ledger"]
slow_call_ms = 100
CONF
# Waits poll every 50 ms for a condition, at most a minute (a slow,
# loaded machine or a sanitizer build; never a timing claim).
wait_steps=1200
"$CBD_BINARY" -c "$tmp/cbd.conf" 2>"$tmp/cbd.log" &
pid=$!
i=0
while [ ! -S "$sock" ] && [ $i -lt $wait_steps ]; do sleep 0.05; i=$((i + 1)); done
[ -S "$sock" ] || { echo "cbd did not start:"; cat "$tmp/cbd.log"; exit 1; }
export CBD_SOCKET="$sock"
ctl() { "$CBCTL_BINARY" "$@" >"$tmp/ctl.out" 2>&1 </dev/null || { echo "cbctl $*: $(cat "$tmp/ctl.out")"; exit 1; }; }
send() { printf '%s\n' "$@" | timeout 5 socat -t 0.2 - UNIX-CONNECT:"$sock" >/dev/null; }

# The circuits: held open, tripped, held closed, half open, two closed
# ones (ledger busy, avatars idle).
send '{"op":"record","name":"ledger","outcome":"success"}' \
	'{"op":"record","name":"avatars","outcome":"success"}' \
	'{"op":"record","name":"search","outcome":"success"}'
ctl open payments --for 10m --reason "provider outage, INC-1234"
ctl open search --no-hold
ctl close checkout --for 2h --reason migration
ctl half-open inventory

# Traffic on ledger while the test runs: 9 successes (one of them slow)
# and one failure a batch, without waiting for replies.
touch "$tmp/traffic-on"
(
	r='{"op":"record","name":"ledger","noreply":true,"outcome":'
	while [ -f "$tmp/traffic-on" ]; do
		printf '%s\n' "${r}\"success\"}" "${r}\"success\"}" "${r}\"success\"}" \
			"${r}\"success\"}" "${r}\"success\",\"duration_ms\":150}" \
			"${r}\"success\"}" "${r}\"success\"}" "${r}\"success\"}" \
			"${r}\"success\"}" "${r}\"failure\"}" |
			timeout 5 socat -t 0.1 - UNIX-CONNECT:"$sock" >/dev/null 2>&1
	done
) &
traffic=$!

# (a) Plain table: open first (payments held, search tripped; equal
# traffic: by name), then held closed, half open, then the closed ones by
# traffic (ledger before avatars although a comes first). Tried again
# until ledger's traffic shows in an interval (the background writer is
# not timed).
i=0
while :; do
	"$CBCTL_BINARY" top --once --interval 500ms >"$tmp/out" 2>"$tmp/err" </dev/null
	rc=$?
	grep -Eq '^ledger +closed +[0-9.]+' "$tmp/out" && ! grep -Eq '^ledger +closed +0\.0 ' "$tmp/out" && break
	i=$((i + 1))
	[ $i -ge 20 ] && break
done
if [ "$rc" -eq 0 ]; then pass "top --once exits 0"; else fail "top --once: exit $rc: $(cat "$tmp/err")"; fi
order=$(sed -n '4,$p' "$tmp/out" | awk 'NF { print $1 }' | tr '\n' ' ')
if [ "$order" = "payments search checkout inventory ledger avatars " ]; then
	pass "open, held, half open, then closed by traffic"
else
	fail "row order: \"$order\": $(cat "$tmp/out")"
fi
expect() {
	if grep -Eq -- "$2" "$tmp/$1"; then pass "$3"; else
		fail "$3: no /$2/ in $1: $(cat "$tmp/$1")"; fi
}
expect out '^NAME +STATE +CALLS/S +FAIL% +SLOW% +RETRY +HOLD$' "column heads"
expect out '^circuits 6  open 2  half_open 1  closed 3  held 2  req/s [0-9.k]+$' "totals in the header"
expect out "^[0-9-]+ [0-9:]+  cbctl top  cbd [^ ]+  up [0-9]+s  [0-9]+ conns  memory up  $sock\$" \
	"the title: version, uptime, connections, backend, socket"
expect out '^payments +open .* [0-9]+m[0-9]{2}s +[^ ]+ until [0-9:]+: provider outage, INC-1234$' \
	"held open: retry time, who, until, why"
expect out '^search +open .* [1-6]?[0-9]\.[0-9]s$' "tripped: the break's retry time"
expect out '^checkout +closed .* - +[^ ]+ until [0-9:]+: migration$' "held closed"
expect out '^inventory +half_open ' "half open"
expect out '^ledger +closed +[0-9.k]+ +[0-9.]+ +[0-9.]+ +-$' "traffic: calls/s, failure and slow %"
expect out '^avatars +closed +0\.0 +- +- +-$' "no traffic: no rates"

"$CBCTL_BINARY" top --once --interval 100ms --filter LED >"$tmp/out" 2>"$tmp/err" </dev/null
rows=$(sed -n '4,$p' "$tmp/out" | awk 'NF { print $1 }' | tr '\n' ' ')
if [ "$rows" = "ledger " ]; then pass "--filter keeps matching names (case ignored)"; else
	fail "--filter LED: \"$rows\""; fi
"$CBCTL_BINARY" top --once --interval 10 >"$tmp/out" 2>"$tmp/err" </dev/null
rc=$?
if [ "$rc" -eq 2 ] && grep -q -- '--interval' "$tmp/err"; then pass "a bad --interval is a usage error"; else
	fail "--interval 10: exit $rc: $(cat "$tmp/err")"; fi
"$CBCTL_BINARY" top --once --socket "$tmp/none.sock" >"$tmp/out" 2>"$tmp/err" </dev/null
rc=$?
if [ "$rc" -eq 3 ]; then pass "no cbd: exit 3"; else fail "no cbd: exit $rc"; fi

# Not a terminal, no --once: a table each interval until SIGTERM. (The
# file exists before the background job's redirection does: a count read
# first must be 0, not an error that ends the wait at once.)
: >"$tmp/plain"
"$CBCTL_BINARY" top --interval 100ms >"$tmp/plain" 2>"$tmp/err" </dev/null &
top_pid=$!
i=0
while [ "$(grep -c '^NAME ' "$tmp/plain")" -lt 2 ] && [ $i -lt $wait_steps ]; do sleep 0.05; i=$((i + 1)); done
kill -TERM "$top_pid"
wait "$top_pid"
rc=$?
if [ "$(grep -c '^NAME ' "$tmp/plain")" -ge 2 ] && [ "$rc" -eq 0 ]; then
	pass "plain tables each interval, SIGTERM ends them (exit 0)"
else
	fail "plain tables: exit $rc, $(grep -c '^NAME ' "$tmp/plain") tables"
fi

# (b) The live screen under tmux.
if ! command -v tmux >/dev/null 2>&1; then
	echo "tmux not installed: the live screen is not checked"
	echo "$passed passed, $failed failed"
	[ "$failed" -eq 0 ] || exit 1
	exit 77
fi
tm() { tmux -S "$tsock" "$@"; }
# wait_pane PATTERN DESCRIPTION: until the pane shows PATTERN (grep -E).
wait_pane() {
	i=0
	while [ $i -lt $wait_steps ]; do
		tm capture-pane -p -t top >"$tmp/pane" 2>/dev/null
		grep -Eq -- "$1" "$tmp/pane" && { pass "$2"; return 0; }
		sleep 0.05
		i=$((i + 1))
	done
	fail "$2: no /$1/ in the pane: $(cat "$tmp/pane")"
	return 1
}
# alternate_is 0|1 DESCRIPTION
alternate_is() {
	i=0
	while [ $i -lt $wait_steps ]; do
		[ "$(tm display -p -t top '#{alternate_on}')" = "$1" ] && { pass "$2"; return 0; }
		sleep 0.05
		i=$((i + 1))
	done
	fail "$2: alternate_on is $(tm display -p -t top '#{alternate_on}')"
	return 1
}
top_cmd="CBD_SOCKET='$sock' '$CBCTL_BINARY' top --interval 500ms; echo top-exited-\$?"
tm -f /dev/null new-session -d -s top -x 80 -y 24 "env PS1='$ ' sh"
tm set-option -t top status off
# Keys sent before the shell's first prompt are echoed before it, and the
# prompt then lands where the command's output goes ("$ top-exited-0").
wait_pane '^\$ ?$' "the shell's first prompt"
tm send-keys -t top "$top_cmd" Enter
wait_pane '^cbctl top ' "the screen shows"
alternate_is 1 "on the alternate screen"
wait_pane '^payments +open ' "held open row"
wait_pane '^ledger +closed +[1-9][0-9.k]* ' "ledger's traffic"
# A circuit tripped by another client shows open, its retry counting.
ctl open avatars --no-hold
wait_pane '^avatars +open +.* [0-9.]+s' "a trip shows up from the watch"
tm capture-pane -p -t top >"$tmp/screen"
# (Trailing blanks cut, the empty rows squeezed to one line.)
mkdir -p "${BUILDDIR:-.}/tests" && sed -e 's/[[:space:]]*$//' "$tmp/screen" | cat -s \
	>"${BUILDDIR:-.}/tests/cbctl-top-screen.txt"
if [ "$(wc -l <"$tmp/screen")" -eq 24 ] && awk 'length > 80 { exit 1 }' "$tmp/screen"; then
	pass "fits 80x24"
else
	fail "does not fit 80x24: $(cat "$tmp/screen")"
fi
# A deleted circuit goes.
ctl delete inventory
i=0
while [ $i -lt $wait_steps ]; do
	tm capture-pane -p -t top >"$tmp/pane"
	grep -q '^inventory ' "$tmp/pane" || break
	sleep 0.05
	i=$((i + 1))
done
if grep -q '^inventory ' "$tmp/pane"; then fail "a deleted circuit stays"; else pass "a deleted circuit goes"; fi
# / and a filter: only matching rows.
tm send-keys -t top / a v a
wait_pane 'filter: ava' "typing the filter shows it"
tm send-keys -t top Enter
wait_pane 'rows 1-1 of 1 +filter "ava"' "the filter keeps one row"
if grep -q '^payments ' "$tmp/pane" || ! grep -Eq '^avatars +open' "$tmp/pane"; then
	fail "filtered rows: $(cat "$tmp/pane")"
else
	pass "only avatars shows"
fi
# Esc in the filter clears it.
tm send-keys -t top / Escape
wait_pane 'rows 1-5 of 5$' "Esc clears the filter"
# A resize redraws: the status line moves to the new last line.
tm resize-window -t top -x 60 -y 12
wait_pane '^q quit .*rows 1-5 of 5' "the status line after a resize"
if [ "$(tm capture-pane -p -t top | sed -n '12p' | cut -c1-6)" = "q quit" ] &&
	! tm capture-pane -p -t top | awk 'length > 60 { exit 0 } END { exit 1 }'; then
	pass "redrawn at 60x12"
else
	fail "after resize: $(tm capture-pane -p -t top)"
fi
# Too small a screen says so, and the table comes back when it grows.
tm resize-window -t top -x 30 -y 5
wait_pane 'too small' "a screen too small says so"
tm resize-window -t top -x 80 -y 24
wait_pane '^q quit .*rows 1-5 of 5' "the table again at 80x24"
# q: the shell back, the alternate screen left.
tm send-keys -t top q
wait_pane '^top-exited-0$' "q quits with exit 0"
alternate_is 0 "q leaves the alternate screen"
wait_pane '^\$ ?$' "the shell prompt is back"
# SIGTERM restores the terminal too.
tm send-keys -t top clear Enter
tm send-keys -t top "$top_cmd" Enter
alternate_is 1 "top again"
wait_pane '^cbctl top ' "the screen again"
shell=$(tm display -p -t top '#{pane_pid}')
top_pid=$(pgrep -P "$shell" | head -1)
if [ -n "$top_pid" ]; then
	kill -TERM "$top_pid"
	wait_pane 'top-exited-0$' "SIGTERM ends it (exit 0)"
	alternate_is 0 "SIGTERM leaves the alternate screen"
	stty_line=$(tm capture-pane -p -t top | grep -c '^\$ ')
	[ "$stty_line" -ge 1 ] && pass "the prompt after SIGTERM" || fail "no prompt after SIGTERM"
else
	fail "cbctl top's pid not found under the pane's shell $shell"
fi
# Keys echo again (the terminal's modes restored): typed text shows.
tm send-keys -t top "echo typed-back"
wait_pane '^\$ echo typed-back$' "the terminal echoes again"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
