/* SPDX-License-Identifier: Apache-2.0 */
/*
 * housekeeping.h — cbd's periodic chores on its own clock: ending holds
 * whose ttl ran out, reclaiming idle circuits, and keeping the state file
 * (persist.c) up to date: a change's append starts once the loop's turn
 * that made it ends (or the batch in flight is done), compactions and
 * retries after a failed write at the next tick.
 */
#ifndef CBD_HOUSEKEEPING_H
#define CBD_HOUSEKEEPING_H

#include <stdbool.h>

/* How often the chores run. */
#define HOUSEKEEPING_INTERVAL_MS 50
/* Idle circuits reclaimed per run at most (the rest wait for the next). */
#define HOUSEKEEPING_RECLAIM_BUDGET 10000

/* Load the state file (when configured) and start the timer. */
void housekeeping_start(void);

/* Stop: end a compaction in progress, let the journal's writer finish
 * its batch, then write the state file in process (shutdown). */
void housekeeping_stop(void);

/* Free the timer and signal events. */
void housekeeping_free(void);

#endif
