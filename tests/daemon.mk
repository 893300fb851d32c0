# tests/daemon.mk — integration tests against a real cbd (included by Makefile.am).
