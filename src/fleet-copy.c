/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fleet-copy.c — this host's copy of the fleet's circuits (see
 * fleet-copy.h): what the circuit script reports of a circuit, read into
 * the circuit table (which answers while Redis is away), its change told
 * through events; the version Redis reported of each, so that an older
 * circuit from a promoted replica is written back rather than taken.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uthash.h>

#include "circuit-json.h"
#include "clock.h"
#include "daemon.h"
#include "events.h"
#include "fleet-copy.h"
#include "fleet.h"
#include "log.h"

/* The version of each copied circuit as Redis last reported it (with its
 * created_at, which tells two circuits of one name apart). */
typedef struct copy_version {
	UT_hash_handle hh;
	int64_t created_at;
	int64_t version;
	/* Freshness (fleet_copy_fresh): the fleet_seq() of the script call
	 * whose reply the copy is (stamped: it was such a reply, read while
	 * the event channel was live), and fleet_seq() when the last event
	 * of this circuit from another host arrived. */
	bool stamped;
	uint64_t stamp;
	uint64_t event_mark;
	char name[];
} copy_version;

static copy_version *versions;
/* The latest event_mark of a forgotten entry: a new entry starts with it
 * (an event must never be forgotten with its entry). */
static uint64_t forgotten_mark;

static const struct {
	const char *name;
	cb_reason reason;
} reason_names[] = {
	{ "failure_threshold", CB_REASON_FAILURE_THRESHOLD },
	{ "failure_rate", CB_REASON_FAILURE_RATE },
	{ "trial_failed", CB_REASON_TRIAL_FAILED },
	{ "trial_succeeded", CB_REASON_TRIAL_SUCCEEDED },
	{ "break_elapsed", CB_REASON_BREAK_ELAPSED },
	{ "forced", CB_REASON_FORCED },
	{ "cas", CB_REASON_CAS },
	{ "held", CB_REASON_HELD },
	{ "hold_expired", CB_REASON_HOLD_EXPIRED },
	{ "released", CB_REASON_RELEASED },
	{ "writeback", CB_REASON_WRITTEN_BACK },
	{ "merged", CB_REASON_MERGED },
};

/* The change a script reply or event reports (reason NONE: none). */
static void
change_from_json(const json_t *j, ct_change *out)
{
	const char *from = json_string_value(json_object_get(j, "from"));
	const char *to = json_string_value(json_object_get(j, "to"));
	const char *reason = json_string_value(json_object_get(j, "reason"));

	memset(out, 0, sizeof *out);
	if (!json_is_object(j) || from == NULL || to == NULL || reason == NULL ||
	    !breaker_state_parse(from, strlen(from), &out->from) ||
	    !breaker_state_parse(to, strlen(to), &out->to))
		return;
	for (size_t i = 0; i < sizeof reason_names / sizeof reason_names[0]; i++) {
		if (strcmp(reason, reason_names[i].name) == 0)
			out->reason = reason_names[i].reason;
	}
	if (out->reason == CB_REASON_NONE)
		out->reason = CB_REASON_FORCED;
}

/* Parse the canonical text of a declared policy ("" = none). */
bool
fleet_copy_declared_parse(const char *text, proto_ctx *out)
{
	json_t *wrap, *ctx;
	proto_error err;
	bool ok;

	memset(out, 0, sizeof *out);
	if (text == NULL || text[0] == '\0')
		return true;
	ctx = json_loads(text, 0, NULL);
	wrap = ctx != NULL ? json_pack("{s:o}", "ctx", ctx) : NULL;
	ok = wrap != NULL && proto_ctx_from_json(wrap, out, &err);
	json_decref(wrap);
	return ok;
}

/* The canonical text of a declared policy: "" for none. NULL: no memory. */
char *
fleet_copy_declared_text(const proto_ctx *declared)
{
	json_t *obj = declared != NULL ? proto_ctx_members_to_json(declared) : json_object();
	char *text;

	if (obj == NULL)
		return NULL;
	text = json_object_size(obj) == 0 ? strdup("")
					  : json_dumps(obj, JSON_COMPACT | JSON_SORT_KEYS);
	json_decref(obj);
	return text;
}

/* What the script reports of a circuit, as a view. Strings point into
 * j; declared receives the parsed policy; reporters (room for
 * CB_REPORTERS_MAX) stands for the reporters the script counted. */
