# conf/local.mk — the example configuration, installed as an example (not
# as the live /etc/cbd/cbd.conf, which belongs to the administrator).
cbdexampledir = $(docdir)/examples
dist_cbdexample_DATA = conf/cbd.conf
