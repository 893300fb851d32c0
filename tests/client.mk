# tests/client.mk — libcbclient tests (included by Makefile.am).
