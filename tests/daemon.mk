# SPDX-License-Identifier: Apache-2.0
# tests/daemon.mk — integration tests against a real cbd (included by Makefile.am).

# Shared by every cbd integration test (and by libcbclient's remote-store
# tests, which need only cbd-harness.c). libcontract.la brings check_run().
DAEMON_TEST_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS) $(JANSSON_CFLAGS)
DAEMON_TEST_LIBS = tests/libcontract.la $(CHECK_LIBS) $(JANSSON_LIBS)
DAEMON_TEST_COMMON = tests/cbd-harness.c tests/cbd-harness.h \
	tests/daemon-util.c tests/daemon-util.h

check_PROGRAMS += tests/cbd-ops-test
tests_cbd_ops_test_SOURCES = tests/cbd-ops-test.c $(DAEMON_TEST_COMMON)
tests_cbd_ops_test_CFLAGS = $(DAEMON_TEST_CFLAGS)
tests_cbd_ops_test_LDADD = $(DAEMON_TEST_LIBS)

# The config loader and key table (unit level), `cbd -t`, and the check
# that conf/cbd.conf and proto/PROTOCOL.md document every key.
check_PROGRAMS += tests/cbd-config-test
tests_cbd_config_test_SOURCES = tests/cbd-config-test.c $(DAEMON_TEST_COMMON)
tests_cbd_config_test_CFLAGS = $(DAEMON_TEST_CFLAGS)
tests_cbd_config_test_LDADD = src/libcbdaemon.la $(DAEMON_TEST_LIBS)

# Signals, reload, shutdown, sockets, logs, sd_notify, socket activation.
check_PROGRAMS += tests/cbd-lifecycle-test
tests_cbd_lifecycle_test_SOURCES = tests/cbd-lifecycle-test.c $(DAEMON_TEST_COMMON)
tests_cbd_lifecycle_test_CFLAGS = $(DAEMON_TEST_CFLAGS)
tests_cbd_lifecycle_test_LDADD = $(DAEMON_TEST_LIBS)

# 16 concurrent clients: exact counts, one cas winner, one permit.
check_PROGRAMS += tests/cbd-concurrency-test
tests_cbd_concurrency_test_SOURCES = tests/cbd-concurrency-test.c $(DAEMON_TEST_COMMON)
tests_cbd_concurrency_test_CFLAGS = $(DAEMON_TEST_CFLAGS)
tests_cbd_concurrency_test_LDADD = $(DAEMON_TEST_LIBS)

# The store contract suite against cbd through its socket.
check_PROGRAMS += tests/cbd-contract-test
tests_cbd_contract_test_SOURCES = tests/cbd-contract-test.c tests/cbd-harness.c \
	tests/cbd-harness.h
tests_cbd_contract_test_CFLAGS = $(DAEMON_TEST_CFLAGS)
tests_cbd_contract_test_LDADD = src/libcbcore.la $(DAEMON_TEST_LIBS)

# The ops, lifecycle, bulkhead, fleet and dashboard tests again with cbd
# under valgrind, in two halves that run side by side: fails on any memory
# error or leak (skipped without valgrind and in sanitizer builds).
if SLOW_TESTS
TESTS += tests/cbd-valgrind.sh tests/cbd-valgrind-fleet.sh
endif
EXTRA_DIST += tests/cbd-valgrind.sh tests/cbd-valgrind-fleet.sh

# Unit tests of the request codec cbd added to proto.c.
check_PROGRAMS += tests/cbd-codec-test
tests_cbd_codec_test_SOURCES = tests/cbd-codec-test.c
tests_cbd_codec_test_CFLAGS = $(DAEMON_TEST_CFLAGS)
tests_cbd_codec_test_LDADD = src/libcbcore.la $(DAEMON_TEST_LIBS)

# Protocol 2's authority rules: policy ownership, reload, holds, cas for
# non-admins, durable state across kill -9 and corrupt state files.
check_PROGRAMS += tests/cbd-authority-test
tests_cbd_authority_test_SOURCES = tests/cbd-authority-test.c $(DAEMON_TEST_COMMON)
tests_cbd_authority_test_CFLAGS = $(DAEMON_TEST_CFLAGS) \
	-DFSYNC_FAIL_SO='"$(abs_top_builddir)/tests/.libs/fsyncfail.so"'
tests_cbd_authority_test_LDADD = $(DAEMON_TEST_LIBS)
# The LD_PRELOAD shim making fsync fail (a shared object, not
# instrumented: it is loaded into cbd, whatever the build).
check_LTLIBRARIES += tests/fsyncfail.la
tests_fsyncfail_la_SOURCES = tests/fsync-fail.c
tests_fsyncfail_la_CFLAGS = $(WARN_CFLAGS)
tests_fsyncfail_la_LDFLAGS = -module -avoid-version -shared -rpath /nowhere

