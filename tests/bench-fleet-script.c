/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench-fleet-script.c — where fleet mode's circuit script (src/fleet.lua)
 * spends Redis's CPU (issue 24). Prints figures, asserts nothing; not run
 * by make check.
 *
 *   CBD_SRCDIR=.. tests/bench-fleet-script [-n CALLS (20000)] [-r ROUNDS (3)]
 *       [-k CIRCUITS (1000)] [-p PIPELINE (32)] [-g GROUPS (all)] [-B BASELINE.lua]
 *
 * Starts a redis-server on a Unix socket in a temp dir, loads the script and
 * variants of it, and calls each variant CALLS times (pipelined, PIPELINE
 * deep, over CIRCUITS circuits in turn, with the arguments cbd sends: four
 * keys with the epoch, now "" = Redis TIME), measuring the server's on-CPU
 * time (/proc/PID/schedstat of its main thread) around each. Every round
 * runs every variant back to back, so that load on the machine falls alike
 * on the variants compared; the table gives each variant's median and
 * lowest µs of Redis CPU a call (and an outcome, for folds) over the rounds.
 * With -B, every variant of groups c, r, s and b runs again right after
 * itself with BASELINE.lua (e.g. the script before a change: an A/B in one
 * run).
 *
 * The variants (GROUPS: letters, e.g. -g fcr):
 *   f  floors: PING; EVALSHA of a script that only returns, with the same
 *      keys and arguments; the same plus one Redis command (HMGET of the
 *      circuit's 17 fields, HSET of one field, PEXPIRE, ZRANGE of the slots,
 *      PUBLISH with no subscriber, GET of the epoch, TIME).
 *   t  the script cut short (a `do return '' end` put before one of its
 *      sections) on a get of a stored closed circuit: what each section of
 *      the script costs (arguments, policy, the function definitions, the
 *      load, the op, the reply's circuit, persist, the reply).
 *   c  the consecutive rule: get, success, failure (a threshold it never
 *      reaches), and outcomes folds of 1, 16 and 64 successes (one run),
 *      and of 64 outcomes with 3 failures (95 % successes: 6 runs).
 *   r  the rate rule on a count window of 100: the same.
 *   s  the rate rule on a time window of 10 s: the same.
 *   b  multi-circuit batches (a test-only Lua wrapper that runs the whole
 *      script once for each of K circuits in one EVALSHA; NOT what cbd
 *      sends): K = 16, 64, 128 circuits each with a fold of 16 outcomes
 *      (1 failure: 6 %), both rules, and of 1 success; per circuit and per
 *      outcome; and K = 64 with each circuit's script cut before the load
 *      (arguments, policy, function definitions: what a script made for
 *      batches would run once a call, not once a circuit).
 */
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <hiredis.h>

#include "redis-util.h"

#define EPOCH "bench-epoch-1"
#define CHANNEL "bench:events"
#define ARGS_ONE 12 /* ARGV of one call with the epoch */
#define BATCH_MAX 128
#define ROUNDS_MAX 50

static const char POLICY_CONS[] =
    "consecutive 1000000000 2 30000 1 30000 0 count 100 10 50 0 100 1 60000 1 0";
static const char POLICY_RATE_COUNT[] =
    "rate 5 2 30000 1 30000 0 count 100 10 50 0 100 1 60000 1 0";
static const char POLICY_RATE_TIME[] =
    "rate 5 2 30000 1 30000 0 time 10000 10 50 0 100 1 60000 1 0";

static redis_server server;
static redisContext *ctx;
static long calls_per_variant = 20000;
static int rounds = 3;
static int circuits = 1000;
static int pipeline = 32;

/* ------------------------------------------------------------ scripts */

/* SCRIPT LOAD text into sha (""; not loaded: says why). */
static void
load(const char *what, const char *text, char sha[64])
{
	redisReply *r = redisCommand(ctx, "SCRIPT LOAD %s", text);

	sha[0] = '\0';
	if (r != NULL && r->type == REDIS_REPLY_STRING && r->len < 64)
		memcpy(sha, r->str, r->len + 1);
	else
		fprintf(stderr, "bench-fleet-script: %s not loaded: %s\n", what,
		    r != NULL && r->type == REDIS_REPLY_ERROR ? r->str : "no reply");
	if (r != NULL)
		freeReplyObject(r);
}

/* The script with `do return '' end` put before anchor (malloc'd; NULL:
 * no such anchor). */
static char *
cut_before(const char *script, const char *anchor)
{
	static const char stop[] = "do return '' end\n";
	const char *at = strstr(script, anchor);
	size_t head, len = strlen(script);
	char *out;

	if (at == NULL)
		return NULL;
	head = (size_t)(at - script);
	out = malloc(len + sizeof stop);
	if (out == NULL)
		return NULL;
	memcpy(out, script, head);
	memcpy(out + head, stop, sizeof stop - 1);
	memcpy(out + head + sizeof stop - 1, script + head, len - head + 1);
	return out;
}

/* The batch wrapper: the whole script as a function of (KEYS, ARGV), run
 * for each of ARGV[1] circuits, each with 4 keys and ARGS_ONE arguments. */
static char *
batch_script(const char *script)
{
	static const char head[] = "local one = function(KEYS, ARGV)\n";
	static const char tail[] = "\nend\n"
				   "local n = tonumber(ARGV[1])\n"
				   "local out = {}\n"
				   "for i = 1, n do\n"
				   "\tlocal k, a = {}, {}\n"
				   "\tfor j = 1, 4 do k[j] = KEYS[4 * (i - 1) + j] end\n"
				   "\tfor j = 1, 12 do a[j] = ARGV[1 + 12 * (i - 1) + j] end\n"
				   "\tlocal r = one(k, a)\n"
				   "\tif type(r) ~= 'string' then return r end\n"
				   "\tout[i] = r\n"
				   "end\n"
				   "return table.concat(out, '\\n')\n";
	size_t len = strlen(script);
	char *out = malloc(sizeof head + len + sizeof tail);

	if (out == NULL)
		return NULL;
	memcpy(out, head, sizeof head - 1);
	memcpy(out + sizeof head - 1, script, len);
	memcpy(out + sizeof head - 1 + len, tail, sizeof tail);
	return out;
}

/* ------------------------------------------------------------ variants */

enum { S_FULL, S_EMPTY, S_BATCH, S_BASE, S_BASE_BATCH, S_BATCH_PRELUDE, S_CUT0 };

/* The script's sections, each cut before its anchor (group t). */
static const struct {
	const char *name, *anchor;
} cuts[] = {
	{ "cut: chunk start, epoch GET", "local op, channel, name, origin = ARGV[1]" },
	{ "cut: + arguments, now (TIME)",
	    "---------------------------------------------------------------- policy" },
	{ "cut: + policy parsed",
	    "---------------------------------------------------------------- circuit" },
	{ "cut: + function definitions", "local stored = fn.load_circuit()" },
	{ "cut: + load (HMGET), op defined", "local handler = ops[op]" },
	{ "cut: + op run", "-- The view first" },
	{ "cut: + reply's circuit (ZRANGE)", "if c ~= nil then\n\tfn.persist(c)" },
	{ "cut: + persist (HSET, PEXPIRE)", "local change_text = fn.change_json()" },
};
#define CUTS (sizeof cuts / sizeof cuts[0])
#define CUT_LOAD 3 /* the cut before load_circuit */

/* Floors: one Redis command in an otherwise empty script. */
static const struct {
	const char *name, *body;
} floors[] = {
	{ "floor: EVALSHA of return ''", "return ''" },
	{ "floor: + HMGET 17 fields",
	    "redis.call('HMGET', KEYS[1], 'state', 'fc', 'sc', 'lfa', 'oa', 'cbm', "
	    "'t_successes', 't_failures', 't_ignored', 't_slow', 't_rejected', 'declared', "
	    "'created_at', 'hold', 'rep_n', 'reporters', 'ver') return ''" },
	{ "floor: + HSET 1 field", "redis.call('HSET', KEYS[1], 't_successes', '12') return ''" },
	{ "floor: + PEXPIRE", "redis.call('PEXPIRE', KEYS[1], 86400000) return ''" },
	{ "floor: + ZRANGE slots",
	    "redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES') return ''" },
	{ "floor: + PUBLISH (no subscriber)",
	    "redis.call('PUBLISH', ARGV[2], string.rep('x', 400)) return ''" },
	{ "floor: + GET epoch", "redis.call('GET', KEYS[4]) return ''" },
	{ "floor: + TIME", "redis.call('TIME') return ''" },
	{ "floor: + policy: match of 17 captures",
	    "local a, b, c, d, e, f, g, h, i, j, k, l, m, n, o, p, q = string.match(ARGV[7], "
	    "'^(%a+) (%d+) (%d+) (%d+) (%d+) (%d+) (%d+) (%a+) (%d+) (%d+) (%d+) (%d+) (%d+) "
	    "(%d+) (%d+) (%d+) (%d+)$') return ''" },
	{ "floor: + policy: match, 15 tonumber, table",
	    "local a, b, c, d, e, f, g, h, i, j, k, l, m, n, o, p, q = string.match(ARGV[7], "
	    "'^(%a+) (%d+) (%d+) (%d+) (%d+) (%d+) (%d+) (%a+) (%d+) (%d+) (%d+) (%d+) (%d+) "
	    "(%d+) (%d+) (%d+) (%d+)$') local P = { trip = a, ft = tonumber(b), st = tonumber(c), "
	    "bm = tonumber(d), hom = tonumber(e), stm = tonumber(f), mgm = tonumber(g), win = h, "
	    "ws = tonumber(i), mc = tonumber(j), fr = tonumber(k), scm = tonumber(l), "
	    "scr = tonumber(m), mr = tonumber(n), rwm = tonumber(o), bb = tonumber(p), "
	    "bmm = tonumber(q) } return ''" },
	{ "floor: + 40 closures (3 upvalues) into a table",
	    "local x, y, z = 1, 2, 3 local t = {} for i = 1, 40 do t[i] = function() return x + y "
	    "+ "
	    "z end end return ''" },
	{ "floor: + HGET+HSET window field",
	    "local v = redis.call('HGET', KEYS[3], 'r7') redis.call('HSET', KEYS[3], 'r7', 1) "
	    "return ''" },
};
#define FLOORS (sizeof floors / sizeof floors[0])

typedef struct variant {
	char name[80];
	char group;
	int script; /* S_*, S_CUT0 + i; -1: PING; -2 - i: floors[i] */
	const char *op;
	const char *prefix; /* circuit names: prefix-<i> */
	const char *policy;
	char extra[512];
	int outcomes; /* per circuit (0: not an outcome op) */
	int batch; /* circuits per call (1: one) */
	double us[ROUNDS_MAX];
} variant;

#define VARIANTS_MAX 160
static variant variants[VARIANTS_MAX];
static int nvariants;
static char shas[S_CUT0 + CUTS][64];
static char floor_shas[FLOORS][64];

static variant *
add(char group, const char *name, int script, const char *op, const char *prefix,
    const char *policy)
{
	variant *v = &variants[nvariants++];

	memset(v, 0, sizeof *v);
	snprintf(v->name, sizeof v->name, "%s", name);
	v->group = group;
	v->script = script;
	v->op = op;
	v->prefix = prefix;
	v->policy = policy;
	v->batch = 1;
	return v;
}

/* extra for a fold of n outcomes: all successes (failures 0), or
 * `failures` single failures spread evenly between runs of successes. */
static void
fold_extra(char *out, size_t size, int n, int failures)
{
	size_t len = (size_t)snprintf(out, size, "{\"items\":[");
	int runs = failures + 1, left = n - failures;

	for (int i = 0; i < runs && len < size; i++) {
		int s = left / (runs - i);

		left -= s;
		if (s > 0)
			len += (size_t)snprintf(out + len, size - len, "%s[\"s\",0,\"h:1\",%d,0]",
			    len > 10 ? "," : "", s);
		if (i < failures && len < size)
			len += (size_t)snprintf(out + len, size - len, "%s[\"f\",0,\"h:1\",1,0]",
			    len > 10 ? "," : "");
	}
	if (len < size)
		snprintf(out + len, size - len, "]}");
}

static void
rule_group(char group, const char *label, const char *prefix, const char *policy)
{
	char name[80];
	variant *v;
	static const struct {
		int n, failures;
	} folds[] = { { 1, 0 }, { 16, 0 }, { 64, 0 }, { 64, 3 } };

	snprintf(name, sizeof name, "%s: get", label);
	add(group, name, S_FULL, "get", prefix, policy);
	snprintf(name, sizeof name, "%s: success", label);
	v = add(group, name, S_FULL, "success", prefix, policy);
	v->outcomes = 1;
	snprintf(name, sizeof name, "%s: failure", label);
	v = add(group, name, S_FULL, "failure", prefix, policy);
	v->outcomes = 1;
	for (size_t i = 0; i < sizeof folds / sizeof folds[0]; i++) {
		snprintf(name, sizeof name, "%s: outcomes %d (%d f)", label, folds[i].n,
		    folds[i].failures);
		v = add(group, name, S_FULL, "outcomes", prefix, policy);
		fold_extra(v->extra, sizeof v->extra, folds[i].n, folds[i].failures);
		v->outcomes = folds[i].n;
	}
}

static void
make_variants(const char *groups)
{
	if (strchr(groups, 'f') != NULL) {
		add('f', "floor: PING", -1, "get", "cons", POLICY_CONS);
		for (size_t i = 0; i < FLOORS; i++)
			add('f', floors[i].name, -2 - (int)i, "get", "cons", POLICY_CONS);
	}
	if (strchr(groups, 't') != NULL) {
		for (size_t i = 0; i < CUTS; i++)
			add('t', cuts[i].name, S_CUT0 + (int)i, "get", "cons", POLICY_CONS);
		add('t', "full get", S_FULL, "get", "cons", POLICY_CONS);
	}
	if (strchr(groups, 'c') != NULL)
		rule_group('c', "consecutive", "cons", POLICY_CONS);
	if (strchr(groups, 'r') != NULL)
		rule_group('r', "rate count", "ratec", POLICY_RATE_COUNT);
	if (strchr(groups, 's') != NULL)
		rule_group('s', "rate time", "ratet", POLICY_RATE_TIME);
	if (strchr(groups, 'b') != NULL) {
		static const int ks[] = { 1, 16, 64, 128 };
		static const struct {
			const char *label, *prefix, *policy;
		} rules[] = { { "consecutive", "cons", POLICY_CONS },
			{ "rate count", "ratec", POLICY_RATE_COUNT } };

		for (size_t r = 0; r < 2; r++) {
			for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
				char name[80];
				variant *v;

				snprintf(name, sizeof name, "batch %s: K=%d x outcomes 16 (1 f)",
				    rules[r].label, ks[i]);
				v = add('b', name, S_BATCH, "outcomes", rules[r].prefix,
				    rules[r].policy);
				fold_extra(v->extra, sizeof v->extra, 16, 1);
				v->outcomes = 16;
				v->batch = ks[i];
			}
			{
				char name[80];
				variant *v;

				snprintf(name, sizeof name, "batch %s: K=64 x outcomes 1 (s)",
				    rules[r].label);
				v = add('b', name, S_BATCH, "outcomes", rules[r].prefix,
				    rules[r].policy);
				fold_extra(v->extra, sizeof v->extra, 1, 0);
				v->outcomes = 1;
				v->batch = 64;
			}
			{
				char name[80];
				variant *v;

				snprintf(name, sizeof name,
				    "batch %s: K=64, cut before load (prelude)", rules[r].label);
				v = add('b', name, S_BATCH_PRELUDE, "outcomes", rules[r].prefix,
				    rules[r].policy);
				fold_extra(v->extra, sizeof v->extra, 16, 1);
				v->outcomes = 16;
				v->batch = 64;
			}
		}
	}
}

