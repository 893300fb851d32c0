# client/cbctl.mk — cbctl, the operator's command line (built on libcbclient).
bin_PROGRAMS += client/cbctl
client_cbctl_SOURCES = client/cbctl.c
client_cbctl_CFLAGS = $(AM_CFLAGS) $(JANSSON_CFLAGS)
client_cbctl_LDADD = client/libcbclient.la $(JANSSON_LIBS)
dist_man1_MANS = client/cbctl.1
