#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# debian.sh — `dpkg-buildpackage -us -uc -b` builds cbd, libcbclient7 and
# libcbclient-dev from a copy of the source tree (the checkout's files, or
# the dist tarball's: srcdir may be read-only); the packages hold what they
# should (dpkg-deb -c), the config is a conffile, the maintainer scripts
# create the cbd user (sysusers), enable and start cbd.socket (not
# cbd.service) and purge what they should (dpkg-deb -I / -e); lintian
# reports no error. As root, the packages are then installed, removed and
# purged in a throwaway root: an overlay of / (a tmpfs holds every change)
# in a mount namespace of its own, so nothing reaches the real host, which
# the test checks by looking at it before and after.
#
# Built with DEB_BUILD_OPTIONS="nocheck parallel=2" (make check is what
# runs the suite). Costs one package build (about a minute and a half on 2
# cores), so it runs once per `./bootstrap test`: it is a slow test, left
# out when configure was given --disable-slow-tests (the sanitizer pass
# and make distcheck are), it skips (77) in a sanitizer build (SAN_CFLAGS
# set) and when dpkg-buildpackage is missing (./bootstrap installs it).
set -u
# chroot, mount and dpkg's helpers live in sbin.
PATH=$PATH:/usr/sbin:/sbin
export PATH