/* ------------------------------------------------------------ calls */

/* Append one call of v on circuits first .. first + v->batch - 1. */
static void
append_call(const variant *v, int first)
{
	static char keys[BATCH_MAX][4][64], names[BATCH_MAX][48], nbuf[16];
	const char *argv[4 + 4 * BATCH_MAX + 1 + ARGS_ONE * BATCH_MAX];
	int argc = 0, n = v->batch;

	if (v->script == -1) {
		redisAppendCommand(ctx, "PING");
		return;
	}
	argv[argc++] = "EVALSHA";
	argv[argc++] = v->script <= -2 ? floor_shas[-2 - v->script] : shas[v->script];
	snprintf(nbuf, sizeof nbuf, "%d", 4 * n);
	argv[argc++] = nbuf;
	for (int b = 0; b < n; b++) {
		int c = (first + b) % circuits;

		snprintf(names[b], sizeof names[b], "%.8s-%d", v->prefix, c);
		snprintf(keys[b][0], sizeof keys[b][0], "bench:{%.8s-%d}", v->prefix, c);
		snprintf(keys[b][1], sizeof keys[b][1], "bench:{%.8s-%d}:slots", v->prefix, c);
		snprintf(keys[b][2], sizeof keys[b][2], "bench:{%.8s-%d}:window", v->prefix, c);
		snprintf(keys[b][3], sizeof keys[b][3], "bench:epoch");
		for (int j = 0; j < 4; j++)
			argv[argc++] = keys[b][j];
	}
	if (v->script == S_BATCH || v->script == S_BASE_BATCH || v->script == S_BATCH_PRELUDE) {
		static char kbuf[16];

		snprintf(kbuf, sizeof kbuf, "%d", n);
		argv[argc++] = kbuf;
	}
	for (int b = 0; b < n; b++) {
		argv[argc++] = v->op;
		argv[argc++] = CHANNEL;
		argv[argc++] = names[b];
		argv[argc++] = "host-a";
		argv[argc++] = ""; /* now: Redis TIME */
		argv[argc++] = ""; /* declared */
		argv[argc++] = v->policy;
		argv[argc++] = "host-a:1";
		argv[argc++] = ""; /* duration_ms */
		argv[argc++] = "";
		argv[argc++] = v->extra;
		argv[argc++] = EPOCH;
	}
	redisAppendCommandArgv(ctx, argc, argv, NULL);
}

