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
	debian/libcbclient7.install \
	debian/libcbclient7.symbols \
	debian/libcbclient-dev.install \
	debian/not-installed \
	tests/debian.sh

# A slow test: configure --disable-slow-tests leaves it out (one package
# build per ./bootstrap test).
if SLOW_TESTS
TESTS += tests/debian.sh
endif