static bool
view_from_json(const char *name, const json_t *j, int64_t now, ct_view *view, proto_ctx *declared,
    cb_reporters *reporters)
{
	const json_t *window = json_object_get(j, "window");
	int64_t break_ms = 0, count;
	proto_policy_sources sources;
	const char *preset;
	proto_error err;
	cb_policy policy;

	proto_node totals = proto_node_json(json_object_get(j, "totals"));
	proto_node hold = proto_node_json(json_object_get(j, "hold"));
	unsigned found;

	memset(view, 0, sizeof *view);
	view->hold.until = CB_TIME_NONE;
	if (!json_is_object(j) || !proto_snapshot_from_json(j, &view->snap, NULL, &err) ||
	    !fleet_copy_declared_parse(json_string_value(json_object_get(j, "declared")),
		declared) ||
	    !circuit_json_totals_read(&totals, "totals", CIRCUIT_JSON_STRICT, &view->totals, &found,
		&err) ||
	    !circuit_json_hold_read(&hold, "hold", CIRCUIT_JSON_STRICT, &view->hold, &err))
		return false;
	view->stored = true;
	view->declared = declared;
	/* As cb_snapshot keeps it: a break break_backoff grew, 0: the policy's. */
	conf_policy(&cbd.conf, name, declared, &policy, &sources, &preset);
	proto_get_int(j, "current_break_ms", 0, CB_DURATION_MAX, false, &break_ms, NULL, &err);
	view->snap.current_break_ms = break_ms;
	count = json_integer_value(json_object_get(j, "slots"));
	view->slots = count > 0 ? (uint64_t)count : 0;
	if (json_is_object(window)) {
		view->has_window = true;
		view->window.calls = (uint32_t)json_integer_value(json_object_get(window, "calls"));
		view->window.failures =
		    (uint32_t)json_integer_value(json_object_get(window, "failures"));
		view->window.slow = (uint32_t)json_integer_value(json_object_get(window, "slow"));
	}
	count = json_integer_value(json_object_get(j, "reporters"));
	if (policy.min_reporters > 1) {
		breaker_reporters_init(reporters, policy.min_reporters);
		for (uint32_t i = 0; i < reporters->slots && (int64_t)i < count; i++)
			reporters->r[i] = (cb_reporter){ .id = (int64_t)i + 1, .at = now };
		view->reporters = reporters;
	}
	return true;
}

static copy_version *
version_find(const char *name)
{
	copy_version *v;

	HASH_FIND(hh, versions, name, strlen(name), v);
	return v;
}

void
fleet_copy_forget(const char *name)
{
	copy_version *v = version_find(name);

	if (v != NULL) {
		if (v->event_mark > forgotten_mark)
			forgotten_mark = v->event_mark;
		HASH_DEL(versions, v);
		free(v);
	}
}

void
fleet_copy_free(void)
{
	copy_version *v, *tmp;

	HASH_ITER (hh, versions, v, tmp) {
		HASH_DEL(versions, v);
		free(v);
	}
	forgotten_mark = 0;
}

/* circuit's version and created_at; false when it reports none (a cbd's
 * script of an earlier version). */
static bool
version_read(const json_t *circuit, int64_t *version, int64_t *created_at)
{
	const json_t *v = json_object_get(circuit, "version");
	const json_t *c = json_object_get(circuit, "created_at");

	if (!json_is_integer(v) || !json_is_integer(c))
		return false;
	*version = json_integer_value(v);
	*created_at = json_integer_value(c);
	return true;
}

/* name's entry, made when missing (NULL: no memory). */
static copy_version *
version_need(const char *name)
{
	copy_version *v = version_find(name);

	if (v == NULL) {
		size_t len = strlen(name);

		v = calloc(1, sizeof *v + len + 1);
		if (v == NULL)
			return NULL;
		memcpy(v->name, name, len + 1);
		v->event_mark = forgotten_mark;
		HASH_ADD_KEYPTR(hh, versions, v->name, len, v);
	}
	return v;
}

/* Remember circuit's version as this host's copy's. */
static copy_version *
version_note(const char *name, const json_t *circuit)
{
	int64_t version, created_at;
	copy_version *v;

	if (!version_read(circuit, &version, &created_at))
		return NULL;
	v = version_need(name);
	if (v == NULL)
		return NULL;
	v->version = version;
	v->created_at = created_at;
	return v;
}

void
fleet_copy_event_arrived(const char *name)
{
	copy_version *v = version_need(name);

	if (v != NULL)
		v->event_mark = fleet_seq();
	else
		forgotten_mark = fleet_seq(); /* every new entry starts stale */
}

bool
fleet_copy_fresh(const char *name)
{
	const copy_version *v = version_find(name);

	return v != NULL && v->stamped && v->stamp >= v->event_mark && fleet_events_fresh(v->stamp);
}

/* Is circuit (Redis's) behind this host's copy: the same circuit at a
 * lower version? */
static bool
version_behind(const char *name, const json_t *circuit)
{
	int64_t version, created_at;
	const copy_version *v = version_find(name);

	return v != NULL && version_read(circuit, &version, &created_at) &&
	    created_at == v->created_at && version < v->version;
}

