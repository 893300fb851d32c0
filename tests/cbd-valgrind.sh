#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# tests/cbd-valgrind.sh — run cbd's integration tests with every cbd they
# start under valgrind (memcheck); fail on any memory error or leak.
# Skipped (77) without valgrind or in a sanitizer build. The suites are
# $CBD_VALGRIND_TESTS, by default the ops, lifecycle and bulkhead ones;
# tests/cbd-valgrind-fleet.sh runs the fleet and dashboard ones (two
# scripts: make -j runs the two halves side by side).
set -u

: "${CBD_BINARY:?CBD_BINARY must name the cbd to test}"
builddir=${BUILDDIR:-.}
command -v valgrind >/dev/null 2>&1 || { echo "valgrind not installed"; exit 77; }
if grep -q 'fsanitize' "$builddir/Makefile" 2>/dev/null; then
	echo "sanitizer build: valgrind cannot run it"
	exit 77
fi

work=$(mktemp -d /tmp/cbd-valgrind-XXXXXX)
trap 'rm -rf "$work"' EXIT INT TERM
cat >"$work/cbd" <<WRAPPER
#!/bin/sh
exec valgrind -q --leak-check=full --show-leak-kinds=definite,indirect,possible \
	--errors-for-leak-kinds=definite,indirect,possible --error-exitcode=99 \
	--log-file="$work/vg.%p.log" "$CBD_BINARY" "\$@"
WRAPPER
chmod +x "$work/cbd"

status=0
passed=0
failed=0
for t in ${CBD_VALGRIND_TESTS:-cbd-ops-test cbd-lifecycle-test cbd-bulkhead-test}; do
	echo "== $t with cbd under valgrind"
	# CBD_TEST_BURST_LINES: cbd-fleet-test's noreply burst, smaller (its
	# count stays exact; valgrind makes each line cost cbd far more).
	CBD_BINARY="$work/cbd" CBD_HARNESS_TIMEOUT_MS=60000 CK_DEFAULT_TIMEOUT=300 \
		CBD_TEST_BURST_LINES=1000 "$builddir/tests/$t" >"$work/$t.out" 2>&1 || {
		status=1
		grep -v '^\(info\|debug\|warning\): ' "$work/$t.out" | tail -n 20
	}
	line=$(grep -E '^[0-9]+%: Checks' "$work/$t.out" | tail -n 1)
	echo "$line"
	checks=$(echo "$line" | sed -nE 's/.*Checks: ([0-9]+), Failures: ([0-9]+), Errors: ([0-9]+).*/\1 \2 \3/p')
	if [ -n "$checks" ]; then
		set -- $checks
		passed=$((passed + $1 - $2 - $3))
		failed=$((failed + $2 + $3))
	else
		failed=$((failed + 1))
	fi
done
# With -q, valgrind writes a log only when it has something to say.
for log in "$work"/vg.*.log; do
	[ -s "$log" ] || continue
	echo "== $log"
	cat "$log"
	status=1
	failed=$((failed + 1))
done
[ $status -eq 0 ] && echo "valgrind: no errors, no leaks"
# The closing line bootstrap's summary reads.
echo "${CBD_VALGRIND_NAME:-cbd-valgrind}: $passed passed, $failed failed"
exit $status