# The throwaway root, run by this script itself in a new mount namespace
# (unshare --mount): $2 is the work directory holding the .debs. Prints
# ok:/FAILED: lines the outer run counts.
if [ "${1:-}" = --throwaway-root ]; then
	work=$2
	ok() { echo "ok: $1"; }
	bad() { echo "FAILED: $1"; }
	ov=$work/ov
	root=$ov/root
	mkdir -p "$ov"
	# Upper and work layers on a tmpfs: they vanish with the namespace,
	# and do not overlap the lower layer (/) as far as overlayfs checks.
	mount -t tmpfs -o size=512m tmpfs "$ov" || { bad "mount a tmpfs"; exit 1; }
	mkdir -p "$ov/upper" "$ov/work" "$root"
	if ! mount -t overlay overlay -o "lowerdir=/,upperdir=$ov/upper,workdir=$ov/work" \
		"$root" 2>"$ov/mount.err"; then
		echo "NOT CHECKED: no overlay of / here ($(cat "$ov/mount.err")): not installing"
		exit 0
	fi
	# Only the root file system is in the overlay: /run and /tmp start empty
	# (no /run/systemd/system: the scripts start no unit), /dev and /proc
	# are the host's.
	mount -t tmpfs tmpfs "$root/run"
	mount -t tmpfs tmpfs "$root/tmp"
	mount --bind /dev "$root/dev"
	mount -t proc proc "$root/proc" 2>/dev/null || true
	# Start nothing, whatever the scripts think (invoke-rc.d's convention).
	printf '#!/bin/sh\nexit 101\n' > "$root/usr/sbin/policy-rc.d"
	chmod 755 "$root/usr/sbin/policy-rc.d"
	# A host that has a cbd user already would prove nothing: the throwaway
	# root starts without one.
	for f in passwd group shadow gshadow; do
		[ -f "$root/etc/$f" ] && sed -i '/^cbd:/d' "$root/etc/$f"
	done
	pkgs=""
	for d in "$work"/*.deb; do
		case $d in *-dbgsym_*) continue ;; esac
		cp "$d" "$root/tmp/"
		pkgs="$pkgs $(dpkg-deb -f "$d" Package)"
	done
	cp "$work/cbd/client/examples/flaky.c" "$root/tmp/"
	# dpkg wants ldconfig and start-stop-daemon in PATH: the sbin dirs too.
	rt() { chroot "$root" env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$@"; }

	if rt sh -c 'dpkg -i /tmp/*.deb' >"$ov/install.log" 2>&1; then
		ok "dpkg -i$pkgs"
	else
		bad "dpkg -i: $(tail -n 20 "$ov/install.log")"
		exit 1
	fi
	rt getent passwd cbd >/dev/null && ok "the cbd user exists" || bad "no cbd user"
	rt getent group cbd >/dev/null && ok "the cbd group exists" || bad "no cbd group"
	[ "$(rt id -gn cbd 2>/dev/null)" = cbd ] && ok "cbd's group is cbd" ||
		bad "cbd's group: $(rt id -gn cbd 2>&1)"
	[ -f "$root/etc/cbd/cbd.conf" ] && ok "/etc/cbd/cbd.conf installed" || bad "no /etc/cbd/cbd.conf"
	rt dpkg-query -W -f='${Conffiles}\n' cbd | grep -q '^ /etc/cbd/cbd.conf ' &&
		ok "dpkg lists /etc/cbd/cbd.conf as a conffile" || bad "cbd.conf is not a conffile"
	wants=$root/etc/systemd/system
	[ -L "$wants/sockets.target.wants/cbd.socket" ] && ok "cbd.socket enabled (sockets.target.wants)" ||
		bad "cbd.socket not enabled"
	[ ! -e "$wants/multi-user.target.wants/cbd.service" ] &&
		ok "cbd.service not enabled (socket activation starts it)" || bad "cbd.service enabled"
	rt cbd -t -c /etc/cbd/cbd.conf >/dev/null 2>&1 && ok "cbd -t accepts the installed config" ||
		bad "cbd -t: $(rt cbd -t -c /etc/cbd/cbd.conf 2>&1)"
	rt cbctl --help >/dev/null 2>&1 && ok "cbctl runs" || bad "cbctl --help failed"
	# The -dev package: an example builds with pkg-config alone and runs
	# with the shared library from libcbclient7.
	if rt sh -c 'cc -o /tmp/flaky /tmp/flaky.c $(pkg-config --cflags --libs cbclient)' \
		>"$ov/cc.log" 2>&1 && rt /tmp/flaky --help >/dev/null 2>&1; then
		ok "an example builds against libcbclient-dev and runs"
	else
		bad "example against the packages: $(cat "$ov/cc.log")"
	fi
	rt ldd /tmp/flaky 2>/dev/null | grep -q 'libcbclient.so.[0-9]* => /\(usr/\)\{0,1\}lib/' &&
		ok "the example links the packaged libcbclient.so" || bad "ldd: $(rt ldd /tmp/flaky 2>&1)"

	# Installed again: the upgrade path of the scripts (postinst configure
	# with the old version) runs clean and keeps the user and the config.
	uid=$(rt id -u cbd)
	echo '# local edit' >> "$root/etc/cbd/cbd.conf"
	if rt sh -c 'dpkg -i --force-confold /tmp/*.deb' >"$ov/reinstall.log" 2>&1; then
		ok "dpkg -i again (upgrade path)"
	else
		bad "dpkg -i again: $(tail -n 20 "$ov/reinstall.log")"
	fi
	[ "$(rt id -u cbd)" = "$uid" ] && ok "upgrade keeps the cbd uid" || bad "upgrade changed cbd's uid"
	grep -q '^# local edit$' "$root/etc/cbd/cbd.conf" && ok "upgrade keeps the edited conffile" ||
		bad "upgrade lost the edit to /etc/cbd/cbd.conf"
	[ -L "$wants/sockets.target.wants/cbd.socket" ] && ok "upgrade keeps cbd.socket enabled" ||
		bad "upgrade disabled cbd.socket"

	# What cbd and systemd would have made by now: state and the socket.
	mkdir -p "$root/var/lib/cbd" "$root/run/cbd"
	echo '{}' > "$root/var/lib/cbd/state.json"
	rt chown -R cbd:cbd /var/lib/cbd
	: > "$root/run/cbd/cbd.sock"
	# shellcheck disable=SC2086
	if rt dpkg -r $pkgs >"$ov/remove.log" 2>&1; then
		ok "dpkg -r"
	else
		bad "dpkg -r: $(tail -n 20 "$ov/remove.log")"
	fi
	[ ! -e "$root/usr/sbin/cbd" ] && ok "remove: /usr/sbin/cbd gone" || bad "remove left /usr/sbin/cbd"
	[ -f "$root/etc/cbd/cbd.conf" ] && ok "remove: the conffile stays" || bad "remove took cbd.conf"
	# shellcheck disable=SC2086
	if rt dpkg -P $pkgs >"$ov/purge.log" 2>&1; then
		ok "dpkg -P"
	else
		bad "dpkg -P: $(tail -n 20 "$ov/purge.log")"
	fi
	[ ! -e "$root/etc/cbd" ] && ok "purge: /etc/cbd gone" || bad "purge left $(ls -A "$root/etc/cbd")"
	[ ! -e "$wants/sockets.target.wants/cbd.socket" ] && ok "purge: cbd.socket's enablement gone" ||
		bad "purge left sockets.target.wants/cbd.socket"
	[ ! -e "$root/run/cbd" ] && ok "purge: /run/cbd gone" || bad "purge left /run/cbd"
	[ -f "$root/var/lib/cbd/state.json" ] && ok "purge: /var/lib/cbd/state.json kept" ||
		bad "purge removed /var/lib/cbd"
	rt getent passwd cbd >/dev/null && ok "purge: the cbd user kept (it owns the kept state)" ||
		bad "purge removed the cbd user"
	[ -z "$(rt dpkg-query -W -f='${db:Status-Status}' cbd 2>/dev/null | grep -v not-installed)" ] &&
		ok "purge: dpkg forgets cbd" || bad "cbd still known to dpkg after purge"
	# The changes were the overlay's: its upper layer holds them.
	grep -q '^cbd:' "$ov/upper/etc/passwd" && ok "the overlay's own /etc/passwd got the user" ||
		bad "the user is not in the overlay's upper layer"
	exit 0
fi

passed=0
failed=0
pass() { passed=$((passed + 1)); echo "ok: $1"; }
fail() { failed=$((failed + 1)); echo "FAILED: $1"; }
srcdir=${CBD_SRCDIR:?}

if ! command -v dpkg-buildpackage >/dev/null 2>&1; then
	echo "dpkg-buildpackage not installed (dpkg-dev; ./bootstrap installs it): skipping"
	exit 77
fi
if [ -n "${SAN_CFLAGS:-}" ]; then
	echo "sanitizer build: skipping (the plain build's make check builds the packages)"
	exit 77
fi

work=$(mktemp -d /tmp/cbd-debian.XXXXXX)
trap 'rm -rf "$work"' EXIT INT TERM
start=$(date +%s)

# debian/changelog's version is configure.ac's (a native package).
ver=$(sed -n 's/^AC_INIT(\[cbd\], \[\([^]]*\)\].*/\1/p' "$srcdir/configure.ac")
dver=$(dpkg-parsechangelog -l "$srcdir/debian/changelog" -S Version 2>/dev/null)
[ -n "$ver" ] && [ "$ver" = "$dver" ] && pass "debian/changelog is version $ver, as configure.ac" ||
	fail "debian/changelog version '$dver', configure.ac '$ver'"

