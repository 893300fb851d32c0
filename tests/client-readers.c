/* SPDX-License-Identifier: Apache-2.0 */
/*
 * client-readers.c — libcbclient's flat and jansson readings of one line
 * compared field by field (see client-readers.h).
 */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "client-readers.h"

/* printf into why; returns true (they differ). */
static bool __attribute__((format(printf, 3, 4)))
differ(char *why, size_t size, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, size, fmt, ap);
	va_end(ap);
	return true;
}

#define DIFF_INT(f)                                                                                \
	do {                                                                                       \
		if (a->f != b->f)                                                                  \
			return differ(why, size, "%s: %lld (flat) != %lld (jansson)", #f,          \
			    (long long)a->f, (long long)b->f);                                     \
	} while (0)
#define DIFF_DBL(f)                                                                                \
	do {                                                                                       \
		if (a->f != b->f)                                                                  \
			return differ(why, size, "%s: %g (flat) != %g (jansson)", #f, a->f, b->f); \
	} while (0)
#define DIFF_STR(f)                                                                                \
	do {                                                                                       \
		if (strcmp(a->f, b->f) != 0)                                                       \
			return differ(why, size, "%s: \"%s\" (flat) != \"%s\" (jansson)", #f,      \
			    a->f, b->f);                                                           \
	} while (0)

bool
snapshot_differ(const cbc_snapshot *a, const cbc_snapshot *b, char *why, size_t size)
{
	DIFF_STR(name);
	DIFF_INT(state);
	DIFF_INT(failure_count);
	DIFF_INT(success_count);
	DIFF_INT(last_failure_at);
	DIFF_INT(opened_at);
	DIFF_INT(retry_after_ms);
	DIFF_INT(hold.held);
	DIFF_INT(hold.state);
	DIFF_INT(hold.by_uid);
	DIFF_STR(hold.by_user);
	DIFF_INT(hold.has_reason);
	DIFF_STR(hold.reason);
	DIFF_INT(hold.since);
	DIFF_INT(hold.until);
	DIFF_INT(totals.successes);
	DIFF_INT(totals.failures);
	DIFF_INT(totals.ignored);
	DIFF_INT(totals.slow);
	DIFF_INT(totals.rejected);
	DIFF_INT(policy.known);
	DIFF_INT(policy.failure_threshold);
	DIFF_INT(policy.success_threshold);
	DIFF_INT(policy.break_ms);
	DIFF_INT(policy.half_open_max);
	DIFF_INT(policy.slot_ttl_ms);
	DIFF_INT(policy.max_gap_ms);
	DIFF_INT(policy.trip);
	DIFF_INT(policy.window);
	DIFF_INT(policy.window_size);
	DIFF_INT(policy.minimum_calls);
	DIFF_INT(policy.failure_rate);
	DIFF_INT(policy.slow_call_ms);
	DIFF_INT(policy.slow_call_rate);
	DIFF_INT(policy.min_reporters);
	DIFF_INT(policy.reporter_window_ms);
	DIFF_INT(policy.break_backoff);
	DIFF_INT(policy.break_max_ms);
	DIFF_INT(policy.has_preset);
	DIFF_STR(policy.preset);
	DIFF_INT(policy.source.failure_threshold);
	DIFF_INT(policy.source.success_threshold);
	DIFF_INT(policy.source.break_ms);
	DIFF_INT(policy.source.half_open_max);
	DIFF_INT(policy.source.slot_ttl_ms);
	DIFF_INT(policy.source.max_gap_ms);
	DIFF_INT(policy.source.trip);
	DIFF_INT(policy.source.window);
	DIFF_INT(policy.source.window_size);
	DIFF_INT(policy.source.minimum_calls);
	DIFF_INT(policy.source.failure_rate);
	DIFF_INT(policy.source.slow_call_ms);
	DIFF_INT(policy.source.slow_call_rate);
	DIFF_INT(policy.source.min_reporters);
	DIFF_INT(policy.source.reporter_window_ms);
	DIFF_INT(policy.source.break_backoff);
	DIFF_INT(policy.source.break_max_ms);
	DIFF_INT(policy.source.preset);
	DIFF_INT(current_break_ms);
	DIFF_INT(window.known);
	DIFF_INT(window.calls);
	DIFF_INT(window.failures);
	DIFF_INT(window.slow);
	DIFF_DBL(window.failure_rate);
	DIFF_DBL(window.slow_call_rate);
	DIFF_INT(reporters);
	DIFF_INT(policy_rev);
	return false;
}

void
reading_of_node(const proto_node *n, reading *r)
{
	proto_node copy = *n;

	memset(r, 0, sizeof *r);
	r->st = cbci_reply_snapshot_node(&copy, "fallback", &r->snap, &r->err);
	copy = *n;
	r->core_ok = proto_snapshot_from_node(&copy, &r->core, &r->retry, &r->perr);
}

void
reading_of_json(const json_t *obj, reading *r)
{
	memset(r, 0, sizeof *r);
	r->st = cbci_reply_snapshot(obj, "fallback", &r->snap, &r->err);
	r->core_ok = proto_snapshot_from_json(obj, &r->core, &r->retry, &r->perr);
}

bool
readings_differ(const reading *a, const reading *b, char *why, size_t size)
{
	DIFF_INT(st);
	DIFF_STR(err.message);
	if (snapshot_differ(&a->snap, &b->snap, why, size))
		return true;
	DIFF_INT(core_ok);
	DIFF_INT(perr.code);
	DIFF_STR(perr.message);
	DIFF_INT(core.state);
	DIFF_INT(core.failure_count);
	DIFF_INT(core.success_count);
	DIFF_INT(core.last_failure_at);
	DIFF_INT(core.opened_at);
	DIFF_INT(retry);
	return false;
}

bool
cache_pair_open(cache_pair *p, const char *tag)
{
	char path[108];

	memset(p, 0, sizeof *p);
	for (int i = 0; i < 2; i++) {
		snprintf(path, sizeof path, "/nonexistent/%s-%s.sock", tag,
		    i == 0 ? "flat" : "jansson");
		p->cache[i] = cbci_cache_acquire(path, NULL);
		if (p->cache[i] == NULL)
			return false;
		p->entry[i] = cbci_cache_watch(p->cache[i], "svc.a");
		if (p->entry[i] == NULL)
			return false;
	}
	return true;
}

void
cache_pair_close(cache_pair *p)
{
	for (int i = 0; i < 2; i++) {
		if (p->cache[i] != NULL)
			cbci_cache_release(p->cache[i], cbci_cache_generation());
	}
}

bool
line_padded(const char *line, size_t len, char *out, size_t size)
{
	static const char pad[] = "\"zz_pad\":[0]}";
	size_t body = len;
	bool empty;

	while (
	    body > 0 && (line[body - 1] == ' ' || line[body - 1] == '\t' || line[body - 1] == '\r'))
		body--;
	if (body < 2 || line[0] != '{' || line[body - 1] != '}')
		return false;
	body--; /* the closing brace */
	empty = true;
	for (size_t i = 1; i < body && empty; i++)
		empty = line[i] == ' ' || line[i] == '\t' || line[i] == '\r' || line[i] == '\n';
	if (body + 1 + sizeof pad > size)
		return false;
	memcpy(out, line, body);
	if (!empty)
		out[body++] = ',';
	memcpy(out + body, pad, sizeof pad);
	return true;
}

bool
cache_pair_differ(cache_pair *p, const char *line, size_t len, const char *padded, char *why,
    size_t size)
{
	cbc_snapshot fresh[2];
	cbc_cache_stats stats[2];
	bool has_fresh[2];
	int64_t retry[2];

	cbci_cache_apply_line(p->cache[0], line, len);
	cbci_cache_apply_line(p->cache[1], padded, strlen(padded));
	for (int i = 0; i < 2; i++) {
		memset(&fresh[i], 0, sizeof fresh[i]);
		cbci_cache_decide(p->cache[i], p->entry[i], &p->seen[i], &fresh[i], &has_fresh[i],
		    &retry[i], NULL);
		cbci_cache_stats(p->cache[i], &stats[i]);
	}
	if (has_fresh[0] != has_fresh[1])
		return differ(why, size, "a fresh snapshot from one cache only (flat: %d)",
		    has_fresh[0]);
	if (has_fresh[0] && snapshot_differ(&fresh[0], &fresh[1], why, size))
		return true;
	{
		const cbc_cache_stats *a = &stats[0], *b = &stats[1];

		DIFF_INT(events);
		DIFF_INT(bad_lines);
		DIFF_INT(refused);
	}
	return false;
}
