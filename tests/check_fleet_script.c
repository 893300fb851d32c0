/* SPDX-License-Identifier: Apache-2.0 */
/*
 * check_fleet_script.c — src/fleet.lua, fleet mode's circuit script, in a
 * real redis-server (a private one on a Unix socket, tests/redis-util.h):
 * the language-neutral trace replayed through it, one case per op for what
 * the trace does not cover (holds, cas, slots, delete, declared, merge,
 * writeback, totals, TIME, events), and a differential run of random op sequences
 * against the C core's circuit table, which the script must mirror, with
 * the boundaries random sequences seldom reach (a rate rule exactly on its
 * rate, break backoff without break_max_ms) run on purpose.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <check.h>
#include <hiredis.h>
#include <jansson.h>

#include "check-run.h"
#include "circuit-table.h"
#include "fleet-args.h"
#include "fleet-fold.h"
#include "proto.h"
#include "redis-util.h"
#include "trace-load.h"

#define T0 INT64_C(1700000000000)
#define CHANNEL "cbd:events"
/* How long the subscriber waits for an event before the case fails. */
#define EVENT_WAIT_S 5

/* The server every case talks to (started once in main) and the script's
 * sha; a forked case inherits both. */
static redis_server server;
static char sha[64];

/* A connection to the test server; the case fails without one. */
static redisContext *
connect_server(void)
{
	redisContext *ctx = redisConnectUnix(server.socket_path);

	ck_assert_msg(ctx != NULL && ctx->err == 0, "connect %s: %s", server.socket_path,
	    ctx != NULL ? ctx->errstr : "out of memory");
	return ctx;
}

/* EVALSHA of op on circuit name with the script's positional arguments
 * made from request as cbd makes them (fleet-args.c). */
static redisReply *
script_command(redisContext *ctx, const char *name, const char *op, const json_t *request)
{
	char key[300], slots[310], window[310];
	const char *origin = "";
	char *args[FLEET_ARGS];
	const char *argv[8 + FLEET_ARGS];
	redisReply *reply;

	snprintf(key, sizeof key, "cbd:{%s}", name);
	snprintf(slots, sizeof slots, "%s:slots", key);
	snprintf(window, sizeof window, "%s:window", key);
	/* name and origin: the request's, else the key's name and none. */
	if (json_is_string(json_object_get(request, "name")))
		name = json_string_value(json_object_get(request, "name"));
	if (json_is_string(json_object_get(request, "origin")))
		origin = json_string_value(json_object_get(request, "origin"));
	ck_assert_msg(fleet_args_make(name, origin, request, args),
	    "%s: a request member of the wrong type", op);
	argv[0] = "EVALSHA";
	argv[1] = sha;
	argv[2] = "3";
	argv[3] = key;
	argv[4] = slots;
	argv[5] = window;
	argv[6] = op;
	argv[7] = CHANNEL;
	for (int i = 0; i < FLEET_ARGS; i++)
		argv[8 + i] = args[i];
	reply = redisCommandArgv(ctx, 8 + FLEET_ARGS, argv, NULL);
	fleet_args_free(args);
	ck_assert_msg(reply != NULL, "EVALSHA %s: %s", op, ctx->errstr);
	return reply;
}

/* Run op on circuit `name` with request (stolen; name, policy, declared
 * and origin filled in when missing); returns the decoded reply. */
static json_t *
fleet_call(redisContext *ctx, const char *name, const char *op, const cb_policy *policy,
    json_t *request)
{
	redisReply *reply;
	json_error_t err;
	json_t *out;
	char *text;

	if (json_object_get(request, "name") == NULL)
		json_object_set_new(request, "name", json_string(name));
	if (json_object_get(request, "policy") == NULL)
		json_object_set_new(request, "policy", proto_policy_flat_json(policy));
	if (json_object_get(request, "origin") == NULL)
		json_object_set_new(request, "origin", json_string("host-a"));
	text = json_dumps(request, JSON_COMPACT);
	ck_assert_ptr_nonnull(text);
	reply = script_command(ctx, name, op, request);
	json_decref(request);
	ck_assert_msg(reply->type == REDIS_REPLY_STRING, "%s %s: %s", op, text,
	    reply->type == REDIS_REPLY_ERROR ? reply->str : "not a string");
	out = json_loads(reply->str, 0, &err);
	ck_assert_msg(out != NULL, "%s: reply %s: %s", op, reply->str, err.text);
	free(text);
	freeReplyObject(reply);
	return out;
}

/* A request object at virtual time now (now < 0: none, Redis TIME). */
static json_t *
at(int64_t now)
{
	json_t *r = json_object();

	if (now >= 0)
		json_object_set_new(r, "now", json_integer(now));
	return r;
}

/* reply.circuit[key] as an integer (CB_TIME_NONE for null). */
static int64_t
field(const json_t *reply, const char *key)
{
	const json_t *v = json_object_get(json_object_get(reply, "circuit"), key);

	ck_assert_msg(v != NULL, "circuit has no %s", key);
	return json_is_null(v) ? CB_TIME_NONE : json_integer_value(v);
}

static const char *
circuit_state(const json_t *reply)
{
	const char *s =
	    json_string_value(json_object_get(json_object_get(reply, "circuit"), "state"));

	ck_assert_ptr_nonnull(s);
	return s;
}

static int64_t
total(const json_t *reply, const char *key)
{
	return json_integer_value(
	    json_object_get(json_object_get(json_object_get(reply, "circuit"), "totals"), key));
}

static bool
flag(const json_t *reply, const char *key)
{
	const json_t *v = json_object_get(reply, key);

	ck_assert_msg(json_is_boolean(v), "reply has no boolean %s", key);
	return json_is_true(v);
}

/* The change's reason, or NULL when change is null. */
static const char *
change_reason(const json_t *reply)
{
	const json_t *change = json_object_get(reply, "change");

	ck_assert_ptr_nonnull(change);
	return json_is_null(change) ? NULL : json_string_value(json_object_get(change, "reason"));
}

static void
assert_reason(const json_t *reply, const char *want)
{
	const char *got = change_reason(reply);

	if (want == NULL)
		ck_assert_msg(got == NULL, "change %s, want null", got);
	else
		ck_assert_msg(got != NULL && strcmp(got, want) == 0, "change %s, want %s",
		    got != NULL ? got : "null", want);
}

/* Does key exist in the server? */
static bool
key_exists(redisContext *ctx, const char *key)
{
	redisReply *reply = redisCommand(ctx, "EXISTS %s", key);
	bool exists;

	ck_assert_ptr_nonnull(reply);
	exists = reply->type == REDIS_REPLY_INTEGER && reply->integer == 1;
	freeReplyObject(reply);
	return exists;
}

static json_t *
with_hold(json_t *request, const char *state, int64_t ttl_ms, const char *reason)
{
	json_object_set_new(request, "state", json_string(state));
	json_object_set_new(request, "hold",
	    json_pack("{s:I, s:i, s:s, s:s?}", "ttl_ms", (json_int_t)ttl_ms, "by_uid", 1000,
		"by_user", "ops", "reason", reason));
	return request;
}

static json_t *
with_str(json_t *request, const char *key, const char *value)
{
	json_object_set_new(request, key, json_string(value));
	return request;
}

static json_t *
with_int(json_t *request, const char *key, int64_t value)
{
	json_object_set_new(request, key, json_integer(value));
	return request;
}

/* ---- the trace ---------------------------------------------------------- */

/* The case's policy: its ctx members resolved like a creating request's
 * (as check_trace.c and cbd do). */
static void
case_policy(const json_t *policy, cb_policy *out)
{
	json_t *request = json_pack("{s:O}", "ctx", policy);
	proto_ctx declared;
	proto_layer layer = { &declared, NULL, PROTO_SOURCE_CLIENT };
	proto_error err;

	ck_assert_msg(proto_ctx_from_json(request, &declared, &err), "%s", err.message);
	json_decref(request);
	if (proto_ctx_has(&declared, PROTO_CTX_PRESET))
		layer.preset = proto_preset_builtin(declared.preset);
	proto_policy_resolve(&layer, 1, out, NULL);
}

/* want[key] (an integer or null) equals the reply's circuit[key]. */
static void
expect_time(const json_t *want, const char *key, const json_t *reply, const char *where)
{
	const json_t *v = json_object_get(want, key);
	int64_t got = field(reply, key);

	if (v == NULL)
		return;
	ck_assert_msg(got == (json_is_null(v) ? CB_TIME_NONE : json_integer_value(v)),
	    "%s: %s is %lld", where, key, (long long)got);
}

static void
replay_case(redisContext *ctx, const json_t *c, size_t number)
{
	const char *title = json_string_value(json_object_get(c, "name"));
	char name[64], *declared;
	cb_policy policy;
	size_t i;
	json_t *step;

	snprintf(name, sizeof name, "trace-%zu", number);
	case_policy(json_object_get(c, "policy"), &policy);
	declared = json_dumps(json_object_get(c, "policy"), JSON_COMPACT | JSON_SORT_KEYS);
	json_array_foreach (json_object_get(c, "steps"), i, step) {
		const char *op = json_string_value(json_object_get(step, "op"));
		const json_t *want = json_object_get(step, "expect");
		json_t *request = with_str(at(json_integer_value(json_object_get(step, "now"))),
		    "declared", declared);
		char where[256];
		json_t *reply;

		snprintf(where, sizeof where, "%s, step %zu (%s)", title, i, op);
		if (json_object_get(step, "duration_ms") != NULL)
			json_object_set(request, "duration_ms",
			    json_object_get(step, "duration_ms"));
		if (strcmp(op, "allow") == 0) {
			const json_t *permit;

			reply = fleet_call(ctx, name, "allow", &policy,
			    with_str(request, "token", "trace-token"));
			ck_assert_msg(flag(reply, "allowed") ==
				json_is_true(json_object_get(want, "allowed")),
			    "%s: allowed", where);
			ck_assert_str_eq(circuit_state(reply),
			    json_string_value(json_object_get(want, "state")));
			if (!flag(reply, "allowed"))
				ck_assert_msg(json_integer_value(
						  json_object_get(reply, "retry_after_ms")) ==
					json_integer_value(json_object_get(want, "retry_after_ms")),
				    "%s: retry_after_ms", where);
			permit = json_object_get(reply, "permit");
			if (json_is_object(permit)) {
				json_t *done = fleet_call(ctx, name, "release_slot", &policy,
				    with_str(with_str(at(json_integer_value(
							  json_object_get(step, "now"))),
						 "declared", declared),
					"token",
					json_string_value(json_object_get(permit, "token"))));

				ck_assert_msg(flag(done, "released"), "%s: permit back", where);
				json_decref(done);
			}
			json_decref(reply);
			continue;
		}
		if (strcmp(op, "force") == 0)
			reply = fleet_call(ctx, name, "set_state", &policy,
			    with_str(request, "state",
				json_string_value(json_object_get(step, "state"))));
		else
			reply = fleet_call(ctx, name, op, &policy, request);
		ck_assert_msg(strcmp(circuit_state(reply),
				  json_string_value(json_object_get(want, "state"))) == 0,
		    "%s: state %s", where, circuit_state(reply));
		ck_assert_msg(field(reply, "failure_count") ==
			json_integer_value(json_object_get(want, "failure_count")),
		    "%s: failure_count %lld", where, (long long)field(reply, "failure_count"));
		ck_assert_msg(field(reply, "success_count") ==
			json_integer_value(json_object_get(want, "success_count")),
		    "%s: success_count", where);
		expect_time(want, "last_failure_at", reply, where);
		expect_time(want, "opened_at", reply, where);
		/* The snapshot's raw field: 0 stands for break_ms. */
		ck_assert_msg((field(reply, "current_break_ms") > 0
				      ? field(reply, "current_break_ms")
				      : policy.break_ms) ==
			json_integer_value(json_object_get(want, "current_break_ms")),
		    "%s: current_break_ms", where);
		if (json_object_get(want, "window") != NULL) {
			const json_t *w = json_object_get(want, "window");
			const json_t *got =
			    json_object_get(json_object_get(reply, "circuit"), "window");

			ck_assert_msg(json_is_object(got), "%s: no window", where);
			ck_assert_msg(json_equal((json_t *)w, (json_t *)got), "%s: window", where);
		}
		json_decref(reply);
	}
	free(declared);
}

