/* SPDX-License-Identifier: Apache-2.0 */
/*
 * check_client_snapshot.c — one reader, two forms: a snapshot (or an event
 * carrying one) read from a flat view (proto-scan.h) gives exactly what
 * the same line read through jansson gives: the same status, the same
 * snapshot field by field, the same error message. Hand-picked lines and
 * a seeded generator (states, holds, totals, windows, null times, wrong
 * types, missing and unknown members, policy and source junk, members in
 * any order). The cache's line handler is compared the same way: a line
 * it reads flat against the same line made non-flat by an array member
 * it ignores; and so are the uncached ops' replies, from a stand-in
 * daemon that answers each request plain or padded the same way. No cbd;
 * linked statically (libcbclient's internals).
 */
#include "config.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <check.h>
#include <jansson.h>

#include "check-run.h"
#include "internal.h"
#include "client-readers.h"
#include "client-test.h"
#include "test-rand.h"

/* Generated lines per test. */
#define GEN_LINES 4000
/* Room for one generated line. */
#define LINE_MAX 8192

/* ---- comparing (client-readers.c) -------------------------------------- */

/* a and b hold the same snapshot, field by field. */
static void
snapshot_same(const cbc_snapshot *a, const cbc_snapshot *b, const char *line)
{
	char why[READERS_WHY_SIZE];

	ck_assert_msg(!snapshot_differ(a, b, why, sizeof why), "%s in %s", why, line);
}

/* The flat view of a line (static: ~11 KiB). */
static proto_flat flat;

/* Read the snapshot object `text` both ways and compare. False (nothing
 * compared) when the text is outside the flat subset; *ok says whether
 * it read as a snapshot. */
static bool
compare_snapshot(const char *text, bool *ok)
{
	char why[READERS_WHY_SIZE];
	reading a, b;
	json_t *obj;
	proto_node n;

	if (!proto_scan_flat(text, strlen(text), &flat))
		return false;
	obj = json_loads(text, JSON_REJECT_DUPLICATES, NULL);
	ck_assert_msg(obj != NULL, "flat but not JSON: %s", text);
	n = proto_node_flat(&flat, 0);
	reading_of_node(&n, &a);
	reading_of_json(obj, &b);
	ck_assert_msg(!readings_differ(&a, &b, why, sizeof why), "%s in %s", why, text);
	json_decref(obj);
	if (ok != NULL)
		*ok = a.st == CBC_OK;
	return true;
}

/* ---- hand-picked snapshots ---------------------------------------------- */

/* A trip's snapshot as cbd writes it. */
#define REAL_POLICY                                                                                \
	"{\"failure_threshold\":5,\"success_threshold\":2,\"break_ms\":30000,\"half_open_max\":1," \
	"\"slot_ttl_ms\":30000,\"max_gap_ms\":null,\"trip\":\"consecutive\",\"window\":\"count\"," \
	"\"window_size\":100,\"minimum_calls\":10,\"failure_rate\":50,\"slow_call_ms\":null,"      \
	"\"slow_call_rate\":100,\"min_reporters\":1,\"reporter_window_ms\":60000,"                 \
	"\"break_backoff\":1,\"break_max_ms\":null,\"preset\":null,\"source\":{"                   \
	"\"failure_threshold\":\"builtin\",\"success_threshold\":\"builtin\",\"break_ms\":"        \
	"\"builtin\",\"half_open_max\":\"builtin\",\"slot_ttl_ms\":\"builtin\",\"max_gap_ms\":"    \
	"\"builtin\",\"trip\":\"builtin\",\"window\":\"builtin\",\"window_size\":\"builtin\","     \
	"\"minimum_calls\":\"builtin\",\"failure_rate\":\"builtin\",\"slow_call_ms\":\"builtin\"," \
	"\"slow_call_rate\":\"builtin\",\"min_reporters\":\"builtin\",\"reporter_window_ms\":"     \
	"\"builtin\",\"break_backoff\":\"builtin\",\"break_max_ms\":\"builtin\",\"preset\":"       \
	"\"builtin\"}}"
#define REAL_SNAPSHOT                                                                              \
	"{\"name\":\"svc.a\",\"state\":\"open\",\"failure_count\":5,\"success_count\":0,"          \
	"\"last_failure_at\":1796052888151,\"opened_at\":1796052888151,\"retry_after_ms\":30000,"  \
	"\"policy\":" REAL_POLICY ",\"hold\":null,\"totals\":{\"successes\":0,\"failures\":5,"     \
	"\"ignored\":0,\"slow\":0,\"rejected\":0},\"current_break_ms\":30000}"

/* The same as protocol 3 writes it: policy_rev, no policy. */
#define COMPACT_SNAPSHOT                                                                           \
	"{\"name\":\"svc.a\",\"state\":\"open\",\"failure_count\":5,\"success_count\":0,"          \
	"\"last_failure_at\":1796052888151,\"opened_at\":1796052888151,\"retry_after_ms\":30000,"  \
	"\"policy_rev\":7,\"hold\":null,\"totals\":{\"successes\":0,\"failures\":5,"               \
	"\"ignored\":0,\"slow\":0,\"rejected\":0},\"current_break_ms\":30000}"
/* A closed circuit's snapshot of protocol 3 with its policy (get,
 * "policy": true, a policy event's): failure_threshold thr. */
