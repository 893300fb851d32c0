# proto/local.mk — build rules for proto/ (included by the top Makefile.am).
