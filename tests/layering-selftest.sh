#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# layering-selftest.sh — the test of the layering test: on a copy of src/
# and client/, tests/layering.py passes as the tree is, and fails, naming
# the file and the include, when a lower file includes a higher header, on
# a cycle, on a sideways include where the layer does not allow one, and on
# a file no layer names; an `allow` line lets one include through, and a
# stale one fails.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

fresh() {
	rm -rf "$tmp/tree"
	mkdir -p "$tmp/tree"
	(cd "$top" && find src client -path client/python -prune -o -path client/node -prune \
	    -o -path client/go -prune -o \( -name '*.[ch]' -o -name LAYERS \) -print) |
	    while read -r f; do
		mkdir -p "$tmp/tree/$(dirname "$f")"
		cp "$top/$f" "$tmp/tree/$f"
	    done
}

# expect_fail WHAT TEXT: the checker fails on the copy and says TEXT.
expect_fail() {
	if python3 "$top/tests/layering.py" "$tmp/tree" >"$tmp/out" 2>&1; then
		echo "FAIL: $1: the check passed"
		cat "$tmp/out"
		exit 1
	fi
	if ! grep -qF -- "$2" "$tmp/out"; then
		echo "FAIL: $1: expected the message: $2"
		cat "$tmp/out"
		exit 1
	fi
	echo "ok: $1"
}

expect_pass() {
	if ! python3 "$top/tests/layering.py" "$tmp/tree" >"$tmp/out" 2>&1; then
		echo "FAIL: $1"
		cat "$tmp/out"
		exit 1
	fi
	echo "ok: $1"
}

fresh
expect_pass "the tree as it is"

# A lower file includes a higher header: the core names the listener.
fresh
echo '#include "server.h"' >>"$tmp/tree/src/core/breaker.h"
line=$(wc -l <"$tmp/tree/src/core/breaker.h")
expect_fail "core includes server.h" \
    "src/core/breaker.h:$line: #include \"server.h\": goes up from layer core to layer process"
expect_fail "core includes server.h (the cycle it makes)" "include cycle"

# The connection includes the op table: up, and a cycle through op.h.
fresh
sed -i 's/^#include "server-client.h"$/#include "server-client.h"\n#include "op.h"/' \
    "$tmp/tree/src/server-client.c"
expect_fail "server-client.c includes op.h" \
    "src/server-client.c:"
expect_fail "server-client.c includes op.h (named)" \
    '#include "op.h": goes up from layer services to layer op-table'

# A cycle inside a layer that allows sideways includes.
fresh
echo '#include "breaker.h"' >>"$tmp/tree/src/core/window.h"
expect_fail "window.h <-> breaker.h" "include cycle src/core/breaker -> src/core/window -> src/core/breaker"

# Sideways where the layer does not allow it: one op room includes another.
fresh
echo '#include "op-circuit.h"' >>"$tmp/tree/src/op-list.c"
expect_fail "op-list.c includes op-circuit.h" \
    '#include "op-circuit.h": sideways within layer ops'

# ... unless an exception says why; a stale exception fails.
echo 'allow src/op-list.c op-circuit.h # the self-test' >>"$tmp/tree/src/LAYERS"
expect_pass "an allow line lets it through"
fresh
echo 'allow src/op-list.c op-circuit.h # the self-test' >>"$tmp/tree/src/LAYERS"
expect_fail "a stale allow line" "no such include any more"

# A file no layer names.
fresh
printf '/* SPDX-License-Identifier: Apache-2.0 */\n' >"$tmp/tree/src/new-room.c"
expect_fail "a file in no layer" "src/new-room.c: no layer"

# libcbclient may not include the daemon's headers.
fresh
echo '#include "log.h"' >>"$tmp/tree/client/retry.c"
expect_fail "libcbclient includes log.h" \
    '#include "log.h": reaches from layer client-lib to layer daemon-base'
# Calls: object files where the connection calls the op table, which calls
# the connection back (a call up, and a cycle of calls).
fresh
mkdir -p "$tmp/build/src"
printf 'void op_dispatch(void);\nvoid server_client_reply(void) {}\nvoid f(void) { op_dispatch(); }\n' \
    >"$tmp/conn.c"
printf 'void server_client_reply(void);\nvoid op_dispatch(void) { server_client_reply(); }\n' \
    >"$tmp/op.c"
${CC:-cc} -c -o "$tmp/build/src/libcbdaemon_la-server-client.o" "$tmp/conn.c"
${CC:-cc} -c -o "$tmp/build/src/libcbdaemon_la-op.o" "$tmp/op.c"
if python3 "$top/tests/layering.py" "$tmp/tree" "$tmp/build" >"$tmp/out" 2>&1; then
	echo "FAIL: calls: the check passed"
	cat "$tmp/out"
	exit 1
fi
for text in "src/server-client.c calls op_dispatch (src/op.c): from layer services to layer op-table" \
    "call cycle src/op -> src/server-client -> src/op"; do
	if ! grep -qF -- "$text" "$tmp/out"; then
		echo "FAIL: calls: expected the message: $text"
		cat "$tmp/out"
		exit 1
	fi
done
echo "ok: a call up and a cycle of calls"
echo "layering-selftest: all cases behave"
