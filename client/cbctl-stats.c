/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cbctl-stats.c — `cbctl stats`: the daemon's counters grouped for people
 * (uptime as a duration, started_at as a local date, requests by op, errors
 * by code, limits, state file, watch/noreply), zero counters hidden unless
 * --all; members a later cbd adds show under "other". --json: the reply.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cbctl.h"

#define MS_PER_MINUTE INT64_C(60000)
#define MS_PER_HOUR (60 * MS_PER_MINUTE)
#define MS_PER_DAY (24 * MS_PER_HOUR)

/* Room for a group's members (and the NULL row ending them). */
#define STATS_GROUP_MEMBERS_MAX 12

/* A group of top-level counters: its heading and its members, each with
 * the label it shows under. */
typedef struct stats_group {
	const char *heading;
	const char *members[STATS_GROUP_MEMBERS_MAX][2]; /* { member, label }, ends at NULL */
} stats_group;

static const stats_group groups[] = {
	{ "circuits",
	    { { "circuits", "stored" }, { "held", "held" }, { "transitions", "transitions" },
		{ "policies", "policies declared" }, { "policy_conflicts", "policy conflicts" },
		{ "reclaimed_idle", "reclaimed idle" },
		{ "reclaimed_capacity", "reclaimed at capacity" }, { "slots", "slots held" },
		{ "slots_expired", "slots expired" }, { NULL, NULL } } },
	{ "state file",
	    { { "state_writes", "writes" }, { "state_write_failures", "write failures" },
		{ "state_appends", "journal appends" },
		{ "state_pending", "changes not yet in the journal" },
		{ "state_write_pause_max_us", "longest pause (us)" }, { NULL, NULL } } },
	{ "watch and noreply",
	    { { "watch_events", "events sent" }, { "noreply", "noreply requests" },
		{ "metrics_scrapes", "metrics scrapes" }, { NULL, NULL } } },
	{ "dashboard",
	    { { "dashboard_clients", "event streams open" }, { "dashboard_events", "events sent" },
		{ "dashboard_history_circuits", "circuits with a history" },
		{ "dashboard_history_left_out", "busy ticks with no room" },
		{ "dashboard_tick_us", "last tick (us)" }, { NULL, NULL } } },
	{ "bulkhead", { { "waiters", "allows waiting for a ticket" }, { NULL, NULL } } },
	{ "reloads", { { "reloads", "done" }, { "reload_failures", "failed" }, { NULL, NULL } } },
};

#define GROUP_COUNT (sizeof groups / sizeof groups[0])

/* A duration as "3d 4h 12m", "4h 12m", "12m 5s" or "5s". */
static void
format_uptime(int64_t ms, char *buf, size_t size)
{
	int64_t d = ms / MS_PER_DAY, h = ms % MS_PER_DAY / MS_PER_HOUR,
		m = ms % MS_PER_HOUR / MS_PER_MINUTE, s = ms % MS_PER_MINUTE / 1000;

	if (d > 0)
		snprintf(buf, size, "%" PRId64 "d %" PRId64 "h %" PRId64 "m", d, h, m);
	else if (h > 0)
		snprintf(buf, size, "%" PRId64 "h %" PRId64 "m", h, m);
	else if (m > 0)
		snprintf(buf, size, "%" PRId64 "m %" PRId64 "s", m, s);
	else
		snprintf(buf, size, "%" PRId64 "s", s);
}

/* Print a heading once, before its first line. */
static void
heading(const char *text, bool *printed)
{
	if (!*printed)
		printf("%s:\n", text);
	*printed = true;
}

/* One counter line under a heading, unless it is zero and not --all. */
static void
counter(const char *head, bool *printed, const char *label, const json_t *value, bool all)
{
	char *text;

	if (!all && json_is_integer(value) && json_integer_value(value) == 0)
		return;
	if (!all && json_is_real(value) && json_real_value(value) == 0)
		return;
	text = json_dumps(value, JSON_ENCODE_ANY | JSON_COMPACT);
	heading(head, printed);
	printf("  %-28s %s\n", label, text != NULL ? text : "?");
	free(text);
}

/* An object of counters (errors, limits) under its heading; takes it out
 * of obj. */
static void
counter_object(json_t *obj, const char *member, const char *head, bool all)
{
	json_t *sub = json_object_get(obj, member);
	const char *key;
	json_t *value;
	bool printed = false;

	if (!json_is_object(sub))
		return;
	json_object_foreach (sub, key, value)
		counter(head, &printed, key, value, all);
	json_object_del(obj, member);
}

