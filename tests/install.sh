#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# install.sh — `make install DESTDIR=...` lays out what an operator and a C
# developer need, and the examples build against the installed tree with
# pkg-config alone. Run by make check from the build tree.
set -u
passed=0
failed=0
pass() { passed=$((passed + 1)); echo "ok: $1"; }
fail() { failed=$((failed + 1)); echo "FAILED: $1"; }

builddir=${BUILDDIR:?}
srcdir=${CBD_SRCDIR:?}
dest=$(mktemp -d /tmp/cbd-install.XXXXXX)
trap 'rm -rf "$dest"' EXIT INT TERM
prefix=${PREFIX:?}
sbindir=${SBINDIR:?}
sysconfdir=${SYSCONFDIR:?}
unitdir=${UNITDIR:?}
sysusersdir=${SYSUSERSDIR:?}
docdir=${DOCDIR:?}
datadir=${DATADIR:?}
# Debian's layout (libdir with the multiarch triplet, sysconfdir /etc) is
# not the prefix's: each directory as configure set it.
bindir=${BINDIR:-$prefix/bin}
libdir=${LIBDIR:-$prefix/lib}
includedir=${INCLUDEDIR:-$prefix/include}
mandir=${MANDIR:-$prefix/share/man}

if ! make -C "$builddir" install DESTDIR="$dest" >"$dest.log" 2>&1; then
	fail "make install: $(tail -n 20 "$dest.log")"
	rm -f "$dest.log"
	echo "install: $passed passed, $failed failed"
	exit 1
fi
rm -f "$dest.log"
pass "make install DESTDIR=... (prefix $prefix)"

for f in "$sbindir/cbd" "$bindir/cbctl" "$includedir/cbclient.h" "$libdir/pkgconfig/cbclient.pc" \
	"$libdir/libcbclient.so" "$libdir/libcbclient.a" \
	"$mandir/man8/cbd.8" "$mandir/man5/cbd.conf.5" "$mandir/man1/cbctl.1"; do
	if [ -e "$dest$f" ]; then pass "installed $f"; else fail "missing $f"; fi
done
# libcbclient never exits, aborts or prints (uthash's default on a failed
# add is exit(): every table in it reports out-of-memory instead).
if command -v nm >/dev/null 2>&1; then
	calls=$(nm -D --undefined-only "$dest$libdir/libcbclient.so" 2>/dev/null |
		awk '{print $NF}' | sed 's/@.*//' |
		grep -xE 'exit|_exit|_Exit|abort|__assert_fail|printf|puts|putchar|perror|fprintf|vfprintf|fputs|fwrite' |
		tr '\n' ' ')
	if [ -z "$calls" ]; then
		pass "libcbclient.so calls no exit, abort or stdio printing"
	else
		fail "libcbclient.so calls $calls"
	fi
fi
# Units and sysusers.d where systemd looks (pkg-config systemd), the
# protocol where client authors look.
for f in "$unitdir/cbd.service" "$unitdir/cbd.socket" "$sysusersdir/cbd.conf" \
	"$docdir/PROTOCOL.md" "$docdir/LICENSE" "$docdir/examples/grafana-cbd.json" \
	"$docdir/examples/cbd-alerts.yml" \
	"$docdir/examples/cbd-metrics.service" "$docdir/examples/cbd-metrics.timer" \
	"$datadir/bash-completion/completions/cbctl" "$datadir/zsh/site-functions/_cbctl"; do
	if [ -e "$dest$f" ]; then pass "installed $f"; else fail "missing $f"; fi
done
if grep -q '\.\./shared\|protocol-v[12]\.md' "$dest$docdir/PROTOCOL.md" 2>/dev/null; then
	fail "the installed PROTOCOL.md points at files outside the repository"
else
	pass "the installed PROTOCOL.md stands on its own"
fi
[ -f "$dest$sysconfdir/cbd/cbd.conf" ] && pass "installed $sysconfdir/cbd/cbd.conf" ||
	fail "missing $sysconfdir/cbd/cbd.conf"
for f in "$sbindir/cbd" "$bindir/cbctl"; do
	[ -x "$dest$f" ] && pass "$f is executable" || fail "$f is not executable"
done
if grep -q "^ExecStart=$sbindir/cbd -c $sysconfdir/cbd/cbd.conf\$" \
	"$dest$unitdir/cbd.service"; then
	pass "unit names the installed cbd and config"
else
	fail "unit ExecStart: $(grep ExecStart "$dest$unitdir/cbd.service")"
fi
if "$dest$sbindir/cbd" -t -c "$dest$sysconfdir/cbd/cbd.conf" >/dev/null 2>&1; then
	pass "installed example config passes cbd -t"
else
	fail "cbd -t on the installed config: $("$dest$sbindir/cbd" -t -c "$dest$sysconfdir/cbd/cbd.conf" 2>&1)"
fi

# Build every example against the installed tree, pkg-config only.
export PKG_CONFIG_PATH="$dest$libdir/pkgconfig"
export PKG_CONFIG_SYSROOT_DIR="$dest"
flags=$(pkg-config --cflags --libs cbclient 2>&1)
[ $? -eq 0 ] && pass "pkg-config --cflags --libs cbclient" || fail "pkg-config: $flags"
n=0
for example in "$srcdir"/client/examples/*.c; do
	[ -f "$example" ] || continue
	n=$((n + 1))
	out="$dest/$(basename "$example" .c)"
	# An example that needs another library says so in its header
	# (" * pkg-config: MODULE..."): the system's, found without the
	# installed tree's sysroot; skipped when missing.
	extra=$(sed -n 's/^ \* pkg-config: //p' "$example")
	extra_flags=
	if [ -n "$extra" ]; then
		# shellcheck disable=SC2086
		if ! extra_flags=$(PKG_CONFIG_SYSROOT_DIR='' PKG_CONFIG_PATH='' \
			pkg-config --cflags --libs $extra 2>/dev/null); then
			echo "skip: $(basename "$example") needs $extra"
			continue
		fi
	fi
	# A sanitizer build's library needs its runtime in the program too.
	# shellcheck disable=SC2086
	if ${CC:-cc} ${SAN_CFLAGS:-} -o "$out" "$example" $flags $extra_flags 2>"$dest/cc.log"; then
		pass "$(basename "$example") builds against the installed library"
	else
		fail "$(basename "$example"): $(cat "$dest/cc.log")"
	fi
	if LD_LIBRARY_PATH="$dest$libdir" "$out" --help >/dev/null 2>&1; then
		pass "$(basename "$example" .c) runs with the installed library"
	else
		fail "$(basename "$example" .c) --help failed"
	fi
done
[ "$n" -gt 0 ] && pass "$n example(s) found" || fail "no examples in client/examples"

echo "install: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
