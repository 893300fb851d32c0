#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# python.sh — the Python client's pytest suite (client/python/tests) against
# a real cbd: every op, the breaker, the store policies with cbd killed and
# SIGSTOPped, the classifiers, retries in virtual time, the state machine
# replaying the C unit tests' sequences.
# Needs CBD_BINARY and CBD_SRCDIR (set by make check). Skips (77) when
# Debian's python3 or its pytest (python3-pytest) is missing.
set -u

# Debian's interpreter, where python3-pytest installs (not a pyenv shim).
PY=/usr/bin/python3
[ -x "$PY" ] || PY=$(command -v python3 || true)
if [ -z "$PY" ] || ! "$PY" -c 'import sys; assert sys.version_info >= (3, 11)' 2>/dev/null; then
	echo "python: SKIP (no python3 >= 3.11)"
	exit 77
fi
if ! "$PY" -c 'import pytest' 2>/dev/null; then
	echo "python: SKIP (pytest missing: apt-get install python3-pytest)"
	exit 77
fi

srcdir=${CBD_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
log=$(mktemp /tmp/python-test.XXXXXX)
trap 'rm -f "$log"' EXIT INT TERM
# Nothing is written into the source tree (distcheck makes it read-only).
cd "$srcdir" && PYTHONDONTWRITEBYTECODE=1 CBD_BINARY=$CBD_BINARY \
	"$PY" -m pytest -q -p no:cacheprovider client/python/tests 2>&1 | tee "$log"

summary=$(grep -E '[0-9]+ (passed|failed|error)' "$log" | tail -n 1)
count() { echo "$summary" | grep -oE "[0-9]+ $1" | grep -oE '[0-9]+' || echo 0; }
passed=$(count passed)
failed=$(( $(count failed) + $(count 'errors?') ))
[ -n "$summary" ] || failed=$((failed + 1))
echo "python: $passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