#define POLICY_SNAPSHOT(fc, rev, thr)                                                              \
	"{\"name\":\"svc.a\",\"state\":\"closed\",\"failure_count\":" #fc                          \
	",\"success_count\":0,\"last_failure_at\":null,\"opened_at\":null,\"retry_after_ms\":0,"   \
	"\"policy_rev\":" #rev ",\"policy\":{\"failure_threshold\":" #thr ",\"break_ms\":30000,"   \
	"\"trip\":\"consecutive\",\"min_reporters\":1},\"hold\":null,\"current_break_ms\":30000}"
/* The same without its policy. */
#define CLOSED_COMPACT(fc, rev)                                                                    \
	"{\"name\":\"svc.a\",\"state\":\"closed\",\"failure_count\":" #fc                          \
	",\"success_count\":0,\"last_failure_at\":null,\"opened_at\":null,\"retry_after_ms\":0,"   \
	"\"policy_rev\":" #rev ",\"hold\":null,\"current_break_ms\":30000}"

static const char *const picked[] = {
	REAL_SNAPSHOT,
	COMPACT_SNAPSHOT,
	POLICY_SNAPSHOT(1, 4294967295, 2),
	CLOSED_COMPACT(0, 1),
	"{\"name\":\"svc.a\",\"state\":\"closed\",\"failure_count\":0,\"success_count\":0,"
	"\"last_failure_at\":null,\"opened_at\":null,\"retry_after_ms\":0}",
	/* v1: no protocol 2 members; no name: the fallback. */
	"{\"state\":\"half_open\",\"failure_count\":1,\"success_count\":1,\"last_failure_at\":7,"
	"\"opened_at\":8}",
	/* Held open, a rate circuit's window, reporters, a preset. */
	"{\"name\":\"db\",\"state\":\"open\",\"failure_count\":3,\"success_count\":9,"
	"\"last_failure_at\":1,\"opened_at\":2,\"retry_after_ms\":10,\"hold\":{\"state\":\"open\","
	"\"by_uid\":0,\"by_user\":\"root\",\"reason\":\"maintenance window\",\"since\":5,"
	"\"until\":null},\"window\":{\"calls\":20,\"failures\":7,\"slow\":1,\"failure_rate\":35,"
	"\"slow_call_rate\":5},\"reporters\":2,\"policy\":{\"trip\":\"rate\",\"window\":\"time\","
	"\"preset\":\"database\",\"source\":{\"trip\":\"config\",\"preset\":\"client\"}}}",
	/* Members in another order than cbd's. */
	"{\"current_break_ms\":60000,\"totals\":{\"rejected\":4,\"successes\":1},\"policy\":"
	"{\"source\":{\"break_ms\":\"defaults\"},\"break_ms\":60000},\"opened_at\":null,"
	"\"success_count\":2,\"state\":\"closed\",\"failure_count\":0,\"name\":\"x\","
	"\"last_failure_at\":null}",
	/* Errors: each reader names the member. */
	"{\"name\":\"svc.a\",\"state\":\"ajar\",\"failure_count\":0,\"success_count\":0}",
	"{\"name\":\"svc.a\",\"state\":\"open\",\"success_count\":0}",
	"{\"name\":\"svc.a\",\"state\":\"open\",\"failure_count\":-1,\"success_count\":0}",
	"{\"name\":\"svc.a\",\"state\":\"open\",\"failure_count\":0,\"success_count\":0,"
	"\"opened_at\":\"soon\"}",
	"{\"name\":\"svc.a\",\"state\":\"open\",\"failure_count\":0,\"success_count\":0,"
	"\"opened_at\":9007199254740993}",
	"{\"name\":\"svc.a\",\"state\":\"open\",\"failure_count\":0,\"success_count\":0,"
	"\"retry_after_ms\":-1}",
	"{\"name\":5,\"state\":\"open\",\"failure_count\":0,\"success_count\":0}",
	"{\"state\":\"open\",\"failure_count\":0,\"success_count\":0,\"hold\":5}",
	"{\"state\":\"open\",\"failure_count\":0,\"success_count\":0,\"hold\":{\"state\":"
	"\"half_open\",\"since\":1}}",
	"{\"state\":\"open\",\"failure_count\":0,\"success_count\":0,\"hold\":{\"state\":"
	"\"open\"}}",
	"{\"state\":\"open\",\"failure_count\":0,\"success_count\":0,\"hold\":{\"state\":"
	"\"open\",\"since\":null}}",
	"{\"state\":\"open\",\"failure_count\":0,\"success_count\":0,\"hold\":{\"state\":"
	"\"open\",\"since\":1,\"by_user\":\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	"aaaaaaaaaaaaaaaa\"}}",
	"{\"state\":\"open\",\"failure_count\":0,\"success_count\":0,\"totals\":true}",
	"{\"state\":\"open\",\"failure_count\":0,\"success_count\":0,\"totals\":{\"slow\":\"x\"}}",
	"{\"state\":\"open\",\"failure_count\":0,\"success_count\":0,\"policy\":\"x\"}",
	"{\"state\":\"open\",\"failure_count\":0,\"success_count\":0,\"policy\":{\"source\":null}}",
	"{\"state\":\"open\",\"failure_count\":0,\"success_count\":0,\"policy\":{\"trip\":5}}",
	"{\"state\":\"open\",\"failure_count\":0,\"success_count\":0,\"policy\":{\"trip\":"
	"\"sometimes\",\"window\":\"sliding\",\"future_key\":{\"a\":1}}}",
	"{\"state\":\"open\",\"failure_count\":0,\"success_count\":0,\"policy\":{\"source\":"
	"{\"trip\":7}}}",
	"{\"state\":\"open\",\"failure_count\":0,\"success_count\":0,\"policy\":{\"source\":"
	"{\"trip\":\"elsewhere\",\"window\":null}}}",
	"{\"state\":\"open\",\"failure_count\":0,\"success_count\":0,\"policy\":{\"preset\":"
	"\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"}}",
	"{\"state\":\"open\",\"failure_count\":0,\"success_count\":0,\"window\":{\"calls\":null,"
	"\"failure_rate\":\"high\"}}",
	"{\"state\":\"open\",\"failure_count\":0,\"success_count\":0,\"current_break_ms\":false}",
	"{\"state\":\"open\",\"failure_count\":0,\"success_count\":0,\"reporters\":{}}",
	"{\"state\":\"open\",\"failure_count\":0,\"success_count\":0,\"policy_rev\":\"7\"}",
	"{\"state\":\"open\",\"failure_count\":0,\"success_count\":0,\"policy_rev\":null}",
	"{\"state\":\"open\",\"failure_count\":0,\"success_count\":0,\"policy_rev\":0}",
	"{\"state\":\"open\",\"failure_count\":0,\"success_count\":0,\"policy_rev\":-3}",
	"{\"state\":\"open\",\"failure_count\":0,\"success_count\":0,"
	"\"policy_rev\":4294967296}",
	"{}",
};

