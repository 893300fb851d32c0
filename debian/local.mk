# SPDX-License-Identifier: Apache-2.0
# debian/local.mk — the Debian packaging in the tarball (dpkg-buildpackage
# works from `make dist`'s tree too) and its test, tests/debian.sh, which
# builds the packages from a copy of the source tree and checks them.
EXTRA_DIST += \
	debian/changelog \
	debian/control \
	debian/copyright \
	debian/rules \
	debian/source/format \
	debian/cbd.install \
	debian/cbd.prerm \
	debian/cbd.postrm \
	debian/libcbclient4.install \
	debian/libcbclient4.symbols \
	debian/libcbclient-dev.install \
	debian/not-installed \
	tests/debian.sh

# tests/debian.sh skips (77) when told so: configure --disable-debian-test,
# which make distcheck passes (one package build per ./bootstrap test).
TESTS += tests/debian.sh
AM_TESTS_ENVIRONMENT += \
	CBD_DEBIAN_TEST='$(enable_debian_test)'; export CBD_DEBIAN_TEST;
