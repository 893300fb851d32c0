/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fleet-sentinel.h — fleet mode with redis = sentinel://...: asking the
 * sentinels (each in turn) which server is the master, and watching one of
 * them for +switch-master. Transport only: what a new master means for
 * the link to Redis is fleet.c's.
 */
#ifndef CBD_FLEET_SENTINEL_H
#define CBD_FLEET_SENTINEL_H

#include <stdbool.h>

#include "conf.h"

/* How long a sentinel may take to name the master before the next one is
 * asked (ms; at least redis_timeout_ms). */
#define FLEET_SENTINEL_TIMEOUT_MS 1000

/* A sentinel named host:port the master: asked (switched false), or a
 * +switch-master message (switched true). */
typedef void (*fleet_sentinel_master_fn)(const char *host, int port, bool switched);
/* No sentinel named the master (each was asked once). */
typedef void (*fleet_sentinel_none_fn)(void);

/* Start with the parsed redis key (borrowed until fleet_sentinel_free)
 * and the handlers; false on no memory. */
bool fleet_sentinel_start(const conf_redis_address *conf, fleet_sentinel_master_fn on_master,
    fleet_sentinel_none_fn on_none);
void fleet_sentinel_free(void);

/* Ask the sentinels for the master, from the first listed (nothing when
 * already asking); the answer comes by on_master or on_none. */
void fleet_sentinel_ask(void);
/* Are the sentinels being asked? */
bool fleet_sentinel_asking(void);
/* Watch the sentinel that named the master last for +switch-master (a
 * watch lost is taken up again by the next call). */
void fleet_sentinel_watch(void);

#endif