START_TEST(trace_replays)
{
	redisContext *ctx = connect_server();
	json_t *doc = trace_load(), *c;
	size_t i;

	json_array_foreach (json_object_get(doc, "cases"), i, c)
		replay_case(ctx, c, i);
	json_decref(doc);
	redisFree(ctx);
}
END_TEST

/* ---- one case per op ------------------------------------------------------ */

static cb_policy
default_policy(void)
{
	cb_policy p;

	breaker_policy_default(&p);
	p.failure_threshold = 2;
	p.break_ms = 1000;
	p.slot_ttl_ms = 500;
	return p;
}

START_TEST(get_never_creates)
{
	redisContext *ctx = connect_server();
	cb_policy p = default_policy();
	json_t *r = fleet_call(ctx, "get-none", "get", &p, at(T0));

	ck_assert(!flag(r, "existed"));
	ck_assert(json_is_null(json_object_get(r, "circuit")));
	assert_reason(r, NULL);
	ck_assert(!key_exists(ctx, "cbd:{get-none}"));
	json_decref(r);
	/* Nor do ignore, release, release_slot, a failed cas. */
	json_decref(fleet_call(ctx, "get-none", "ignore", &p, at(T0)));
	json_decref(fleet_call(ctx, "get-none", "release", &p, at(T0)));
	json_decref(
	    fleet_call(ctx, "get-none", "release_slot", &p, with_str(at(T0), "token", "x")));
	r = fleet_call(ctx, "get-none", "cas", &p,
	    with_str(with_str(at(T0), "from", "open"), "to", "closed"));
	ck_assert(!flag(r, "applied"));
	ck_assert(json_is_null(json_object_get(r, "circuit")));
	json_decref(r);
	ck_assert(!key_exists(ctx, "cbd:{get-none}"));
	ck_assert(!key_exists(ctx, "cbd:{get-none}:slots"));
	ck_assert(!key_exists(ctx, "cbd:{get-none}:window"));
	redisFree(ctx);
}
END_TEST

START_TEST(hold_open_expires)
{
	redisContext *ctx = connect_server();
	cb_policy p = default_policy();
	json_t *r = fleet_call(ctx, "held-open", "set_state", &p,
	    with_hold(at(T0), "open", 1000, "maintenance"));

	assert_reason(r, "held");
	ck_assert_str_eq(json_string_value(
			     json_object_get(json_object_get(json_object_get(r, "circuit"), "hold"),
				 "reason")),
	    "maintenance");
	json_decref(r);
	/* Held open refuses, the hold's end as the hint (not the break). */
	r = fleet_call(ctx, "held-open", "allow", &p, with_str(at(T0 + 300), "token", "t"));
	ck_assert(!flag(r, "allowed"));
	ck_assert_int_eq(json_integer_value(json_object_get(r, "retry_after_ms")), 700);
	ck_assert_int_eq(total(r, "rejected"), 1);
	json_decref(r);
	/* Failures change no state while held. */
	r = fleet_call(ctx, "held-open", "failure", &p, at(T0 + 400));
	ck_assert_str_eq(circuit_state(r), "open");
	assert_reason(r, NULL);
	json_decref(r);
	r = fleet_call(ctx, "held-open", "get", &p, at(T0 + 999));
	ck_assert_str_eq(circuit_state(r), "open");
	ck_assert(json_is_object(json_object_get(json_object_get(r, "circuit"), "hold")));
	json_decref(r);
	/* At now >= until the hold ends lazily: held open -> half_open. */
	r = fleet_call(ctx, "held-open", "get", &p, at(T0 + 1000));
	ck_assert_str_eq(circuit_state(r), "half_open");
	ck_assert(json_is_null(json_object_get(json_object_get(r, "circuit"), "hold")));
	assert_reason(r, "hold_expired");
	ck_assert_str_eq(json_string_value(json_object_get(json_object_get(r, "change"), "from")),
	    "open");
	json_decref(r);
	redisFree(ctx);
}
END_TEST

START_TEST(hold_closed_and_release)
{
	redisContext *ctx = connect_server();
	cb_policy p = default_policy();
	json_t *r;

	json_decref(
	    fleet_call(ctx, "held-closed", "set_state", &p, with_hold(at(T0), "closed", 0, NULL)));
	for (int i = 0; i < 5; i++)
		json_decref(fleet_call(ctx, "held-closed", "failure", &p, at(T0 + i)));
	r = fleet_call(ctx, "held-closed", "allow", &p, with_str(at(T0 + 10), "token", "t"));
	ck_assert(flag(r, "allowed"));
	ck_assert_str_eq(circuit_state(r), "closed");
	ck_assert_int_eq(field(r, "failure_count"), 5);
	ck_assert_int_eq(total(r, "failures"), 5);
	/* No ttl: until null, and no expiry on the key. */
	ck_assert(json_is_null(
	    json_object_get(json_object_get(json_object_get(r, "circuit"), "hold"), "until")));
	json_decref(r);
	/* cas is refused on a held circuit, even from the right state. */
	r = fleet_call(ctx, "held-closed", "cas", &p,
	    with_str(with_str(at(T0 + 20), "from", "closed"), "to", "open"));
	ck_assert(!flag(r, "applied"));
	ck_assert_str_eq(circuit_state(r), "closed");
	json_decref(r);
	/* release: held closed stays closed, counts reset. */
	r = fleet_call(ctx, "held-closed", "release", &p, at(T0 + 30));
	ck_assert(flag(r, "released"));
	assert_reason(r, "released");
	ck_assert_int_eq(field(r, "failure_count"), 0);
	ck_assert(json_is_null(json_object_get(json_object_get(r, "circuit"), "hold")));
	json_decref(r);
	r = fleet_call(ctx, "held-closed", "release", &p, at(T0 + 40));
	ck_assert(!flag(r, "released"));
	assert_reason(r, NULL);
	json_decref(r);
	/* set_state without hold clears one: change forced even if same state. */
	json_decref(fleet_call(ctx, "held-closed", "set_state", &p,
	    with_hold(at(T0 + 50), "open", 0, NULL)));
	r = fleet_call(ctx, "held-closed", "set_state", &p, with_str(at(T0 + 60), "state", "open"));
	assert_reason(r, "forced");
	ck_assert(json_is_null(json_object_get(json_object_get(r, "circuit"), "hold")));
	json_decref(r);
	redisFree(ctx);
}
END_TEST

START_TEST(cas_applies_or_not)
{
	redisContext *ctx = connect_server();
	cb_policy p = default_policy();
	json_t *r = fleet_call(ctx, "cas", "cas", &p,
	    with_str(with_str(at(T0), "from", "closed"), "to", "open"));

	ck_assert(flag(r, "applied"));
	ck_assert(!flag(r, "existed"));
	ck_assert_str_eq(circuit_state(r), "open");
	ck_assert_int_eq(field(r, "opened_at"), T0);
	assert_reason(r, "cas");
	json_decref(r);
	r = fleet_call(ctx, "cas", "cas", &p,
	    with_str(with_str(at(T0 + 1), "from", "closed"), "to", "half_open"));
	ck_assert(!flag(r, "applied"));
	ck_assert_str_eq(circuit_state(r), "open");
	assert_reason(r, NULL);
	json_decref(r);
	redisFree(ctx);
}
END_TEST

START_TEST(slots_half_open_max)
{
	redisContext *ctx = connect_server();
	cb_policy p = default_policy();
	json_t *r;

	p.half_open_max = 2;
	json_decref(
	    fleet_call(ctx, "slots", "set_state", &p, with_str(at(T0), "state", "half_open")));
	r = fleet_call(ctx, "slots", "acquire_slot", &p, with_str(at(T0), "token", "t1"));
	ck_assert(flag(r, "acquired"));
	ck_assert_int_eq(json_integer_value(
			     json_object_get(json_object_get(r, "permit"), "expires_at")),
	    T0 + 500);
	json_decref(r);
	r = fleet_call(ctx, "slots", "allow", &p, with_str(at(T0 + 100), "token", "t2"));
	ck_assert(flag(r, "allowed"));
	ck_assert_str_eq(json_string_value(json_object_get(json_object_get(r, "permit"), "token")),
	    "t2");
	ck_assert_int_eq(field(r, "slots"), 2);
	json_decref(r);
	/* Full: refused, hint = the earliest slot's expiry. */
	r = fleet_call(ctx, "slots", "allow", &p, with_str(at(T0 + 200), "token", "t3"));
	ck_assert(!flag(r, "allowed"));
	ck_assert(json_is_null(json_object_get(r, "permit")));
	ck_assert_int_eq(json_integer_value(json_object_get(r, "retry_after_ms")), 300);
	ck_assert_int_eq(total(r, "rejected"), 1);
	json_decref(r);
	r = fleet_call(ctx, "slots", "acquire_slot", &p, with_str(at(T0 + 200), "token", "t3"));
	ck_assert(!flag(r, "acquired"));
	json_decref(r);
	/* Release by token; again, or an unknown one, releases nothing. */
	r = fleet_call(ctx, "slots", "release_slot", &p, with_str(at(T0 + 250), "token", "t2"));
	ck_assert(flag(r, "released"));
	ck_assert_int_eq(field(r, "slots"), 1);
	json_decref(r);
	r = fleet_call(ctx, "slots", "release_slot", &p, with_str(at(T0 + 250), "token", "t2"));
	ck_assert(!flag(r, "released"));
	json_decref(r);
	r = fleet_call(ctx, "slots", "release_slot", &p, with_str(at(T0 + 250), "token", "nope"));
	ck_assert(!flag(r, "released"));
	json_decref(r);
	/* t1 expires at T0 + 500: no longer counted. */
	r = fleet_call(ctx, "slots", "get", &p, at(T0 + 500));
	ck_assert_int_eq(field(r, "slots"), 0);
	json_decref(r);
	r = fleet_call(ctx, "slots", "acquire_slot", &p, with_str(at(T0 + 500), "token", "t4"));
	ck_assert(flag(r, "acquired"));
	json_decref(r);
	r = fleet_call(ctx, "slots", "acquire_slot", &p, with_str(at(T0 + 700), "token", "t5"));
	ck_assert(flag(r, "acquired"));
	json_decref(r);
	/* At T0 + 1000 t4 (expiring then) is pruned and its place taken. */
	r = fleet_call(ctx, "slots", "acquire_slot", &p, with_str(at(T0 + 1000), "token", "t6"));
	ck_assert(flag(r, "acquired"));
	ck_assert_int_eq(field(r, "slots"), 2);
	json_decref(r);
	/* Releasing an expired slot not yet pruned frees it but reports
	 * false (as C). */
	r = fleet_call(ctx, "slots", "release_slot", &p, with_str(at(T0 + 1300), "token", "t5"));
	ck_assert(!flag(r, "released"));
	json_decref(r);
	r = fleet_call(ctx, "slots", "acquire_slot", &p, with_str(at(T0 + 1300), "token", "t7"));
	ck_assert(flag(r, "acquired"));
	json_decref(r);
	redisFree(ctx);
}
END_TEST