START_TEST(picked_snapshots_read_the_same_both_ways)
{
	int ok = 0;

	for (size_t i = 0; i < sizeof picked / sizeof picked[0]; i++) {
		bool read_ok = false;

		ck_assert_msg(compare_snapshot(picked[i], &read_ok), "not flat: %s", picked[i]);
		ok += read_ok;
	}
	/* Both outcomes were compared. */
	ck_assert_int_ge(ok, 5);
	ck_assert_int_le(ok, (int)(sizeof picked / sizeof picked[0]) - 20);
}
END_TEST

/* ---- generated snapshots ------------------------------------------------ */

/* A member list being built: "key":value texts, then joined in any
 * order. */
typedef struct members {
	char text[48][LINE_MAX / 4];
	int n;
} members;

typedef struct gen {
	uint64_t rng;
	int junk; /* one value in `junk` is wrong (0: none) */
} gen;

static bool
chance(gen *g, int percent)
{
	return (int)test_below(&g->rng, 100) < percent;
}

/* Is this value to be a wrong one? */
static bool
junk(gen *g)
{
	return g->junk > 0 && test_below(&g->rng, (size_t)g->junk) == 0;
}

static const char *
pick(gen *g, const char *const *from, size_t n)
{
	return from[test_below(&g->rng, n)];
}

#define PICK(g, arr) pick(g, arr, sizeof arr / sizeof arr[0])

/* Values of the wrong type for anything. */
static const char *const wrong[] = {
	"\"x\"",
	"true",
	"false",
	"{}",
	"{\"a\":1}",
	"-1",
	"9007199254740993",
	"123456789012345678",
	"\"\"",
};

