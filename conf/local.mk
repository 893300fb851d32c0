# SPDX-License-Identifier: Apache-2.0
# conf/local.mk — the example configuration, installed as an example (not
# as the live /etc/cbd/cbd.conf, which belongs to the administrator).
cbdexampledir = $(docdir)/examples
dist_cbdexample_DATA = conf/cbd.conf conf/grafana-cbd.json conf/cbd-alerts.yml

# The live config: installed only when absent, so that reinstalling never
# overwrites an administrator's file (cbd.service reads it from here).
cbdconfdir = $(sysconfdir)/cbd
install-data-local: install-cbd-conf
install-cbd-conf:
	$(MKDIR_P) '$(DESTDIR)$(cbdconfdir)'
	test -f '$(DESTDIR)$(cbdconfdir)/cbd.conf' || \
	    $(INSTALL_DATA) '$(srcdir)/conf/cbd.conf' '$(DESTDIR)$(cbdconfdir)/cbd.conf'
uninstall-local: uninstall-cbd-conf
uninstall-cbd-conf:
	if cmp -s '$(srcdir)/conf/cbd.conf' '$(DESTDIR)$(cbdconfdir)/cbd.conf'; then \
	    rm -f '$(DESTDIR)$(cbdconfdir)/cbd.conf'; fi
.PHONY: install-cbd-conf uninstall-cbd-conf
