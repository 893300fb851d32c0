# SPDX-License-Identifier: Apache-2.0
# tests/fuzz/local.mk — the adversarial tests: the fuzz targets (request
# path, config loader, libcbclient's readers of cbd's lines), the malloc
# failure sweep and the stress benchmark.
#
# make check replays the seed corpora (tests/fuzz/corpus/*) through the
# targets linked with tests/fuzz/replay.c; no clang needed. A real fuzzing
# session needs clang with libFuzzer, in a build directory of its own:
#
#   mkdir build-fuzz && cd build-fuzz
#   ../configure --enable-fuzzing CC=clang
#   make tests/fuzz/fuzz-request tests/fuzz/fuzz-config tests/fuzz/fuzz-client-line
#   mkdir -p corpus/request corpus/config corpus/client-line
#   tests/fuzz/fuzz-request -max_total_time=600 -max_len=4096 \
#       -dict=../tests/fuzz/request.dict corpus/request ../tests/fuzz/corpus/request
#   tests/fuzz/fuzz-config -max_total_time=600 -max_len=4096 \
#       -dict=../tests/fuzz/config.dict corpus/config ../tests/fuzz/corpus/config
#   tests/fuzz/fuzz-client-line -max_total_time=600 -max_len=4096 \
#       -dict=../tests/fuzz/client-line.dict corpus/client-line \
#       ../tests/fuzz/corpus/client-line
#
# New inputs land in corpus/*; minimize before adding a few to the seeds:
#   tests/fuzz/fuzz-request -merge=1 new-seeds corpus/request
# A crash is saved as crash-*; replay it with tests/fuzz/replay-request FILE.

FUZZ_COMMON = tests/fuzz/fuzz-daemon.c tests/fuzz/fuzz-daemon.h
FUZZ_CFLAGS = $(AM_CFLAGS) $(LIBEVENT_CFLAGS) $(JANSSON_CFLAGS) -I$(top_srcdir)/tests \
	-I$(top_srcdir)/tests/fuzz
FUZZ_LIBS = src/libcbdaemon.la $(LIBEVENT_LIBS) $(JANSSON_LIBS)
FUZZ_CLIENT_LIBS = client/libcbclient.la src/libcbcore.la $(JANSSON_LIBS) -lpthread
EXTRA_DIST += tests/fuzz/corpus tests/fuzz/request.dict tests/fuzz/config.dict \
	tests/fuzz/client-line.dict

# The replays make check runs (CBD_SRCDIR names the corpora).
check_PROGRAMS += tests/fuzz/replay-request
tests_fuzz_replay_request_SOURCES = tests/fuzz/fuzz-request.c tests/fuzz/replay.c $(FUZZ_COMMON)
tests_fuzz_replay_request_CFLAGS = $(FUZZ_CFLAGS) -DFUZZ_CORPUS='"request"'
tests_fuzz_replay_request_LDADD = $(FUZZ_LIBS)

# libcbclient's readers of cbd's lines (static: the client's internals).
check_PROGRAMS += tests/fuzz/replay-client-line
tests_fuzz_replay_client_line_SOURCES = tests/fuzz/fuzz-client-line.c tests/fuzz/replay.c \
	tests/client-readers.c tests/client-readers.h
tests_fuzz_replay_client_line_CFLAGS = $(FUZZ_CFLAGS) -pthread -DFUZZ_CORPUS='"client-line"'
tests_fuzz_replay_client_line_LDFLAGS = -static
tests_fuzz_replay_client_line_LDADD = $(FUZZ_CLIENT_LIBS)

check_PROGRAMS += tests/fuzz/replay-config
tests_fuzz_replay_config_SOURCES = tests/fuzz/fuzz-config.c tests/fuzz/replay.c
tests_fuzz_replay_config_CFLAGS = $(FUZZ_CFLAGS) -DFUZZ_CORPUS='"config"'
tests_fuzz_replay_config_LDADD = $(FUZZ_LIBS)

if ENABLE_FUZZING
# libFuzzer binaries (the same targets, libFuzzer's main).
noinst_PROGRAMS += tests/fuzz/fuzz-request tests/fuzz/fuzz-config tests/fuzz/fuzz-client-line
tests_fuzz_fuzz_request_SOURCES = tests/fuzz/fuzz-request.c $(FUZZ_COMMON)
tests_fuzz_fuzz_request_CFLAGS = $(FUZZ_CFLAGS)
tests_fuzz_fuzz_request_LDFLAGS = $(AM_LDFLAGS) $(FUZZ_LDFLAGS)
tests_fuzz_fuzz_request_LDADD = $(FUZZ_LIBS)
tests_fuzz_fuzz_config_SOURCES = tests/fuzz/fuzz-config.c
tests_fuzz_fuzz_config_CFLAGS = $(FUZZ_CFLAGS)
tests_fuzz_fuzz_config_LDFLAGS = $(AM_LDFLAGS) $(FUZZ_LDFLAGS)
tests_fuzz_fuzz_config_LDADD = $(FUZZ_LIBS)
tests_fuzz_fuzz_client_line_SOURCES = tests/fuzz/fuzz-client-line.c \
	tests/client-readers.c tests/client-readers.h
tests_fuzz_fuzz_client_line_CFLAGS = $(FUZZ_CFLAGS) -pthread
tests_fuzz_fuzz_client_line_LDFLAGS = $(AM_LDFLAGS) $(FUZZ_LDFLAGS) -static
tests_fuzz_fuzz_client_line_LDADD = $(FUZZ_CLIENT_LIBS)
endif

# The malloc failure sweep: the Nth allocation fails, for every N of a
# scripted session. --wrap applies to the objects linked statically (ours:
# the .la convenience libraries); jansson's allocator is set at run time.
check_PROGRAMS += tests/cbd-oom-test
tests_cbd_oom_test_SOURCES = tests/cbd-oom-test.c $(FUZZ_COMMON)
tests_cbd_oom_test_CFLAGS = $(FUZZ_CFLAGS) $(CHECK_CFLAGS)
tests_cbd_oom_test_LDFLAGS = $(AM_LDFLAGS) \
	-Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=strdup,--wrap=strndup \
	-Wl,--wrap=json_loadb
tests_cbd_oom_test_LDADD = tests/libcontract.la $(FUZZ_LIBS) $(CHECK_LIBS)

# The stress benchmark: prints figures, asserts nothing; not run by make check.
#   CBD_BINARY=src/cbd tests/stress [-d SECONDS] [-n SLOWLORIS] [-c CIRCUITS] [-m NAMES]
noinst_PROGRAMS += tests/stress
tests_stress_SOURCES = tests/stress.c tests/cbd-harness.c tests/cbd-harness.h
tests_stress_CFLAGS = $(AM_CFLAGS) -pthread
tests_stress_LDFLAGS = $(AM_LDFLAGS) -pthread

# The sweep again under valgrind (every 10th N; skipped without valgrind
# and in sanitizer builds).
if SLOW_TESTS
TESTS += tests/oom-valgrind.sh
endif
EXTRA_DIST += tests/oom-valgrind.sh
tests/oom-valgrind.log: tests/cbd-oom-test$(EXEEXT)