static void add(members *m, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Add "key":value (value printf-style) to m. */
static void
add(members *m, const char *key, const char *fmt, ...)
{
	va_list ap;
	int w;

	ck_assert_int_lt(m->n, 48);
	w = snprintf(m->text[m->n], sizeof m->text[m->n], "\"%s\":", key);
	va_start(ap, fmt);
	vsnprintf(m->text[m->n] + w, sizeof m->text[m->n] - (size_t)w, fmt, ap);
	va_end(ap);
	m->n++;
}

/* Join m's members into "{...}" at out, in cbd's order or shuffled. */
static void
join(gen *g, members *m, char *out, size_t size)
{
	size_t used = 0;

	if (chance(g, 40)) {
		for (int i = m->n - 1; i > 0; i--) {
			size_t j = test_below(&g->rng, (size_t)i + 1);
			char tmp[sizeof m->text[0]];

			memcpy(tmp, m->text[i], sizeof tmp);
			memcpy(m->text[i], m->text[j], sizeof tmp);
			memcpy(m->text[j], tmp, sizeof tmp);
		}
	}
	used += (size_t)snprintf(out + used, size - used, "{");
	for (int i = 0; i < m->n && used < size; i++)
		used +=
		    (size_t)snprintf(out + used, size - used, "%s%s", i > 0 ? "," : "", m->text[i]);
	if (used < size)
		snprintf(out + used, size - used, "}");
}

/* An integer member: mostly valid, else null, wrong or absent. */
static void
add_int(gen *g, members *m, const char *key, int64_t valid, bool null_ok)
{
	if (chance(g, 5))
		return; /* absent */
	if (junk(g))
		add(m, key, "%s", PICK(g, wrong));
	else if (null_ok && chance(g, 30))
		add(m, key, "null");
	else
		add(m, key, "%lld", (long long)valid);
}

/* A string member from `valid`, or null, wrong or absent. */
static void
add_str(gen *g, members *m, const char *key, const char *const *valid, size_t n)
{
	if (chance(g, 5))
		return;
	if (junk(g))
		add(m, key, "%s", PICK(g, wrong));
	else if (chance(g, 10))
		add(m, key, "null");
	else
		add(m, key, "\"%s\"", pick(g, valid, n));
}

/* Now and then a member this library does not know. */
static void
add_unknown(gen *g, members *m)
{
	static const char *const values[] = { "1", "\"v\"", "null", "{\"a\":{}}", "true" };

	if (chance(g, 10))
		add(m, chance(g, 50) ? "zz_later" : "x", "%s", PICK(g, values));
}

static const char *const states[] = { "closed", "open", "half_open", "ajar", "" };
static const char *const sources[] = { "builtin", "defaults", "client", "config", "cosmic" };
static const char *const trips[] = { "consecutive", "rate", "sometimes" };
static const char *const windows[] = { "count", "time", "sliding" };
static const char *const presets[] = { "database", "service", "x",
	"a-preset-name-that-is-longer-than-sixty-four-bytes-which-is-the-room-for-it" };
static const char *const users[] = { "root", "",
	"a-user-name-longer-than-the-sixty-three-bytes-a-hold-has-room-for-in-it" };

/* The policy object's text into out. */
static void
gen_policy(gen *g, char *out, size_t size)
{
	static const char *const int_keys[] = { "failure_threshold", "success_threshold",
		"break_ms", "half_open_max", "slot_ttl_ms", "max_gap_ms", "window_size",
		"minimum_calls", "failure_rate", "slow_call_ms", "slow_call_rate", "min_reporters",
		"reporter_window_ms", "break_backoff", "break_max_ms" };
	static const char *const all_keys[] = { "failure_threshold", "success_threshold",
		"break_ms", "half_open_max", "slot_ttl_ms", "max_gap_ms", "trip", "window",
		"window_size", "minimum_calls", "failure_rate", "slow_call_ms", "slow_call_rate",
		"min_reporters", "reporter_window_ms", "break_backoff", "break_max_ms", "preset" };
	char source[LINE_MAX / 4];
	members m = { .n = 0 }, s = { .n = 0 };

	for (size_t i = 0; i < sizeof int_keys / sizeof int_keys[0]; i++)
		add_int(g, &m, int_keys[i], (int64_t)test_below(&g->rng, 100000), true);
	add_str(g, &m, "trip", trips, 3);
	add_str(g, &m, "window", windows, 3);
	add_str(g, &m, "preset", presets, 4);
	add_unknown(g, &m);
	if (chance(g, 85)) {
		for (size_t i = 0; i < sizeof all_keys / sizeof all_keys[0]; i++)
			add_str(g, &s, all_keys[i], sources, 5);
		add_unknown(g, &s);
		join(g, &s, source, sizeof source);
		add(&m, "source", "%s", junk(g) ? PICK(g, wrong) : chance(g, 5) ? "null" : source);
	}
	join(g, &m, out, size);
}

/* A generated snapshot object's text into out. */
static void
gen_snapshot(gen *g, char *out, size_t size)
{
	char policy[LINE_MAX / 2], obj[LINE_MAX / 4];
	members m = { .n = 0 };

	if (chance(g, 95))
		add(&m, "name", "%s", junk(g) ? "5" : chance(g, 95) ? "\"svc.a\"" : "\"other\"");
	if (junk(g))
		add(&m, "state", "%s", PICK(g, wrong));
	else if (chance(g, 98))
		add(&m, "state", "\"%s\"", states[test_below(&g->rng, chance(g, 3) ? 5 : 3)]);
	add_int(g, &m, "failure_count", (int64_t)test_below(&g->rng, 50), false);
	add_int(g, &m, "success_count", (int64_t)test_below(&g->rng, 50), false);
	add_int(g, &m, "last_failure_at", INT64_C(1796052888151), true);
	add_int(g, &m, "opened_at", INT64_C(1796052888151), true);
	add_int(g, &m, "retry_after_ms", (int64_t)test_below(&g->rng, 30000), false);
	if (chance(g, 50))
		add_int(g, &m, "policy_rev", 1 + (int64_t)test_below(&g->rng, 4294967295u), false);
	if (chance(g, 60)) {
		gen_policy(g, policy, sizeof policy);
		add(&m, "policy", "%s", junk(g) ? PICK(g, wrong) : chance(g, 5) ? "null" : policy);
	}
	if (chance(g, 70)) {
		members h = { .n = 0 };

		add_str(g, &h, "state", states, chance(g, 5) ? 5 : 2);
		add_int(g, &h, "by_uid", (int64_t)test_below(&g->rng, 2000), true);
		add_str(g, &h, "by_user", users, 3);
		add_str(g, &h, "reason", users, 3);
		add_int(g, &h, "since", INT64_C(1796052888000), true);
		add_int(g, &h, "until", INT64_C(1796052899000), true);
		add_unknown(g, &h);
		join(g, &h, obj, sizeof obj);
		add(&m, "hold", "%s", junk(g) ? PICK(g, wrong) : chance(g, 50) ? "null" : obj);
	}
	if (chance(g, 80)) {
		members t = { .n = 0 };

		add_int(g, &t, "successes", (int64_t)test_below(&g->rng, 1000), true);
		add_int(g, &t, "failures", (int64_t)test_below(&g->rng, 1000), true);
		add_int(g, &t, "ignored", (int64_t)test_below(&g->rng, 1000), true);
		add_int(g, &t, "slow", (int64_t)test_below(&g->rng, 1000), true);
		add_int(g, &t, "rejected", (int64_t)test_below(&g->rng, 1000), true);
		add_unknown(g, &t);
		join(g, &t, obj, sizeof obj);
		add(&m, "totals", "%s", junk(g) ? PICK(g, wrong) : chance(g, 5) ? "null" : obj);
	}
	add_int(g, &m, "current_break_ms", 30000, true);
	if (chance(g, 40)) {
		members w = { .n = 0 };

		add_int(g, &w, "calls", (int64_t)test_below(&g->rng, 100), true);
		add_int(g, &w, "failures", (int64_t)test_below(&g->rng, 100), true);
		add_int(g, &w, "slow", (int64_t)test_below(&g->rng, 100), true);
		add_int(g, &w, "failure_rate", (int64_t)test_below(&g->rng, 101), true);
		add_int(g, &w, "slow_call_rate", (int64_t)test_below(&g->rng, 101), true);
		join(g, &w, obj, sizeof obj);
		add(&m, "window", "%s", junk(g) ? PICK(g, wrong) : chance(g, 5) ? "null" : obj);
	}
	if (chance(g, 30))
		add_int(g, &m, "reporters", (int64_t)test_below(&g->rng, 5), true);
	add_unknown(g, &m);
	join(g, &m, out, size);
}

/* A generator with seed s and a junk rate of its own per line. */
static void
gen_next_line(gen *g)
{
	static const int rates[] = { 0, 0, 200, 60, 20, 5 };

	g->junk = rates[test_below(&g->rng, sizeof rates / sizeof rates[0])];
}

START_TEST(generated_snapshots_read_the_same_both_ways)
{
	gen g = { .rng = UINT64_C(0x5eed0f1a75) };
	static char line[LINE_MAX];
	int compared = 0, ok = 0;

	for (int i = 0; i < GEN_LINES; i++) {
		bool read_ok = false;

		gen_next_line(&g);
		gen_snapshot(&g, line, sizeof line);
		if (compare_snapshot(line, &read_ok)) {
			compared++;
			ok += read_ok;
		}
	}
	/* Most lines are in the flat subset (too deep an unknown member is
	 * not), and both outcomes are frequent. */
	ck_assert_int_ge(compared, GEN_LINES * 8 / 10);
	ck_assert_int_ge(ok, compared / 5);
	ck_assert_int_le(ok, compared * 4 / 5);
}
END_TEST

/* ---- the cache's line handler ------------------------------------------- */

static void
pair_open(cache_pair *p)
{
	ck_assert(cache_pair_open(p, "check-snapshot"));
}

/* Feed line (an object's text) to both caches, the second one with an
 * array member added, and compare what they made of it. */
static void
pair_feed(cache_pair *p, const char *line)
{
	static char padded[LINE_MAX + 32];
	char why[READERS_WHY_SIZE];
	size_t len = strlen(line);

	ck_assert_msg(line_padded(line, len, padded, sizeof padded), "not an object: %s", line);
	ck_assert_msg(proto_scan_flat(line, len, &flat), "not flat: %s", line);
	ck_assert(!proto_scan_flat(padded, strlen(padded), &flat));
	ck_assert_msg(!cache_pair_differ(p, line, len, padded, why, sizeof why), "%s: %s", why,
	    line);
}

START_TEST(cache_reads_lines_the_same_both_ways)
{
	static const char *const lines[] = {
		"{\"event\":\"change\",\"from\":\"closed\",\"snapshot\":" REAL_SNAPSHOT
		",\"reason\":\"failure threshold reached\"}",
		"{\"event\":\"delete\",\"name\":\"svc.a\",\"reason\":\"deleted\"}",
		/* Protocol 3: a compact change event, a policy event. */
		"{\"event\":\"change\",\"from\":\"closed\",\"snapshot\":" COMPACT_SNAPSHOT
		",\"reason\":\"failure threshold reached\"}",
		"{\"event\":\"policy\",\"snapshot\":" POLICY_SNAPSHOT(0, 8, 3) "}",
		"{\"id\":\"cache-probe-3\",\"ok\":true,\"server\":\"cbd\",\"protocol\":2}",
		"{\"ok\":false,\"error\":{\"code\":\"unknown_op\",\"message\":\"watch\"}}",
		"{\"event\":\"change\"}",
		"{\"event\":\"change\",\"snapshot\":5}",
		"{\"event\":\"change\",\"snapshot\":{\"name\":\"svc.a\",\"state\":\"ajar\"}}",
		("{\"event\":\"change\",\"snapshot\":{\"name\":\"svc.a\",\"state\":\"open\","
		 "\"failure_count\":\"x\"}}"),
		"{\"event\":5,\"ok\":true}",
		"{\"event\":\"rename\",\"name\":\"svc.a\"}",
		"{\"ok\":true}",
		"{}",
	};
	cache_pair p;
	cbc_cache_stats st;

	pair_open(&p);
	for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++)
		pair_feed(&p, lines[i]);
	cbci_cache_stats(p.cache[0], &st);
	/* The change events (6; two without a snapshot object to read, which
	 * are no bad lines), the policy event, the delete and the rename;
	 * two bad snapshots; two refusals (ok:false, and a line that is
	 * neither reply nor event). */
	ck_assert_int_eq(st.events, 9);
	ck_assert_int_eq(st.bad_lines, 2);
	ck_assert_int_eq(st.refused, 2);
	cache_pair_close(&p);
}
END_TEST

