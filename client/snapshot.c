/* SPDX-License-Identifier: Apache-2.0 */
/*
 * snapshot.c — protocol 2's snapshot members (hold, totals, policy with
 * its sources, current_break_ms, a rate circuit's window, reporters) read
 * into the public snapshot, and the conversions between the public
 * snapshot and the core's, and the policy kept per circuit with its
 * policy_rev (protocol 3's compact snapshots). Tolerant of a protocol 1
 * cbd: an absent member reads as not held, totals -1, policy not known.
 * Protocol 3's compact snapshots: policy may be absent (not known) and
 * policy_rev present (0 when absent: a protocol 1 or 2 cbd).
 * Strict on what is there: a mistyped member is CBC_EPROTO naming it.
 * Policy keys this library does not know are skipped (later protocol
 * versions add keys).
 */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"

static const char *const source_names[] = {
	[CBC_SOURCE_NONE] = "none",
	[CBC_SOURCE_BUILTIN] = "builtin",
	[CBC_SOURCE_DEFAULTS] = "defaults",
	[CBC_SOURCE_CLIENT] = "client",
	[CBC_SOURCE_CONFIG] = "config",
	[CBC_SOURCE_OTHER] = "other",
};

#define SOURCE_COUNT (sizeof source_names / sizeof source_names[0])

const char *
cbc_policy_source_name(cbc_policy_source source)
{
	if ((unsigned)source >= SOURCE_COUNT)
		return "other";
	return source_names[source];
}

/* The source of a wire name; CBC_SOURCE_OTHER for a name we do not know. */
static cbc_policy_source
source_parse(const char *text)
{
	for (size_t i = CBC_SOURCE_BUILTIN; i < CBC_SOURCE_OTHER; i++)
		if (strcmp(text, source_names[i]) == 0)
			return (cbc_policy_source)i;
	return CBC_SOURCE_OTHER;
}

/* How a policy key is written. */
typedef enum policy_kind {
	POLICY_INT = 0, /* an integer or null */
	POLICY_TRIP, /* "consecutive" | "rate" */
	POLICY_WINDOW, /* "count" | "time" */
	POLICY_PRESET, /* a name or null */
} policy_kind;

/* A policy key this library reads: its wire name, kind and where it goes. */
typedef struct policy_row {
	const char *key;
	policy_kind kind;
	size_t value; /* offset in cbc_policy */
	size_t source; /* offset in cbc_policy_sources */
} policy_row;

#define POLICY_ROW_KIND(k, kind)                                                                   \
	{                                                                                          \
#k, kind, offsetof(cbc_policy, k), offsetof(cbc_policy_sources, k)                 \
	}
#define POLICY_ROW(k) POLICY_ROW_KIND(k, POLICY_INT)

static const policy_row policy_rows[] = {
	POLICY_ROW(failure_threshold),
	POLICY_ROW(success_threshold),
	POLICY_ROW(break_ms),
	POLICY_ROW(half_open_max),
	POLICY_ROW(slot_ttl_ms),
	POLICY_ROW(max_gap_ms),
	POLICY_ROW_KIND(trip, POLICY_TRIP),
	POLICY_ROW_KIND(window, POLICY_WINDOW),
	POLICY_ROW(window_size),
	POLICY_ROW(minimum_calls),
	POLICY_ROW(failure_rate),
	POLICY_ROW(slow_call_ms),
	POLICY_ROW(slow_call_rate),
	POLICY_ROW(min_reporters),
	POLICY_ROW(reporter_window_ms),
	POLICY_ROW(break_backoff),
	POLICY_ROW(break_max_ms),
	POLICY_ROW(max_concurrent),
	POLICY_ROW(retry_budget_percent),
	POLICY_ROW(retry_min_per_s),
	POLICY_ROW_KIND(preset, POLICY_PRESET),
};

#define POLICY_ROW_COUNT (sizeof policy_rows / sizeof policy_rows[0])