START_TEST(delete_drops_everything)
{
	redisContext *ctx = connect_server();
	cb_policy p = default_policy();
	json_t *r;

	p.trip = CB_TRIP_RATE;
	json_decref(fleet_call(ctx, "del", "failure", &p, at(T0)));
	json_decref(
	    fleet_call(ctx, "del", "set_state", &p, with_str(at(T0), "state", "half_open")));
	json_decref(fleet_call(ctx, "del", "acquire_slot", &p, with_str(at(T0), "token", "t")));
	json_decref(fleet_call(ctx, "del", "failure", &p, at(T0)));
	ck_assert(key_exists(ctx, "cbd:{del}"));
	ck_assert(key_exists(ctx, "cbd:{del}:slots"));
	ck_assert(key_exists(ctx, "cbd:{del}:window"));
	r = fleet_call(ctx, "del", "delete", &p, at(T0));
	ck_assert(flag(r, "existed"));
	ck_assert(json_is_null(json_object_get(r, "circuit")));
	json_decref(r);
	ck_assert(!key_exists(ctx, "cbd:{del}"));
	ck_assert(!key_exists(ctx, "cbd:{del}:slots"));
	ck_assert(!key_exists(ctx, "cbd:{del}:window"));
	r = fleet_call(ctx, "del", "delete", &p, at(T0));
	ck_assert(!flag(r, "existed"));
	json_decref(r);
	redisFree(ctx);
}
END_TEST

START_TEST(declared_mismatch_changes_nothing)
{
	redisContext *ctx = connect_server();
	cb_policy p = default_policy();
	json_t *r = fleet_call(ctx, "decl", "failure", &p,
	    with_str(at(T0), "declared", "{\"failure_threshold\":2}"));

	ck_assert_str_eq(json_string_value(
			     json_object_get(json_object_get(r, "circuit"), "declared")),
	    "{\"failure_threshold\":2}");
	json_decref(r);
	r = fleet_call(ctx, "decl", "failure", &p, with_str(at(T0 + 1), "declared", ""));
	ck_assert(flag(r, "mismatch"));
	ck_assert_str_eq(json_string_value(json_object_get(r, "declared")),
	    "{\"failure_threshold\":2}");
	ck_assert_int_eq(json_integer_value(json_object_get(r, "now")), T0 + 1);
	json_decref(r);
	/* The second failure was not applied: still one, still closed. */
	r = fleet_call(ctx, "decl", "get", &p,
	    with_str(at(T0 + 2), "declared", "{\"failure_threshold\":2}"));
	ck_assert(json_object_get(r, "mismatch") == NULL);
	ck_assert_int_eq(field(r, "failure_count"), 1);
	ck_assert_int_eq(total(r, "failures"), 1);
	json_decref(r);
	redisFree(ctx);
}
END_TEST

static json_t *
with_merge(json_t *request, int64_t opened_at, int64_t current_break_ms)
{
	json_object_set_new(request, "circuit",
	    json_pack("{s:s, s:i, s:i, s:I, s:I, s:I}", "state", "open", "failure_count", 7,
		"success_count", 0, "last_failure_at", (json_int_t)opened_at, "opened_at",
		(json_int_t)opened_at, "current_break_ms", (json_int_t)current_break_ms));
	return request;
}

START_TEST(merge_opens_never_closes)
{
	redisContext *ctx = connect_server();
	cb_policy p = default_policy();
	json_t *r;

	/* A closed fleet circuit opens with the local copy's fields. */
	json_decref(fleet_call(ctx, "merge", "success", &p, at(T0)));
	r = fleet_call(ctx, "merge", "merge", &p, with_merge(at(T0 + 100), T0 + 50, 4000));
	ck_assert_str_eq(circuit_state(r), "open");
	ck_assert_int_eq(field(r, "opened_at"), T0 + 50);
	ck_assert_int_eq(field(r, "current_break_ms"), 4000);
	ck_assert_int_eq(field(r, "failure_count"), 7);
	ck_assert_int_eq(field(r, "last_failure_at"), T0 + 50);
	assert_reason(r, "merged");
	json_decref(r);
	/* An open one stays as it is. */
	r = fleet_call(ctx, "merge", "merge", &p, with_merge(at(T0 + 200), T0 + 150, 9000));
	ck_assert_int_eq(field(r, "opened_at"), T0 + 50);
	ck_assert_int_eq(field(r, "current_break_ms"), 4000);
	assert_reason(r, NULL);
	json_decref(r);
	/* merge never mismatches: the stored declared policy stays. */
	json_decref(fleet_call(ctx, "merge-decl", "success", &p,
	    with_str(at(T0), "declared", "{\"break_ms\":1000}")));
	r = fleet_call(ctx, "merge-decl", "merge", &p,
	    with_str(with_merge(at(T0 + 1), T0, 0), "declared", ""));
	ck_assert(json_object_get(r, "mismatch") == NULL);
	ck_assert_str_eq(circuit_state(r), "open");
	ck_assert_str_eq(json_string_value(
			     json_object_get(json_object_get(r, "circuit"), "declared")),
	    "{\"break_ms\":1000}");
	json_decref(r);
	/* A held closed one stays closed. */
	json_decref(
	    fleet_call(ctx, "merge-held", "set_state", &p, with_hold(at(T0), "closed", 0, NULL)));
	r = fleet_call(ctx, "merge-held", "merge", &p, with_merge(at(T0 + 1), T0, 0));
	ck_assert_str_eq(circuit_state(r), "closed");
	assert_reason(r, NULL);
	json_decref(r);
	/* None stored: created open. */
	r = fleet_call(ctx, "merge-new", "merge", &p, with_merge(at(T0 + 1), T0, 0));
	ck_assert(!flag(r, "existed"));
	ck_assert_str_eq(circuit_state(r), "open");
	ck_assert_int_eq(field(r, "opened_at"), T0);
	json_decref(r);
	redisFree(ctx);
}
END_TEST

/* merge with an operator's hold placed on one host during an outage. */
START_TEST(merge_places_a_hold_unless_held)
{
	redisContext *ctx = connect_server();
	cb_policy p = default_policy();
	json_t *r, *req, *hold;

	json_decref(fleet_call(ctx, "mh", "success", &p, at(T0)));
	req = with_merge(at(T0 + 100), T0 + 50, 0);
	hold = json_pack("{s:s, s:I, s:I, s:I, s:s, s:s}", "state", "open", "since",
	    (json_int_t)(T0 + 60), "until", (json_int_t)(T0 + 60000), "by_uid", (json_int_t)0,
	    "by_user", "root", "reason", "outage work");
	json_object_set_new(json_object_get(req, "circuit"), "hold", hold);
	r = fleet_call(ctx, "mh", "merge", &p, req);
	ck_assert_str_eq(circuit_state(r), "open");
	ck_assert_int_eq(field(r, "opened_at"), T0 + 50);
	ck_assert_str_eq(json_string_value(
			     json_object_get(json_object_get(json_object_get(r, "circuit"), "hold"),
				 "reason")),
	    "outage work");
	ck_assert_int_eq(json_integer_value(
			     json_object_get(json_object_get(json_object_get(r, "circuit"), "hold"),
				 "until")),
	    T0 + 60000);
	assert_reason(r, "held");
	json_decref(r);
	/* The fleet's circuit is held already: the write-back changes nothing. */
	req = with_merge(at(T0 + 200), T0 + 150, 0);
	json_object_set_new(json_object_get(req, "circuit"), "hold",
	    json_pack("{s:s, s:I, s:I, s:s}", "state", "closed", "since", (json_int_t)(T0 + 150),
		"by_uid", (json_int_t)0, "by_user", "other"));
	r = fleet_call(ctx, "mh", "merge", &p, req);
	ck_assert_str_eq(circuit_state(r), "open");
	ck_assert_str_eq(json_string_value(
			     json_object_get(json_object_get(json_object_get(r, "circuit"), "hold"),
				 "reason")),
	    "outage work");
	assert_reason(r, NULL);
	json_decref(r);
	redisFree(ctx);
}
END_TEST

/* writeback's request: an operator's action made on a host while Redis
 * was away, against the circuit as that host knew it (opened_at
 * CB_TIME_NONE: null; hold NULL: none, else stolen). */
static json_t *
with_writeback(json_t *request, const char *action, const char *state, int64_t opened_at,
    json_t *hold)
{
	json_object_set_new(request, "action", json_string(action));
	if (state != NULL)
		json_object_set_new(request, "state", json_string(state));
	json_object_set_new(request, "known",
	    json_pack("{s:o, s:o}", "opened_at",
		opened_at != CB_TIME_NONE ? json_integer(opened_at) : json_null(), "hold",
		hold != NULL ? hold : json_null()));
	return request;
}

/* The hold with_hold places at since, as a host knew it. */
static json_t *
known_hold(const char *state, int64_t since)
{
	return json_pack("{s:s, s:I, s:i, s:s}", "state", state, "since", (json_int_t)since,
	    "by_uid", 1000, "by_user", "ops");
}

static json_t *
circuit_hold(const json_t *reply)
{
	return json_object_get(json_object_get(reply, "circuit"), "hold");
}

