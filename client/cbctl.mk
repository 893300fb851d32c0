# SPDX-License-Identifier: Apache-2.0
# client/cbctl.mk — cbctl, the operator's command line (built on libcbclient),
# its manual page and its bash and zsh completion.
bin_PROGRAMS += client/cbctl
client_cbctl_SOURCES = client/cbctl.c client/cbctl.h client/cbctl-stats.c \
	client/cbctl-watch.c client/cbctl-reload.c client/cbctl-socket.c client/cbctl-top.c
client_cbctl_CFLAGS = $(AM_CFLAGS) $(JANSSON_CFLAGS)
client_cbctl_LDADD = client/libcbclient.la $(JANSSON_LIBS)
dist_man1_MANS = client/cbctl.1
# libcbclient linked in statically: cbctl is one self-contained program (an
# operator's tool keeps working whatever libcbclient.so is installed), and
# the build tree's cbctl is the real binary, not a libtool wrapper script.
client_cbctl_LDFLAGS = $(AM_LDFLAGS) -static

# Shell completion, where bash-completion and zsh look for it. bash's
# loader wants the file named after the command: cbctl.bash is installed
# as cbctl (a copy made by make).
bashcompletiondir = $(datadir)/bash-completion/completions
bashcompletion_DATA = client/completion/cbctl
zshcompletiondir = $(datadir)/zsh/site-functions
dist_zshcompletion_DATA = client/completion/_cbctl
EXTRA_DIST += client/completion/cbctl.bash
CLEANFILES += client/completion/cbctl
client/completion/cbctl: $(srcdir)/client/completion/cbctl.bash
	$(AM_V_GEN)$(MKDIR_P) client/completion && \
	cp $(srcdir)/client/completion/cbctl.bash $@.tmp && mv $@.tmp $@
