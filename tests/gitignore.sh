#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# gitignore.sh — an in-tree build (./configure && make in the source tree)
# leaves `git status` clean: every program and generated file the build
# makes is ignored by the checkout's .gitignore. Skipped (77) outside a
# git checkout (make distcheck builds from a tarball).
set -u
srcdir=${CBD_SRCDIR:?}
builddir=${BUILDDIR:-.}
passed=0
failed=0
command -v git >/dev/null 2>&1 && git -C "$srcdir" rev-parse --git-dir >/dev/null 2>&1 || {
	echo "not a git checkout: skipping"
	exit 77
}
for f in $(MAKEFLAGS= make -s --no-print-directory -C "$builddir" print-generated) config.status \
	config.log Makefile \
	src/.libs/libcbcore.a tests/test-suite.log tests/cbd-ops-test.log \
	tests/cbd-ops-test.trs; do
	if git -C "$srcdir" check-ignore -q --no-index "$f"; then
		passed=$((passed + 1))
	else
		failed=$((failed + 1))
		echo "FAILED: $f is not ignored by .gitignore"
	fi
done
echo "gitignore: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
