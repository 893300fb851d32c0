# SPDX-License-Identifier: Apache-2.0
# client/local.mk — libcbclient (shared and static), its installed header
# and pkg-config file, and the example (included by the top Makefile.am).
pkgconfigdir = $(libdir)/pkgconfig

lib_LTLIBRARIES += client/libcbclient.la
include_HEADERS += client/cbclient.h
# cbclient.pc is written at make time (not by configure) so that
# `make install prefix=...` installs a file naming that prefix; it is
# rewritten on every make run (a cheap sed) for the same reason.
pkgconfig_DATA = client/pc/cbclient.pc
client/pc/cbclient.pc: $(srcdir)/client/cbclient.pc.in client-pc-always
	$(AM_V_GEN)$(MKDIR_P) client/pc && sed \
	    -e 's|[@]prefix[@]|$(prefix)|g' -e 's|[@]exec_prefix[@]|$(exec_prefix)|g' \
	    -e 's|[@]libdir[@]|$(libdir)|g' -e 's|[@]includedir[@]|$(includedir)|g' \
	    -e 's|[@]VERSION[@]|$(VERSION)|g' $(srcdir)/client/cbclient.pc.in > $@.tmp && \
	    mv $@.tmp $@
client-pc-always:
.PHONY: client-pc-always
CLEANFILES += client/pc/cbclient.pc
EXTRA_DIST += client/cbclient.pc.in

client_libcbclient_la_SOURCES = \
	client/internal.h \
	client/error.c \
	client/ctx.c \
	client/conn.c \
	client/ops.c \
	client/snapshot.c \
	client/store.c \
	client/store-local.c \
	client/store-remote.c \
	client/store-resilient.c \
	client/cache.c \
	client/circuit-breaker.c \
	client/retry.c \
	client/classify-http.c
client_libcbclient_la_CFLAGS = $(AM_CFLAGS) $(JANSSON_CFLAGS) -pthread
# The core (state machine, table, codec) is linked in; only cbc_* is exported.
client_libcbclient_la_LIBADD = src/libcbcore.la src/libcbbase.la $(JANSSON_LIBS) -lpthread
client_libcbclient_la_LDFLAGS = $(AM_LDFLAGS) -version-info $(CBCLIENT_LT_VERSION) \
	-export-symbols-regex '^cbc_'

# The example: a flaky dependency protected by a shared circuit.
noinst_PROGRAMS += client/examples/flaky
client_examples_flaky_SOURCES = client/examples/flaky.c
client_examples_flaky_LDADD = client/libcbclient.la
# The libcurl example: HTTP GETs classified by CURLcode and status
# (tests/curl-example.sh); only with libcurl (configure).
if HAVE_LIBCURL
noinst_PROGRAMS += client/examples/curl-breaker
endif
client_examples_curl_breaker_SOURCES = client/examples/curl-breaker.c
client_examples_curl_breaker_CFLAGS = $(AM_CFLAGS) $(LIBCURL_CFLAGS)
client_examples_curl_breaker_LDADD = client/libcbclient.la $(LIBCURL_LIBS)

