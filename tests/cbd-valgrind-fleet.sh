#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# tests/cbd-valgrind-fleet.sh — the second half of tests/cbd-valgrind.sh:
# the fleet and dashboard suites with every cbd under valgrind.
CBD_VALGRIND_TESTS="cbd-fleet-test cbd-dashboard-test" CBD_VALGRIND_NAME=cbd-valgrind-fleet \
	exec ${SHELL:-/bin/sh} "$(dirname "$0")/cbd-valgrind.sh"
