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

#include "scrape.h"

/* Begin s: the metrics text, its daemon-wide series made now (in
 * s->out), its circuits' series in steps (scrape.h; in_steps as there).
 * False when out of memory. */
bool metrics_scrape(scrape *s, bool in_steps);

/* The whole text at once, made no further than the first line end past
 * `most` bytes (0: all; the metrics op cuts it there); NULL when out of
 * memory. Free with free(). */
char *metrics_text(size_t most, size_t *len);

#endif