/* Largest policy_rev (protocol 3: below 2^32). */
#define POLICY_REV_MAX 4294967295LL

void
cbci_snapshot_v2_clear(cbc_snapshot *out)
{
	memset(&out->hold, 0, sizeof out->hold);
	out->totals.successes = -1;
	out->totals.failures = -1;
	out->totals.ignored = -1;
	out->totals.slow = -1;
	out->totals.rejected = -1;
	out->totals.rejected_concurrency = -1;
	out->totals.retries = -1;
	out->totals.rejected_retry = -1;
	out->in_flight = -1;
	memset(&out->policy, 0, sizeof out->policy);
	out->current_break_ms = -1;
	memset(&out->window, 0, sizeof out->window);
	out->reporters = -1;
	out->policy_rev = 0;
}

/* An optional integer member of obj (path names obj in messages): absent
 * leaves *out alone, null stores null_value. */
static cbc_status
read_int(proto_node *obj, const char *path, const char *key, int64_t null_value, int64_t *out,
    cbc_error *err)
{
	proto_node v = proto_node_get(obj, key);

	switch (proto_node_typeof(&v)) {
	case PROTO_NODE_ABSENT:
		return CBC_OK;
	case PROTO_NODE_NULL:
		*out = null_value;
		return CBC_OK;
	case PROTO_NODE_INT:
		*out = proto_node_int(&v);
		return CBC_OK;
	default:
		return cbci_fail(err, CBC_EPROTO, "reply member %s.%s must be an integer", path,
		    key);
	}
}

/* An optional string member copied into buf; *present says whether it
 * was a string (null and absent are not). */
static cbc_status
read_string(proto_node *obj, const char *path, const char *key, char *buf, size_t size,
    bool *present, cbc_error *err)
{
	proto_node v = proto_node_get(obj, key);
	const char *text;
	size_t len = 0;

	buf[0] = '\0';
	if (present != NULL)
		*present = false;
	if (proto_node_is_absent(&v) || proto_node_is_null(&v))
		return CBC_OK;
	if ((text = proto_node_string(&v, &len)) == NULL)
		return cbci_fail(err, CBC_EPROTO, "reply member %s.%s must be a string", path, key);
	if (len >= size)
		return cbci_fail(err, CBC_EPROTO, "reply member %s.%s is longer than %zu bytes",
		    path, key, size - 1);
	memcpy(buf, text, len + 1);
	if (present != NULL)
		*present = true;
	return CBC_OK;
}

/* Copy text (NULL: none) into buf; false when it does not fit. */
static bool
copy_text(const char *text, char *buf, size_t size)
{
	size_t len = text != NULL ? strlen(text) : 0;

	if (len >= size)
		return false;
	memcpy(buf, text != NULL ? text : "", len + 1);
	return true;
}

/* snapshot.hold: null or {"state", "by_uid", "by_user", "reason", "since",
 * "until"}, read by the core's reader (the one cbd's state file uses). */
static cbc_status
read_hold(proto_node *v, cbc_hold_info *out, cbc_error *err)
{
	static const char path[] = "snapshot.hold";
	proto_error perr;
	cbc_hold_info h;
	ct_hold hold;

	if (!circuit_json_hold_read(v, path, CIRCUIT_JSON_TOLERANT, &hold, &perr))
		return cbci_fail(err, CBC_EPROTO, "reply member %s", perr.message);
	if (!hold.held)
		return CBC_OK;
	memset(&h, 0, sizeof h);
	h.held = true;
	h.state = (cbc_state)hold.state;
	h.by_uid = hold.by_uid;
	h.since = hold.since;
	h.until = hold.until;
	h.has_reason = hold.reason != NULL;
	if (!copy_text(hold.by_user, h.by_user, sizeof h.by_user))
		return cbci_fail(err, CBC_EPROTO,
		    "reply member %s.by_user is longer than %zu bytes", path, sizeof h.by_user - 1);
	if (!copy_text(hold.reason, h.reason, sizeof h.reason))
		return cbci_fail(err, CBC_EPROTO, "reply member %s.reason is longer than %zu bytes",
		    path, sizeof h.reason - 1);
	*out = h;
	return CBC_OK;
}

