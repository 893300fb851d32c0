/* SPDX-License-Identifier: Apache-2.0 */
/*
 * trace-load.h — proto/traces/state-machine.json, the state machine's
 * shared trace, for the suites that replay it (check_trace against the
 * circuit table, check_fleet_script against the fleet script).
 */
#ifndef CBD_TRACE_LOAD_H
#define CBD_TRACE_LOAD_H

#include <jansson.h>

/* The trace document (version 1, more than 10 cases), from
 * $CBD_SRCDIR; fails the running check test when it is not. */
json_t *trace_load(void);

#endif