START_TEST(writeback_applies_to_the_circuit_the_host_knew)
{
	redisContext *ctx = connect_server();
	cb_policy p = default_policy();
	redisReply *bad;
	json_t *r, *req;

	/* A release of the hold the fleet still has: ended as release does. */
	json_decref(fleet_call(ctx, "wr", "set_state", &p, with_hold(at(T0), "open", 0, NULL)));
	r = fleet_call(ctx, "wr", "writeback", &p,
	    with_writeback(at(T0 + 10), "release", NULL, T0, known_hold("open", T0)));
	ck_assert(flag(r, "applied"));
	ck_assert(json_is_null(circuit_hold(r)));
	ck_assert_str_eq(circuit_state(r), "half_open");
	assert_reason(r, "writeback");
	json_decref(r);
	/* Another operator placed a new hold meanwhile: it stands. */
	json_decref(fleet_call(ctx, "wr2", "set_state", &p, with_hold(at(T0), "open", 0, NULL)));
	json_decref(
	    fleet_call(ctx, "wr2", "set_state", &p, with_hold(at(T0 + 5), "closed", 0, NULL)));
	r = fleet_call(ctx, "wr2", "writeback", &p,
	    with_writeback(at(T0 + 10), "release", NULL, T0, known_hold("open", T0)));
	ck_assert(!flag(r, "applied"));
	ck_assert_int_eq(json_integer_value(json_object_get(circuit_hold(r), "since")), T0 + 5);
	assert_reason(r, NULL);
	json_decref(r);
	/* ... and neither a delete nor a forced state removes it. */
	r = fleet_call(ctx, "wr2", "writeback", &p,
	    with_writeback(at(T0 + 11), "delete", NULL, T0, known_hold("open", T0)));
	ck_assert(!flag(r, "applied"));
	ck_assert(key_exists(ctx, "cbd:{wr2}"));
	json_decref(r);
	r = fleet_call(ctx, "wr2", "writeback", &p,
	    with_writeback(at(T0 + 12), "set_state", "open", CB_TIME_NONE, NULL));
	ck_assert(!flag(r, "applied"));
	ck_assert_str_eq(circuit_state(r), "closed");
	json_decref(r);
	/* A delete of the circuit the host knew (held by the hold it knew). */
	r = fleet_call(ctx, "wr2", "writeback", &p,
	    with_writeback(at(T0 + 13), "delete", NULL, CB_TIME_NONE,
		known_hold("closed", T0 + 5)));
	ck_assert(flag(r, "applied"));
	ck_assert(json_is_null(json_object_get(r, "circuit")));
	ck_assert(!key_exists(ctx, "cbd:{wr2}"));
	json_decref(r);
	/* Nothing stored: nothing to apply, nothing created. */
	r = fleet_call(ctx, "wr2", "writeback", &p,
	    with_writeback(at(T0 + 14), "set_state", "open", CB_TIME_NONE, NULL));
	ck_assert(!flag(r, "applied"));
	ck_assert(!key_exists(ctx, "cbd:{wr2}"));
	json_decref(r);
	/* A forced close of the open circuit the host knew: closed. */
	json_decref(fleet_call(ctx, "ws", "set_state", &p, with_str(at(T0), "state", "open")));
	r = fleet_call(ctx, "ws", "writeback", &p,
	    with_writeback(at(T0 + 20), "set_state", "closed", T0, NULL));
	ck_assert(flag(r, "applied"));
	ck_assert_str_eq(circuit_state(r), "closed");
	assert_reason(r, "writeback");
	json_decref(r);
	/* It tripped since (the host knew it closed): the trip stands. */
	json_decref(fleet_call(ctx, "ws", "set_state", &p, with_str(at(T0 + 30), "state", "open")));
	r = fleet_call(ctx, "ws", "writeback", &p,
	    with_writeback(at(T0 + 40), "set_state", "closed", CB_TIME_NONE, NULL));
	ck_assert(!flag(r, "applied"));
	ck_assert_str_eq(circuit_state(r), "open");
	json_decref(r);
	r = fleet_call(ctx, "ws", "writeback", &p,
	    with_writeback(at(T0 + 41), "delete", NULL, T0, NULL));
	ck_assert(!flag(r, "applied"));
	json_decref(r);
	/* A forced open takes the operator's time as opened_at. */
	json_decref(fleet_call(ctx, "wo", "success", &p, at(T0)));
	r = fleet_call(ctx, "wo", "writeback", &p,
	    with_int(with_writeback(at(T0 + 50), "set_state", "open", CB_TIME_NONE, NULL), "at",
		T0 + 7));
	ck_assert(flag(r, "applied"));
	ck_assert_str_eq(circuit_state(r), "open");
	ck_assert_int_eq(field(r, "opened_at"), T0 + 7);
	json_decref(r);
	/* Refused before anything is written: no action, no known. */
	req = json_pack("{s:{}}", "known");
	bad = script_command(ctx, "wo", "writeback", req);
	json_decref(req);
	ck_assert(bad->type == REDIS_REPLY_ERROR);
	freeReplyObject(bad);
	req = json_pack("{s:s}", "action", "delete");
	bad = script_command(ctx, "wo", "writeback", req);
	json_decref(req);
	ck_assert(bad->type == REDIS_REPLY_ERROR);
	freeReplyObject(bad);
	ck_assert(key_exists(ctx, "cbd:{wo}"));
	redisFree(ctx);
}
END_TEST

START_TEST(max_gap_chain)
{
	redisContext *ctx = connect_server();
	cb_policy p = default_policy();
	json_t *r;

	p.failure_threshold = 3;
	p.max_gap_ms = 100;
	json_decref(fleet_call(ctx, "gap", "failure", &p, at(T0)));
	/* A gap of exactly max_gap_ms continues the chain... */
	r = fleet_call(ctx, "gap", "failure", &p, at(T0 + 100));
	ck_assert_int_eq(field(r, "failure_count"), 2);
	json_decref(r);
	/* ...one more ms restarts it. */
	r = fleet_call(ctx, "gap", "failure", &p, at(T0 + 201));
	ck_assert_int_eq(field(r, "failure_count"), 1);
	ck_assert_str_eq(circuit_state(r), "closed");
	json_decref(r);
	redisFree(ctx);
}
END_TEST

START_TEST(totals_count_every_outcome)
{
	redisContext *ctx = connect_server();
	cb_policy p = default_policy();
	json_t *r;

	p.failure_threshold = 3;
	p.slow_call_ms = 100;
	json_decref(fleet_call(ctx, "totals", "success", &p, with_int(at(T0), "duration_ms", 150)));
	json_decref(fleet_call(ctx, "totals", "success", &p, at(T0 + 1)));
	json_decref(fleet_call(ctx, "totals", "ignore", &p, at(T0 + 2)));
	json_decref(
	    fleet_call(ctx, "totals", "failure", &p, with_int(at(T0 + 3), "duration_ms", 100)));
	json_decref(fleet_call(ctx, "totals", "failure", &p, at(T0 + 4)));
	json_decref(fleet_call(ctx, "totals", "failure", &p, at(T0 + 5)));
	r = fleet_call(ctx, "totals", "allow", &p, with_str(at(T0 + 6), "token", "t"));
	ck_assert(!flag(r, "allowed"));
	ck_assert_int_eq(total(r, "successes"), 2);
	ck_assert_int_eq(total(r, "failures"), 3);
	ck_assert_int_eq(total(r, "ignored"), 1);
	ck_assert_int_eq(total(r, "slow"), 2);
	ck_assert_int_eq(total(r, "rejected"), 1);
	json_decref(r);
	redisFree(ctx);
}
END_TEST

START_TEST(min_reporters_gate)
{
	redisContext *ctx = connect_server();
	cb_policy p = default_policy();
	json_t *r;

	p.failure_threshold = 1;
	p.min_reporters = 2;
	p.reporter_window_ms = 1000;
	r = fleet_call(ctx, "gate", "failure", &p, with_str(at(T0), "reporter", "a"));
	ck_assert_str_eq(circuit_state(r), "closed");
	ck_assert_int_eq(field(r, "reporters"), 1);
	json_decref(r);
	/* a again: still one reporter. */
	r = fleet_call(ctx, "gate", "failure", &p, with_str(at(T0 + 10), "reporter", "a"));
	ck_assert_str_eq(circuit_state(r), "closed");
	json_decref(r);
	/* b, after a's report left the window: still one. */
	r = fleet_call(ctx, "gate", "failure", &p, with_str(at(T0 + 1011), "reporter", "b"));
	ck_assert_str_eq(circuit_state(r), "closed");
	ck_assert_int_eq(field(r, "reporters"), 1);
	json_decref(r);
	/* c, with b's report exactly reporter_window_ms old: two. */
	r = fleet_call(ctx, "gate", "failure", &p, with_str(at(T0 + 2011), "reporter", "c"));
	ck_assert_str_eq(circuit_state(r), "open");
	assert_reason(r, "failure_threshold");
	ck_assert_int_eq(field(r, "reporters"), 2);
	json_decref(r);
	redisFree(ctx);
}
END_TEST

static int64_t
wall_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

START_TEST(time_when_now_absent)
{
	redisContext *ctx = connect_server();
	cb_policy p = default_policy();
	int64_t before = wall_ms();
	json_t *r = fleet_call(ctx, "clock", "failure", &p, at(-1));
	int64_t after = wall_ms();
	int64_t now = json_integer_value(json_object_get(r, "now"));

	/* Redis TIME reads the same clock as this process. */
	ck_assert_int_ge(now, before);
	ck_assert_int_le(now, after);
	ck_assert_int_eq(field(r, "last_failure_at"), now);
	json_decref(r);
	/* null is absent too. */
	r = fleet_call(ctx, "clock", "get", &p, json_pack("{s:n}", "now"));
	ck_assert_int_ge(json_integer_value(json_object_get(r, "now")), now);
	json_decref(r);
	redisFree(ctx);
}
END_TEST

/* The next message on a subscribed connection, decoded. */
static json_t *
next_event(redisContext *sub)
{
	redisReply *reply = NULL;
	json_error_t err;
	json_t *event;

	ck_assert_msg(redisGetReply(sub, (void **)&reply) == REDIS_OK, "no event: %s", sub->errstr);
	ck_assert(reply->type == REDIS_REPLY_ARRAY && reply->elements == 3);
	ck_assert_str_eq(reply->element[0]->str, "message");
	ck_assert_str_eq(reply->element[1]->str, CHANNEL);
	event = json_loads(reply->element[2]->str, 0, &err);
	ck_assert_msg(event != NULL, "event %s: %s", reply->element[2]->str, err.text);
	freeReplyObject(reply);
	return event;
}

START_TEST(events_published)
{
	redisContext *ctx = connect_server();
	redisContext *sub = connect_server();
	struct timeval wait = { EVENT_WAIT_S, 0 };
	cb_policy p = default_policy();
	redisReply *reply;
	json_t *e;

	ck_assert_int_eq(redisSetTimeout(sub, wait), REDIS_OK);
	reply = redisCommand(sub, "SUBSCRIBE %s", CHANNEL);
	ck_assert_ptr_nonnull(reply);
	freeReplyObject(reply);
	/* No change, no event: the first event seen is the trip. */
	json_decref(fleet_call(ctx, "ev", "failure", &p, at(T0)));
	json_decref(fleet_call(ctx, "ev", "failure", &p, at(T0 + 1)));
	e = next_event(sub);
	ck_assert_str_eq(json_string_value(json_object_get(e, "origin")), "host-a");
	ck_assert_str_eq(json_string_value(json_object_get(e, "name")), "ev");
	ck_assert_int_eq(json_integer_value(json_object_get(e, "now")), T0 + 1);
	ck_assert_str_eq(circuit_state(e), "open");
	assert_reason(e, "failure_threshold");
	ck_assert_str_eq(json_string_value(json_object_get(json_object_get(e, "change"), "from")),
	    "closed");
	json_decref(e);
	json_decref(fleet_call(ctx, "ev", "delete", &p, at(T0 + 2)));
	e = next_event(sub);
	ck_assert_str_eq(json_string_value(json_object_get(e, "name")), "ev");
	ck_assert(json_is_null(json_object_get(e, "circuit")));
	assert_reason(e, NULL);
	json_decref(e);
	redisFree(sub);
	redisFree(ctx);
}
END_TEST

