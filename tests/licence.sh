#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# licence.sh — the whole tree is Apache-2.0 and says so: LICENSE at the top
# is the Apache License 2.0, every source file names it in an SPDX line
# near its top, each client package carries the same LICENSE and declares
# the licence in its own metadata, and make install puts LICENSE in the
# doc directory. Run by make check (from the checkout or the dist tarball).
set -u
passed=0
failed=0
pass() { passed=$((passed + 1)); echo "ok: $1"; }
fail() { failed=$((failed + 1)); echo "FAILED: $1"; }

src=${CBD_SRCDIR:?}
spdx='SPDX-License-Identifier: Apache-2.0'

if grep -q 'Apache License' "$src/LICENSE" 2>/dev/null &&
	grep -q 'Version 2.0, January 2004' "$src/LICENSE"; then
	pass "LICENSE is the Apache License 2.0"
else
	fail "LICENSE is missing or not the Apache License 2.0"
fi

# Each client package ships the very same text (npm pack, sdist, wheel and
# Go modules take the LICENSE of the package's own directory).
for dir in client/python client/node client/go; do
	if cmp -s "$src/LICENSE" "$src/$dir/LICENSE"; then
		pass "$dir/LICENSE equals LICENSE"
	else
		fail "$dir/LICENSE is missing or differs from LICENSE"
	fi
done

# Source files: code, build files, scripts, units, man pages. Data the tests
# replay (fuzz corpus, protocol examples, JSON) and documents are not.
missing=""
count=0
for f in $(cd "$src" && find . -type f | sort); do
	case "$f" in
	./.git/* | */_build/* | ./build/* | ./build-*/* | */node_modules/* | ./autom4te.cache/*) continue ;;
	./tests/fuzz/corpus/* | ./proto/examples/*) continue ;;
	# Made by autotools in the tree (an in-tree build or the dist tarball).
	./configure | ./config.* | *Makefile.in | ./aclocal.m4 | ./build-aux/* | ./m4/*) continue ;;
	*.[ch] | *.py | *.js | *.ts | *.go | *.sh | *.mk | *.lua | *.am | *.ac | *.[158] | *.in) ;;
	*/go.mod | */pyproject.toml | ./bootstrap) ;;
	*) continue ;;
	esac
	# Made by the build from a file that has the line (fleet.lua).
	[ "$f" = ./src/fleet-script.c ] && continue
	count=$((count + 1))
	head -n 5 "$src/$f" | grep -q "$spdx" || missing="$missing ${f#./}"
done
if [ "$count" -lt 100 ]; then
	fail "only $count source files found under $src"
elif [ -z "$missing" ]; then
	pass "all $count source files carry '$spdx' in their first 5 lines"
else
	fail "no SPDX line in:$missing"
fi

grep -q '^license = {text = "Apache-2.0"}' "$src/client/python/pyproject.toml" &&
	pass "pyproject.toml declares Apache-2.0" ||
	fail "client/python/pyproject.toml has no license = {text = \"Apache-2.0\"}"
grep -q '"license": "Apache-2.0"' "$src/client/node/package.json" &&
	pass "package.json declares Apache-2.0" ||
	fail "client/node/package.json has no \"license\": \"Apache-2.0\""

echo "licence: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