# A copy of the tree: the checkout's files (tracked or new, not ignored:
# no build output), else everything but build directories (dist tarball).
mkdir "$work/cbd"
if [ -d "$srcdir/.git" ] || [ -f "$srcdir/.git" ]; then
	(cd "$srcdir" && git ls-files -co --exclude-standard -z |
		xargs -0 sh -c 'for f; do [ -e "$f" ] && printf "%s\0" "$f"; done' sh |
		tar -c --null -T - -f -) | tar -x -C "$work/cbd"
else
	(cd "$srcdir" && tar -c --exclude=./.git --exclude='./build*' --exclude=./_build \
		--exclude=./_inst --exclude=node_modules --exclude=autom4te.cache -f - .) |
		tar -x -C "$work/cbd"
fi
chmod -R u+w "$work/cbd"
[ -x "$work/cbd/debian/rules" ] && pass "copied the source tree" || fail "no debian/rules in the copy"

# make check's make variables are not the package build's.
if (cd "$work/cbd" && unset MAKEFLAGS MFLAGS MAKELEVEL MAKEOVERRIDES &&
	DEB_BUILD_OPTIONS="nocheck parallel=2" nice dpkg-buildpackage -us -uc -b) \
	>"$work/build.log" 2>&1; then
	pass "dpkg-buildpackage -us -uc -b ($(($(date +%s) - start)) s)"
else
	fail "dpkg-buildpackage: $(tail -n 40 "$work/build.log")"
	echo "debian: $passed passed, $failed failed"
	exit 1
fi
cbd=$(ls "$work"/cbd_"$dver"_*.deb)
lib=$(ls "$work"/libcbclient[0-9]*_"$dver"_*.deb | grep -v dbgsym)
dev=$(ls "$work"/libcbclient-dev_"$dver"_*.deb)
changes=$(ls "$work"/cbd_"$dver"_*.changes)

