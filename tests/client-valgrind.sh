#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# tests/client-valgrind.sh — libcbclient's test programs under valgrind
# (memcheck, in-process: CK_FORK=no); fails on any memory error or leak.
# Skipped (77) without valgrind or in a sanitizer build.
set -u

: "${CBD_BINARY:?CBD_BINARY must name the cbd to test}"
builddir=${BUILDDIR:-.}
command -v valgrind >/dev/null 2>&1 || { echo "valgrind not installed"; exit 77; }
if grep -q 'fsanitize' "$builddir/Makefile" 2>/dev/null; then
	echo "sanitizer build: valgrind cannot run it"
	exit 77
fi

work=$(mktemp -d /tmp/cbc-valgrind-XXXXXX)
trap 'rm -rf "$work"' EXIT INT TERM

status=0
passed=0
failed=0
for t in check_client_local check_client_remote check_client_retry check_client_snapshot \
    check_client_bulkhead; do
	echo "== $t under valgrind"
	# Tests tagged "native" assume the client's own speed (see
	# check_client_remote.c); valgrind is far slower.
	CK_FORK=no CK_EXCLUDE_TAGS=native CBD_HARNESS_TIMEOUT_MS=60000 \
		"$builddir/libtool" --mode=execute \
		valgrind -q --leak-check=full --show-leak-kinds=definite,indirect,possible \
		--errors-for-leak-kinds=definite,indirect,possible --error-exitcode=99 \
		--log-file="$work/$t.vg" "$builddir/tests/$t" >"$work/$t.out" 2>&1
	rc=$?
	if [ "$rc" -eq 0 ]; then
		passed=$((passed + 1))
	else
		failed=$((failed + 1))
		status=1
		echo "FAIL: $t (exit $rc; 99: valgrind found errors or leaks)"
		tail -n 30 "$work/$t.out"
		cat "$work/$t.vg"
	fi
	grep -E '^[0-9]+%: Checks' "$work/$t.out"
done
echo "client-valgrind: $passed passed, $failed failed"
exit $status
