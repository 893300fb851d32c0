/*
 * snapshot.c — protocol 2's snapshot members (hold, totals, policy with
 * its sources) read into the public snapshot. Tolerant of a protocol 1
 * cbd: an absent member reads as not held, totals -1, policy not known.
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

/* A policy key this library reads: its wire name and where it goes. */
typedef struct policy_row {
	const char *key;
	size_t value; /* offset in cbc_policy */
	size_t source; /* offset in cbc_policy_sources */
} policy_row;

#define POLICY_ROW(k)                                                                              \
	{                                                                                          \
#k, offsetof(cbc_policy, k), offsetof(cbc_policy_sources, k)                       \
	}

static const policy_row policy_rows[] = {
	POLICY_ROW(failure_threshold),
	POLICY_ROW(success_threshold),
	POLICY_ROW(break_ms),
	POLICY_ROW(half_open_max),
	POLICY_ROW(slot_ttl_ms),
	POLICY_ROW(max_gap_ms),
};

#define POLICY_ROW_COUNT (sizeof policy_rows / sizeof policy_rows[0])

void
cbci_snapshot_v2_clear(cbc_snapshot *out)
{
	memset(&out->hold, 0, sizeof out->hold);
	out->totals.successes = -1;
	out->totals.failures = -1;
	out->totals.ignored = -1;
	out->totals.slow = -1;
	out->totals.rejected = -1;
	memset(&out->policy, 0, sizeof out->policy);
}

/* An optional integer member of obj (path names obj in messages): absent
 * leaves *out alone, null stores null_value. */
static cbc_status
read_int(const json_t *obj, const char *path, const char *key, int64_t null_value, int64_t *out,
    cbc_error *err)
{
	const json_t *v = json_object_get(obj, key);

	if (v == NULL)
		return CBC_OK;
	if (json_is_null(v)) {
		*out = null_value;
		return CBC_OK;
	}
	if (!json_is_integer(v))
		return cbci_fail(err, CBC_EPROTO, "reply member %s.%s must be an integer", path,
		    key);
	*out = json_integer_value(v);
	return CBC_OK;
}

/* A required integer member (a time may be null with null_ok). */
static cbc_status
read_int_required(const json_t *obj, const char *path, const char *key, bool null_ok, int64_t *out,
    cbc_error *err)
{
	const json_t *v = json_object_get(obj, key);

	if (v == NULL || (json_is_null(v) && !null_ok))
		return cbci_fail(err, CBC_EPROTO, "reply member %s.%s is missing", path, key);
	return read_int(obj, path, key, CBC_TIME_NONE, out, err);
}

/* An optional string member copied into buf; *present says whether it
 * was a string (null and absent are not). */
static cbc_status
read_string(const json_t *obj, const char *path, const char *key, char *buf, size_t size,
    bool *present, cbc_error *err)
{
	const json_t *v = json_object_get(obj, key);

	buf[0] = '\0';
	if (present != NULL)
		*present = false;
	if (v == NULL || json_is_null(v))
		return CBC_OK;
	if (!json_is_string(v))
		return cbci_fail(err, CBC_EPROTO, "reply member %s.%s must be a string", path, key);
	if (json_string_length(v) >= size)
		return cbci_fail(err, CBC_EPROTO, "reply member %s.%s is longer than %zu bytes",
		    path, key, size - 1);
	memcpy(buf, json_string_value(v), json_string_length(v) + 1);
	if (present != NULL)
		*present = true;
	return CBC_OK;
}

/* snapshot.hold: null or {"state", "by_uid", "by_user", "reason", "since",
 * "until"}. */