static void
restore_done(const json_t *reply, void *arg)
{
	char *name = arg;
	fleet_stats *counters = (fleet_stats *)fleet_counters();

	if (reply != NULL) {
		if (json_is_true(json_object_get(reply, "applied"))) {
			counters->restored++;
			log_info("fleet: circuit \"%s\" in redis was older than this host's copy "
				 "(a replica promoted before it had the last changes): written "
				 "back",
			    name);
		}
		/* The copy was in that state: no news here (other hosts get
		 * the change the script published). */
		fleet_copy_apply(name, json_object_get(reply, "circuit"), NULL, clock_realtime_ms(),
		    false, NULL);
	}
	free(name);
}

/* Write this host's copy of name back to Redis (restore) at its version. */
static void
restore_send(const char *name)
{
	const copy_version *v = version_find(name);
	int64_t now = clock_realtime_ms();
	json_t *circuit, *args;
	ct_change lapsed;
	ct_view view;
	char *copy;

	if (v == NULL)
		return;
	circuit_table_get(cbd.table, name, now, &view, &lapsed);
	events_changed(name, &lapsed);
	if (!view.stored)
		return;
	circuit = proto_snapshot_to_json(name, &view.snap, 0);
	if (circuit == NULL)
		return;
	if (json_object_set_new(circuit, "current_break_ms",
		json_integer(view.snap.current_break_ms)) != 0 ||
	    json_object_set_new(circuit, "hold",
		view.hold.held ? circuit_json_hold(&view.hold) : json_null()) != 0 ||
	    json_object_set_new(circuit, "version", json_integer(v->version)) != 0 ||
	    json_object_set_new(circuit, "created_at", json_integer(v->created_at)) != 0) {
		json_decref(circuit);
		return;
	}
	args = json_pack("{s:o}", "circuit", circuit);
	copy = strdup(name);
	if (args != NULL && copy != NULL &&
	    fleet_call_script("restore", name, args, restore_done, copy) != NULL)
		copy = NULL;
	free(copy);
	json_decref(args);
}

/* What copy_apply's view points into besides the JSON it read: valid
 * until the next copy_apply (cbd is single-threaded). */
static proto_ctx copy_declared;
static union {
	cb_reporters r;
	unsigned char room[sizeof(cb_reporters) + CB_REPORTERS_MAX * sizeof(cb_reporter)];
} copy_reporters;

/* Make this host's copy of name what the script reports (circuit NULL
 * or null: not stored), log and broadcast its change. *view (may be
 * NULL) receives the script's view. Returns whether circuit was read. */
static bool
copy_apply(const char *name, const json_t *circuit, const json_t *change_json, int64_t now,
    bool deleted_event, ct_view *view, bool stamped, uint64_t stamp)
{
	ct_view local;
	ct_change change;
	copy_version *v = version_find(name);

	if (view == NULL)
		view = &local;
	/* Fresh again only when a reply says so (fleet_copy_apply_fresh). */
	if (v != NULL)
		v->stamped = false;
	if (circuit == NULL || json_is_null(circuit)) {
		memset(view, 0, sizeof *view);
		breaker_snapshot_init(&view->snap);
		view->hold.until = CB_TIME_NONE;
		fleet_copy_forget(name);
		if (circuit_table_delete(cbd.table, name) && deleted_event) {
			events_deleted(name);
		}
		view->policy_rev = circuit_table_policy_rev(cbd.table, name);
		return true;
	}
	if (!view_from_json(name, circuit, now, view, &copy_declared, &copy_reporters.r)) {
		log_warning("fleet: cannot read the circuit script's view of a circuit");
		return false;
	}
	if (version_behind(name, circuit)) {
		/* Redis lost changes this host saw: its copy stays, and is
		 * written back. */
		restore_send(name);
		return true;
	}
	v = version_note(name, circuit);
	if (v != NULL && stamped) {
		v->stamped = true;
		v->stamp = stamp;
	}
	/* Only a cache: a refused restore (max_circuits) leaves the copy out. */
	circuit_table_restore(cbd.table, name, view, clock_realtime_ms());
	/* The copy's (kept across refreshes of one policy: protocol 3). */
	view->policy_rev = circuit_table_policy_rev(cbd.table, name);
	change_from_json(change_json, &change);
	/* Per-circuit transitions count the copy's changes, as
	 * stats.transitions does (events_changed). */
	if (change.reason != CB_REASON_NONE)
		circuit_table_count_transition(cbd.table, name, change.from, change.to);
	events_changed(name, &change);
	return true;
}

bool
fleet_copy_apply(const char *name, const json_t *circuit, const json_t *change_json, int64_t now,
    bool deleted_event, ct_view *view)
{
	return copy_apply(name, circuit, change_json, now, deleted_event, view, false, 0);
}

bool
fleet_copy_apply_fresh(const char *name, const json_t *circuit, const json_t *change_json,
    int64_t now, bool deleted_event, ct_view *view, uint64_t stamp)
{
	return copy_apply(name, circuit, change_json, now, deleted_event, view, true, stamp);
}
