/* SPDX-License-Identifier: Apache-2.0 */
/*
 * circuit-json.h — a circuit as jansson values: the snapshot object of
 * protocol 2 (policy, hold, totals, window) as watch events, the state
 * file and the fleet script exchange it, and the hold and totals read
 * back. The hot path writes the same text without jansson (encode.h).
 */
#ifndef CBD_CIRCUIT_JSON_H
#define CBD_CIRCUIT_JSON_H

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "breaker.h"
#include "circuit-table.h"
#include "proto.h"

/* A circuit's full snapshot object; policy resolved for name. */
json_t *circuit_json_snapshot(const char *name, const ct_view *view, const cb_policy *policy,
    const char *preset, const proto_policy_sources *sources, int64_t now);

/* A hold as JSON: null, or {"state", "by_uid", "by_user", "reason",
 * "since", "until"}; the totals as {"successes", ...}. NULL: no memory. */
json_t *circuit_json_hold(const ct_hold *hold);
/* A rate circuit's window: {"calls", "failures", "slow", "failure_rate",
 * "slow_call_rate"}, rates in percent (0 when empty). */
json_t *circuit_json_window(const ct_view *view);
json_t *circuit_json_totals(const ct_totals *totals);
/* Read them back (a hold: null or absent is no hold; strings point into
 * the JSON). False with err naming the member. */
bool circuit_json_hold_read(const json_t *hold, ct_hold *out, proto_error *err);
bool circuit_json_totals_read(const json_t *totals, ct_totals *out, proto_error *err);

#endif
