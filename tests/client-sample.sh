# SPDX-License-Identifier: Apache-2.0
# client-sample.sh — sourced by the client install tests (python-install.sh,
# node-pack.sh, go-module.sh): the fenced blocks of a client README by
# their marker line, a cbd with the README samples' circuit, and the check
# that a README's protected-call sample, run against it and a local HTTP
# upstream, gets the body, then trips the circuit through cbd and is
# refused without reaching the upstream. The caller sets $tmp (its
# temporary directory) and $cbd, and sources tests/test-lib.sh.
# shellcheck disable=SC2154 # $tmp, $cbd: the caller's

# The fenced block after the line "<!-- $2 -->" in the file $1.
readme_block() {
	awk -v m="<!-- $2 -->" '$0 == m { f = 1; next }
		f == 1 && /^```/ { f = 2; next }
		f == 2 && /^```/ { exit }
		f == 2 { print }' "$1"
}

# cbd on $tmp/cbd.sock (exported as CBD_SOCKET), stopped at exit: the
# samples' circuit "users" opens at two failures in a row, for long.
sample_start_cbd() {
	export CBD_SOCKET="$tmp/cbd.sock"
	cat >"$tmp/cbd.conf" <<CONF
[circuit "users"]
failure_threshold = 2
break_ms = 600000
CONF
	"$cbd" -c "$tmp/cbd.conf" -s "$CBD_SOCKET" 2>"$tmp/cbd.log" &
	test_started $!
}

# Wait (10 s at most) for cbd's socket and the upstream's port file $1;
# sets $base, the upstream's URL. The upstream (the caller's, in its
# language) answers GET /users/42 with 200 "alice" and anything else with
# 503, and writes the count of requests to $tmp/hits (by rename) before it
# answers.
sample_wait() {
	i=0
	while { [ ! -S "$CBD_SOCKET" ] || [ ! -s "$1" ]; } && [ $i -lt 200 ]; do
		sleep 0.05
		i=$((i + 1))
	done
	[ -S "$CBD_SOCKET" ] || { echo "cbd did not start"; cat "$tmp/cbd.log"; return 1; }
	[ -s "$1" ] || { echo "the HTTP upstream did not start"; return 1; }
	base="http://127.0.0.1:$(cat "$1")"
}

sample_hits() { cat "$tmp/hits" 2>/dev/null || echo 0; }

# check_sample LABEL COMMAND...: COMMAND runs the sample (USERS_URL in its
# environment). First the body; then, with the upstream failing, runs
# until one is refused: two failures recorded in cbd open the circuit (a
# run whose cbd answer came late takes the LOCAL store policy and records
# nothing there, so it may take more), and the refused run must not reach
# the upstream. A fresh process can only know the circuit is open from cbd.
check_sample() {
	label=$1
	shift
	out=$(USERS_URL="$base/users/42" "$@" 2>&1)
	if [ "$out" = alice ]; then
		pass "$label: the README sample prints the upstream's body"
	else
		fail "$label: the README sample printed: $out"
	fi
	n=0
	while [ $n -lt 10 ]; do
		n=$((n + 1))
		before=$(sample_hits)
		out=$(USERS_URL="$base/fail" "$@" 2>&1)
		case "$out" in
		"users failed: "*) ;;
		*) break ;;
		esac
	done
	case "$out" in
	"users is open: retry in "*)
		if [ "$(sample_hits)" = "$before" ] && [ $n -ge 3 ]; then
			pass "$label: after $((n - 1)) failed runs the sample is refused by cbd, the upstream not called"
		else
			fail "$label: refused after $((n - 1)) failed runs, upstream hits $before -> $(sample_hits)"
		fi ;;
	*) fail "$label: the failing sample printed: $out (run $n)" ;;
	esac
}