# Trip rules against a real cbd: presets, several processes on one rate
# circuit, totals under 16 clients, min_reporters, break_backoff.
check_PROGRAMS += tests/cbd-rates-test
tests_cbd_rates_test_SOURCES = tests/cbd-rates-test.c $(DAEMON_TEST_COMMON)
tests_cbd_rates_test_CFLAGS = $(DAEMON_TEST_CFLAGS)
tests_cbd_rates_test_LDADD = $(DAEMON_TEST_LIBS)

# watch/unwatch events and noreply (protocol 2, §5 and §6).
check_PROGRAMS += tests/cbd-watch-test
tests_cbd_watch_test_SOURCES = tests/cbd-watch-test.c $(DAEMON_TEST_COMMON)
tests_cbd_watch_test_CFLAGS = $(DAEMON_TEST_CFLAGS)
tests_cbd_watch_test_LDADD = $(DAEMON_TEST_LIBS)

# Protocol 3's compact snapshots (§1): the reply budget, policy where
# asked, policy_rev and policy events.
check_PROGRAMS += tests/cbd-snapshot-test
tests_cbd_snapshot_test_SOURCES = tests/cbd-snapshot-test.c $(DAEMON_TEST_COMMON)
tests_cbd_snapshot_test_CFLAGS = $(DAEMON_TEST_CFLAGS)
tests_cbd_snapshot_test_LDADD = $(DAEMON_TEST_LIBS)

# Protocol 3's bulkhead and retry budget (§2, §3): tickets, waiters,
# reasons, totals, the keys.
check_PROGRAMS += tests/cbd-bulkhead-test
tests_cbd_bulkhead_test_SOURCES = tests/cbd-bulkhead-test.c $(DAEMON_TEST_COMMON)
tests_cbd_bulkhead_test_CFLAGS = $(DAEMON_TEST_CFLAGS)
tests_cbd_bulkhead_test_LDADD = $(DAEMON_TEST_LIBS)

# Prometheus metrics: the op, GET /metrics, the per-circuit cap, promtool.
check_PROGRAMS += tests/cbd-metrics-test
tests_cbd_metrics_test_SOURCES = tests/cbd-metrics-test.c $(DAEMON_TEST_COMMON)
tests_cbd_metrics_test_CFLAGS = $(DAEMON_TEST_CFLAGS)
tests_cbd_metrics_test_LDADD = $(DAEMON_TEST_LIBS)

# Issue 27, the dashboard's HTTP side: routes, events, streams bounded, a
# stalled stream dropped, odd names.
check_PROGRAMS += tests/cbd-dashboard-test
tests_cbd_dashboard_test_SOURCES = tests/cbd-dashboard-test.c $(DAEMON_TEST_COMMON)
tests_cbd_dashboard_test_CFLAGS = $(DAEMON_TEST_CFLAGS)
tests_cbd_dashboard_test_LDADD = $(DAEMON_TEST_LIBS)

# Issue 9, every peer bounded: output bound, idle connections, descriptor
# limit, socket ownership, log flood and escaping, whole lines only.
check_PROGRAMS += tests/cbd-limits-test
tests_cbd_limits_test_SOURCES = tests/cbd-limits-test.c $(DAEMON_TEST_COMMON)
tests_cbd_limits_test_CFLAGS = $(DAEMON_TEST_CFLAGS)
tests_cbd_limits_test_LDADD = $(DAEMON_TEST_LIBS)

# The hot path's encoder writes what jansson writes, byte for byte.
check_PROGRAMS += tests/check_encode
tests_check_encode_SOURCES = tests/check_encode.c
tests_check_encode_CFLAGS = $(DAEMON_TEST_CFLAGS)
tests_check_encode_LDADD = src/libcbdaemon.la $(DAEMON_TEST_LIBS)

# Fleet mode (backend = redis): two cbds on one private redis-server.
check_PROGRAMS += tests/cbd-fleet-test
tests_cbd_fleet_test_SOURCES = tests/cbd-fleet-test.c tests/redis-util.c tests/redis-util.h \
	$(DAEMON_TEST_COMMON)
tests_cbd_fleet_test_CFLAGS = $(DAEMON_TEST_CFLAGS)
tests_cbd_fleet_test_LDADD = $(DAEMON_TEST_LIBS)

# The integration suites and the store contract again, with backend = redis.
TESTS += tests/fleet-suites.sh
EXTRA_DIST += tests/fleet-suites.sh