/* snapshot.totals: {"successes", "failures", "ignored", "slow",
 * "rejected"}, read by the core's reader; a member left out stays -1. */
static cbc_status
read_totals(proto_node *v, cbc_totals *out, cbc_error *err)
{
	proto_error perr;
	ct_totals t;
	unsigned found;

	if (!circuit_json_totals_read(v, "snapshot.totals", CIRCUIT_JSON_TOLERANT, &t, &found,
		&perr))
		return cbci_fail(err, CBC_EPROTO, "reply member %s", perr.message);
	if (found & 1u)
		out->successes = (int64_t)t.successes;
	if (found & 2u)
		out->failures = (int64_t)t.failures;
	if (found & 4u)
		out->ignored = (int64_t)t.ignored;
	if (found & 8u)
		out->slow = (int64_t)t.slow;
	if (found & 16u)
		out->rejected = (int64_t)t.rejected;
	if (found & 32u)
		out->rejected_concurrency = (int64_t)t.rejected_concurrency;
	if (found & 64u)
		out->retries = (int64_t)t.retries;
	if (found & 128u)
		out->rejected_retry = (int64_t)t.rejected_retry;
	return CBC_OK;
}

/* An enum policy member: one of names (index 1.., 0 is UNSET), null or
 * absent leave it UNSET; a name this library does not know too (a later
 * protocol's value). */
static cbc_status
read_enum(proto_node *obj, const char *path, const char *key, const char *const *names, int *out,
    cbc_error *err)
{
	proto_node v = proto_node_get(obj, key);
	const char *text;

	if (proto_node_is_absent(&v) || proto_node_is_null(&v))
		return CBC_OK;
	if ((text = proto_node_string(&v, NULL)) == NULL)
		return cbci_fail(err, CBC_EPROTO, "reply member %s.%s must be a string", path, key);
	for (int i = 1; names[i] != NULL; i++) {
		if (strcmp(text, names[i]) == 0) {
			*out = i;
			return CBC_OK;
		}
	}
	return CBC_OK;
}

static const char *const trip_wire[] = { "", "consecutive", "rate", NULL };
static const char *const window_wire[] = { "", "count", "time", NULL };

/* One policy row's value into p. */
static cbc_status
read_policy_value(proto_node *v, const char *path, const policy_row *row, cbc_policy *p,
    cbc_error *err)
{
	void *at = (char *)p + row->value;
	int e = 0;
	cbc_status st;

	switch (row->kind) {
	case POLICY_INT:
		return read_int(v, path, row->key, CBC_POLICY_NULL, at, err);
	case POLICY_TRIP:
		st = read_enum(v, path, row->key, trip_wire, &e, err);
		p->trip = (cbc_trip)e;
		return st;
	case POLICY_WINDOW:
		st = read_enum(v, path, row->key, window_wire, &e, err);
		p->window = (cbc_window)e;
		return st;
	case POLICY_PRESET:
		return read_string(v, path, row->key, p->preset, sizeof p->preset, &p->has_preset,
		    err);
	}
	return CBC_OK;
}

