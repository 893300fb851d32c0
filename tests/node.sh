#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# node.sh — the Node.js client's suite (client/node/test, node --test)
# against a real cbd: every op, the breaker, the store policies with cbd
# killed and SIGSTOPped, the classifiers, retries in virtual time, the
# shared state-machine trace, the example service.
# Needs CBD_BINARY and CBD_SRCDIR (set by make check). Skips (77) when
# Node.js 20 or later (Debian's nodejs) is missing.
set -u

NODE=$(command -v node || command -v nodejs || true)
if [ -z "$NODE" ] || ! "$NODE" -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 20 ? 0 : 1)' 2>/dev/null; then
	echo "node: SKIP (no Node.js >= 20: apt-get install nodejs)"
	exit 77
fi

srcdir=${CBD_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
log=$(mktemp /tmp/node-test.XXXXXX)
trap 'rm -f "$log"' EXIT INT TERM
# Nothing is written into the source tree (distcheck makes it read-only).
cd "$srcdir" && CBD_BINARY=$CBD_BINARY "$NODE" --test --test-reporter=tap \
	client/node/test/*.test.js 2>&1 | tee "$log"

count() { grep -E "^# $1 [0-9]+" "$log" | tail -n 1 | grep -oE '[0-9]+' || echo 0; }
passed=$(count pass)
failed=$(( $(count fail) + $(count cancelled) ))
grep -qE '^# pass [0-9]+' "$log" || failed=$((failed + 1))
echo "node: $passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