/* Calls made: `calls` replies read; false when one was an error. */
static bool
run_calls(variant *v, long calls, int *circuit)
{
	long sent = 0, got = 0;
	bool ok = true;

	while (got < calls) {
		redisReply *r;

		while (sent < calls && sent - got < pipeline) {
			append_call(v, *circuit);
			*circuit = (*circuit + v->batch) % circuits;
			sent++;
		}
		if (redisGetReply(ctx, (void **)&r) != REDIS_OK) {
			fprintf(stderr, "bench-fleet-script: %s\n", ctx->errstr);
			exit(1);
		}
		if (r->type == REDIS_REPLY_ERROR) {
			if (ok)
				fprintf(stderr, "bench-fleet-script: %s: %s\n", v->name, r->str);
			ok = false;
		}
		freeReplyObject(r);
		got++;
	}
	return ok;
}

/* Redis's main thread on-CPU ns (/proc/PID/schedstat). */
static unsigned long long
redis_cpu_ns(void)
{
	char path[64];
	unsigned long long ns = 0;
	FILE *f;

	snprintf(path, sizeof path, "/proc/%ld/schedstat", (long)server.pid);
	if ((f = fopen(path, "r")) == NULL)
		return 0;
	if (fscanf(f, "%llu", &ns) != 1)
		ns = 0;
	fclose(f);
	return ns;
}

