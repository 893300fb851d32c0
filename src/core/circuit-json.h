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

/* A circuit's snapshot object; policy resolved for name, included as the
 * "policy" member only with_policy (protocol 3: policy_rev always). */
json_t *circuit_json_snapshot(const char *name, const ct_view *view, const cb_policy *policy,
    const char *preset, const proto_policy_sources *sources, int64_t now, bool with_policy);

/* A hold as JSON: null, or {"state", "by_uid", "by_user", "reason",
 * "since", "until"}; the totals as {"successes", ...}. NULL: no memory. */
json_t *circuit_json_hold(const ct_hold *hold);
/* A rate circuit's window: {"calls", "failures", "slow", "failure_rate",
 * "slow_call_rate"}, rates in percent (0 when empty). */
json_t *circuit_json_window(const ct_view *view);
json_t *circuit_json_totals(const ct_totals *totals);
/* How strictly holds and totals are read: cbd's state file and the fleet
 * script write every member (strict: one left out or out of range is an
 * error); libcbclient reads replies of cbds of every protocol version
 * (tolerant: a member left out, or null, is not reported). */
typedef enum circuit_json_mode {
	CIRCUIT_JSON_STRICT = 0,
	CIRCUIT_JSON_TOLERANT,
} circuit_json_mode;

/* A hold back into *out: absent or null is no hold; strings point into the
 * node (by_user "" when not given). False with err naming path.member. */
bool circuit_json_hold_read(proto_node *hold, const char *path, circuit_json_mode mode,
    ct_hold *out, proto_error *err);

/* The members of totals, in their bits of *found (CIRCUIT_JSON_TOTALS_*). */
#define CIRCUIT_JSON_TOTALS_COUNT 8
#define CIRCUIT_JSON_TOTALS_ALL 0xffu
/* The first members, protocol 2's: required when strict; protocol 3's
 * (rejected_concurrency, retries, rejected_retry) may be left out (0). */
#define CIRCUIT_JSON_TOTALS_V2 5
/* Totals back into *out: each member found sets its field and its bit in
 * *found (successes 1, failures 2, ignored 4, slow 8, rejected 16,
 * rejected_concurrency 32, retries 64, rejected_retry 128);
 * tolerant, absent or null totals find none. False with err naming
 * path.member. */
bool circuit_json_totals_read(proto_node *totals, const char *path, circuit_json_mode mode,
    ct_totals *out, unsigned *found, proto_error *err);

#endif
