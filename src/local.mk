# src/local.mk — the pure core shared by cbd and libcbclient, and the daemon.

# The core: state machine, circuit table, codec. One convenience library so
# the same object code links into cbd, libcbclient and the unit tests.
noinst_LTLIBRARIES += src/libcbcore.la
src_libcbcore_la_SOURCES = \
	src/breaker.c src/breaker.h \
	src/circuit-table.c src/circuit-table.h \
	src/proto.c src/proto.h
src_libcbcore_la_CFLAGS = $(AM_CFLAGS) $(JANSSON_CFLAGS)
src_libcbcore_la_LIBADD = $(JANSSON_LIBS)