START_TEST(cache_reads_generated_events_the_same_both_ways)
{
	gen g = { .rng = UINT64_C(0xca5e0f1a75) };
	static char snap[LINE_MAX], line[LINE_MAX + 128];
	cbc_cache_stats st;
	int fed = 0;
	cache_pair p;

	pair_open(&p);
	for (int i = 0; i < GEN_LINES / 4; i++) {
		gen_next_line(&g);
		gen_snapshot(&g, snap, sizeof snap);
		snprintf(line, sizeof line,
		    "{\"event\":\"change\",\"from\":\"closed\",\"snapshot\":%s,\"reason\":\"x\"}",
		    snap);
		if (!proto_scan_flat(line, strlen(line), &flat))
			continue; /* too deep an unknown member */
		pair_feed(&p, line);
		fed++;
	}
	cbci_cache_stats(p.cache[0], &st);
	ck_assert_int_ge(fed, GEN_LINES / 4 * 8 / 10);
	ck_assert_int_eq(st.events, (uint64_t)fed);
	/* Both applied and refused snapshots. */
	ck_assert_uint_gt(st.bad_lines, 0);
	ck_assert_uint_lt(st.bad_lines, (uint64_t)fed * 4 / 5);
	cache_pair_close(&p);
}
END_TEST

/* Would one more own failure be sent with its reply awaited (a cache
 * without a connection queues nothing: the verdict is all)? */
