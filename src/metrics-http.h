/* SPDX-License-Identifier: Apache-2.0 */
/*
 * metrics-http.h — the metrics port (metrics_listen): GET /metrics over a
 * small HTTP/1.x server of cbd's own, bounded like the socket (protocol 2,
 * §8 and §10): at most metrics_max_connections connections, a header of
 * at most METRICS_HTTP_HEADER_MAX bytes, METRICS_HTTP_TIMEOUT_MS for the
 * whole exchange, and accepting paused (not spinning) while cbd is out of
 * descriptors.
 */
#ifndef CBD_METRICS_HTTP_H
#define CBD_METRICS_HTTP_H

#include <stdbool.h>
#include <stdint.h>

/* Bytes of request line and headers a scraper may send. */
#define METRICS_HTTP_HEADER_MAX 8192
/* A connection's whole exchange (request, reply, close), at most. */
#define METRICS_HTTP_TIMEOUT_MS 10000
/* Pending connections the kernel may queue. */
#define METRICS_HTTP_BACKLOG 64
/* Accepting pauses this long when cbd is out of descriptors. */
#define METRICS_HTTP_PAUSE_MS 100
/* A reply made in steps (a scrape of more than SCRAPE_AT_ONCE_CIRCUITS
 * circuits) makes its next step only while less than this is unsent:
 * a scraper that reads slowly slows its scrape, not cbd's memory. */
#define METRICS_HTTP_OUT_MAX (256 * 1024)
/* Connections accepted in one turn of the loop, at most. */
#define METRICS_HTTP_ACCEPT_BATCH 16

/* Start serving on cbd.conf.metrics_listen (when set); false (logged)
 * when it cannot be bound. */
bool metrics_http_start(void);

/* Stop serving; close every connection. */
void metrics_http_stop(void);

/* HTTP connections open now (stats, tests). */
uint64_t metrics_http_connections(void);

#endif