START_TEST(expiry_set)
{
	redisContext *ctx = connect_server();
	cb_policy p = default_policy();
	redisReply *reply;

	json_decref(fleet_call(ctx, "ttl", "success", &p, at(T0)));
	reply = redisCommand(ctx, "PTTL cbd:{ttl}");
	ck_assert(reply->type == REDIS_REPLY_INTEGER);
	ck_assert_int_gt(reply->integer, 0);
	ck_assert_int_le(reply->integer, 86400000);
	freeReplyObject(reply);
	/* Open: a day plus the break. */
	json_decref(fleet_call(ctx, "ttl", "set_state", &p, with_str(at(T0 + 1), "state", "open")));
	reply = redisCommand(ctx, "PTTL cbd:{ttl}");
	ck_assert_int_gt(reply->integer, 86400000);
	ck_assert_int_le(reply->integer, 86400000 + p.break_ms);
	freeReplyObject(reply);
	/* Held: kept until released. */
	json_decref(
	    fleet_call(ctx, "ttl", "set_state", &p, with_hold(at(T0 + 1), "open", 0, NULL)));
	reply = redisCommand(ctx, "PTTL cbd:{ttl}");
	ck_assert_int_eq(reply->integer, -1);
	freeReplyObject(reply);
	redisFree(ctx);
}
END_TEST

START_TEST(bad_requests_refused)
{
	redisContext *ctx = connect_server();
	json_t *req = json_object();
	redisReply *reply = script_command(ctx, "bad", "nonsense", req);

	ck_assert(reply->type == REDIS_REPLY_ERROR);
	freeReplyObject(reply);
	json_decref(req);
	req = json_pack("{s:i}", "now", 1);
	reply = script_command(ctx, "bad", "allow", req);
	json_decref(req);
	ck_assert(reply->type == REDIS_REPLY_ERROR);
	freeReplyObject(reply);
	ck_assert(!key_exists(ctx, "cbd:{bad}"));
	redisFree(ctx);
}
END_TEST

/* EVALSHA of a failure on cbd:{bad} with these positional arguments
 * (after op and channel); returns the reply's error text ("" when it is
 * not an error). */
static char *
raw_failure(redisContext *ctx, int argc, const char *const *args)
{
	const char *argv[8 + FLEET_ARGS + 1] = { "EVALSHA", sha, "3", "cbd:{bad}",
		"cbd:{bad}:slots", "cbd:{bad}:window", "failure", CHANNEL };
	redisReply *reply;
	char *text;

	ck_assert_int_le(argc, FLEET_ARGS + 1);
	for (int i = 0; i < argc; i++)
		argv[8 + i] = args[i];
	reply = redisCommandArgv(ctx, 8 + argc, argv, NULL);
	ck_assert_ptr_nonnull(reply);
	text = strdup(reply->type == REDIS_REPLY_ERROR ? reply->str : "");
	freeReplyObject(reply);
	return text;
}

/* Is msg an error reply that names `what`? */
static void
assert_names(char *msg, const char *what)
{
	ck_assert_msg(strstr(msg, "fleet.lua") != NULL && strstr(msg, what) != NULL,
	    "error \"%s\" does not name %s", msg, what);
	free(msg);
}

/* A malformed positional request is an error reply naming what is wrong,
 * and writes nothing. */
START_TEST(malformed_arguments_refused)
{
	redisContext *ctx = connect_server();
	const char *good_policy =
	    "consecutive 5 2 30000 1 30000 0 count 100 10 50 0 100 1 60000 1 0";
	/* name origin now declared policy reporter duration_ms token extra */
	const char *args[FLEET_ARGS] = { "bad", "host-a", "1", "", good_policy, "r", "", "", "" };
	const char *copy[FLEET_ARGS];
	cb_policy p = default_policy();

	/* The good request works (then the circuit goes again). */
	free(raw_failure(ctx, FLEET_ARGS, args));
	ck_assert(key_exists(ctx, "cbd:{bad}"));
	json_decref(fleet_call(ctx, "bad", "delete", &p, json_object()));
	assert_names(raw_failure(ctx, FLEET_ARGS - 1, args), "11 arguments");
#define BAD(index, value, what)                                                                    \
	do {                                                                                       \
		memcpy(copy, args, sizeof copy);                                                   \
		copy[index] = value;                                                               \
		assert_names(raw_failure(ctx, FLEET_ARGS, copy), what);                            \
	} while (0)
	BAD(FLEET_ARG_NOW, "soon", "now");
	BAD(FLEET_ARG_NOW, "1.5", "now");
	BAD(FLEET_ARG_DURATION, "12ms", "duration_ms");
	BAD(FLEET_ARG_EXTRA, "{\"from\":", "extra");
	BAD(FLEET_ARG_EXTRA, "[1]", "extra");
	BAD(FLEET_ARG_POLICY, "consecutive 5 2", "17 members");
	BAD(FLEET_ARG_POLICY, "sometimes 5 2 30000 1 30000 0 count 100 10 50 0 100 1 60000 1 0",
	    "policy.trip");
	BAD(FLEET_ARG_POLICY, "consecutive 5 x 30000 1 30000 0 count 100 10 50 0 100 1 60000 1 0",
	    "policy.success_threshold");
	BAD(FLEET_ARG_POLICY, "consecutive 5 2 30000 1 30000 0 ring 100 10 50 0 100 1 60000 1 0",
	    "policy.window");
	BAD(FLEET_ARG_POLICY, "consecutive 5 2 30000 1 30000 0 count 100 10 50 0 100 1 60000 1 0 7",
	    "more than 17");
#undef BAD
	ck_assert(!key_exists(ctx, "cbd:{bad}"));
	redisFree(ctx);
}
END_TEST

/* ---- the script against the C core -------------------------------------- */

/* A small deterministic generator (xorshift), so every run is the same. */
static uint64_t rng_state;

static uint64_t
rng(uint64_t n)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state % n;
}

static const char *const reason_names[] = {
	[CB_REASON_NONE] = NULL,
	[CB_REASON_FAILURE_THRESHOLD] = "failure_threshold",
	[CB_REASON_FAILURE_RATE] = "failure_rate",
	[CB_REASON_TRIAL_FAILED] = "trial_failed",
	[CB_REASON_TRIAL_SUCCEEDED] = "trial_succeeded",
	[CB_REASON_BREAK_ELAPSED] = "break_elapsed",
	[CB_REASON_FORCED] = "forced",
	[CB_REASON_CAS] = "cas",
	[CB_REASON_HELD] = "held",
	[CB_REASON_HOLD_EXPIRED] = "hold_expired",
	[CB_REASON_RELEASED] = "released",
};

/* The script's circuit equals the table's view. */
static void
assert_same(const json_t *r, const ct_view *v, const char *where)
{
	const json_t *circuit = json_object_get(r, "circuit");
	const json_t *hold, *window;

	ck_assert_msg(v->stored == !json_is_null(circuit), "%s: stored", where);
	if (!v->stored)
		return;
	ck_assert_msg(strcmp(circuit_state(r), breaker_state_name(v->snap.state)) == 0,
	    "%s: state %s, C %s", where, circuit_state(r), breaker_state_name(v->snap.state));
	ck_assert_msg(field(r, "failure_count") == v->snap.failure_count, "%s: failure_count",
	    where);
	ck_assert_msg(field(r, "success_count") == v->snap.success_count, "%s: success_count",
	    where);
	ck_assert_msg(field(r, "last_failure_at") == v->snap.last_failure_at, "%s: last_failure_at",
	    where);
	ck_assert_msg(field(r, "opened_at") == v->snap.opened_at, "%s: opened_at", where);
	ck_assert_msg(field(r, "current_break_ms") == v->snap.current_break_ms,
	    "%s: current_break_ms %lld, C %lld", where, (long long)field(r, "current_break_ms"),
	    (long long)v->snap.current_break_ms);
	ck_assert_msg(total(r, "successes") == (int64_t)v->totals.successes &&
		total(r, "failures") == (int64_t)v->totals.failures &&
		total(r, "ignored") == (int64_t)v->totals.ignored &&
		total(r, "slow") == (int64_t)v->totals.slow &&
		total(r, "rejected") == (int64_t)v->totals.rejected,
	    "%s: totals", where);
	hold = json_object_get(circuit, "hold");
	ck_assert_msg(v->hold.held == json_is_object(hold), "%s: held", where);
	if (v->hold.held) {
		ck_assert_str_eq(json_string_value(json_object_get(hold, "state")),
		    breaker_state_name(v->hold.state));
		ck_assert_msg((json_is_null(json_object_get(hold, "until"))
				      ? CB_TIME_NONE
				      : json_integer_value(json_object_get(hold, "until"))) ==
			v->hold.until,
		    "%s: hold until", where);
	}
	window = json_object_get(circuit, "window");
	ck_assert_msg(v->has_window == json_is_object(window), "%s: has_window", where);
	if (v->has_window)
		ck_assert_msg(json_integer_value(json_object_get(window, "calls")) ==
			    v->window.calls &&
			json_integer_value(json_object_get(window, "failures")) ==
			    v->window.failures &&
			json_integer_value(json_object_get(window, "slow")) == v->window.slow,
		    "%s: window %lld/%lld/%lld, C %u/%u/%u", where,
		    (long long)json_integer_value(json_object_get(window, "calls")),
		    (long long)json_integer_value(json_object_get(window, "failures")),
		    (long long)json_integer_value(json_object_get(window, "slow")), v->window.calls,
		    v->window.failures, v->window.slow);
}

static void
assert_change(const json_t *r, const ct_change *change, const char *where)
{
	const char *want = reason_names[change->reason];
	const char *got = change_reason(r);

	ck_assert_msg(want == NULL ? got == NULL : got != NULL && strcmp(got, want) == 0,
	    "%s: change %s, C %s", where, got != NULL ? got : "null", want != NULL ? want : "null");
	if (want != NULL)
		ck_assert_msg(strcmp(json_string_value(
					 json_object_get(json_object_get(r, "change"), "from")),
				  breaker_state_name(change->from)) == 0,
		    "%s: change from", where);
}

/* Slots held on both sides: C's token and the script's. */
typedef struct held_slot {
	char c_token[CT_TOKEN_SIZE];
	char token[32];
} held_slot;

#define DIFF_STEPS 600
#define DIFF_HELD_MAX 16