static bool
failure_synced(cbci_cache *c, cbci_cache_entry *e)
{
	static const char line[] = "{}\n";
	bool could_trip = false;

	unsigned hint = 0;

	cbci_cache_report(c, e, line, sizeof line - 1, "{", 1, &hint, -1, true, 0, &could_trip);
	return could_trip;
}

/* Apply line (a string literal) to c. */
#define APPLY(c, line) cbci_cache_apply_line(c, line, strlen(line))

/* Protocol 3: the cache keeps the circuit's rule with its policy_rev. A
 * synced reply or a policy event brings it; a compact snapshot of the
 * same rev keeps it (and hands it out with the fresh snapshot); another
 * rev, a watch reply of another rev, or a delete makes it unknown (every
 * failure synced); unknown events change nothing. */
START_TEST(cache_keeps_the_rule_with_its_policy_rev)
{
	cbci_cache *c = cbci_cache_acquire("/nonexistent/check-snapshot-rev.sock", NULL);
	cbci_cache_entry *e;
	cbc_snapshot fresh;
	bool has_fresh;
	uint64_t seen = 0;
	int64_t retry;
	cbc_cache_stats st;

	ck_assert_ptr_nonnull(c);
	e = cbci_cache_watch(c, "svc.a");
	ck_assert_ptr_nonnull(e);
	/* No rule read: every failure synced. */
	ck_assert(failure_synced(c, e));
	/* A synced outcome's reply ("policy": true): threshold 2, rev 5. */
	APPLY(c, "{\"id\":\"cache-sync-1\",\"ok\":true,\"snapshot\":" POLICY_SNAPSHOT(0, 5, 2) "}");
	ck_assert(!failure_synced(c, e));
	ck_assert(failure_synced(c, e));
	/* A compact change event of rev 5: the rule stays, and the fresh
	 * snapshot carries the kept policy. */
	APPLY(c,
	    "{\"event\":\"change\",\"from\":\"open\",\"snapshot\":" CLOSED_COMPACT(0,
		5) ",\"reason\":\"x\"}");
	cbci_cache_decide(c, e, &seen, &fresh, &has_fresh, &retry, NULL);
	ck_assert(has_fresh);
	ck_assert_int_eq(fresh.policy_rev, 5);
	ck_assert(fresh.policy.known);
	ck_assert_int_eq(fresh.policy.failure_threshold, 2);
	ck_assert(!failure_synced(c, e));
	/* Rev 6 without a policy: stale, the rule unknown. */
	APPLY(c,
	    "{\"event\":\"change\",\"from\":\"open\",\"snapshot\":" CLOSED_COMPACT(0,
		6) ",\"reason\":\"x\"}");
	cbci_cache_decide(c, e, &seen, &fresh, &has_fresh, &retry, NULL);
	ck_assert(has_fresh);
	ck_assert_int_eq(fresh.policy_rev, 6);
	ck_assert(!fresh.policy.known);
	ck_assert(failure_synced(c, e));
	/* A policy event (a reload): threshold 3 from now, no state change. */
	APPLY(c, "{\"event\":\"policy\",\"snapshot\":" POLICY_SNAPSHOT(0, 6, 3) "}");
	cbci_cache_decide(c, e, &seen, &fresh, &has_fresh, &retry, NULL);
	ck_assert(has_fresh);
	ck_assert(fresh.policy.known);
	ck_assert_int_eq(fresh.policy.failure_threshold, 3);
	ck_assert_int_eq(fresh.state, CBC_STATE_CLOSED);
	ck_assert(!failure_synced(c, e));
	ck_assert(!failure_synced(c, e));
	ck_assert(failure_synced(c, e));
	/* A watch reply of rev 9 (after a reconnect) only sets the base: the
	 * rule is unknown, but its policy is kept for rev 9, which the next
	 * event of rev 9 makes the rule. */
	APPLY(c, "{\"ok\":true,\"snapshots\":[" POLICY_SNAPSHOT(0, 9, 4) "]}");
	ck_assert(failure_synced(c, e));
	APPLY(c,
	    "{\"event\":\"change\",\"from\":\"open\",\"snapshot\":" CLOSED_COMPACT(0,
		9) ",\"reason\":\"x\"}");
	ck_assert(!failure_synced(c, e));
	/* An event this library does not know changes nothing. */
	APPLY(c, "{\"event\":\"later\",\"snapshot\":" CLOSED_COMPACT(0, 99) "}");
	ck_assert(!failure_synced(c, e));
	/* Deleted: its next creation gets another policy. */
	APPLY(c, "{\"event\":\"delete\",\"name\":\"svc.a\",\"reason\":\"deleted\"}");
	ck_assert(failure_synced(c, e));
	APPLY(c,
	    "{\"event\":\"change\",\"from\":\"open\",\"snapshot\":" CLOSED_COMPACT(0,
		9) ",\"reason\":\"x\"}");
	ck_assert(failure_synced(c, e));
	cbci_cache_stats(c, &st);
	ck_assert_uint_eq(st.bad_lines, 0);
	cbci_cache_release(c, cbci_cache_generation());
}
END_TEST

