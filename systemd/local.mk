# systemd/local.mk — build rules for systemd/ (included by the top Makefile.am).