static void
differential(redisContext *ctx, const char *name, const cb_policy *policy, uint64_t seed)
{
	circuit_table *table = circuit_table_new(16, seed);
	held_slot held[DIFF_HELD_MAX];
	size_t nheld = 0;
	int64_t now = T0;
	uint64_t tokens = 0;
	static const char *const states[] = { "closed", "open", "half_open" };

	rng_state = seed;
	for (int step = 0; step < DIFF_STEPS; step++) {
		ct_call call = { .policy = policy, .now = now, .clock = now };
		uint64_t kind = rng(20);
		json_t *req = at(now), *r = NULL;
		ct_change change = { 0 };
		ct_view view;
		char where[128];
		char token[32];

		snprintf(token, sizeof token, "tok-%llu", (unsigned long long)++tokens);
		if (kind < 12) { /* outcomes, by one of three reporters */
			int64_t reporter = (int64_t)rng(3) + 1;
			const char *op = kind < 5 ? "success" : kind < 11 ? "failure" : "ignore";
			char id[16];

			/* Some successes counted (record_success's count): the
			 * script's success op with extra.count against the
			 * core's bulk path. */
			uint64_t count =
			    kind < 5 && rng(3) == 0 ? 2 + rng(rng(4) == 0 ? 500 : 20) : 1;

			call.duration_ms = (int64_t)rng(4) * 60;
			call.reporter = reporter;
			snprintf(id, sizeof id, "r%lld", (long long)reporter);
			with_int(with_str(req, "reporter", id), "duration_ms", call.duration_ms);
			if (count > 1)
				with_int(req, "count", (int64_t)count);
			snprintf(where, sizeof where, "%s step %d (%s x%llu)", name, step, op,
			    (unsigned long long)count);
			r = fleet_call(ctx, name, op, policy, req);
			if (kind < 5)
				circuit_table_record_successes(table, name, &call, count, &view,
				    &change);
			else if (kind < 11)
				circuit_table_record_failure(table, name, &call, &view, &change);
			else
				circuit_table_record_ignore(table, name, &call, &view, &change);
		} else if (kind < 15) {
			ct_allow a;

			snprintf(where, sizeof where, "%s step %d (allow)", name, step);
			r = fleet_call(ctx, name, "allow", policy, with_str(req, "token", token));
			circuit_table_allow(table, name, &call, &a, &view, &change);
			ck_assert_msg(a.allowed == flag(r, "allowed"), "%s: allowed", where);
			ck_assert_msg(a.retry_after_ms ==
				json_integer_value(json_object_get(r, "retry_after_ms")),
			    "%s: retry_after_ms %lld, C %lld", where,
			    (long long)json_integer_value(json_object_get(r, "retry_after_ms")),
			    (long long)a.retry_after_ms);
			if (a.has_permit && nheld < DIFF_HELD_MAX) {
				strcpy(held[nheld].c_token, a.permit.token);
				strcpy(held[nheld].token, token);
				nheld++;
			}
		} else if (kind == 15 && nheld > 0) {
			size_t i = rng(nheld);
			bool released;
			json_t *done;

			snprintf(where, sizeof where, "%s step %d (release_slot)", name, step);
			done = fleet_call(ctx, name, "release_slot", policy,
			    with_str(req, "token", held[i].token));
			released = circuit_table_release_slot(table, name, held[i].c_token, now);
			ck_assert_msg(released == flag(done, "released"), "%s: released", where);
			json_decref(done);
			held[i] = held[--nheld];
			req = at(now);
			r = fleet_call(ctx, name, "get", policy, req);
			circuit_table_get(table, name, now, &view, &change);
		} else if (kind == 16) {
			const char *state = states[rng(2)];
			ct_hold_request hold = { .ttl_ms = (int64_t)rng(3) * 700, .by_uid = 1 };
			bool with = rng(2) == 0;
			cb_state st;

			breaker_state_parse(state, strlen(state), &st);
			snprintf(where, sizeof where, "%s step %d (set_state %s%s)", name, step,
			    state, with ? " held" : "");
			if (with)
				req = with_hold(req, state, hold.ttl_ms, NULL);
			else
				req = with_str(req, "state", state);
			r = fleet_call(ctx, name, "set_state", policy, req);
			circuit_table_set_state(table, name, st, with ? &hold : NULL, &call, &view,
			    &change);
		} else if (kind == 17) {
			bool released;

			snprintf(where, sizeof where, "%s step %d (release)", name, step);
			r = fleet_call(ctx, name, "release", policy, req);
			circuit_table_release(table, name, &call, &released, &view, &change);
			ck_assert_msg(released == flag(r, "released"), "%s: released", where);
		} else if (kind == 18) {
			const char *from = states[rng(3)], *to = states[rng(3)];
			cb_state f, t;
			bool applied;

			breaker_state_parse(from, strlen(from), &f);
			breaker_state_parse(to, strlen(to), &t);
			snprintf(where, sizeof where, "%s step %d (cas %s %s)", name, step, from,
			    to);
			r = fleet_call(ctx, name, "cas", policy,
			    with_str(with_str(req, "from", from), "to", to));
			circuit_table_cas(table, name, f, t, &call, &applied, &view, &change);
			ck_assert_msg(applied == flag(r, "applied"), "%s: applied", where);
		} else {
			snprintf(where, sizeof where, "%s step %d (get)", name, step);
			r = fleet_call(ctx, name, "get", policy, req);
			circuit_table_get(table, name, now, &view, &change);
		}
		assert_same(r, &view, where);
		assert_change(r, &change, where);
		json_decref(r);
		/* Often a multiple of 50 ms, so that times meet the policy's
		 * bounds (max_gap_ms, break_ms, ttls) exactly. */
		if (rng(2) == 0)
			now += (int64_t)rng(rng(5) == 0 ? 60 : 4) * 50;
		else
			now += rng(5) == 0 ? (int64_t)rng(3000) : (int64_t)rng(120);
	}
	circuit_table_free(table);
}

START_TEST(mirrors_the_c_core)
{
	redisContext *ctx = connect_server();
	cb_policy p;

	/* Consecutive, max_gap chains, several slots, backoff with a cap. */
	breaker_policy_default(&p);
	p.failure_threshold = 3;
	p.max_gap_ms = 300;
	p.break_ms = 800;
	p.half_open_max = 2;
	p.slot_ttl_ms = 600;
	p.break_backoff = 2;
	p.break_max_ms = 5000;
	differential(ctx, "diff-consecutive", &p, 0x9e3779b97f4a7c15u);
	/* Rate over a count window with the slow rule. */
	breaker_policy_default(&p);
	p.trip = CB_TRIP_RATE;
	p.window_size = 6;
	p.minimum_calls = 3;
	p.failure_rate = 60;
	p.slow_call_ms = 120;
	p.slow_call_rate = 50;
	p.break_ms = 700;
	p.slot_ttl_ms = 700;
	differential(ctx, "diff-rate-count", &p, 0x1234567887654321u);
	/* Rate over a time window, backoff without a cap. */
	breaker_policy_default(&p);
	p.trip = CB_TRIP_RATE;
	p.window = CB_WINDOW_TIME;
	p.window_size = 3000;
	p.minimum_calls = 4;
	p.failure_rate = 70;
	p.break_ms = 900;
	p.slot_ttl_ms = 400;
	p.break_backoff = 3;
	differential(ctx, "diff-rate-time", &p, 0xdeadbeefcafef00du);
	/* The min_reporters gate on both rules. */
	breaker_policy_default(&p);
	p.failure_threshold = 2;
	p.min_reporters = 2;
	p.reporter_window_ms = 500;
	p.break_ms = 600;
	differential(ctx, "diff-reporters", &p, 0x0badc0ffee0ddf00u);
	p.trip = CB_TRIP_RATE;
	p.window_size = 4;
	p.minimum_calls = 2;
	p.min_reporters = 3;
	p.slow_call_ms = 100;
	differential(ctx, "diff-reporters-rate", &p, 0x5555aaaa3333ccccu);
	redisFree(ctx);
}
END_TEST

/* One outcome on circuit name in both the script and the C core (table)
 * at now: "success", "failure" or "slow" (a success of 150 ms); they
 * must agree. The script's reply. */
static json_t *
outcome_both(redisContext *ctx, circuit_table *table, const char *name, const cb_policy *policy,
    const char *what, int64_t now, const char *where)
{
	ct_call call = { .policy = policy, .now = now, .clock = now, .reporter = 1 };
	bool failure = strcmp(what, "failure") == 0;
	json_t *req = at(now), *r;
	ct_change change = { 0 };
	ct_view view;

	call.duration_ms = strcmp(what, "slow") == 0 ? 150 : 0;
	with_int(with_str(req, "reporter", "r1"), "duration_ms", call.duration_ms);
	r = fleet_call(ctx, name, failure ? "failure" : "success", policy, req);
	if (failure)
		circuit_table_record_failure(table, name, &call, &view, &change);
	else
		circuit_table_record_success(table, name, &call, &view, &change);
	assert_same(r, &view, where);
	assert_change(r, &change, where);
	return r;
}

/* The rate rules on their exact boundaries, where a float division (29 /
 * 100 * 100 is 28.999... in Lua) would differ from the C core's integer
 * arithmetic: a rate of 29 % with 100 calls and 29 failures (or slow
 * calls) opens, 28 does not; likewise 57 and 58. The random differential
 * seldom lands on one. */
START_TEST(rate_boundaries_exact)
{
	static const struct {
		int rate, bad;
		bool slow, opens;
	} cases[] = {
		{ 29, 29, false, true },
		{ 29, 28, false, false },
		{ 57, 57, false, true },
		{ 58, 58, false, true },
		{ 58, 57, false, false },
		{ 29, 29, true, true },
		{ 57, 57, true, true },
		{ 57, 56, true, false },
	};
	redisContext *ctx = connect_server();

	for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
		circuit_table *table = circuit_table_new(4, 0x42u + k);
		char name[32], where[96];
		cb_policy p;
		json_t *r = NULL;

		breaker_policy_default(&p);
		p.trip = CB_TRIP_RATE;
		p.window_size = 100;
		p.minimum_calls = 100;
		p.break_ms = 60000;
		if (cases[k].slow) {
			p.failure_rate = 100;
			p.slow_call_ms = 100;
			p.slow_call_rate = cases[k].rate;
		} else {
			p.failure_rate = cases[k].rate;
		}
		snprintf(name, sizeof name, "boundary-%zu", k);
		/* The bad calls last: the rule decides on the 100th call. */
		for (int i = 0; i < 100; i++) {
			const char *what = i < 100 - cases[k].bad ? "success"
			    : cases[k].slow                       ? "slow"
								  : "failure";

			snprintf(where, sizeof where, "%s call %d (rate %d, %d %s)", name, i + 1,
			    cases[k].rate, cases[k].bad, cases[k].slow ? "slow" : "failures");
			json_decref(r);
			r = outcome_both(ctx, table, name, &p, what, T0 + i, where);
			if (i < 99)
				ck_assert_msg(strcmp(circuit_state(r), "closed") == 0,
				    "%s: opened early", where);
		}
		ck_assert_msg(strcmp(circuit_state(r), cases[k].opens ? "open" : "closed") == 0,
		    "%s: %s after 100 calls", where, circuit_state(r));
		json_decref(r);
		circuit_table_free(table);
	}
	redisFree(ctx);
}
END_TEST

