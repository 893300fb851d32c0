#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# man.sh — the manual pages render cleanly: groff (through preconv, as
# man does) warns about nothing with -ww, and no alternating-font macro
# (.BR, .IR, .RB, ...) runs two words together (".IR file ), or use"
# renders "),oruse": those macros put no space between their arguments;
# a comma, semicolon or ")" glued to the next word is the tell).
# Run by make check; skips without groff or python3.
set -u
src=${CBD_SRCDIR:?}
passed=0
failed=0
pass() { passed=$((passed + 1)); echo "ok: $1"; }
fail() { failed=$((failed + 1)); echo "FAILED: $1"; }

for tool in groff preconv python3; do
	command -v "$tool" >/dev/null 2>&1 || { echo "$tool not installed: skipping"; exit 77; }
done

for page in src/cbd.8 conf/cbd.conf.5 client/cbctl.1; do
	out=$(preconv "$src/$page" | groff -man -Tutf8 -ww -z 2>&1)
	[ -z "$out" ] && pass "$page: groff -ww warns about nothing" || fail "$page: $out"
	out=$(python3 - "$src/$page" <<'PY'
import re, shlex, sys
ALTERNATING = {".BR", ".RB", ".IR", ".RI", ".BI", ".IB"}
for n, line in enumerate(open(sys.argv[1], encoding="utf-8"), 1):
    words = line.split(None, 1)
    if not words or words[0] not in ALTERNATING or len(words) < 2:
        continue
    try:
        args = shlex.split(words[1].replace('\\"', "\x00"), posix=True)
    except ValueError:
        continue
    for a, b in zip(args, args[1:]):
        # A comma, semicolon or closing parenthesis, then a word with no
        # space between ("(" + word, "host" + ":" + "port" or PREFIX +
        # "events" can be meant; "), or" never is).
        if re.match(r"\w", b) and re.search(r"[,;)]$", a):
            print(f"line {n}: {a!r} and {b!r} run together: {line.strip()}")
PY
)
	[ -z "$out" ] && pass "$page: no words run together" || fail "$page: $out"
done

echo "man: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
