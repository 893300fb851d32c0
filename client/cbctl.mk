# client/cbctl.mk — cbctl, the operator's command line (built on libcbclient).
bin_PROGRAMS += client/cbctl
client_cbctl_SOURCES = client/cbctl.c
client_cbctl_CFLAGS = $(AM_CFLAGS) $(JANSSON_CFLAGS)
client_cbctl_LDADD = client/libcbclient.la $(JANSSON_LIBS)
dist_man1_MANS = client/cbctl.1
# libcbclient linked in statically: cbctl is one self-contained program (an
# operator's tool keeps working whatever libcbclient.so is installed), and
# the build tree's cbctl is the real binary, not a libtool wrapper script.
client_cbctl_LDFLAGS = $(AM_LDFLAGS) -static