static cbc_status
read_hold(const json_t *v, cbc_hold_info *out, cbc_error *err)
{
	static const char path[] = "snapshot.hold";
	char state[16];
	cbc_hold_info h;
	cbc_status st;

	if (v == NULL || json_is_null(v))
		return CBC_OK;
	if (!json_is_object(v))
		return cbci_fail(err, CBC_EPROTO, "reply member %s must be an object or null",
		    path);
	memset(&h, 0, sizeof h);
	h.held = true;
	h.until = CBC_TIME_NONE;
	st = read_string(v, path, "state", state, sizeof state, NULL, err);
	if (st == CBC_OK && (!cbc_state_parse(state, &h.state) || h.state == CBC_STATE_HALF_OPEN))
		st = cbci_fail(err, CBC_EPROTO, "reply member %s.state must be open or closed",
		    path);
	if (st == CBC_OK)
		st = read_int(v, path, "by_uid", -1, &h.by_uid, err);
	if (st == CBC_OK)
		st = read_string(v, path, "by_user", h.by_user, sizeof h.by_user, NULL, err);
	if (st == CBC_OK)
		st = read_string(v, path, "reason", h.reason, sizeof h.reason, &h.has_reason, err);
	if (st == CBC_OK)
		st = read_int_required(v, path, "since", false, &h.since, err);
	if (st == CBC_OK)
		st = read_int(v, path, "until", CBC_TIME_NONE, &h.until, err);
	if (st == CBC_OK)
		*out = h;
	return st;
}

/* snapshot.totals: {"successes", "failures", "ignored", "slow",
 * "rejected"}; a member left out stays -1. */
static cbc_status
read_totals(const json_t *v, cbc_totals *out, cbc_error *err)
{
	static const char path[] = "snapshot.totals";
	cbc_status st;

	if (v == NULL || json_is_null(v))
		return CBC_OK;
	if (!json_is_object(v))
		return cbci_fail(err, CBC_EPROTO, "reply member %s must be an object", path);
	st = read_int(v, path, "successes", -1, &out->successes, err);
	if (st == CBC_OK)
		st = read_int(v, path, "failures", -1, &out->failures, err);
	if (st == CBC_OK)
		st = read_int(v, path, "ignored", -1, &out->ignored, err);
	if (st == CBC_OK)
		st = read_int(v, path, "slow", -1, &out->slow, err);
	if (st == CBC_OK)
		st = read_int(v, path, "rejected", -1, &out->rejected, err);
	return st;
}

/* snapshot.policy: every key (null when it has no value) and "source". */
static cbc_status
read_policy(const json_t *v, cbc_policy *out, cbc_error *err)
{
	static const char path[] = "snapshot.policy";
	const json_t *sources;
	cbc_policy p;
	cbc_status st = CBC_OK;

	if (v == NULL || json_is_null(v))
		return CBC_OK;
	if (!json_is_object(v))
		return cbci_fail(err, CBC_EPROTO, "reply member %s must be an object", path);
	sources = json_object_get(v, "source");
	if (sources != NULL && !json_is_object(sources))
		return cbci_fail(err, CBC_EPROTO, "reply member %s.source must be an object", path);
	memset(&p, 0, sizeof p);
	p.known = true;
	for (size_t i = 0; i < POLICY_ROW_COUNT && st == CBC_OK; i++) {
		const policy_row *row = &policy_rows[i];
		const json_t *src = json_object_get(sources, row->key);
		cbc_policy_source *source = (cbc_policy_source *)((char *)&p.source + row->source);

		st = read_int(v, path, row->key, CBC_POLICY_NULL,
		    (int64_t *)((char *)&p + row->value), err);
		if (st != CBC_OK || src == NULL || json_is_null(src))
			continue;
		if (!json_is_string(src))
			st = cbci_fail(err, CBC_EPROTO,
			    "reply member %s.source.%s must be a string", path, row->key);
		else
			*source = source_parse(json_string_value(src));
	}
	if (st == CBC_OK)
		*out = p;
	return st;
}

cbc_status
cbci_snapshot_v2(const json_t *obj, cbc_snapshot *out, cbc_error *err)
{
	cbc_snapshot s;
	cbc_status st;

	cbci_snapshot_v2_clear(&s);
	st = read_hold(json_object_get(obj, "hold"), &s.hold, err);
	if (st == CBC_OK)
		st = read_totals(json_object_get(obj, "totals"), &s.totals, err);
	if (st == CBC_OK)
		st = read_policy(json_object_get(obj, "policy"), &s.policy, err);
	if (st == CBC_OK && out != NULL) {
		out->hold = s.hold;
		out->totals = s.totals;
		out->policy = s.policy;
	}
	return st;
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
