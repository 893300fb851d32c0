/* SPDX-License-Identifier: Apache-2.0 */
/*
 * window.h — the sliding window of the failure-rate trip rule (protocol 2,
 * §3): the outcomes of the last `window_size` calls (a count window, two
 * bits a call), or of the last `window_size` ms in 1 s buckets (a time
 * window, 12 bytes a bucket). O(1) per outcome (a time window clears the
 * buckets it skipped over, at most once each).
 *
 * Pure: no I/O, no clock reads; the caller allocates window_bytes() and
 * passes `now`. Shared by cbd and libcbclient's local store.
 */
#ifndef CBD_WINDOW_H
#define CBD_WINDOW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum cb_window_kind {
	CB_WINDOW_COUNT = 0, /* the last window_size calls */
	CB_WINDOW_TIME, /* the calls of the last window_size ms */
} cb_window_kind;

/* Bounds of window_size (spec §3). */
#define CB_WINDOW_COUNT_MIN 1
#define CB_WINDOW_COUNT_MAX 10000
#define CB_WINDOW_TIME_MIN 1000
#define CB_WINDOW_TIME_MAX 3600000
/* A time window's bucket. */
#define CB_WINDOW_BUCKET_MS 1000
/* Most calls a window holds: a time window's calls beyond it (counted
 * successes can bring billions a second) are left out of it, so that its
 * 32-bit counts never wrap. */
#define CB_WINDOW_CALLS_MAX UINT32_MAX

/* What the window holds now. */
typedef struct cb_window_counts {
	uint32_t calls;
	uint32_t failures;
	uint32_t slow;
} cb_window_counts;

typedef struct cb_window {
	uint8_t kind; /* cb_window_kind */
	uint32_t slots; /* count: calls kept; time: buckets */
	uint32_t next; /* count: the slot the next call overwrites */
	int64_t last_second; /* time: the second of the newest bucket */
	cb_window_counts counts; /* count: over the ring; time: see window_counts */
	unsigned char data[]; /* count: 2 bits a slot; time: buckets */
} cb_window;

/* Bytes of a window of this kind and size (window_size: calls or ms). */
size_t window_bytes(cb_window_kind kind, int64_t window_size);

/* Make w (window_bytes() long) an empty window of this kind and size. */
void window_init(cb_window *w, cb_window_kind kind, int64_t window_size);

/* Does w have this kind and size? (A policy change needs a new one.) */
bool window_fits(const cb_window *w, cb_window_kind kind, int64_t window_size);

/* Forget every call (every transition empties the window). */
void window_reset(cb_window *w);

/* Add one call at now. */
void window_add(cb_window *w, bool failure, bool slow, int64_t now);

/* Add n calls alike at now, as n window_add() calls would, in
 * O(min(n, slots)) for a count window and O(1) for a time window once its
 * head is at now. */
void window_add_run(cb_window *w, bool failure, bool slow, uint64_t n, int64_t now);

/* What the window holds at now (a time window drops expired buckets). */
cb_window_counts window_counts(cb_window *w, int64_t now);

#endif
