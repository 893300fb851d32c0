/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cbd-contract-test.c — the store contract suite (store-contract.h) run
 * against a real cbd through its socket: each store is a fresh cbd
 * started by the harness with max_circuits in its config.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <check.h>
#include <jansson.h>

#include "cbd-harness.h"
#include "check-run.h"
#include "proto.h"
#include "store-contract.h"

/* One store: a daemon and a connection to it. */
typedef struct remote_store {
	cbd_harness h;
	int fd;
} remote_store;

static void *
remote_create(uint64_t max_circuits)
{
	remote_store *s = calloc(1, sizeof *s);
	char config[128];

	if (s == NULL)
		return NULL;
	snprintf(config, sizeof config, "[cbd]\nmax_circuits = %llu\nlog_level = warning\n",
	    (unsigned long long)max_circuits);
	if (!harness_start(&s->h, config)) {
		free(s);
		return NULL;
	}
	s->fd = harness_connect(&s->h);
	if (s->fd < 0) {
		harness_stop(&s->h);
		free(s);
		return NULL;
	}
	return s;
}

static void
remote_teardown(void *store)
{
	remote_store *s = store;

	if (s == NULL)
		return;
	close(s->fd);
	harness_stop(&s->h);
	free(s);
}

/* request["ctx"] = the whole policy and now. */
static void
add_ctx(json_t *request, const cb_policy *p, int64_t now)
{
	json_t *ctx = json_pack("{s:I, s:I, s:I, s:I, s:I, s:I}", "failure_threshold",
	    (json_int_t)p->failure_threshold, "success_threshold", (json_int_t)p->success_threshold,
	    "break_ms", (json_int_t)p->break_ms, "half_open_max", (json_int_t)p->half_open_max,
	    "slot_ttl_ms", (json_int_t)p->slot_ttl_ms, "now", (json_int_t)now);

	if (p->max_gap_ms > 0)
		json_object_set_new(ctx, "max_gap_ms", json_integer(p->max_gap_ms));
	json_object_set_new(request, "ctx", ctx);
}

/* Send request (stolen), read the reply into *reply. */
static contract_status
call(remote_store *s, json_t *request, json_t **reply)
{
	static char line[1 << 16];
	char *text = json_dumps(request, JSON_COMPACT);
	const char *code;

	json_decref(request);
	*reply = NULL;
	if (text == NULL)
		return CONTRACT_ERROR;
	if (!harness_request(s->fd, text, line, sizeof line)) {
		free(text);
		return CONTRACT_ERROR;
	}
	free(text);
	*reply = json_loads(line, 0, NULL);
	if (*reply == NULL)
		return CONTRACT_ERROR;
	if (json_is_true(json_object_get(*reply, "ok")))
		return CONTRACT_OK;
	code = json_string_value(json_object_get(json_object_get(*reply, "error"), "code"));
	if (code != NULL && strcmp(code, "capacity") == 0)
		return CONTRACT_CAPACITY;
	fprintf(stderr, "cbd-contract: %s\n", line);
	return CONTRACT_ERROR;
}

/* A request for op on name with policy and now. */
static json_t *
request(const char *op, const char *name, const cb_policy *p, int64_t now)
{
	json_t *r = json_pack("{s:s, s:s}", "op", op, "name", name);

	if (p != NULL)
		add_ctx(r, p, now);
	return r;
}

/* Read reply["snapshot"] into out. */
static contract_status
snapshot_of(json_t *reply, contract_status status, cb_snapshot *out)
{
	proto_error err;

	if (status == CONTRACT_OK &&
	    !proto_snapshot_from_json(json_object_get(reply, "snapshot"), out, NULL, &err))
		status = CONTRACT_ERROR;
	json_decref(reply);
	return status;
}

static contract_status
remote_get(void *store, const char *name, const cb_policy *p, int64_t now, cb_snapshot *out)
{
	json_t *reply;
	contract_status st = call(store, request("get", name, p, now), &reply);

	return snapshot_of(reply, st, out);
}

static contract_status
remote_record_success(void *store, const char *name, const cb_policy *p, int64_t now,
    cb_snapshot *out)
{
	json_t *reply;
	contract_status st = call(store, request("record_success", name, p, now), &reply);

	return snapshot_of(reply, st, out);
}

static contract_status
remote_record_failure(void *store, const char *name, const cb_policy *p, int64_t now,
    cb_snapshot *out)
{
	json_t *reply;
	contract_status st = call(store, request("record_failure", name, p, now), &reply);

	return snapshot_of(reply, st, out);
}

static contract_status
remote_cas(void *store, const char *name, cb_state from, cb_state to, const cb_policy *p,
    int64_t now, bool *applied, cb_snapshot *out)
{
	json_t *r = request("cas", name, p, now), *reply;
	contract_status st;

	json_object_set_new(r, "from", json_string(breaker_state_name(from)));
	json_object_set_new(r, "to", json_string(breaker_state_name(to)));
	st = call(store, r, &reply);
	*applied = st == CONTRACT_OK && json_is_true(json_object_get(reply, "applied"));
	return snapshot_of(reply, st, out);
}

static contract_status
remote_set_state(void *store, const char *name, cb_state state, const cb_policy *p, int64_t now,
    cb_snapshot *out)
{
	json_t *r = request("set_state", name, p, now), *reply;
	contract_status st;

	json_object_set_new(r, "state", json_string(breaker_state_name(state)));
	st = call(store, r, &reply);
	return snapshot_of(reply, st, out);
}

static contract_status
remote_acquire_slot(void *store, const char *name, const cb_policy *p, int64_t now, bool *acquired,
    char token[CONTRACT_TOKEN_SIZE], int64_t *expires_at)
{
	json_t *reply;
	contract_status st = call(store, request("acquire_slot", name, p, now), &reply);

	*acquired = false;
	if (st == CONTRACT_OK && json_is_true(json_object_get(reply, "acquired"))) {
		const char *t = json_string_value(json_object_get(reply, "token"));

		if (t == NULL || strlen(t) >= CONTRACT_TOKEN_SIZE) {
			st = CONTRACT_ERROR;
		} else {
			*acquired = true;
			snprintf(token, CONTRACT_TOKEN_SIZE, "%s", t);
			*expires_at = json_integer_value(json_object_get(reply, "expires_at"));
		}
	}
	json_decref(reply);
	return st;
}

static contract_status
remote_release_slot(void *store, const char *name, const char *token, const cb_policy *p,
    int64_t now)
{
	json_t *r = request("release_slot", name, p, now), *reply;
	contract_status st;

	json_object_set_new(r, "token", json_string(token));
	st = call(store, r, &reply);
	json_decref(reply);
	return st;
}

static contract_status
remote_delete(void *store, const char *name, bool *existed)
{
	json_t *reply;
	contract_status st = call(store, request("delete", name, NULL, 0), &reply);

	*existed = st == CONTRACT_OK && json_is_true(json_object_get(reply, "existed"));
	json_decref(reply);
	return st;
}

static const contract_impl cbd_store = {
	.name = "cbd over its socket",
	.create = remote_create,
	.teardown = remote_teardown,
	.get = remote_get,
	.record_success = remote_record_success,
	.record_failure = remote_record_failure,
	.cas = remote_cas,
	.set_state = remote_set_state,
	.acquire_slot = remote_acquire_slot,
	.release_slot = remote_release_slot,
	.delete_circuit = remote_delete,
};

int
main(void)
{
	/* Each case starts a daemon: allow for slow machines and valgrind. */
	setenv("CK_DEFAULT_TIMEOUT", "120", 0);
	return check_run(contract_suite(&cbd_store), NULL);
}
