#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# tests/oom-valgrind.sh — the malloc failure sweep (tests/cbd-oom-test)
# under valgrind: every run, each in its own child, must end without a
# memory error or a leak. Valgrind's leak check per child is slow, so only
# every $CBD_OOM_STEP-th allocation (default 10) is failed here; the
# sanitizer build's make check runs every N with LeakSanitizer.
# Skipped (77) without valgrind or in a sanitizer build.
set -u

builddir=${BUILDDIR:-.}
command -v valgrind >/dev/null 2>&1 || { echo "valgrind not installed"; exit 77; }
if grep -q 'fsanitize' "$builddir/Makefile" 2>/dev/null; then
	echo "sanitizer build: valgrind cannot run it"
	exit 77
fi
CBD_OOM_STEP=${CBD_OOM_STEP:-10} CK_DEFAULT_TIMEOUT=600 \
	valgrind -q --leak-check=full --show-leak-kinds=definite,indirect,possible \
	--errors-for-leak-kinds=definite,indirect,possible --error-exitcode=99 \
	"$builddir/tests/cbd-oom-test"
