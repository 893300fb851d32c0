# client/local.mk — build rules for client/ (included by the top Makefile.am).
pkgconfigdir = $(libdir)/pkgconfig
