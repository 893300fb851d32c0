/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fleet-fold.h — a fold of outcomes (issue 24): the outcomes of one circuit
 * that op-fleet.c coalesces into one call of the circuit script's
 * "outcomes" op, as the script's runs (src/fleet.lua), and the way back
 * from the script's per-outcome answers to each outcome. Pure (jansson
 * values in and out): cbd's op-fleet.c and check_fleet_script use the same
 * code.
 */
#ifndef CBD_FLEET_FOLD_H
#define CBD_FLEET_FOLD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "breaker.h"

/* Most outcomes one fold carries (one script call); an outcome past it
 * starts the next fold (counted: stats.backend.fold_full). */
#define FLEET_FOLD_MAX 128

/* One outcome of a fold. */
typedef struct fleet_fold_item {
	char kind; /* 's' success, 'f' failure, 'i' ignore, 'r' rejected */
	int64_t value; /* duration_ms (0: none given); rejected: its count */
	const char *reporter; /* borrowed */
	bool want; /* its request waits for a reply */
	/* A counted success (record_success's count, up to
	 * PROTO_SUCCESS_COUNT_MAX): that many in a run of its own, answered
	 * once, after its last (0 or 1: one outcome). */
	int64_t count;
} fleet_fold_item;

/* Where each outcome of a fold sits in the script's runs (1-based). */
typedef struct fleet_fold_place {
	int run, k;
} fleet_fold_place;

/* The script's extra object {"items": runs} for outcomes items[0..n) of
 * a circuit with policy: consecutive outcomes the script cannot tell
 * apart under that policy (same kind and rejected count; the same side
 * of slow_call_ms; the same reporter when min_reporters > 1; no reply
 * wanted; not counted) share one run. A counted success is a run of its
 * own: [kind, value, reporter, count, want, 1], its count applied in bulk
 * and answered once, at its last. place[i]: outcome i's run and place in
 * it (a counted one's: its last). NULL: out of memory. */
json_t *fleet_fold_extra(const fleet_fold_item *items, size_t n, const cb_policy *policy,
    fleet_fold_place *place);

/* The script's answer for the outcome at place: its [run, k, circuit,
 * change] entry in the reply's items (borrowed), or NULL when it has none
 * (it changed nothing and wants no reply). *cursor (start at 0) walks the
 * entries: ask for the outcomes in order. */
const json_t *fleet_fold_answer(const json_t *reply, fleet_fold_place place, size_t *cursor);

#endif
