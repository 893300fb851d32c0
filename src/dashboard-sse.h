/* SPDX-License-Identifier: Apache-2.0 */
/*
 * dashboard-sse.h — the dashboard's Server-Sent Events streams (GET
 * /events on metrics_listen): at most dashboard_max_clients at once, each
 * sent every change, policy and delete (what a watcher of every circuit is
 * sent) and a stats tick every DASHBOARD_TICK_MS. The tick runs while
 * metrics_listen is set, streams or not: it keeps the history. A stream whose unsent
 * output would pass max_output_bytes is dropped, like a slow watcher:
 * nothing waits for a browser.
 */
#ifndef CBD_DASHBOARD_SSE_H
#define CBD_DASHBOARD_SSE_H

#include <stdbool.h>
#include <stdint.h>

#include "circuit-table.h"
#include "conf.h"

/* Start the stats tick (metrics_listen began); false when out of
 * memory. */
bool dashboard_sse_start(void);

/* Is there room for one more stream? (false: counted as a limit hit). */
bool dashboard_sse_room(void);

/* fd (non-blocking, a request for /events read) becomes a stream: the
 * reply's head goes out first. Takes fd (closed on failure). */
bool dashboard_sse_attach(int fd);

/* The fan-out (events.c): a change, a delete, a circuit whose policy_rev
 * a reload (to fresh) renewed (called from the table's walk: view has
 * the new rev). */
void dashboard_sse_changed(const char *name, const ct_change *change);
void dashboard_sse_deleted(const char *name, const char *reason);
void dashboard_sse_policy_renewed(const char *name, const ct_view *view, const cbd_conf *fresh);

/* Streams open now (stats, tests). */
uint64_t dashboard_sse_clients(void);

/* Close every stream and stop the tick (exit, metrics_listen stopped). */
void dashboard_sse_stop(void);

#endif
