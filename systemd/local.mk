# SPDX-License-Identifier: Apache-2.0
# systemd/local.mk — the unit files (paths filled in at build time), the
# sysusers.d entry for cbd's user, and the metrics timer examples.
systemdsystemunit_DATA = systemd/cbd.service systemd/cbd.socket
dist_sysusers_DATA = systemd/sysusers/cbd.conf
EXTRA_DIST += systemd/cbd.service.in systemd/cbd.socket.in systemd/cbd-metrics.service.in
CLEANFILES += systemd/cbd.service systemd/cbd.socket systemd/cbd-metrics.service

# cbd-metrics.service and .timer (cbctl metrics for node_exporter's
# textfile collector, every 15 s): examples an administrator copies, not
# units installed where systemd would find them.
systemdexampledir = $(docdir)/examples
systemdexample_DATA = systemd/cbd-metrics.service
dist_systemdexample_DATA = systemd/cbd-metrics.timer

# Units name installed paths, so they are made by make, not configure.
systemd/cbd.service systemd/cbd.socket systemd/cbd-metrics.service: Makefile
	$(AM_V_GEN)$(MKDIR_P) systemd && \
	sed -e 's|@sbindir[@]|$(sbindir)|g' -e 's|@sysconfdir[@]|$(sysconfdir)|g' \
	    -e 's|@bindir[@]|$(bindir)|g' \
	    $(srcdir)/$@.in > $@.tmp && mv $@.tmp $@
systemd/cbd.service: $(srcdir)/systemd/cbd.service.in
systemd/cbd.socket: $(srcdir)/systemd/cbd.socket.in
systemd/cbd-metrics.service: $(srcdir)/systemd/cbd-metrics.service.in