/* A line outside the flat subset still goes through jansson: garbage and
 * arrays are bad lines, a watch reply's snapshots are applied. */
START_TEST(cache_reads_lines_outside_the_flat_subset)
{
	static const char watch_reply[] = "{\"ok\":true,\"snapshots\":[" REAL_SNAPSHOT "]}";
	cbc_cache_stats st;
	cbci_cache *c = cbci_cache_acquire("/nonexistent/check-snapshot-other.sock", NULL);
	cbci_cache_entry *e;
	cbc_snapshot fresh;
	bool has_fresh;
	uint64_t seen = 0;
	int64_t retry;

	ck_assert_ptr_nonnull(c);
	e = cbci_cache_watch(c, "svc.a");
	ck_assert_ptr_nonnull(e);
	cbci_cache_apply_line(c, "not json", 8);
	cbci_cache_apply_line(c, "[1,2]", 5);
	cbci_cache_apply_line(c, watch_reply, strlen(watch_reply));
	cbci_cache_stats(c, &st);
	ck_assert_int_eq(st.bad_lines, 2);
	ck_assert_int_eq(st.events, 0);
	/* A watch reply's snapshot is no event: nothing fresh. */
	cbci_cache_decide(c, e, &seen, &fresh, &has_fresh, &retry, NULL);
	ck_assert(!has_fresh);
	cbci_cache_release(c, cbci_cache_generation());
}
END_TEST

/* ---- uncached replies, from a stand-in daemon ---------------------------- */

/* What the stand-in answers to a request naming `name`: the reply's
 * members after its "id" (the text ends with the object's '}'). */
typedef struct scripted {
	const char *name;
	const char *rest;
} scripted;

static const scripted replies[] = {
	{ "real", "\"ok\":true,\"snapshot\":" REAL_SNAPSHOT "}" },
	{ "ajar", "\"ok\":true,\"snapshot\":{\"name\":\"ajar\",\"state\":\"ajar\"}}" },
	{ "nosnap", "\"ok\":true}" },
	{ "badhold",
	    "\"ok\":true,\"snapshot\":{\"state\":\"open\",\"failure_count\":1,"
	    "\"success_count\":0,\"hold\":{\"state\":\"open\",\"since\":\"x\"}}}" },
	{ "refused",
	    "\"ok\":false,\"error\":{\"code\":\"forbidden\",\"message\":\"admin only\"}}" },
	{ "full", "\"ok\":false,\"error\":{\"code\":\"capacity\",\"message\":\"full\"}}" },
	{ "nocode", "\"ok\":false,\"error\":{\"message\":\"what\"}}" },
	{ "okint", "\"ok\":1,\"snapshot\":" REAL_SNAPSHOT "}" },
	{ "nook", "\"snapshot\":" REAL_SNAPSHOT "}" },
	{ "allowed",
	    "\"ok\":true,\"allowed\":true,\"state\":\"half_open\",\"permit\":\"p-1\","
	    "\"retry_after_ms\":null,\"applied\":false,\"snapshot\":" REAL_SNAPSHOT "}" },
	{ "refusedcall",
	    "\"ok\":true,\"allowed\":false,\"state\":\"open\",\"retry_after_ms\":250,"
	    "\"applied\":true,\"snapshot\":" REAL_SNAPSHOT "}" },
	{ "badallow",
	    "\"ok\":true,\"allowed\":\"yes\",\"state\":5,\"applied\":1,\"snapshot\":"
	    "{}}" },
	{ "badstate", "\"ok\":true,\"allowed\":true,\"state\":\"ajar\",\"applied\":null}" },
	{ "badretry",
	    "\"ok\":true,\"allowed\":false,\"state\":\"open\",\"retry_after_ms\":\"soon\"}" },
	{ "longpermit",
	    "\"ok\":true,\"allowed\":true,\"state\":\"closed\",\"permit\":\"aaaaaaaaaaaa"
	    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"}" },
	{ "wrongid", NULL }, /* echoes another id */
};

#define SCRIPTED_COUNT (sizeof replies / sizeof replies[0])

typedef struct stand_in {
	client_stand_in server;
	bool pad; /* answer with an array member added (set between calls) */
} stand_in;

/* The reply line (with its newline) to one request line into out. */
static void
stand_in_reply(stand_in *d, const char *line, char *out, size_t size)
{
	json_t *req = json_loads(line, 0, NULL);
	const char *name = json_string_value(json_object_get(req, "name"));
	long long id = (long long)json_integer_value(json_object_get(req, "id"));
	const char *rest = "\"ok\":true}";
	size_t len;

	for (size_t i = 0; name != NULL && i < SCRIPTED_COUNT; i++) {
		if (strcmp(name, replies[i].name) != 0)
			continue;
		if (replies[i].rest == NULL)
			id++;
		else
			rest = replies[i].rest;
	}
	if (name != NULL && strcmp(name, "wrongid") == 0)
		rest = "\"ok\":true,\"snapshot\":" REAL_SNAPSHOT "}";
	snprintf(out, size, "{\"id\":%lld,%s", id, rest);
	len = strlen(out);
	if (__atomic_load_n(&d->pad, __ATOMIC_ACQUIRE))
		snprintf(out + len - 1, size - (len - 1), ",\"zz_pad\":[0]}");
	len = strlen(out);
	snprintf(out + len, size - len, "\n");
	json_decref(req);
}

