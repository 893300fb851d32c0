# systemd/local.mk — the unit files (paths filled in at build time) and the
# sysusers.d entry for cbd's user.
systemdsystemunit_DATA = systemd/cbd.service systemd/cbd.socket
dist_sysusers_DATA = systemd/sysusers/cbd.conf
EXTRA_DIST += systemd/cbd.service.in systemd/cbd.socket.in
CLEANFILES += systemd/cbd.service systemd/cbd.socket

# Units name installed paths, so they are made by make, not configure.
systemd/cbd.service systemd/cbd.socket: Makefile
	$(AM_V_GEN)$(MKDIR_P) systemd && \
	sed -e 's|@sbindir[@]|$(sbindir)|g' -e 's|@sysconfdir[@]|$(sysconfdir)|g' \
	    $(srcdir)/$@.in > $@.tmp && mv $@.tmp $@
systemd/cbd.service: $(srcdir)/systemd/cbd.service.in
systemd/cbd.socket: $(srcdir)/systemd/cbd.socket.in
