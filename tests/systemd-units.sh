#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# systemd-units.sh — the unit files are valid and hardened: systemd-analyze
# verify must print nothing, and the service's exposure score must stay low.
# Run by make check (units generated in the build tree).
set -u
builddir=${BUILDDIR:-.}
passed=0
failed=0
pass() { passed=$((passed + 1)); echo "ok: $1"; }
fail() { failed=$((failed + 1)); echo "FAILED: $1"; }

if ! command -v systemd-analyze >/dev/null 2>&1; then
	echo "systemd-analyze not installed: skipping"
	exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
# ExecStart must name an executable that exists: point it at the built cbd.
sed "s|^ExecStart=[^ ]*|ExecStart=${CBD_BINARY:-/bin/true}|" \
	"$builddir/systemd/cbd.service" > "$tmp/cbd.service"
cp "$builddir/systemd/cbd.socket" "$tmp/cbd.socket"

out=$(systemd-analyze verify --man=no "$tmp/cbd.socket" "$tmp/cbd.service" 2>&1)
if [ $? -eq 0 ] && [ -z "$out" ]; then pass "systemd-analyze verify"; else
	fail "systemd-analyze verify: $out"; fi

for key in Type=notify ExecReload= Restart=on-failure RuntimeDirectory=cbd StateDirectory=cbd \
	NoNewPrivileges=yes ProtectSystem=strict ProtectHome=yes PrivateTmp=yes \
	'CapabilityBoundingSet=$' RestrictAddressFamilies=AF_UNIX SystemCallFilter=; do
	if grep -q "^$key" "$tmp/cbd.service"; then pass "service has $key"; else
		fail "service lacks $key"; fi
done
if grep -q '^ListenStream=/run/cbd/cbd.sock$' "$tmp/cbd.socket"; then
	pass "socket listens on /run/cbd/cbd.sock"; else fail "socket path"; fi

# Exposure 2.0 or less ("OK") on systemd's 0-10 scale.
if systemd-analyze security --offline=yes --threshold=20 "$tmp/cbd.service" >/dev/null 2>&1; then
	pass "security exposure <= 2.0"
else
	fail "security exposure: $(systemd-analyze security --offline=yes "$tmp/cbd.service" 2>&1 | tail -n 1)"
fi

# README states the score: it must be the one systemd-analyze gives (the
# scoring changes between systemd versions: checked on Debian 12's 252).
score=$(systemd-analyze security --offline=yes "$tmp/cbd.service" 2>/dev/null |
	sed -n 's/.*Overall exposure level for cbd.service: \([0-9.]*\).*/\1/p')
readme=$(tr '\n' ' ' <"${CBD_SRCDIR:?}/README.md" |
	sed -n 's/.*(exposure *\([0-9.]*\) on `systemd-analyze security`.*/\1/p')
case "$(systemd-analyze --version | head -n 1)" in
"systemd 252 "*)
	[ -n "$score" ] && [ "$score" = "$readme" ] &&
		pass "README's exposure $readme is the unit's" ||
		fail "README says exposure $readme, systemd-analyze security says $score" ;;
*) echo "not systemd 252: README's exposure ($readme; here $score) not compared" ;;
esac

echo "systemd-units: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
