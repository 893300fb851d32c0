# SPDX-License-Identifier: Apache-2.0
# src/local.mk — the pure core shared by cbd and libcbclient, and the daemon.

# The base both cbd and libcbclient stand on: the clocks.
noinst_LTLIBRARIES += src/libcbbase.la
src_libcbbase_la_SOURCES = src/clock.c src/clock.h

# The core (src/core/): state machine, windows, circuit table, codec, the
# circuit's JSON and the hot path's encoder. Pure: no I/O, no clock read.
# One convenience library so the same object code links into cbd,
# libcbclient and the unit tests.
noinst_LTLIBRARIES += src/libcbcore.la
src_libcbcore_la_SOURCES = \
	src/core/breaker.c src/core/breaker.h \
	src/core/window.c src/core/window.h \
	src/core/circuit-table.c src/core/circuit-table.h \
	src/core/circuit-json.c src/core/circuit-json.h \
	src/core/proto.c src/core/proto.h \
	src/core/proto-scan.c src/core/proto-scan.h \
	src/core/encode.c src/core/encode.h
src_libcbcore_la_CFLAGS = $(AM_CFLAGS) $(JANSSON_CFLAGS)
src_libcbcore_la_LIBADD = $(JANSSON_LIBS)

# The daemon, listed by layer from the bottom (src/LAYERS). Its modules
# (all but main) form a convenience library so the unit tests link the
# same code.
noinst_LTLIBRARIES += src/libcbdaemon.la
src_libcbdaemon_la_SOURCES = \
	src/log.c src/log.h \
	src/json-alloc.c src/json-alloc.h \
	src/conf.c src/conf.h \
	src/daemon.c src/daemon.h \
	src/stats.c src/stats.h \
	src/log-limit.c src/log-limit.h \
	src/persist-writer.c src/persist-writer.h \
	src/persist.c src/persist.h \
	src/fleet.c src/fleet.h src/fleet-args.c src/fleet-args.h src/fleet-fold.c src/fleet-fold.h \
	src/server-client.c src/server-client.h \
	src/events.c src/events.h \
	src/fleet-copy.c src/fleet-copy.h \
	src/fleet-sentinel.c src/fleet-sentinel.h \
	src/fleet-sync.c src/fleet-sync.h \
	src/watch.c src/watch.h \
	src/metrics.c src/metrics.h \
	src/scrape.c src/scrape.h \
	src/dashboard.c src/dashboard.h \
	src/dashboard-sse.c src/dashboard-sse.h \
	src/metrics-http.c src/metrics-http.h \
	src/stats-report.c src/stats-report.h \
	src/op-call.c src/op-call.h \
	src/op-wait.c src/op-wait.h \
	src/op-circuit.c src/op-circuit.h \
	src/op-permit.c src/op-permit.h \
	src/op-list.c src/op-list.h \
	src/op-service.c src/op-service.h \
	src/op-fleet.c src/op-fleet.h \
	src/op.c src/op.h \
	src/housekeeping.c src/housekeeping.h \
	src/server.c src/server.h
nodist_src_libcbdaemon_la_SOURCES = src/fleet-script.c src/dashboard-assets.c
# -pthread: the state file journal's writer thread (src/persist-writer.c).
src_libcbdaemon_la_CFLAGS = $(AM_CFLAGS) -pthread $(LIBEVENT_CFLAGS) $(JANSSON_CFLAGS) \
	$(INIH_CFLAGS) $(SYSTEMD_CFLAGS) $(HIREDIS_CFLAGS)
src_libcbdaemon_la_LIBADD = src/libcbcore.la src/libcbbase.la $(LIBEVENT_LIBS) $(JANSSON_LIBS) $(INIH_LIBS) \
	$(HIREDIS_LIBS)
src_libcbdaemon_la_LDFLAGS = $(AM_LDFLAGS) -pthread
if HAVE_SYSTEMD
src_libcbdaemon_la_LIBADD += $(SYSTEMD_LIBS)
endif

sbin_PROGRAMS += src/cbd
src_cbd_SOURCES = src/cbd.c
src_cbd_CFLAGS = $(AM_CFLAGS) $(LIBEVENT_CFLAGS) $(JANSSON_CFLAGS)
src_cbd_LDADD = src/libcbdaemon.la

# The circuit script of fleet mode, built into cbd as a C string; fenced
# from clang-format (tests/format.sh checks it too, in- and out-of-tree).
EXTRA_DIST += src/fleet.lua src/LAYERS
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

# The dashboard's page, script and style (src/dashboard/), built into cbd
# as C strings the same way: no network, nothing but sed at build time.
DASHBOARD_FILES = src/dashboard/index.html src/dashboard/app.js src/dashboard/style.css \
	src/dashboard/icon.svg
EXTRA_DIST += $(DASHBOARD_FILES)
BUILT_SOURCES += src/dashboard-assets.c
CLEANFILES += src/dashboard-assets.c
src/dashboard-assets.c: $(srcdir)/src/dashboard/index.html $(srcdir)/src/dashboard/app.js \
    $(srcdir)/src/dashboard/style.css $(srcdir)/src/dashboard/icon.svg
	$(AM_V_GEN)$(MKDIR_P) src && { \
	  echo '/* Generated from src/dashboard/ by src/local.mk: do not edit. */'; \
	  echo '/* clang-format off */'; \
	  for f in index.html:dashboard_index_html app.js:dashboard_app_js \
	      style.css:dashboard_style_css icon.svg:dashboard_icon_svg; do \
	    echo "const char $${f#*:}[] ="; \
	    sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/^/"/' -e 's/$$/\\n"/' \
	      $(srcdir)/src/dashboard/$${f%%:*}; \
	    echo ';'; \
	  done; \
	  echo '/* clang-format on */'; } > $@.tmp && mv $@.tmp $@
