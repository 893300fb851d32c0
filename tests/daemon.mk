# tests/daemon.mk — integration tests against a real cbd (included by Makefile.am).

# Shared by every cbd integration test (and by libcbclient's remote-store
# tests, which need only cbd-harness.c).
DAEMON_TEST_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS) $(JANSSON_CFLAGS)
DAEMON_TEST_LIBS = $(CHECK_LIBS) $(JANSSON_LIBS)
DAEMON_TEST_COMMON = tests/cbd-harness.c tests/cbd-harness.h \
	tests/daemon-util.c tests/daemon-util.h

check_PROGRAMS += tests/cbd-ops-test
tests_cbd_ops_test_SOURCES = tests/cbd-ops-test.c $(DAEMON_TEST_COMMON)
tests_cbd_ops_test_CFLAGS = $(DAEMON_TEST_CFLAGS)
tests_cbd_ops_test_LDADD = $(DAEMON_TEST_LIBS)
