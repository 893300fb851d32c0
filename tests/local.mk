# SPDX-License-Identifier: Apache-2.0
# tests/local.mk — unit suites (check) for the pure core and the store
# contract suite run against each store.

TESTS += $(check_PROGRAMS)
TEST_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS) $(JANSSON_CFLAGS)
TEST_CORE_LIBS = src/libcbcore.la src/libcbbase.la $(CHECK_LIBS) $(JANSSON_LIBS)

# The store contract suite and check_run(), linked into the unit tests.
check_LTLIBRARIES += tests/libcontract.la
tests_libcontract_la_SOURCES = tests/store-contract.c tests/store-contract.h \
	tests/check-run.c tests/check-run.h tests/test-rand.h \
	tests/trace-load.c tests/trace-load.h
tests_libcontract_la_CFLAGS = $(TEST_CFLAGS)

check_PROGRAMS += tests/check_breaker
tests_check_breaker_SOURCES = tests/check_breaker.c
tests_check_breaker_CFLAGS = $(TEST_CFLAGS)
tests_check_breaker_LDADD = tests/libcontract.la $(TEST_CORE_LIBS)

check_PROGRAMS += tests/check_window
tests_check_window_SOURCES = tests/check_window.c
tests_check_window_CFLAGS = $(TEST_CFLAGS)
tests_check_window_LDADD = tests/libcontract.la $(TEST_CORE_LIBS)

# The language-neutral state-machine trace, replayed on the core.
check_PROGRAMS += tests/check_trace
tests_check_trace_SOURCES = tests/check_trace.c
tests_check_trace_CFLAGS = $(TEST_CFLAGS)
tests_check_trace_LDADD = tests/libcontract.la $(TEST_CORE_LIBS)

check_PROGRAMS += tests/check_proto
tests_check_proto_SOURCES = tests/check_proto.c
tests_check_proto_CFLAGS = $(TEST_CFLAGS)
tests_check_proto_LDADD = tests/libcontract.la $(TEST_CORE_LIBS)

check_PROGRAMS += tests/check_circuit_table
tests_check_circuit_table_SOURCES = tests/check_circuit_table.c
tests_check_circuit_table_CFLAGS = $(TEST_CFLAGS)
tests_check_circuit_table_LDADD = tests/libcontract.la $(TEST_CORE_LIBS)

# Shell tests: the unit files, cbctl against a real cbd, make install.
TEST_EXTENSIONS = .sh
SH_LOG_COMPILER = env BUILDDIR='$(abs_top_builddir)' PREFIX='$(prefix)' \
	SBINDIR='$(sbindir)' SYSCONFDIR='$(sysconfdir)' \
	UNITDIR='$(systemdsystemunitdir)' SYSUSERSDIR='$(sysusersdir)' DOCDIR='$(docdir)' \
	DATADIR='$(datadir)' BINDIR='$(bindir)' LIBDIR='$(libdir)' INCLUDEDIR='$(includedir)' \
	MANDIR='$(mandir)' \
	SAN_CFLAGS='$(SAN_CFLAGS)' HAVE_SYSTEMD='$(have_systemd)' $(SHELL)
TESTS += tests/systemd-units.sh tests/socket-activation.sh tests/cbctl.sh tests/install.sh \
	tests/format.sh tests/gitignore.sh tests/licence.sh
EXTRA_DIST += tests/socket-activation.sh tests/cbctl.sh tests/install.sh tests/format.sh .clang-format
EXTRA_DIST += tests/systemd-units.sh tests/gitignore.sh tests/licence.sh

# The layering check: src/LAYERS against the includes of src/ and client/,
# and its own test (it fails when a lower file includes a higher header).
TESTS += tests/layering.sh tests/layering-selftest.sh
EXTRA_DIST += tests/layering.sh tests/layering-selftest.sh tests/layering.py
# The manual pages render cleanly (groff -ww, no words run together).
TESTS += tests/man.sh
EXTRA_DIST += tests/man.sh
# The Prometheus alerting rules and the dashboard's cbd up (promtool).
TESTS += tests/alerts.sh
EXTRA_DIST += tests/alerts.sh tests/cbd-alerts.test.yml
# The unit files must exist before their test runs.
tests/systemd-units.log: systemd/cbd.service systemd/cbd.socket

# The benchmark: prints figures, asserts nothing; not run by make check.
#   CBD_BINARY=src/cbd tests/bench [-c 1,8,50] [-d SECONDS]
#   CBD_BINARY=src/cbd tests/bench -t [-d SECONDS] [-r ROUNDS]   (cbd CPU a pair, with and
#   without a ticket: protocol 3 bulkhead)
noinst_PROGRAMS += tests/bench
tests_bench_SOURCES = tests/bench.c tests/bench-load.c tests/bench-load.h \
	tests/cbd-harness.c tests/cbd-harness.h
