/* SPDX-License-Identifier: Apache-2.0 */
/*
 * log-limit.h — rate limiting of log lines that a peer or a stuck disk can
 * repeat without end (circuit transitions, policy conflicts, state file
 * errors, the fleet script's errors), per kind and name, with a summary of
 * what was suppressed.
 */
#ifndef CBD_LOG_LIMIT_H
#define CBD_LOG_LIMIT_H

#include <stdbool.h>
#include <stdint.h>

/* Lines logged per kind and name in one window, at most. */
#define LOG_LIMIT_BURST 5
/* The window: summaries are logged, and counts start again, this often. */
#define LOG_LIMIT_WINDOW_MS 10000
/* Names tracked in one window (all kinds together); lines of others are
 * counted together, per kind, once this many names were seen. */
#define LOG_LIMIT_NAMES_MAX 1024

/* What a rate-limited line is about; each kind has its stats.limits
 * counter and its summary line. */
typedef enum log_limit_kind {
	LOG_LIMIT_TRANSITION = 0, /* a circuit's state change (name: the circuit) */
	LOG_LIMIT_POLICY_CONFLICT, /* a policy_conflict warning (name: the circuit) */
	LOG_LIMIT_STATE_FILE, /* a state file write that failed (name: "") */
	LOG_LIMIT_FLEET_SCRIPT, /* the fleet's circuit script failed (name: "") */
	LOG_LIMIT_KIND_COUNT,
} log_limit_kind;

/* May a transition of circuit `name` be logged? False: it is counted
 * (stats.limits) and summarized when the window ends. */
bool log_limit_allow(const char *name);

/* May a line of `kind` about `name` be logged? As log_limit_allow. */
bool log_limit_allow_kind(log_limit_kind kind, const char *name);

/* Would log_limit_allow_kind allow it now? Counts nothing (for a line
 * another process logs, such as the state file writer's). */
bool log_limit_would_allow(log_limit_kind kind, const char *name);

/* End the window (now, monotonic ms): log "suppressed N transitions of
 * NAME in the last M s" (and the like for the other kinds) for each name
 * that had lines suppressed, and forget every count. */
void log_limit_flush(int64_t now);

/* Forget everything without logging. */
void log_limit_free(void);

#endif
