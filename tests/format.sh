#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# format.sh — every C file is as .clang-format says (STYLE.md habit 11),
# the ones the build generates (src/fleet-script.c) included: an in-tree
# build puts them among the sources, so an out-of-tree one checks them in
# the build tree too. The formatter is pinned to clang-format 14 (Debian
# 12); another version may format differently, so it skips rather than
# fail on one.
set -u
srcdir=${CBD_SRCDIR:?}
builddir=${BUILDDIR:-$srcdir}
command -v clang-format >/dev/null 2>&1 || { echo "clang-format not installed: skipping"; exit 77; }
case "$(clang-format --version)" in
*" 14."*) ;;
*) echo "clang-format is not version 14: skipping"; exit 77 ;;
esac
passed=0
failed=0
# C files of the build tree that are not sources: generated.
generated=
if [ "$(cd "$builddir" && pwd)" != "$(cd "$srcdir" && pwd)" ]; then
	for f in "$builddir"/src/*.[ch] "$builddir"/client/*.[ch]; do
		[ -f "$f" ] && [ ! -f "$srcdir/${f#"$builddir"/}" ] && generated="$generated $f"
	done
fi
for f in "$srcdir"/src/*.[ch] "$srcdir"/client/*.[ch] "$srcdir"/client/examples/*.c \
	"$srcdir"/tests/*.[ch] "$srcdir"/tests/fuzz/*.[ch] $generated; do
	if clang-format --style=file --dry-run -Werror "$f" >/dev/null 2>&1; then
		passed=$((passed + 1))
	else
		failed=$((failed + 1))
		echo "FAILED: ${f#"$srcdir"/} is not formatted (run: clang-format -i ${f#"$srcdir"/})"
	fi
done
echo "format: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