tests_bench_CFLAGS = $(AM_CFLAGS) -pthread
tests_bench_LDFLAGS = $(AM_LDFLAGS) -pthread
# Socket activation needs the daemon built first.
tests/socket-activation.log: src/cbd$(EXEEXT)
tests/systemd-units.log: src/cbd$(EXEEXT)
tests/cbctl.log: src/cbd$(EXEEXT) client/cbctl$(EXEEXT)
# cbctl top: the plain table, and the live screen under tmux; it leaves
# the screen it saw in tests/cbctl-top-screen.txt (README's picture).
TESTS += tests/cbctl-top.sh
EXTRA_DIST += tests/cbctl-top.sh
CLEANFILES += tests/cbctl-top-screen.txt
tests/cbctl-top.log: src/cbd$(EXEEXT) client/cbctl$(EXEEXT)
# install.sh runs make install: after everything else is built.
tests/install.log: all-am

# Mutated requests against a real cbd: one well-formed reply each, no crash.
check_PROGRAMS += tests/cbd-hostile-test
tests_cbd_hostile_test_SOURCES = tests/cbd-hostile-test.c $(DAEMON_TEST_COMMON)
tests_cbd_hostile_test_CFLAGS = $(DAEMON_TEST_CFLAGS)
tests_cbd_hostile_test_LDADD = tests/libcontract.la $(DAEMON_TEST_LIBS)

# Protocol 2's authority figures: memory per circuit at 1M circuits and the
# longest stall while the state file of 10000 open circuits is kept up to
# date. Prints figures, asserts nothing; not run by make check.
#   CBD_BINARY=src/cbd tests/bench-authority [-n CIRCUITS] [-o OPEN] [-d SECONDS]
noinst_PROGRAMS += tests/bench-authority
tests_bench_authority_SOURCES = tests/bench-authority.c tests/cbd-harness.c tests/cbd-harness.h
tests_bench_authority_CFLAGS = $(AM_CFLAGS) -pthread
tests_bench_authority_LDFLAGS = $(AM_LDFLAGS) -pthread
TESTS += tests/python.sh
# The clients install as their READMEs say, offline, and their README
# samples run against a real cbd (helpers in tests/client-sample.sh).
if SLOW_TESTS
TESTS += tests/python-install.sh
endif
# The dashboard in headless Chromium (puppeteer-core, installed into the
# build tree on first run): slow (a browser), once per ./bootstrap test.
if SLOW_TESTS
TESTS += tests/dashboard-browser.sh
endif
EXTRA_DIST += tests/dashboard-browser.sh tests/dashboard-browser.js docs/dashboard.png
clean-local: clean-dashboard-node
clean-dashboard-node:
	rm -rf tests/dashboard-node
.PHONY: clean-dashboard-node
EXTRA_DIST += tests/python-install.sh tests/client-sample.sh tests/test-lib.sh

# The bulkhead and retry budget at work: 8 service processes (Python and
# Node.js) against a dependency that slows down, then one that fails and
# is retried; prints figures, asserts nothing; not run by make check.
#   CBD_BINARY=src/cbd CBD_SRCDIR=.. python3 ../tests/bench-bulkhead.py [-d SECONDS]
EXTRA_DIST += tests/bench-bulkhead.py

# One big scrape against cbd's loop: a get loop's latency while curl
# scrapes /metrics (or /api/circuits) of N circuits; prints figures,
# asserts nothing; not run by make check.
#   python3 ../tests/bench-scrape.py src/cbd [CIRCUITS] [SCRAPES] [PATH]
EXTRA_DIST += tests/bench-scrape.py

# What a request costs cbd and a GET costs Redis, counted: user-space
# instructions (callgrind), system calls (strace -c -f) and bytes a
# request, N and 2N requests subtracted; prints figures, asserts nothing;
# not run by make check.
#   CBD_BINARY=src/cbd python3 ../tests/bench-instr.py [-n 20000] [-c 8] [OP ...|all]
EXTRA_DIST += tests/bench-instr.py

# Watchers that do not keep up (issue 28, item 3): cbd's RSS peak and
# after they closed, and another client's get latency, with 500 watchers
# (400 slow, 100 never reading) at 200 changes/s for 40 s; prints
# figures, asserts nothing; not run by make check.
#   python3 ../tests/bench-watchers.py src/cbd [-w 500] [-s 400] [-c 200] [-d 40]
EXTRA_DIST += tests/bench-watchers.py

# cbd side by side with Redis (GET, and EVALSHA of a record-failure script),
# one load generator; prints figures, asserts nothing; not run by make check.
#   CBD_BINARY=src/cbd tests/bench-vs-redis [-d SECONDS] [-c 8,50] [-r ROUNDS] [-P]
noinst_PROGRAMS += tests/bench-vs-redis
tests_bench_vs_redis_SOURCES = tests/bench-vs-redis.c tests/bench-load.c tests/bench-load.h \
	tests/redis-util.c tests/redis-util.h tests/cbd-harness.c tests/cbd-harness.h
