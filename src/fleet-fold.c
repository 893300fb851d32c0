/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fleet-fold.c — a fold's outcomes as the circuit script's runs, and its
 * answers back to each outcome (see fleet-fold.h).
 */
#include <string.h>

#include "fleet-fold.h"

/* Would the script apply b exactly as a (the run a ends may take b)? */
static bool
same_outcome(const fleet_fold_item *a, const fleet_fold_item *b, const cb_policy *policy)
{
	if (a->want || b->want || a->kind != b->kind || a->count > 1 || b->count > 1)
		return false;
	if (a->kind == 'r')
		return a->value == b->value;
	/* duration_ms counts only against slow_call_ms; the reporter only for
	 * min_reporters > 1 (src/fleet.lua's record and on_outcome). */
	if (policy->slow_call_ms > 0 &&
	    (a->value >= policy->slow_call_ms) != (b->value >= policy->slow_call_ms))
		return false;
	return policy->min_reporters <= 1 || strcmp(a->reporter, b->reporter) == 0;
}

json_t *
fleet_fold_extra(const fleet_fold_item *items, size_t n, const cb_policy *policy,
    fleet_fold_place *place)
{
	json_t *runs = json_array(), *extra = json_object();
	json_t *run = NULL;
	size_t start = 0;

	if (runs == NULL || extra == NULL || json_object_set(extra, "items", runs) != 0)
		goto fail;
	for (size_t i = 0; i < n; i++) {
		const fleet_fold_item *it = &items[i];
		char kind[2] = { it->kind, '\0' };

		if (run != NULL && same_outcome(&items[start], it, policy)) {
			json_int_t count = json_integer_value(json_array_get(run, 3)) + 1;

			if (json_array_set_new(run, 3, json_integer(count)) != 0)
				goto fail;
			place[i] = (fleet_fold_place){ (int)json_array_size(runs), (int)count };
			continue;
		}
		if (it->count > 1)
			run = json_pack("[s, I, s, I, i, i]", kind, (json_int_t)it->value,
			    it->reporter != NULL ? it->reporter : "", (json_int_t)it->count,
			    it->want ? 1 : 0, 1);
		else
			run = json_pack("[s, I, s, i, i]", kind, (json_int_t)it->value,
			    it->reporter != NULL ? it->reporter : "", 1, it->want ? 1 : 0);
		if (run == NULL || json_array_append_new(runs, run) != 0)
			goto fail;
		start = i;
		place[i] = (fleet_fold_place){ (int)json_array_size(runs),
			it->count > 1 ? (int)it->count : 1 };
	}
	json_decref(runs);
	return extra;
fail:
	json_decref(runs);
	json_decref(extra);
	return NULL;
}

const json_t *
fleet_fold_answer(const json_t *reply, fleet_fold_place place, size_t *cursor)
{
	const json_t *items = json_object_get(reply, "items");
	const json_t *e = json_array_get(items, *cursor);

	if (e == NULL || json_integer_value(json_array_get(e, 0)) != place.run ||
	    json_integer_value(json_array_get(e, 1)) != place.k)
		return NULL;
	(*cursor)++;
	return e;
}
