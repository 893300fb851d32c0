/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fleet-args.c — the circuit script's positional arguments from a request
 * object (see fleet-args.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fleet-args.h"

/* The policy's members in the order the script reads them (ARGV[7]). */
static const char *const policy_members[] = { "trip", "failure_threshold", "success_threshold",
	"break_ms", "half_open_max", "slot_ttl_ms", "max_gap_ms", "window", "window_size",
	"minimum_calls", "failure_rate", "slow_call_ms", "slow_call_rate", "min_reporters",
	"reporter_window_ms", "break_backoff", "break_max_ms" };

/* args' policy object as the script reads it: its members' values in
 * policy_members order, one space apart; "" when absent. NULL when a
 * member is missing or not a string or integer, or out of memory. */
static char *
policy_text(const json_t *policy)
{
	char text[FLEET_POLICY_TEXT_MAX];
	size_t len = 0;

	if (policy == NULL || json_is_null(policy))
		return strdup("");
	for (size_t i = 0; i < sizeof policy_members / sizeof policy_members[0]; i++) {
		const json_t *v = json_object_get(policy, policy_members[i]);
		int n;

		if (json_is_string(v))
			n = snprintf(text + len, sizeof text - len, "%s%s", i > 0 ? " " : "",
			    json_string_value(v));
		else if (json_is_integer(v))
			n = snprintf(text + len, sizeof text - len, "%s%" JSON_INTEGER_FORMAT,
			    i > 0 ? " " : "", json_integer_value(v));
		else
			return NULL;
		if (n < 0 || (size_t)n >= sizeof text - len)
			return NULL;
		len += (size_t)n;
	}
	return strdup(text);
}

/* A string member ("" when absent or null), or the text of an integer
 * member. NULL: another type, or out of memory. */
static char *
member_text(const json_t *v)
{
	char num[32];

	if (v == NULL || json_is_null(v))
		return strdup("");
	if (json_is_string(v))
		return strdup(json_string_value(v));
	if (json_is_integer(v)) {
		snprintf(num, sizeof num, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
		return strdup(num);
	}
	return NULL;
}

/* The script's arguments after op and channel (src/fleet.lua's header)
 * from a request object: name and origin as given, the hot members each
 * in its place, every other member in the extra object. False when a
 * member has the wrong type, or out of memory (argv then all NULL). */
bool
fleet_args_make(const char *name, const char *origin, const json_t *args, char *argv[FLEET_ARGS])
{
	static const char *const hot[] = { "name", "origin", "now", "declared", "policy",
		"reporter", "duration_ms", "token" };
	const json_t *declared = json_object_get(args, "declared");
	json_t *extra = json_object();
	const char *key;
	json_t *v;
	bool ok;

	memset(argv, 0, FLEET_ARGS * sizeof argv[0]);
	/* Every other member (an op's own: from, to, state, hold, circuit,
	 * action, known, ...) goes in the extra object. */
	json_object_foreach ((json_t *)args, key, v) {
		bool is_hot = false;

		for (size_t i = 0; i < sizeof hot / sizeof hot[0]; i++)
			is_hot = is_hot || strcmp(key, hot[i]) == 0;
		if (!is_hot && extra != NULL && json_object_set(extra, key, v) != 0) {
			json_decref(extra);
			extra = NULL;
		}
	}
	argv[FLEET_ARG_NAME] = strdup(name);
	argv[FLEET_ARG_ORIGIN] = strdup(origin);
	argv[FLEET_ARG_NOW] = member_text(json_object_get(args, "now"));
	/* "-": not given (the call never mismatches a stored declared). */
	argv[FLEET_ARG_DECLARED] = json_is_string(declared) ? strdup(json_string_value(declared))
	    : declared == NULL || json_is_null(declared)    ? strdup("-")
							    : NULL;
	argv[FLEET_ARG_POLICY] = policy_text(json_object_get(args, "policy"));
	argv[FLEET_ARG_REPORTER] = member_text(json_object_get(args, "reporter"));
	argv[FLEET_ARG_DURATION] = member_text(json_object_get(args, "duration_ms"));
	argv[FLEET_ARG_TOKEN] = member_text(json_object_get(args, "token"));
	argv[FLEET_ARG_EXTRA] = extra == NULL ? NULL
	    : json_object_size(extra) == 0    ? strdup("")
					      : json_dumps(extra, JSON_COMPACT);
	json_decref(extra);
	ok = true;
	for (int i = 0; i < FLEET_ARGS; i++)
		ok = ok && argv[i] != NULL;
	if (!ok)
		fleet_args_free(argv);
	return ok;
}

void
fleet_args_free(char *argv[FLEET_ARGS])
{
	for (int i = 0; i < FLEET_ARGS; i++) {
		free(argv[i]);
		argv[i] = NULL;
	}
}
