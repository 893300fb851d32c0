/* SPDX-License-Identifier: Apache-2.0 */
/*
 * client-readers.h — libcbclient's two readings of one line from cbd,
 * compared: a snapshot read from a flat view (proto-scan.h) against the
 * same text read through jansson, and two watch caches fed the same line
 * as it is and made non-flat. Each comparison says what differs (a field
 * and both values) instead of asserting, so that check tests and the
 * fuzz target share it. Links libcbclient's internals (static).
 */
#ifndef CBD_TESTS_CLIENT_READERS_H
#define CBD_TESTS_CLIENT_READERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "internal.h"

/* Room for what differs. */
#define READERS_WHY_SIZE 512

/* What one reader made of a snapshot object (the client's and the core's). */
typedef struct reading {
	cbc_status st;
	cbc_error err;
	cbc_snapshot snap;
	bool core_ok;
	proto_error perr;
	cb_snapshot core;
	int64_t retry;
} reading;

/* The first field where a and b differ, with both values, into why;
 * false when they are the same. */
bool snapshot_differ(const cbc_snapshot *a, const cbc_snapshot *b, char *why, size_t size);

/* The readers over a node (each from a fresh copy: its own hints). */
void reading_of_node(const proto_node *n, reading *r);
/* The readers over jansson values, through the json entry points. */
void reading_of_json(const json_t *obj, reading *r);
/* What differs between a (flat) and b (jansson), into why; false if
 * nothing. */
bool readings_differ(const reading *a, const reading *b, char *why, size_t size);

/* Two caches without a connection (no socket there) watching "svc.a":
 * one is fed lines as they are, the other the same lines made non-flat. */
typedef struct cache_pair {
	cbci_cache *cache[2];
	cbci_cache_entry *entry[2];
	uint64_t seen[2];
} cache_pair;

/* False when out of resources. tag makes the caches' paths unique. */
bool cache_pair_open(cache_pair *p, const char *tag);
void cache_pair_close(cache_pair *p);
/* line (len bytes) with an array member appended (outside the flat
 * subset, ignored by every reader) into out; false when line is no
 * object ending in '}' or out is too small. */
bool line_padded(const char *line, size_t len, char *out, size_t size);
/* Feed line to the first cache and padded to the second and compare what
 * they made of it (a fresh snapshot, the counters); false if the same,
 * else true with why. */
bool cache_pair_differ(cache_pair *p, const char *line, size_t len, const char *padded, char *why,
    size_t size);

#endif