static bool
stand_in_line(const char *line, char *reply, size_t size, void *arg)
{
	stand_in_reply(arg, line, reply, size);
	return true;
}

/* What one op made of a reply. */
typedef struct op_result {
	cbc_status st;
	cbc_error err;
	cbc_snapshot snap;
	cbc_allow_result allow;
	bool applied;
} op_result;

/* Run op `which` (0 get, 1 allow, 2 cas) on name against the stand-in,
 * answering plain or padded. */
static void
op_run(stand_in *d, cbc_conn *conn, int which, const char *name, bool pad, op_result *r)
{
	memset(r, 0, sizeof *r);
	__atomic_store_n(&d->pad, pad, __ATOMIC_RELEASE);
	switch (which) {
	case 0:
		r->st = cbc_get(conn, name, NULL, &r->snap, &r->err);
		break;
	case 1:
		r->st = cbc_allow(conn, name, NULL, &r->allow, &r->err);
		break;
	default:
		r->st = cbc_cas(conn, name, CBC_STATE_OPEN, CBC_STATE_HALF_OPEN, NULL, &r->applied,
		    &r->snap, &r->err);
		break;
	}
}

/* Drop the digits of text. */
static void
strip_digits(char *text)
{
	char *to = text;

	for (const char *p = text; *p != '\0'; p++)
		if (*p < '0' || *p > '9')
			*to++ = *p;
	*to = '\0';
}

START_TEST(uncached_replies_read_the_same_both_ways)
{
	static const char *const ops[] = { "get", "allow", "cas" };
	stand_in d;
	cbc_conn *conn;
	cbc_error err;
	int failed = 0;

	d.pad = false;
	client_stand_in_start(&d.server, stand_in_line, &d);
	conn = cbc_conn_new(d.server.path, &err);
	ck_assert_ptr_nonnull(conn);
	ck_assert_int_eq(cbc_conn_set_timeouts(conn, 5000, 5000, &err), CBC_OK);
	for (int which = 0; which < 3; which++) {
		for (size_t i = 0; i < SCRIPTED_COUNT; i++) {
			const char *name = replies[i].name;
			op_result a, b;
			char line[128];

			op_run(&d, conn, which, name, false, &a);
			op_run(&d, conn, which, name, true, &b);
			snprintf(line, sizeof line, "%s of %s", ops[which], name);
			ck_assert_msg(a.st == b.st, "status %d (flat) != %d (jansson): %s", a.st,
			    b.st, line);
			/* The request ids differ (wrongid's message names them). */
			strip_digits(a.err.message);
			strip_digits(b.err.message);
			ck_assert_msg(strcmp(a.err.message, b.err.message) == 0,
			    "\"%s\" (flat) != \"%s\" (jansson): %s", a.err.message, b.err.message,
			    line);
			ck_assert_str_eq(a.err.code, b.err.code);
			snapshot_same(&a.snap, &b.snap, line);
			ck_assert_int_eq(a.allow.allowed, b.allow.allowed);
			ck_assert_int_eq(a.allow.state, b.allow.state);
			ck_assert_int_eq(a.allow.retry_after_ms, b.allow.retry_after_ms);
			ck_assert_int_eq(a.allow.has_permit, b.allow.has_permit);
			ck_assert_str_eq(a.allow.permit, b.allow.permit);
			ck_assert_int_eq(a.applied, b.applied);
			failed += a.st != CBC_OK;
		}
	}
	/* Answers and refusals of every kind were compared. */
	ck_assert_int_gt(failed, 10);
	ck_assert_int_lt(failed, 3 * (int)SCRIPTED_COUNT - 5);
	cbc_conn_free(conn);
	client_stand_in_stop(&d.server);
}
END_TEST

static Suite *
snapshot_suite(void)
{
	Suite *s = suite_create("snapshots from a flat view and from jansson");
	TCase *tc = tcase_create("snapshot");
	TCase *cache = tcase_create("cache");
	TCase *replies_tc = tcase_create("replies");

	tcase_add_test(tc, picked_snapshots_read_the_same_both_ways);
	tcase_add_test(tc, generated_snapshots_read_the_same_both_ways);
	tcase_set_timeout(tc, 60);
	suite_add_tcase(s, tc);
	tcase_add_test(cache, cache_reads_lines_the_same_both_ways);
	tcase_add_test(cache, cache_reads_generated_events_the_same_both_ways);
	tcase_add_test(cache, cache_reads_lines_outside_the_flat_subset);
	tcase_add_test(cache, cache_keeps_the_rule_with_its_policy_rev);
	tcase_set_timeout(cache, 60);
	suite_add_tcase(s, cache);
	tcase_add_test(replies_tc, uncached_replies_read_the_same_both_ways);
	tcase_set_timeout(replies_tc, 60);
	suite_add_tcase(s, replies_tc);
	return s;
}

int
main(void)
{
	return check_run(snapshot_suite(), NULL);
}