tests_bench_vs_redis_CFLAGS = $(AM_CFLAGS) -pthread
tests_bench_vs_redis_LDFLAGS = $(AM_LDFLAGS) -pthread

# Fleet mode's cost: record_failure through cbd -> Redis vs EVALSHA of the
# circuit script from the same load generator, and the cross-host event
# delay; prints figures, asserts nothing; not run by make check.
#   CBD_BINARY=src/cbd CBD_SRCDIR=.. tests/bench-fleet [-d SECONDS] [-c 8,50] [-n TRIPS]
noinst_PROGRAMS += tests/bench-fleet
tests_bench_fleet_SOURCES = tests/bench-fleet.c tests/bench-load.c tests/bench-load.h \
	tests/redis-util.c tests/redis-util.h tests/cbd-harness.c tests/cbd-harness.h
tests_bench_fleet_CFLAGS = $(AM_CFLAGS) -pthread
tests_bench_fleet_LDFLAGS = $(AM_LDFLAGS) -pthread

# Where the circuit script spends Redis's CPU (issue 24): the script and cut
# short variants of it, per call, circuit and outcome, both rules, and a
# test-only multi-circuit batch; prints figures, asserts nothing; not run by
# make check.
#   CBD_SRCDIR=.. tests/bench-fleet-script [-n CALLS] [-r ROUNDS] [-k CIRCUITS] [-p PIPELINE]
#       [-g GROUPS (ftcrsb)]
noinst_PROGRAMS += tests/bench-fleet-script
tests_bench_fleet_script_SOURCES = tests/bench-fleet-script.c tests/redis-util.c \
	tests/redis-util.h
tests_bench_fleet_script_CFLAGS = $(AM_CFLAGS) $(HIREDIS_CFLAGS)
tests_bench_fleet_script_LDADD = $(HIREDIS_LIBS)
TESTS += tests/go.sh
EXTRA_DIST += tests/go.sh
if SLOW_TESTS
TESTS += tests/go-module.sh
endif
EXTRA_DIST += tests/go-module.sh
TESTS += tests/node.sh
EXTRA_DIST += tests/node.sh
if SLOW_TESTS
TESTS += tests/node-pack.sh
endif
EXTRA_DIST += tests/node-pack.sh

# One circuit, three languages: Python trips it, Node.js and Go fail fast,
# and exactly one of three processes runs the half-open trial.
TESTS += tests/cross-language.sh
EXTRA_DIST += tests/cross-language.sh
# The C, Python, Node.js and Go clients agree: successes never classified,
# a cached process stops exactly at its own threshold, cbd counts every
# call alike (ignored and rejected included). agree-c is its C side.
TESTS += tests/clients-agree.sh
EXTRA_DIST += tests/clients-agree.sh
noinst_PROGRAMS += tests/agree-c
tests_agree_c_SOURCES = tests/agree-c.c
tests_agree_c_CFLAGS = $(AM_CFLAGS) -pthread
tests_agree_c_LDFLAGS = $(AM_LDFLAGS) -pthread
tests_agree_c_LDADD = client/libcbclient.la
# Fleet mode (issue 23): each language's cached client on one host through
# Redis losing its data (FLUSHALL under a hold, Redis restarted empty under
# an open circuit and a timed hold); Sentinel failing over (SENTINEL
# FAILOVER, the master killed) under load on two hosts. Skip without
# redis-server (and python3, node, go for the clients).
TESTS += tests/fleet-clients-reseed.sh tests/fleet-sentinel-load.sh
EXTRA_DIST += tests/fleet-clients-reseed.sh tests/fleet-sentinel-load.sh
tests/fleet-clients-reseed.log: src/cbd$(EXEEXT) client/cbctl$(EXEEXT) tests/agree-c$(EXEEXT)
tests/fleet-sentinel-load.log: src/cbd$(EXEEXT) client/cbctl$(EXEEXT)
# The libcurl example against a real local HTTP server and cbd (skips
# without libcurl or python3).
TESTS += tests/curl-example.sh
EXTRA_DIST += tests/curl-example.sh
# The three example services fall back alike.
TESTS += tests/examples.sh
EXTRA_DIST += tests/examples.sh

# fleet mode's circuit script (src/fleet.lua) in a private redis-server:
# the trace, each op, and random op sequences against the C core.
check_PROGRAMS += tests/check_fleet_script
tests_check_fleet_script_SOURCES = tests/check_fleet_script.c tests/redis-util.c \
	tests/redis-util.h src/fleet-args.c src/fleet-args.h src/fleet-fold.c src/fleet-fold.h
tests_check_fleet_script_CFLAGS = $(TEST_CFLAGS) $(HIREDIS_CFLAGS)
tests_check_fleet_script_LDADD = tests/libcontract.la $(TEST_CORE_LIBS) $(HIREDIS_LIBS) \
	$(JANSSON_LIBS) $(CHECK_LIBS)
EXTRA_DIST += src/fleet.lua
