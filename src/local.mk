# SPDX-License-Identifier: Apache-2.0
# src/local.mk — the pure core shared by cbd and libcbclient, and the daemon.

# The core: state machine, circuit table, codec. One convenience library so
# the same object code links into cbd, libcbclient and the unit tests.
noinst_LTLIBRARIES += src/libcbcore.la
src_libcbcore_la_SOURCES = \
	src/breaker.c src/breaker.h \
	src/window.c src/window.h \
	src/circuit-table.c src/circuit-table.h \
	src/proto.c src/proto.h \
	src/proto-scan.c src/proto-scan.h \
	src/clock.c src/clock.h
src_libcbcore_la_CFLAGS = $(AM_CFLAGS) $(JANSSON_CFLAGS)
src_libcbcore_la_LIBADD = $(JANSSON_LIBS)

# The daemon. Its modules (all but main) form a convenience library so the
# unit tests link the same code.
noinst_LTLIBRARIES += src/libcbdaemon.la
src_libcbdaemon_la_SOURCES = \
	src/conf.c src/conf.h \
	src/log.c src/log.h \
	src/log-limit.c src/log-limit.h \
	src/stats.c src/stats.h \
	src/op.c src/op.h src/op-store.c src/op-sidecar.c src/op-admin.c \
	src/encode.c src/encode.h \
	src/json-alloc.c src/json-alloc.h \
	src/server.c src/server.h \
	src/server-client.c src/server-client.h \
	src/persist.c src/persist.h \
	src/housekeeping.c src/housekeeping.h \
	src/watch.c src/watch.h \
	src/metrics.c src/metrics.h \
	src/fleet.c src/fleet.h src/fleet-args.c src/fleet-args.h src/op-fleet.c
nodist_src_libcbdaemon_la_SOURCES = src/fleet-script.c
src_libcbdaemon_la_CFLAGS = $(AM_CFLAGS) $(LIBEVENT_CFLAGS) $(JANSSON_CFLAGS) \
	$(INIH_CFLAGS) $(SYSTEMD_CFLAGS) $(HIREDIS_CFLAGS)
src_libcbdaemon_la_LIBADD = src/libcbcore.la $(LIBEVENT_LIBS) $(JANSSON_LIBS) $(INIH_LIBS) \
	$(HIREDIS_LIBS)
if HAVE_SYSTEMD
src_libcbdaemon_la_LIBADD += $(SYSTEMD_LIBS)
endif

sbin_PROGRAMS += src/cbd
src_cbd_SOURCES = src/cbd.c
src_cbd_CFLAGS = $(AM_CFLAGS) $(LIBEVENT_CFLAGS) $(JANSSON_CFLAGS)
src_cbd_LDADD = src/libcbdaemon.la

# The circuit script of fleet mode, built into cbd as a C string; fenced
# from clang-format (tests/format.sh checks it too, in- and out-of-tree).
EXTRA_DIST += src/fleet.lua
BUILT_SOURCES += src/fleet-script.c
CLEANFILES += src/fleet-script.c
src/fleet-script.c: $(srcdir)/src/fleet.lua
	$(AM_V_GEN)$(MKDIR_P) src && { \
	  echo '/* Generated from src/fleet.lua by src/local.mk: do not edit. */'; \
	  echo '/* clang-format off */'; \
	  echo 'const char fleet_script_text[] ='; \
	  sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/^/"/' -e 's/$$/\\n"/' \
	    $(srcdir)/src/fleet.lua; \
	  echo ';'; \
	  echo '/* clang-format on */'; } > $@.tmp && mv $@.tmp $@