# Contents.
dpkg-deb -c "$cbd" | awk '{print $6}' | sed 's|^\./|/|' > "$work/cbd.list"
for f in /usr/sbin/cbd /usr/bin/cbctl /etc/cbd/cbd.conf /lib/systemd/system/cbd.service \
	/lib/systemd/system/cbd.socket /usr/lib/sysusers.d/cbd.conf \
	/usr/share/man/man8/cbd.8.gz /usr/share/man/man5/cbd.conf.5.gz /usr/share/man/man1/cbctl.1.gz \
	/usr/share/bash-completion/completions/cbctl /usr/share/zsh/vendor-completions/_cbctl \
	/usr/share/doc/cbd/PROTOCOL.md.gz /usr/share/doc/cbd/copyright \
	/usr/share/doc/cbd/examples/cbd.conf /usr/share/doc/cbd/examples/grafana-cbd.json; do
	grep -qx "$f" "$work/cbd.list" && pass "cbd holds $f" || fail "cbd lacks $f"
done
grep -q '^/var/lib/cbd' "$work/cbd.list" && fail "cbd ships /var/lib/cbd (systemd's StateDirectory makes it)" ||
	pass "cbd ships no /var/lib/cbd (StateDirectory= makes it)"
mkdir "$work/x"
dpkg-deb -x "$cbd" "$work/x"
grep -q '^ExecStart=/usr/sbin/cbd -c /etc/cbd/cbd.conf$' "$work/x/lib/systemd/system/cbd.service" &&
	pass "cbd.service runs /usr/sbin/cbd with /etc/cbd/cbd.conf" ||
	fail "cbd.service: $(grep ExecStart "$work/x/lib/systemd/system/cbd.service")"
grep -q '^u cbd ' "$work/x/usr/lib/sysusers.d/cbd.conf" && pass "sysusers.d/cbd.conf makes user cbd" ||
	fail "sysusers.d/cbd.conf: $(cat "$work/x/usr/lib/sysusers.d/cbd.conf")"
grep -q 'Apache-2.0' "$work/x/usr/share/doc/cbd/copyright" &&
	grep -q '^Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/' \
		"$work/x/usr/share/doc/cbd/copyright" && pass "copyright: DEP-5, Apache-2.0" ||
	fail "usr/share/doc/cbd/copyright is not DEP-5 Apache-2.0"