/* snapshot.policy: every key (null when it has no value) and "source". */
static cbc_status
read_policy(proto_node *v, cbc_policy *out, cbc_error *err)
{
	static const char path[] = "snapshot.policy";
	proto_node sources;
	cbc_policy p;
	cbc_status st = CBC_OK;

	if (proto_node_is_absent(v) || proto_node_is_null(v))
		return CBC_OK;
	if (!proto_node_is_object(v))
		return cbci_fail(err, CBC_EPROTO, "reply member %s must be an object", path);
	sources = proto_node_get(v, "source");
	if (!proto_node_is_absent(&sources) && !proto_node_is_object(&sources))
		return cbci_fail(err, CBC_EPROTO, "reply member %s.source must be an object", path);
	memset(&p, 0, sizeof p);
	p.known = true;
	for (size_t i = 0; i < POLICY_ROW_COUNT && st == CBC_OK; i++) {
		const policy_row *row = &policy_rows[i];
		proto_node src = proto_node_get(&sources, row->key);
		cbc_policy_source *source = (cbc_policy_source *)((char *)&p.source + row->source);
		const char *text;

		st = read_policy_value(v, path, row, &p, err);
		if (st != CBC_OK || proto_node_is_absent(&src) || proto_node_is_null(&src))
			continue;
		if ((text = proto_node_string(&src, NULL)) == NULL)
			st = cbci_fail(err, CBC_EPROTO,
			    "reply member %s.source.%s must be a string", path, row->key);
		else
			*source = source_parse(text);
	}
	if (st == CBC_OK)
		*out = p;
	return st;
}

/* A number member (an integer or a real) of obj; absent or null: 0. */
static cbc_status
read_number(proto_node *obj, const char *path, const char *key, double *out, cbc_error *err)
{
	proto_node v = proto_node_get(obj, key);

	switch (proto_node_typeof(&v)) {
	case PROTO_NODE_ABSENT:
	case PROTO_NODE_NULL:
		return CBC_OK;
	case PROTO_NODE_INT:
	case PROTO_NODE_REAL:
		*out = proto_node_number(&v);
		return CBC_OK;
	default:
		return cbci_fail(err, CBC_EPROTO, "reply member %s.%s must be a number", path, key);
	}
}

/* snapshot.policy_rev (protocol 3): absent reads 0; else an integer from
 * 1 to POLICY_REV_MAX. */
static cbc_status
read_policy_rev(proto_node *obj, int64_t *out, cbc_error *err)
{
	proto_node v = proto_node_get(obj, "policy_rev");

	if (proto_node_is_absent(&v))
		return CBC_OK;
	if (proto_node_typeof(&v) != PROTO_NODE_INT || proto_node_int(&v) < 1 ||
	    proto_node_int(&v) > POLICY_REV_MAX)
		return cbci_fail(err, CBC_EPROTO,
		    "reply member snapshot.policy_rev must be an integer from 1 to %lld",
		    (long long)POLICY_REV_MAX);
	*out = proto_node_int(&v);
	return CBC_OK;
}

/* snapshot.window: {"calls", "failures", "slow", "failure_rate",
 * "slow_call_rate"} (a rate circuit), rates in percent. */
static cbc_status
read_window(proto_node *v, cbc_window_counts *out, cbc_error *err)
{
	static const char path[] = "snapshot.window";
	cbc_window_counts w;
	cbc_status st;

	if (proto_node_is_absent(v) || proto_node_is_null(v))
		return CBC_OK;
	if (!proto_node_is_object(v))
		return cbci_fail(err, CBC_EPROTO, "reply member %s must be an object", path);
	memset(&w, 0, sizeof w);
	w.known = true;
	st = read_int(v, path, "calls", 0, &w.calls, err);
	if (st == CBC_OK)
		st = read_int(v, path, "failures", 0, &w.failures, err);
	if (st == CBC_OK)
		st = read_int(v, path, "slow", 0, &w.slow, err);
	if (st == CBC_OK)
		st = read_number(v, path, "failure_rate", &w.failure_rate, err);
	if (st == CBC_OK)
		st = read_number(v, path, "slow_call_rate", &w.slow_call_rate, err);
	if (st == CBC_OK)
		*out = w;
	return st;
}

