/* SPDX-License-Identifier: Apache-2.0 */
/*
 * metrics.h — Prometheus metrics (protocol 2, §8): the text exposition
 * format 0.0.4 of cbd's counters and of its circuits, for the `metrics` op
 * and for `GET /metrics` on `metrics_listen` (metrics-http.c).
 */
#ifndef CBD_METRICS_H
#define CBD_METRICS_H

#include <stdbool.h>
#include <stddef.h>

/* The whole text; NULL when out of memory. Free with free(). */
char *metrics_text(size_t *len);

#endif