static int
cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

int
main(int argc, char **argv)
{
	const char *groups = "ftcrsb", *base_path = NULL;
	char *script, *base = NULL;
	int opt;

	while ((opt = getopt(argc, argv, "n:r:k:p:g:B:")) != -1) {
		switch (opt) {
		case 'n':
			calls_per_variant = atol(optarg);
			break;
		case 'r':
			rounds = atoi(optarg);
			break;
		case 'k':
			circuits = atoi(optarg);
			break;
		case 'p':
			pipeline = atoi(optarg);
			break;
		case 'g':
			groups = optarg;
			break;
		case 'B':
			base_path = optarg;
			break;
		default:
			fprintf(stderr,
			    "usage: bench-fleet-script [-n CALLS] [-r ROUNDS] [-k CIRCUITS] "
			    "[-p PIPELINE] [-g GROUPS] [-B BASELINE.lua]\n");
			return 2;
		}
	}
	if (rounds < 1 || rounds > ROUNDS_MAX || calls_per_variant < 1 || circuits < BATCH_MAX ||
	    pipeline < 1) {
		fprintf(stderr, "bench-fleet-script: bad option (circuits >= %d)\n", BATCH_MAX);
		return 2;
	}
	if (!redis_available()) {
		fprintf(stderr, "bench-fleet-script: redis-server not installed\n");
		return 77;
	}
	if ((script = redis_fleet_script()) == NULL) {
		fprintf(stderr, "bench-fleet-script: no src/fleet.lua (set CBD_SRCDIR)\n");
		return 1;
	}
	if (!redis_start(&server)) {
		fprintf(stderr, "bench-fleet-script: redis-server did not start\n");
		return 1;
	}
	ctx = redisConnectUnix(server.socket_path);
	if (ctx == NULL || ctx->err != 0) {
		fprintf(stderr, "bench-fleet-script: cannot connect\n");
		redis_stop(&server);
		return 1;
	}
	freeReplyObject(redisCommand(ctx, "SET bench:epoch %s", EPOCH));
	load("the script", script, shas[S_FULL]);
	load("the empty script", "return ''", shas[S_EMPTY]);
	{
		char *b = batch_script(script);

		load("the batch wrapper", b, shas[S_BATCH]);
		free(b);
	}
	if (base_path != NULL) {
		char *b;

		base = redis_read_file(base_path);
		if (base == NULL) {
			fprintf(stderr, "bench-fleet-script: cannot read %s\n", base_path);
			return 1;
		}
		load("the baseline script", base, shas[S_BASE]);
		b = batch_script(base);
		load("the baseline batch wrapper", b, shas[S_BASE_BATCH]);
		free(b);
	}
	{
		/* The batch with each circuit's script cut before the load: what
		 * a script made for batches would run once, not per circuit. */
		char *cut = cut_before(script, cuts[CUT_LOAD].anchor), *b;

		b = cut != NULL ? batch_script(cut) : NULL;
		if (b != NULL)
			load("the batch prelude", b, shas[S_BATCH_PRELUDE]);
		free(b);
		free(cut);
	}
	for (size_t i = 0; i < CUTS; i++) {
		char *cut = cut_before(script, cuts[i].anchor);

		if (cut == NULL) {
			fprintf(stderr, "bench-fleet-script: no anchor for '%s'\n", cuts[i].name);
			shas[S_CUT0 + i][0] = '\0';
			continue;
		}
		load(cuts[i].name, cut, shas[S_CUT0 + i]);
		free(cut);
	}
	for (size_t i = 0; i < FLOORS; i++)
		load(floors[i].name, floors[i].body, floor_shas[i]);
	make_variants(groups);
	if (base != NULL) {
		/* Each variant of the rules and batches again with the baseline
		 * script, right after it. */
		int n = nvariants;

		for (int i = n - 1; i >= 0; i--) {
			variant *v = &variants[i];

			if (v->script != S_FULL && v->script != S_BATCH)
				continue;
			memmove(v + 2, v + 1, sizeof *v * (size_t)(nvariants - i - 1));
			v[1] = *v;
			v[1].script = v->script == S_FULL ? S_BASE : S_BASE_BATCH;
			snprintf(v[1].name, sizeof v[1].name, "  (base) %.60s", v->name);
			nvariants++;
		}
	}

	/* Every circuit stored (a get does not create): a few outcomes each,
	 * with each policy. */
	{
		static const struct {
			const char *prefix, *policy;
		} warm[] = { { "cons", POLICY_CONS }, { "ratec", POLICY_RATE_COUNT },
			{ "ratet", POLICY_RATE_TIME } };
		int c = 0;

		for (size_t w = 0; w < 3; w++) {
			variant v = { .script = S_FULL,
				.op = "success",
				.prefix = warm[w].prefix,
				.policy = warm[w].policy,
				.batch = 1 };

			run_calls(&v, (long)circuits * 3, &c);
		}
	}

	printf("bench-fleet-script: %ld calls a variant, %d rounds, %d circuits, pipeline %d; "
	       "redis-server pid %ld\n",
	    calls_per_variant, rounds, circuits, pipeline, (long)server.pid);
	for (int round = 0; round < rounds; round++) {
		for (int i = 0; i < nvariants; i++) {
			variant *v = &variants[i];
			int c = 0;
			long calls = calls_per_variant;
			unsigned long long t0, t1;

			if (v->script >= 0 && shas[v->script][0] == '\0') {
				v->us[round] = -1;
				continue;
			}
			/* Batches: the same circuit-calls as the others. */
			if (v->batch > 1)
				calls = calls_per_variant / v->batch > 0
				    ? calls_per_variant / v->batch
				    : 1;
			/* Heavy folds: fewer calls (at least 2,000). */
			if (v->outcomes > 1 && v->batch == 1) {
				calls = calls_per_variant * 4 / v->outcomes;
				if (calls < 2000)
					calls = 2000;
			}
			run_calls(v, pipeline * 4, &c); /* warm */
			t0 = redis_cpu_ns();
			run_calls(v, calls, &c);
			t1 = redis_cpu_ns();
			v->us[round] = (double)(t1 - t0) / 1e3 / (double)calls;
		}
		fprintf(stderr, "round %d done\n", round + 1);
	}

	printf("%-44s %10s %10s %12s %12s\n", "variant (µs of Redis CPU)", "call med", "call min",
	    "circuit med", "outcome med");
	for (int i = 0; i < nvariants; i++) {
		variant *v = &variants[i];
		double s[ROUNDS_MAX], med;

		memcpy(s, v->us, sizeof(double) * (size_t)rounds);
		qsort(s, (size_t)rounds, sizeof s[0], cmp_double);
		if (s[0] < 0) {
			printf("%-44s %10s\n", v->name, "n/a");
			continue;
		}
		med = s[rounds / 2];
		printf("%-44s %10.2f %10.2f", v->name, med, s[0]);
		if (v->batch > 1)
			printf(" %12.2f", med / v->batch);
		else
			printf(" %12s", "");
		if (v->outcomes > 0)
			printf(" %12.3f", med / v->batch / v->outcomes);
		printf("\n");
	}
	redisFree(ctx);
	redis_stop(&server);
	free(script);
	free(base);
	return 0;
}
