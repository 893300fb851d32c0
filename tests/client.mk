# SPDX-License-Identifier: Apache-2.0
# tests/client.mk — libcbclient tests (included by Makefile.am).
# check_client_local and check_client_retry need no daemon;
# check_client_remote runs real cbd processes (see tests/cbd-harness.h).

CLIENT_TEST_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS) $(JANSSON_CFLAGS) -pthread
CLIENT_TEST_LIBS = client/libcbclient.la tests/libcontract.la src/libcbcore.la \
	$(CHECK_LIBS) $(JANSSON_LIBS) -lpthread

check_PROGRAMS += tests/check_client_local
tests_check_client_local_SOURCES = tests/check_client_local.c \
	tests/client-test.c tests/client-test.h
tests_check_client_local_CFLAGS = $(CLIENT_TEST_CFLAGS)
tests_check_client_local_LDADD = $(CLIENT_TEST_LIBS)

# Snapshots, events and uncached replies read from a flat view against the
# same lines read through jansson (a stand-in daemon, no cbd). Static: it
# calls libcbclient's internals.
check_PROGRAMS += tests/check_client_snapshot
tests_check_client_snapshot_SOURCES = tests/check_client_snapshot.c tests/test-rand.h \
	tests/client-test.c tests/client-test.h tests/client-readers.c tests/client-readers.h
tests_check_client_snapshot_CFLAGS = $(CLIENT_TEST_CFLAGS)
tests_check_client_snapshot_LDFLAGS = -static
tests_check_client_snapshot_LDADD = $(CLIENT_TEST_LIBS)

# Against real cbd processes, started with the daemon's test harness.
check_PROGRAMS += tests/check_client_remote
tests_check_client_remote_SOURCES = tests/check_client_remote.c \
	tests/client-test.c tests/client-test.h \
	tests/cbd-harness.c tests/cbd-harness.h
tests_check_client_remote_CFLAGS = $(CLIENT_TEST_CFLAGS)
tests_check_client_remote_LDADD = $(CLIENT_TEST_LIBS)

# Protocol 3's bulkhead and retry budget through the breaker and
# cbc_retry_execute, against real cbd processes.
check_PROGRAMS += tests/check_client_bulkhead
tests_check_client_bulkhead_SOURCES = tests/check_client_bulkhead.c \
	tests/cbd-harness.c tests/cbd-harness.h
tests_check_client_bulkhead_CFLAGS = $(CLIENT_TEST_CFLAGS)
tests_check_client_bulkhead_LDADD = $(CLIENT_TEST_LIBS)

# Latency measurements (built, not run by make check): see its header.
noinst_PROGRAMS += tests/bench_client
tests_bench_client_SOURCES = tests/bench_client.c \
	tests/cbd-harness.c tests/cbd-harness.h
tests_bench_client_CFLAGS = $(CLIENT_TEST_CFLAGS)
tests_bench_client_LDADD = client/libcbclient.la $(JANSSON_LIBS) -lpthread

# Both client test programs again under valgrind: any memory error or leak
# in libcbclient fails (skipped without valgrind and in sanitizer builds).
if SLOW_TESTS
TESTS += tests/client-valgrind.sh
endif
EXTRA_DIST += tests/client-valgrind.sh
tests/client-valgrind.log: tests/check_client_local$(EXEEXT) tests/check_client_remote$(EXEEXT) \
	tests/check_client_retry$(EXEEXT) tests/check_client_snapshot$(EXEEXT) \
	tests/check_client_bulkhead$(EXEEXT)

# cbc_retry_* in virtual time on a local store (no daemon).
check_PROGRAMS += tests/check_client_retry
tests_check_client_retry_SOURCES = tests/check_client_retry.c
tests_check_client_retry_CFLAGS = $(CLIENT_TEST_CFLAGS)
tests_check_client_retry_LDADD = $(CLIENT_TEST_LIBS)

# Instructions per event line in a watching process (built, not run by
# make check): see its header. Static: it calls libcbclient's internals.
noinst_PROGRAMS += tests/bench-cache-line
tests_bench_cache_line_SOURCES = tests/bench-cache-line.c
tests_bench_cache_line_CFLAGS = $(CLIENT_TEST_CFLAGS)
tests_bench_cache_line_LDFLAGS = -static
tests_bench_cache_line_LDADD = client/libcbclient.la $(JANSSON_LIBS) -lpthread
