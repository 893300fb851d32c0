/* SPDX-License-Identifier: Apache-2.0 */
/*
 * metrics.h — Prometheus metrics (protocol 2, §8): the text exposition
 * format 0.0.4 of cbd's counters and of its circuits, for the `metrics` op
 * and for `GET /metrics` on `metrics_listen` (libevent's HTTP server,
 * loopback addresses only).
 */
#ifndef CBD_METRICS_H
#define CBD_METRICS_H

#include <stdbool.h>
#include <stddef.h>

/* The whole text; NULL when out of memory. Free with free(). */
char *metrics_text(size_t *len);

/* Start serving on cbd.conf.metrics_listen (when set); false (logged)
 * when it cannot be bound. */
bool metrics_http_start(void);

/* Stop serving and free the server. */
void metrics_http_stop(void);

#endif