/* break_backoff without break_max_ms: each failed trial doubles the break,
 * without bound, in the script as in the C core (retry_after_ms says so
 * exactly). */
START_TEST(backoff_without_cap)
{
	redisContext *ctx = connect_server();
	circuit_table *table = circuit_table_new(4, 7);
	const char *name = "backoff";
	int64_t now = T0, expect = 1000;
	char where[96], token[32];
	cb_policy p;

	breaker_policy_default(&p);
	p.failure_threshold = 1;
	p.break_ms = 1000;
	p.break_backoff = 2;
	p.break_max_ms = 0;
	p.slot_ttl_ms = 1000000;
	json_decref(outcome_both(ctx, table, name, &p, "failure", now, "first trip"));
	for (int round = 0; round < 7; round++, expect *= 2) {
		ct_call call = { .policy = &p, .now = now + expect - 1, .clock = now + expect - 1 };
		ct_change change = { 0 };
		ct_view view;
		ct_allow a;
		json_t *r;
		bool released;

		snprintf(where, sizeof where, "round %d (break %lld)", round, (long long)expect);
		/* 1 ms before the break ends: refused, 1 ms to wait. */
		r = fleet_call(ctx, name, "allow", &p, with_str(at(call.now), "token", "never"));
		circuit_table_allow(table, name, &call, &a, &view, &change);
		ck_assert_msg(!flag(r, "allowed") && !a.allowed, "%s: allowed early", where);
		ck_assert_msg(json_integer_value(json_object_get(r, "retry_after_ms")) == 1 &&
			a.retry_after_ms == 1,
		    "%s: retry_after_ms %lld, C %lld", where,
		    (long long)json_integer_value(json_object_get(r, "retry_after_ms")),
		    (long long)a.retry_after_ms);
		json_decref(r);
		/* When it ends: the trial, which fails (the break grows). */
		now += expect;
		call.now = call.clock = now;
		snprintf(token, sizeof token, "tok-%d", round);
		r = fleet_call(ctx, name, "allow", &p, with_str(at(now), "token", token));
		circuit_table_allow(table, name, &call, &a, &view, &change);
		ck_assert_msg(flag(r, "allowed") && a.allowed, "%s: trial refused", where);
		assert_same(r, &view, where);
		json_decref(r);
		json_decref(outcome_both(ctx, table, name, &p, "failure", now, where));
		r = fleet_call(ctx, name, "release_slot", &p, with_str(at(now), "token", token));
		released = circuit_table_release_slot(table, name, a.permit.token, now);
		ck_assert_msg(flag(r, "released") && released, "%s: trial slot", where);
		json_decref(r);
	}
	/* 1000 ms doubled 7 times, past any cap a default would set. */
	ck_assert_int_eq(expect, 128000);
	circuit_table_free(table);
	redisFree(ctx);
}
END_TEST

/* ---- folded outcomes (issue 24) ----------------------------------------- */

/* Steps per policy: two in three are a fold (about 6,000 folds of 1 to
 * 40 outcomes over the six policies). */
#define FOLD_STEPS 1500
#define FOLD_LEN_MAX 40
#define FOLD_MARK "fold-mark"

/* The events published since the last mark, of circuit `name` each into
 * its list (in order): PUBLISH a mark and read up to it. */
static void
events_until_mark(redisContext *ctx, redisContext *sub, const char *one, json_t *ev_one,
    const char *fold, json_t *ev_fold)
{
	redisReply *reply = redisCommand(ctx, "PUBLISH %s %s", CHANNEL, FOLD_MARK);

	ck_assert_ptr_nonnull(reply);
	freeReplyObject(reply);
	for (;;) {
		json_error_t err;
		json_t *e, *to;
		const char *n;

		reply = NULL;
		ck_assert_msg(redisGetReply(sub, (void **)&reply) == REDIS_OK, "no event: %s",
		    sub->errstr);
		ck_assert(reply->type == REDIS_REPLY_ARRAY && reply->elements == 3);
		if (strcmp(reply->element[2]->str, FOLD_MARK) == 0) {
			freeReplyObject(reply);
			return;
		}
		e = json_loads(reply->element[2]->str, 0, &err);
		ck_assert_msg(e != NULL, "event %s", reply->element[2]->str);
		freeReplyObject(reply);
		/* The list is chosen before "name" (which n points into) goes. */
		n = json_string_value(json_object_get(e, "name"));
		to = n == NULL             ? NULL
		    : strcmp(n, one) == 0  ? ev_one
		    : strcmp(n, fold) == 0 ? ev_fold
					   : NULL;
		json_object_del(e, "name");
		if (to != NULL)
			json_array_append_new(to, e);
		else
			json_decref(e);
	}
}

/* Two JSON values equal, or the case fails saying where. */
static void
assert_json_eq(const json_t *a, const json_t *b, const char *what, const char *where)
{
	if (!json_equal(a, b)) {
		char *ta = json_dumps(a, JSON_COMPACT | JSON_ENCODE_ANY);
		char *tb = json_dumps(b, JSON_COMPACT | JSON_ENCODE_ANY);

		ck_abort_msg("%s: %s one by one %s, folded %s", where, what, ta, tb);
	}
}

/* Hash key as a JSON object of its fields (empty: no such key). */
static json_t *
hash_json(redisContext *ctx, const char *key)
{
	redisReply *reply = redisCommand(ctx, "HGETALL %s", key);
	json_t *out = json_object();

	ck_assert_msg(reply != NULL && reply->type == REDIS_REPLY_ARRAY, "HGETALL %s", key);
	for (size_t i = 0; i + 1 < reply->elements; i += 2)
		json_object_set_new(out, reply->element[i]->str,
		    json_string(reply->element[i + 1]->str));
	freeReplyObject(reply);
	return out;
}

/* The circuit's hash and its window's (the ring entries or buckets a fold
 * writes once at its end) are stored alike for circuits one and fold. */
static void
assert_stored_alike(redisContext *ctx, const char *one, const char *fold, const char *where)
{
	static const char *const suffixes[] = { "", ":window" };

	for (size_t i = 0; i < sizeof suffixes / sizeof suffixes[0]; i++) {
		char k1[128], k2[128];
		json_t *h1, *h2;

		snprintf(k1, sizeof k1, "cbd:{%s}%s", one, suffixes[i]);
		snprintf(k2, sizeof k2, "cbd:{%s}%s", fold, suffixes[i]);
		h1 = hash_json(ctx, k1);
		h2 = hash_json(ctx, k2);
		assert_json_eq(h1, h2, i == 0 ? "stored circuit" : "stored window", where);
		json_decref(h1);
		json_decref(h2);
	}
}

/* Random sequences of outcomes on two circuits: one gets each outcome in
 * its own call, the other the same outcomes folded into one "outcomes"
 * call (made by fleet-fold.c, as cbd makes it) at the same now; allows,
 * holds with a ttl and forced states between folds, on both alike. Each
 * outcome's answer (circuit and change, when it changed the state or
 * wants a reply), the events published, and the circuit after every step
 * (its reply, and its hash and window's hash as stored) must be the same. */
static void
fold_differential(redisContext *ctx, redisContext *sub, const char *base, const cb_policy *policy,
    uint64_t seed, int *trips_inside, int *counted)
{
	static const char *const reporters[] = { "r1", "r2", "r3" };
	static const char *const states[] = { "closed", "open", "half_open" };
	char one[64], fold[64];
	int64_t now = T0;
	json_t *ev_one = json_array(), *ev_fold = json_array();

	snprintf(one, sizeof one, "%s-one", base);
	snprintf(fold, sizeof fold, "%s-fold", base);
	rng_state = seed;
	for (int step = 0; step < FOLD_STEPS; step++) {
		uint64_t what = rng(12);
		char where[128];
		json_t *r1, *r2;

		if (what < 8) {
			fleet_fold_item items[FOLD_LEN_MAX];
			fleet_fold_place place[FOLD_LEN_MAX];
			json_t *replies[FOLD_LEN_MAX], *extra, *req, *fr;
			size_t n = 1 + rng(rng(3) == 0 ? FOLD_LEN_MAX : 8), cursor = 0;
			int changes = 0;
			/* Failures in bursts: some folds are mostly failures. */
			uint64_t fail_pct = rng(3) == 0 ? 80 : 25;

			for (size_t i = 0; i < n; i++) {
				uint64_t k = rng(100);
				fleet_fold_item *it = &items[i];
				const char *op;
				json_t *q = at(now);

				it->kind = k < 5          ? 'i'
				    : k < 9               ? 'r'
				    : rng(100) < fail_pct ? 'f'
							  : 's';
				it->value =
				    it->kind == 'r' ? 1 + (int64_t)rng(3) : (int64_t)rng(4) * 60;
				it->reporter = reporters[rng(3)];
				it->want = rng(4) == 0;
				/* A counted success (record_success's count): one by
				 * one on circuit one, its answer the last call's circuit
				 * with the change they made (first from, last to). */
				it->count = it->kind == 's' && rng(4) == 0
				    ? 2 + (int64_t)rng(rng(4) == 0 ? 150 : 12)
				    : 1;
				op = it->kind == 's'  ? "success"
				    : it->kind == 'f' ? "failure"
				    : it->kind == 'i' ? "ignore"
						      : "rejected";
				with_str(q, "reporter", it->reporter);
				if (it->kind == 'r')
					with_int(q, "count", it->value);
				else
					with_int(q, "duration_ms", it->value);
				replies[i] = fleet_call(ctx, one, op, policy, q);
				if (it->count > 1) {
					json_t *merged =
					    json_incref(json_object_get(replies[i], "change"));

					for (int64_t c = 1; c < it->count; c++) {
						json_t *q2 = with_int(with_str(at(now), "reporter",
									  it->reporter),
						    "duration_ms", it->value);
						json_t *r = fleet_call(ctx, one, op, policy, q2);
						json_t *ch = json_object_get(r, "change");

						if (json_is_null(merged) && !json_is_null(ch)) {
							json_decref(merged);
							merged = json_deep_copy(ch);
						} else if (!json_is_null(ch)) {
							json_object_set(merged, "to",
							    json_object_get(ch, "to"));
							json_object_set(merged, "reason",
							    json_object_get(ch, "reason"));
						}
						json_decref(replies[i]);
						replies[i] = r;
					}
					json_object_set_new(replies[i], "change", merged);
					(*counted)++;
				}
			}
			extra = fleet_fold_extra(items, n, policy, place);
			ck_assert_ptr_nonnull(extra);
			req = at(now);
			json_object_set(req, "items", json_object_get(extra, "items"));
			json_decref(extra);
			fr = fleet_call(ctx, fold, "outcomes", policy, req);
			for (size_t i = 0; i < n; i++) {
				const json_t *e = fleet_fold_answer(fr, place[i], &cursor);
				const json_t *change = json_object_get(replies[i], "change");

				snprintf(where, sizeof where, "%s step %d outcome %zu of %zu (%c)",
				    base, step, i + 1, n, items[i].kind);
				if (json_is_null(change) && !items[i].want) {
					ck_assert_msg(e == NULL, "%s: an answer for no change",
					    where);
				} else {
					ck_assert_msg(e != NULL, "%s: no answer", where);
					assert_json_eq(json_object_get(replies[i], "circuit"),
					    json_array_get(e, 2), "circuit", where);
					assert_json_eq(change, json_array_get(e, 3), "change",
					    where);
					changes += !json_is_null(change);
				}
				json_decref(replies[i]);
			}
			ck_assert_msg(cursor == json_array_size(json_object_get(fr, "items")),
			    "%s step %d: answers left over", base, step);
			if (changes > 1)
				(*trips_inside)++;
			json_decref(fr);
		} else if (what < 10) {
			snprintf(where, sizeof where, "%s step %d (allow)", base, step);
			r1 = fleet_call(ctx, one, "allow", policy, with_str(at(now), "token", "t"));
			r2 =
			    fleet_call(ctx, fold, "allow", policy, with_str(at(now), "token", "t"));
			assert_json_eq(r1, r2, "allow", where);
			json_decref(r1);
			json_decref(r2);
		} else if (what == 10) {
			const char *state = states[rng(3)];
			bool hold = rng(2) == 0 && strcmp(state, "half_open") != 0;
			int64_t ttl = 1 + (int64_t)rng(4) * 100;

			snprintf(where, sizeof where, "%s step %d (set_state %s)", base, step,
			    state);
			r1 = fleet_call(ctx, one, "set_state", policy,
			    hold ? with_hold(at(now), state, ttl, NULL)
				 : with_str(at(now), "state", state));
			r2 = fleet_call(ctx, fold, "set_state", policy,
			    hold ? with_hold(at(now), state, ttl, NULL)
				 : with_str(at(now), "state", state));
			assert_json_eq(json_object_get(r1, "circuit"),
			    json_object_get(r2, "circuit"), "circuit", where);
			json_decref(r1);
			json_decref(r2);
		}
		snprintf(where, sizeof where, "%s step %d (get)", base, step);
		r1 = fleet_call(ctx, one, "get", policy, at(now));
		r2 = fleet_call(ctx, fold, "get", policy, at(now));
		assert_json_eq(json_object_get(r1, "circuit"), json_object_get(r2, "circuit"),
		    "circuit", where);
		json_decref(r1);
		json_decref(r2);
		assert_stored_alike(ctx, one, fold, where);
		events_until_mark(ctx, sub, one, ev_one, fold, ev_fold);
		assert_json_eq(ev_one, ev_fold, "events", where);
		json_array_clear(ev_one);
		json_array_clear(ev_fold);
		if (rng(2) == 0)
			now += (int64_t)rng(rng(5) == 0 ? 40 : 4) * 50;
		else
			now += rng(5) == 0 ? (int64_t)rng(2000) : (int64_t)rng(100);
	}
	json_decref(ev_one);
	json_decref(ev_fold);
}