cbc_status
cbci_snapshot_v2(proto_node *obj, cbc_snapshot *out, cbc_error *err)
{
	cbc_snapshot s;
	cbc_status st;
	proto_node v;

	cbci_snapshot_v2_clear(&s);
	v = proto_node_get(obj, "hold");
	st = read_hold(&v, &s.hold, err);
	if (st == CBC_OK) {
		v = proto_node_get(obj, "totals");
		st = read_totals(&v, &s.totals, err);
	}
	if (st == CBC_OK) {
		v = proto_node_get(obj, "policy");
		st = read_policy(&v, &s.policy, err);
	}
	if (st == CBC_OK)
		st = read_policy_rev(obj, &s.policy_rev, err);
	if (st == CBC_OK)
		st = read_int(obj, "snapshot", "current_break_ms", -1, &s.current_break_ms, err);
	if (st == CBC_OK) {
		v = proto_node_get(obj, "window");
		st = read_window(&v, &s.window, err);
	}
	if (st == CBC_OK)
		st = read_int(obj, "snapshot", "reporters", -1, &s.reporters, err);
	if (st == CBC_OK)
		st = read_int(obj, "snapshot", "in_flight", -1, &s.in_flight, err);
	if (st == CBC_OK && out != NULL) {
		out->hold = s.hold;
		out->totals = s.totals;
		out->policy = s.policy;
		out->current_break_ms = s.current_break_ms;
		out->window = s.window;
		out->reporters = s.reporters;
		out->policy_rev = s.policy_rev;
		out->in_flight = s.in_flight;
	}
	return st;
}

void
cbci_policy_keep(cbci_policy_kept *kept, cbc_snapshot *s)
{
	if (s->policy.known) {
		kept->policy = s->policy;
		kept->rev = s->policy_rev;
	} else if (s->policy_rev != 0 && kept->policy.known && kept->rev == s->policy_rev) {
		s->policy = kept->policy;
	} else if (s->policy_rev != 0) {
		kept->policy.known = false;
	}
}

void
cbci_policy_forget(cbci_policy_kept *kept)
{
	kept->policy.known = false;
	kept->rev = 0;
}

/* The policy key names of a policy_conflict array joined by commas into
 * buf (cut to fit); the number of names. Non-string items are skipped. */
size_t
cbci_conflict_join(const json_t *conflict, char *buf, size_t size)
{
	size_t n = 0, used = 0;
	const json_t *item;
	size_t i;

	if (size > 0)
		buf[0] = '\0';
	if (!json_is_array(conflict))
		return 0;
	json_array_foreach (conflict, i, item) {
		const char *key = json_string_value(item);
		int w;

		if (key == NULL)
			continue;
		n++;
		if (size == 0 || used >= size)
			continue;
		w = snprintf(buf + used, size - used, "%s%s", used > 0 ? "," : "", key);
		if (w > 0)
			used += (size_t)w;
	}
	return n;
}

/* A core snapshot as the public one (name copied, retry_after_ms given). */
void
cbci_snapshot_fill(cbc_snapshot *out, const char *name, const cb_snapshot *snap,
    int64_t retry_after_ms)
{
	size_t len = strlen(name);

	if (len > CBC_NAME_MAX)
		len = CBC_NAME_MAX;
	memcpy(out->name, name, len);
	out->name[len] = '\0';
	out->state = (cbc_state)snap->state;
	out->failure_count = snap->failure_count;
	out->success_count = snap->success_count;
	out->last_failure_at = snap->last_failure_at;
	out->opened_at = snap->opened_at;
	out->retry_after_ms = retry_after_ms;
	cbci_snapshot_v2_clear(out);
}

/* The public snapshot as a core one. */
void
cbci_snapshot_to_core(const cbc_snapshot *in, cb_snapshot *out)
{
	out->state = (cb_state)in->state;
	out->failure_count = in->failure_count;
	out->success_count = in->success_count;
	out->last_failure_at = in->last_failure_at;
	out->opened_at = in->opened_at;
	/* Only a break grown by break_backoff is kept: the policy gives the
	 * others (and a hold's break is carried through the policy). */
	out->current_break_ms = in->policy.known && !in->hold.held && in->policy.break_ms > 0 &&
		in->current_break_ms > in->policy.break_ms
	    ? in->current_break_ms
	    : 0;
}
