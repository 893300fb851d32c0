# SPDX-License-Identifier: Apache-2.0
# test-lib.sh — sourced by the shell tests that start processes of their
# own: the ok/FAILED lines and the closing count that ./bootstrap reads, a
# private temporary directory, and the processes a test starts, stopped
# (and the directory removed) at exit whatever way the test ends.
# shellcheck disable=SC2034 # $tmp, $PY: for the caller

passed=0
failed=0
pass() { passed=$((passed + 1)); echo "ok: $1"; }
fail() { failed=$((failed + 1)); echo "FAILED: $1"; }

# until_true DESCRIPTION COMMAND...: run COMMAND every 50 ms until it
# succeeds; after 60 s a failure names DESCRIPTION (the bound only
# catches a hang).
until_true() {
	what=$1
	shift
	i=0
	until "$@"; do
		i=$((i + 1))
		[ $i -ge 1200 ] && { fail "$what (waited 60 s)"; return 1; }
		sleep 0.05
	done
}

# test_begin NAME: $tmp is a new /tmp/cbd-NAME.XXXXXX; at exit every
# process given to test_started is stopped and $tmp removed.
test_pids=
test_begin() {
	test_name=$1
	tmp=$(mktemp -d "/tmp/cbd-$1.XXXXXX") || exit 1
	trap test_cleanup EXIT
	trap 'exit 1' INT TERM
}
test_started() { test_pids="$test_pids $1"; }
test_cleanup() {
	for p in $test_pids; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
	chmod -R u+w "$tmp" 2>/dev/null
	rm -rf "$tmp"
}

# The closing line; the test fails when a check failed or none ran.
test_end() {
	echo "$test_name: $passed passed, $failed failed"
	[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
}

# $PY: Debian's python3 (the one its packages serve), else any; exits 77
# (skip) when python3, node or go is missing.
need_python_node_go() {
	PY=/usr/bin/python3
	[ -x "$PY" ] || PY=$(command -v python3 || true)
	for tool in "$PY" node go; do
		[ -n "$tool" ] && command -v "$tool" >/dev/null 2>&1 || {
			echo "python3, node and go are needed: skipping"
			exit 77
		}
	done
}

# test_cbd_start [CONF]: cbd (with the config file CONF, if given) on
# $tmp/cbd.sock (exported as CBD_SOCKET), logging to $tmp/cbd.log; waits
# (10 s at most) for its socket.
test_cbd_start() {
	export CBD_SOCKET="$tmp/cbd.sock"
	[ $# -gt 0 ] && set -- -c "$1"
	"${CBD_BINARY:?}" "$@" -s "$CBD_SOCKET" 2>"$tmp/cbd.log" &
	test_started $!
	i=0
	while [ ! -S "$CBD_SOCKET" ] && [ $i -lt 200 ]; do
		sleep 0.05
		i=$((i + 1))
	done
	[ -S "$CBD_SOCKET" ] || { echo "cbd did not start"; cat "$tmp/cbd.log"; exit 1; }
}