START_TEST(fold_equals_one_by_one)
{
	redisContext *ctx = connect_server();
	redisContext *sub = connect_server();
	struct timeval wait = { EVENT_WAIT_S, 0 };
	redisReply *reply;
	int trips_inside = 0, counted = 0;
	cb_policy p;
	/* FOLD_SEED (hex): other random sequences than the fixed ones, to
	 * explore by hand; unset in make check. */
	const char *salt_text = getenv("FOLD_SEED");
	uint64_t salt = salt_text != NULL ? strtoull(salt_text, NULL, 16) : 0;

	ck_assert_int_eq(redisSetTimeout(sub, wait), REDIS_OK);
	reply = redisCommand(sub, "SUBSCRIBE %s", CHANNEL);
	ck_assert_ptr_nonnull(reply);
	freeReplyObject(reply);
	/* Consecutive with max_gap chains, two trials, backoff. */
	breaker_policy_default(&p);
	p.failure_threshold = 3;
	p.success_threshold = 2;
	p.max_gap_ms = 100;
	p.break_ms = 300;
	p.half_open_max = 2;
	p.break_backoff = 2;
	p.break_max_ms = 2000;
	fold_differential(ctx, sub, "fold-consecutive", &p, 0x9e3779b97f4a7c15u ^ salt,
	    &trips_inside, &counted);
	/* Consecutive, slow calls counted. */
	p.slow_call_ms = 120;
	p.max_gap_ms = 0;
	fold_differential(ctx, sub, "fold-slow", &p, 0x2545f4914f6cdd1du ^ salt, &trips_inside,
	    &counted);
	/* Rate rule over a count window with the slow rule. */
	breaker_policy_default(&p);
	p.trip = CB_TRIP_RATE;
	p.window_size = 6;
	p.minimum_calls = 3;
	p.failure_rate = 60;
	p.slow_call_ms = 120;
	p.slow_call_rate = 50;
	p.break_ms = 400;
	fold_differential(ctx, sub, "fold-rate-count", &p, 0x1234567887654321u ^ salt,
	    &trips_inside, &counted);
	/* Rate rule over a time window. */
	breaker_policy_default(&p);
	p.trip = CB_TRIP_RATE;
	p.window = CB_WINDOW_TIME;
	p.window_size = 2000;
	p.minimum_calls = 4;
	p.failure_rate = 50;
	p.break_ms = 300;
	p.break_backoff = 3;
	fold_differential(ctx, sub, "fold-rate-time", &p, 0xdeadbeefcafef00du ^ salt, &trips_inside,
	    &counted);
	/* min_reporters on both rules. */
	breaker_policy_default(&p);
	p.failure_threshold = 2;
	p.min_reporters = 2;
	p.reporter_window_ms = 400;
	p.break_ms = 300;
	fold_differential(ctx, sub, "fold-reporters", &p, 0x0badc0ffee0ddf00u ^ salt, &trips_inside,
	    &counted);
	p.trip = CB_TRIP_RATE;
	p.window_size = 4;
	p.minimum_calls = 2;
	p.min_reporters = 3;
	p.slow_call_ms = 100;
	fold_differential(ctx, sub, "fold-reporters-rate", &p, 0x5555aaaa3333ccccu ^ salt,
	    &trips_inside, &counted);
	/* Folds that moved the state more than once (e.g. a trial closed
	 * then a failure run tripped) were among them. */
	ck_assert_int_gt(trips_inside, 40);
	/* Counted successes (runs of their own) were among the outcomes. */
	ck_assert_int_gt(counted, 100);
	redisFree(sub);
	redisFree(ctx);
}
END_TEST

START_TEST(fold_malformed_refused)
{
	redisContext *ctx = connect_server();
	cb_policy p = default_policy();
	static const char *const bad[] = { "[]", "[[\"x\",0,\"r\",1,0]]", "[[\"s\",0,\"r\",0,0]]",
		"[[\"s\",0,\"r\",2,1]]", "[[\"r\",0,\"r\",1,0]]", "[[\"s\",0.5,\"r\",1,0]]", "[7]",
		"[[\"f\",0,\"r\",2,0,1]]", "[[\"s\",0,\"r\",1000001,0,1]]",
		"[[\"s\",0,\"r\",2,0,2]]" };

	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		json_t *req = at(T0);
		redisReply *reply;

		json_object_set_new(req, "items", json_loads(bad[i], 0, NULL));
		json_object_set_new(req, "name", json_string("fold-bad"));
		json_object_set_new(req, "policy", proto_policy_flat_json(&p));
		reply = script_command(ctx, "fold-bad", "outcomes", req);
		ck_assert_msg(reply->type == REDIS_REPLY_ERROR &&
			strstr(reply->str, "outcomes") != NULL,
		    "%s: %s", bad[i], reply->type == REDIS_REPLY_ERROR ? reply->str : "accepted");
		freeReplyObject(reply);
		json_decref(req);
	}
	ck_assert(!key_exists(ctx, "cbd:{fold-bad}"));
	redisFree(ctx);
}
END_TEST

/* Load the script once; the cases use its sha. */
static bool
load_script(void)
{
	redisContext *ctx = redisConnectUnix(server.socket_path);
	char *text = redis_fleet_script();
	redisReply *reply = NULL;
	bool ok = false;

	if (text == NULL)
		fprintf(stderr, "check_fleet_script: cannot read src/fleet.lua (set CBD_SRCDIR)\n");
	if (ctx != NULL && ctx->err == 0 && text != NULL)
		reply = redisCommand(ctx, "SCRIPT LOAD %s", text);
	if (reply != NULL && reply->type == REDIS_REPLY_STRING && reply->len < sizeof sha) {
		memcpy(sha, reply->str, reply->len + 1);
		ok = true;
	} else if (reply != NULL && reply->type == REDIS_REPLY_ERROR) {
		fprintf(stderr, "check_fleet_script: SCRIPT LOAD: %s\n", reply->str);
	}
	if (reply != NULL)
		freeReplyObject(reply);
	if (ctx != NULL)
		redisFree(ctx);
	free(text);
	return ok;
}

int
main(void)
{
	Suite *s = suite_create("fleet_script");
	TCase *trace = tcase_create("trace");
	TCase *ops = tcase_create("ops");
	TCase *diff = tcase_create("differential");
	int status;

	if (!redis_available()) {
		fprintf(stderr, "check_fleet_script: redis-server not installed, skipped\n");
		return 77;
	}
	if (!redis_start(&server)) {
		fprintf(stderr, "check_fleet_script: redis-server did not start\n");
		return EXIT_FAILURE;
	}
	if (!load_script()) {
		redis_stop(&server);
		return EXIT_FAILURE;
	}
	tcase_add_test(trace, trace_replays);
	tcase_add_test(ops, get_never_creates);
	tcase_add_test(ops, hold_open_expires);
	tcase_add_test(ops, hold_closed_and_release);
	tcase_add_test(ops, cas_applies_or_not);
	tcase_add_test(ops, slots_half_open_max);
	tcase_add_test(ops, delete_drops_everything);
	tcase_add_test(ops, declared_mismatch_changes_nothing);
	tcase_add_test(ops, merge_opens_never_closes);
	tcase_add_test(ops, merge_places_a_hold_unless_held);
	tcase_add_test(ops, writeback_applies_to_the_circuit_the_host_knew);
	tcase_add_test(ops, max_gap_chain);
	tcase_add_test(ops, totals_count_every_outcome);
	tcase_add_test(ops, min_reporters_gate);
	tcase_add_test(ops, time_when_now_absent);
	tcase_add_test(ops, events_published);
	tcase_add_test(ops, expiry_set);
	tcase_add_test(ops, bad_requests_refused);
	tcase_add_test(ops, malformed_arguments_refused);
	tcase_add_test(diff, mirrors_the_c_core);
	tcase_add_test(diff, rate_boundaries_exact);
	tcase_add_test(diff, backoff_without_cap);
	tcase_add_test(diff, fold_equals_one_by_one);
	tcase_add_test(ops, fold_malformed_refused);
	/* Bounds for a loaded machine, not timing assertions. */
	tcase_set_timeout(trace, 60);
	tcase_set_timeout(ops, 60);
	tcase_set_timeout(diff, 120);
	suite_add_tcase(s, trace);
	suite_add_tcase(s, ops);
	suite_add_tcase(s, diff);
	status = check_run(s, NULL);
	redis_stop(&server);
	return status;
}