# The library package is named after the SONAME (policy 8.1), with a
# shlibs and a symbols file; -dev has the header, .so link, .a and .pc.
mkdir "$work/l"
dpkg-deb -x "$lib" "$work/l"
so=$(ls "$work"/l/usr/lib/*/libcbclient.so.*.*)
soname=$(objdump -p "$so" | awk '$1 == "SONAME" {print $2}')
libpkg=$(dpkg-deb -f "$lib" Package)
[ "$libpkg" = "libcbclient$(echo "$soname" | sed 's/^libcbclient\.so\.//')" ] &&
	pass "$libpkg holds $soname (package named after the SONAME)" ||
	fail "$libpkg holds $soname: rename the package (debian/control, *.install, *.symbols)"
dpkg-deb -I "$lib" shlibs | grep -q "^libcbclient [0-9]* $libpkg " && pass "$libpkg has a shlibs file" ||
	fail "$libpkg: no shlibs"
dpkg-deb -I "$lib" symbols 2>/dev/null | grep -q '^ cbc_allow@Base' && pass "$libpkg has a symbols file" ||
	fail "$libpkg: no symbols file"
nonc=$(nm -D --defined-only "$so" | awk '$2 ~ /^[TDBRW]$/ && $3 !~ /^cbc_/ {print $3}')
[ -z "$nonc" ] && pass "libcbclient exports only cbc_*" || fail "libcbclient exports $nonc"
dpkg-deb -c "$dev" | awk '{print $6 $7 $8}' > "$work/dev.list"
for f in './usr/include/cbclient.h' '/libcbclient.a$' "/libcbclient.so->libcbclient.so.[0-9.]*\$" \
	'/pkgconfig/cbclient.pc$'; do
	grep -q "$f" "$work/dev.list" && pass "libcbclient-dev holds $f" || fail "libcbclient-dev lacks $f"
done
dpkg-deb -f "$dev" Depends | grep -q "$libpkg (= $dver)" && pass "libcbclient-dev depends on $libpkg (= $dver)" ||
	fail "libcbclient-dev Depends: $(dpkg-deb -f "$dev" Depends)"

# The maintainer scripts.
dpkg-deb -I "$cbd" conffiles | grep -qx '/etc/cbd/cbd.conf' && pass "/etc/cbd/cbd.conf is a conffile" ||
	fail "conffiles: $(dpkg-deb -I "$cbd" conffiles 2>&1)"
dpkg-deb -e "$cbd" "$work/ctl"
grep -q '^ *systemd-sysusers .*cbd\.conf' "$work/ctl/postinst" && pass "postinst runs systemd-sysusers cbd.conf" ||
	fail "postinst does not create the user"
dpkg-deb -f "$cbd" Depends | grep -q 'systemd' && pass "cbd depends on systemd (systemd-sysusers)" ||
	fail "cbd Depends: $(dpkg-deb -f "$cbd" Depends)"
grep -q "deb-systemd-helper enable 'cbd.socket'" "$work/ctl/postinst" &&
	grep -q "deb-systemd-invoke start 'cbd.socket'" "$work/ctl/postinst" &&
	pass "postinst enables and starts cbd.socket" || fail "postinst does not enable and start cbd.socket"
grep -q "deb-systemd-invoke start 'cbd.service'" "$work/ctl/postinst" &&
	fail "postinst starts cbd.service" || pass "postinst does not start cbd.service"
grep -q "try-restart 'cbd.service'" "$work/ctl/postinst" &&
	pass "postinst restarts a running cbd.service on upgrade" || fail "no try-restart of cbd.service"
grep -q "stop 'cbd.socket'" "$work/ctl/prerm" && grep -q 'stop cbd.service' "$work/ctl/prerm" &&
	pass "prerm stops cbd.socket and cbd.service" || fail "prerm: $(cat "$work/ctl/prerm")"
grep -q "deb-systemd-helper purge 'cbd.socket'" "$work/ctl/postrm" &&
	grep -q 'rm -rf "${DPKG_ROOT:-}/run/cbd"' "$work/ctl/postrm" &&
	pass "postrm purge: the units' enablement and /run/cbd" || fail "postrm: $(cat "$work/ctl/postrm")"
grep -v '^#' "$work/ctl/postrm" | grep -q '/var/lib/cbd\|userdel\|deluser\|groupdel' &&
	fail "postrm touches /var/lib/cbd or the cbd user" || pass "postrm keeps /var/lib/cbd and the cbd user"

# lintian: no error (warnings and below are printed, not fatal).
lintian --fail-on error --info "$changes" >"$work/lintian.out" 2>&1
rc=$?
grep -v '^running with root privileges' "$work/lintian.out"
[ $rc -eq 0 ] && pass "lintian: no error ($(grep -c '^W:' "$work/lintian.out") warnings)" ||
	fail "lintian: $(grep '^E:' "$work/lintian.out")"

# Install, remove and purge in a throwaway root (root only).
if [ "$(id -u)" -ne 0 ]; then
	echo "not root: the packages are not installed (run as root to check that)"
elif ! command -v unshare >/dev/null 2>&1; then
	echo "NOT CHECKED: no unshare: the packages are not installed"
else
	host_state() {
		getent passwd cbd
		getent group cbd
		dpkg-query -W -f='${Package} ${db:Status-Status}\n' cbd "$libpkg" libcbclient-dev 2>/dev/null
		ls -d /etc/cbd /usr/sbin/cbd /etc/systemd/system/sockets.target.wants/cbd.socket \
			/usr/share/doc/"$libpkg" /usr/include/cbclient.h /var/lib/cbd 2>/dev/null
	}
	before=$(host_state)
	out=$(unshare --mount --propagation private /bin/sh "$0" --throwaway-root "$work" 2>&1)
	echo "$out"
	passed=$((passed + $(echo "$out" | grep -c '^ok: ')))
	failed=$((failed + $(echo "$out" | grep -c '^FAILED: ')))
	echo "$out" | grep -q '^ok: \|^FAILED: \|^NOT CHECKED' ||
		fail "throwaway root: unshare --mount failed: $out"
	after=$(host_state)
	[ "$before" = "$after" ] && pass "the host is unchanged (user, group, packages, files)" ||
		fail "the host changed: before [$before] after [$after]"
fi

echo "debian: $(($(date +%s) - start)) s"
echo "debian: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
