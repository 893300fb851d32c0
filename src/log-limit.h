/* SPDX-License-Identifier: Apache-2.0 */
/*
 * log-limit.h — rate limiting of the transition log lines, per circuit,
 * with a summary of what was suppressed.
 */
#ifndef CBD_LOG_LIMIT_H
#define CBD_LOG_LIMIT_H

#include <stdbool.h>
#include <stdint.h>

/* Transition lines logged per circuit in one window, at most. */
#define LOG_LIMIT_BURST 5
/* The window: summaries are logged, and counts start again, this often. */
#define LOG_LIMIT_WINDOW_MS 10000
/* Circuits tracked in one window; transitions of others are counted
 * together once this many circuits changed. */
#define LOG_LIMIT_NAMES_MAX 1024

/* May a transition of circuit `name` be logged? False: it is counted
 * (stats.limits) and summarized when the window ends. */
bool log_limit_allow(const char *name);

/* End the window (now, monotonic ms): log "suppressed N transitions of
 * NAME in the last M s" for each circuit that had lines suppressed, and
 * forget every count. */
void log_limit_flush(int64_t now);

/* Forget everything without logging. */
void log_limit_free(void);

#endif