/* requests: the total, then each op's requests with its errors. */
static void
print_requests(json_t *obj, bool all)
{
	json_t *ops = json_object_get(obj, "ops");
	json_int_t total = json_integer_value(json_object_get(obj, "requests"));
	const char *op;
	json_t *counts;
	bool printed = true;

	printf("requests: %" JSON_INTEGER_FORMAT "\n", total);
	json_object_del(obj, "requests");
	if (!json_is_object(ops))
		return;
	json_object_foreach (ops, op, counts) {
		json_int_t n = json_integer_value(json_object_get(counts, "requests"));
		json_int_t e = json_integer_value(json_object_get(counts, "errors"));

		if (!all && n == 0 && e == 0)
			continue;
		if (e > 0)
			printf("  %-28s %" JSON_INTEGER_FORMAT " (%" JSON_INTEGER_FORMAT
			       " failed)\n",
			    op, n, e);
		else
			counter("requests", &printed, op, json_object_get(counts, "requests"),
			    true);
	}
	json_object_del(obj, "ops");
}

/* Whatever is left (members this cbctl does not know), dotted. */
static void
print_other(const char *prefix, json_t *value, bool all, bool *printed)
{
	const char *key;
	json_t *member;
	char path[256];

	if (json_is_object(value)) {
		json_object_foreach (value, key, member) {
			snprintf(path, sizeof path, "%s%s%s", prefix, prefix[0] ? "." : "", key);
			print_other(path, member, all, printed);
		}
		return;
	}
	counter("other", printed, prefix, value, all);
}

/* backend: memory, or redis with where and how it is, then its counters. */
static void
print_backend(json_t *obj, bool all)
{
	json_t *backend = json_object_get(obj, "backend");
	const char *type = json_string_value(json_object_get(backend, "type"));
	const char *health = json_string_value(json_object_get(backend, "health"));
	const char *redis = json_string_value(json_object_get(backend, "redis"));

	if (!json_is_object(backend) || type == NULL)
		return;
	if (redis != NULL)
		printf("backend: %s %s, %s\n", type, redis, health != NULL ? health : "?");
	else
		printf("backend: %s\n", type);
	json_object_del(backend, "type");
	json_object_del(backend, "health");
	json_object_del(backend, "redis");
	counter_object(obj, "backend", "backend", all);
}

int
cbctl_cmd_stats(cbctl *ctl)
{
	cbc_stats stats;
	cbc_error err;
	cbc_status status = cbc_stats_get(ctl->conn, &stats, &err);
	bool all = false, printed;
	char when[32], span[48];
	json_t *obj, *conns;

	cbctl_option_get(ctl, "--all", &all);
	if (status != CBC_OK)
		return cbctl_fail_status(ctl, status, &err);
	obj = cbctl_last_reply(ctl);
	if (obj == NULL) {
		cbctl_errorf("stats: could not read cbd's reply");
		return EXIT_REFUSED;
	}
	if (ctl->json) {
		char *text = cbc_conn_last_reply(ctl->conn);

		if (text != NULL)
			puts(text);
		cbc_free(text);
		json_decref(obj);
		return EXIT_OK;
	}
	json_object_del(obj, "ok");
	json_object_del(obj, "id");
	format_uptime(json_integer_value(json_object_get(obj, "uptime_ms")), span, sizeof span);
	printf("uptime: %s\n", span);
	if (json_is_integer(json_object_get(obj, "started_at"))) {
		cbctl_format_time(json_integer_value(json_object_get(obj, "started_at")), when,
		    sizeof when);
		printf("started at: %s\n", when);
	}
	json_object_del(obj, "uptime_ms");
	json_object_del(obj, "started_at");
	conns = json_object_get(obj, "connections");
	if (json_is_object(conns)) {
		printf("connections: %" JSON_INTEGER_FORMAT " open, %" JSON_INTEGER_FORMAT
		       " since start\n",
		    json_integer_value(json_object_get(conns, "current")),
		    json_integer_value(json_object_get(conns, "total")));
		json_object_del(obj, "connections");
	}
	print_backend(obj, all);
	for (size_t g = 0; g < GROUP_COUNT; g++) {
		printed = false;
		for (size_t m = 0; groups[g].members[m][0] != NULL; m++) {
			json_t *value = json_object_get(obj, groups[g].members[m][0]);

			if (value == NULL)
				continue;
			counter(groups[g].heading, &printed, groups[g].members[m][1], value, all);
			json_object_del(obj, groups[g].members[m][0]);
		}
		if (g == 0) {
			print_requests(obj, all);
			counter_object(obj, "errors", "errors", all);
			counter_object(obj, "limits", "limits hit", all);
		}
	}
	printed = false;
	print_other("", obj, all, &printed);
	json_decref(obj);
	return EXIT_OK;
}
