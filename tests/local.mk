# tests/local.mk — test suites (filled in by the foundation work).
TESTS += $(check_PROGRAMS)
