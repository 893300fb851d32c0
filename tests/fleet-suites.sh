#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# fleet-suites.sh — the daemon's integration suites and libcbclient's store
# contract against cbd in fleet mode: a private redis-server on a Unix
# socket in a temp dir, and every cbd the suites start (tests/cbd-harness.c)
# configured with backend = redis on it, each with a key prefix of its own.
# Every suite that runs against cbd runs here too; a case that cannot
# hold in fleet mode skips itself when CBD_TEST_REDIS_SOCKET is set, with
# its reason in a comment, and proto/PROTOCOL.md §15 ("Differences from
# memory mode") lists each such difference. Skips (77) without
# redis-server. Needs CBD_BINARY (set by make check).
set -u

command -v redis-server >/dev/null 2>&1 || {
	echo "fleet-suites: SKIP (redis-server not installed: apt-get install redis-server)"
	exit 77
}
dir=$(mktemp -d /tmp/cbd-fleet-suites.XXXXXX)
sock=$dir/redis.sock
redis-server --port 0 --unixsocket "$sock" --unixsocketperm 700 --save '' \
	--appendonly no --dir "$dir" --loglevel warning >"$dir/redis.log" 2>&1 &
redis=$!
trap 'kill $redis 2>/dev/null; wait $redis 2>/dev/null; rm -rf "$dir"' EXIT INT TERM
i=0
until [ -S "$sock" ] || [ $i -ge 200 ]; do
	sleep 0.05
	i=$((i + 1))
done
[ -S "$sock" ] || { echo "fleet-suites: redis-server did not start"; cat "$dir/redis.log"; exit 1; }

failed=0
for t in cbd-contract-test cbd-ops-test cbd-concurrency-test cbd-authority-test \
	cbd-rates-test cbd-watch-test cbd-snapshot-test cbd-limits-test cbd-metrics-test cbd-bulkhead-test \
	check_client_remote check_client_bulkhead; do
	if CBD_TEST_REDIS_SOCKET=$sock "tests/$t" >"$dir/$t.log" 2>&1; then
		echo "fleet: $t: $(grep -E 'Checks:' "$dir/$t.log" | tail -n 1)"
	else
		echo "fleet: $t FAILED:"
		cat "$dir/$t.log"
		failed=$((failed + 1))
	fi
done
[ "$failed" -eq 0 ]
