/* SPDX-License-Identifier: Apache-2.0 */
/*
 * check_circuit_table.c — the store contract suite against the in-memory
 * circuit table, plus what only the table has: slot owners, allow,
 * lifetime and reclaiming (protocol 2, §2), holds (§4), declared policies
 * and the counters.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "check-run.h"
#include "circuit-table.h"
#include "store-contract.h"
#include "test-rand.h"

#define T0 INT64_C(1700000000000)

/* A random instance id, as cbd makes one, so tokens differ per table. */
static uint64_t
random_instance(void)
{
	uint64_t id = 0;

	ck_assert_int_eq(getrandom(&id, sizeof id, 0), (ssize_t)sizeof id);
	return id;
}

static contract_status
status_of(ct_status status)
{
	switch (status) {
	case CT_OK:
		return CONTRACT_OK;
	case CT_CAPACITY:
		return CONTRACT_CAPACITY;
	case CT_SLOTS:
	case CT_NOMEM:
		break;
	}
	return CONTRACT_ERROR;
}

/* A table call at now (the clock of idleness too). */
static ct_call
at(const cb_policy *policy, int64_t now)
{
	return (ct_call){ .policy = policy, .now = now, .clock = now };
}

static void *
mem_create(uint64_t max_circuits)
{
	return circuit_table_new(max_circuits, random_instance());
}

static void
mem_teardown(void *store)
{
	circuit_table_free(store);
}

static contract_status
mem_get(void *store, const char *name, const cb_policy *policy, int64_t now, cb_snapshot *out)
{
	ct_view v;

	circuit_table_get(store, name, now, &v, NULL);
	*out = v.snap;
	return CONTRACT_OK;
}

static contract_status
mem_record_success(void *store, const char *name, const cb_policy *policy, int64_t now,
    cb_snapshot *out)
{
	ct_call call = at(policy, now);
	ct_view v;
	ct_status status = circuit_table_record_success(store, name, &call, &v, NULL);

	*out = v.snap;
	return status_of(status);
}

static contract_status
mem_record_failure(void *store, const char *name, const cb_policy *policy, int64_t now,
    cb_snapshot *out)
{
	ct_call call = at(policy, now);
	ct_view v;
	ct_status status = circuit_table_record_failure(store, name, &call, &v, NULL);

	*out = v.snap;
	return status_of(status);
}

static contract_status
mem_cas(void *store, const char *name, cb_state from, cb_state to, const cb_policy *policy,
    int64_t now, bool *applied, cb_snapshot *out)
{
	ct_call call = at(policy, now);
	ct_view v;
	ct_status status = circuit_table_cas(store, name, from, to, &call, applied, &v, NULL);

	*out = v.snap;
	return status_of(status);
}

static contract_status
mem_set_state(void *store, const char *name, cb_state state, const cb_policy *policy, int64_t now,
    cb_snapshot *out)
{
	ct_call call = at(policy, now);
	ct_view v;
	ct_status status = circuit_table_set_state(store, name, state, NULL, &call, &v, NULL);

	*out = v.snap;
	return status_of(status);
}

static contract_status
mem_acquire_slot(void *store, const char *name, const cb_policy *policy, int64_t now,
    bool *acquired, char token[CONTRACT_TOKEN_SIZE], int64_t *expires_at)
{
	ct_call call = at(policy, now);
	ct_slot_grant grant;
	ct_status status = circuit_table_acquire_slot(store, name, &call, acquired, &grant);

	if (status == CT_OK && *acquired) {
		strcpy(token, grant.token);
		*expires_at = grant.expires_at;
	}
	return status_of(status);
}

static contract_status
mem_release_slot(void *store, const char *name, const char *token, const cb_policy *policy,
    int64_t now)
{
	circuit_table_release_slot(store, name, token, now);
	return CONTRACT_OK;
}

static contract_status
mem_delete(void *store, const char *name, bool *existed)
{
	*existed = circuit_table_delete(store, name);
	return CONTRACT_OK;
}

static const contract_impl memory_impl = {
	.name = "contract: in-memory circuit table",
	.create = mem_create,
	.teardown = mem_teardown,
	.get = mem_get,
	.record_success = mem_record_success,
	.record_failure = mem_record_failure,
	.cas = mem_cas,
	.set_state = mem_set_state,
	.acquire_slot = mem_acquire_slot,
	.release_slot = mem_release_slot,
	.delete_circuit = mem_delete,
};

/* ---- table-only cases ---- */

static circuit_table *table;

static void
setup(void)
{
	table = circuit_table_new(100, random_instance());
	ck_assert_ptr_nonnull(table);
}

static void
teardown(void)
{
	circuit_table_free(table);
}

static cb_policy
policy(void)
{
	cb_policy p;

	breaker_policy_default(&p);
	p.failure_threshold = 2;
	p.break_ms = 1000;
	p.slot_ttl_ms = 500;
	return p;
}

static ct_view
fail_at(circuit_table *t, const char *name, const cb_policy *p, int64_t now, ct_status want)
{
	ct_call call = at(p, now);
	ct_view v;

	ck_assert_int_eq(circuit_table_record_failure(t, name, &call, &v, NULL), want);
	return v;
}

static ct_view
succeed_at(circuit_table *t, const char *name, const cb_policy *p, int64_t now)
{
	ct_call call = at(p, now);
	ct_view v;

	ck_assert_int_eq(circuit_table_record_success(t, name, &call, &v, NULL), CT_OK);
	return v;
}

static void
trip(const char *name, const cb_policy *p, int64_t now)
{
	ct_view v;

	for (int64_t i = 0; i < p->failure_threshold; i++)
		v = fail_at(table, name, p, now, CT_OK);
	ck_assert_int_eq(v.snap.state, CB_STATE_OPEN);
}

static ct_status
acquire(circuit_table *t, const char *name, const cb_policy *p, int64_t now, ct_owner *owner,
    bool *acquired, ct_slot_grant *grant)
{
	ct_call call = at(p, now);

	call.owner = owner;
	return circuit_table_acquire_slot(t, name, &call, acquired, grant);
}

static ct_status
allow_at(const char *name, const cb_policy *p, int64_t now, ct_allow *a, ct_change *change)
{
	ct_call call = at(p, now);

	return circuit_table_allow(table, name, &call, a, NULL, change);
}

static uint64_t
stored_circuits(void)
{
	ct_stats st;

	circuit_table_stats(table, &st);
	return st.circuits;
}

static ct_view
view_of(const char *name, int64_t now)
{
	ct_view v;

	circuit_table_get(table, name, now, &v, NULL);
	return v;
}

START_TEST(writes_create_reads_do_not)
{
	cb_policy p = policy();
	ct_call call = at(&p, T0);
	ct_allow allow;
	ct_view v;
	bool applied;

	ck_assert(!view_of("a", T0).stored);
	circuit_table_record_ignore(table, "a", &call, &v, NULL);
	ck_assert(!circuit_table_cas(table, "a", CB_STATE_OPEN, CB_STATE_CLOSED, &call, &applied,
	    &v, NULL));
	ck_assert(!applied);
	ck_assert(!circuit_table_release_slot(table, "a", "nope", T0));
	ck_assert_int_eq(stored_circuits(), 0);
	/* A success on a fresh name creates it (protocol 2: circuits live
	 * while used), and so does allow. */
	v = succeed_at(table, "a", &p, T0);
	ck_assert(v.stored);
	ck_assert_int_eq(v.totals.successes, 1);
	ck_assert_int_eq(allow_at("b", &p, T0, &allow, NULL), CT_OK);
	ck_assert(allow.allowed);
	ck_assert_int_eq(stored_circuits(), 2);
	/* An ignored outcome counts on a stored circuit. */
	circuit_table_record_ignore(table, "a", &call, &v, NULL);
	ck_assert_int_eq(v.totals.ignored, 1);
}
END_TEST

START_TEST(idle_closed_circuits_are_reclaimed)
{
	cb_policy p = policy();
	bool stored, acquired;
	ct_slot_grant grant;
	ct_stats st;

	circuit_table_set_idle_reclaim(table, 1000);
	succeed_at(table, "idle", &p, T0);
	trip("open", &p, T0);
	ck_assert_int_eq(acquire(table, "slotted", &p, T0, NULL, &acquired, &grant), CT_OK);
	succeed_at(table, "used", &p, T0);
	/* "used" is named again (a get counts as use). */
	circuit_table_use(table, "used", T0 + 900, &stored);
	ck_assert(stored);
	ck_assert_uint_eq(circuit_table_reclaim_idle(table, T0 + 999, 100), 0);
	ck_assert_uint_eq(circuit_table_reclaim_idle(table, T0 + 1000, 100), 1);
	ck_assert(!view_of("idle", T0).stored);
	/* Open and slot-holding circuits stay, however idle. */
	ck_assert_uint_eq(circuit_table_reclaim_idle(table, T0 + 100000, 100), 1);
	ck_assert(view_of("open", T0).stored);
	ck_assert(view_of("slotted", T0).stored);
	ck_assert(!view_of("used", T0).stored);
	circuit_table_stats(table, &st);
	ck_assert_uint_eq(st.reclaimed_idle, 2);
}
END_TEST

START_TEST(capacity_reclaims_longest_idle_first)
{
	cb_policy p = policy();
	circuit_table *small = circuit_table_new(2, random_instance());
	ct_call call;
	ct_view v;
	ct_stats st;
	bool stored;

	succeed_at(small, "old", &p, T0);
	succeed_at(small, "young", &p, T0 + 10);
	circuit_table_use(small, "old", T0 + 20, &stored); /* now "young" is older */
	fail_at(small, "new", &p, T0 + 30, CT_OK);
	circuit_table_get(small, "young", T0, &v, NULL);
	ck_assert(!v.stored);
	circuit_table_get(small, "old", T0, &v, NULL);
	ck_assert(v.stored);
	/* Nothing reclaimable (both open): refused, nothing changes. */
	p.failure_threshold = 1;
	fail_at(small, "old", &p, T0 + 40, CT_OK);
	fail_at(small, "new", &p, T0 + 40, CT_OK);
	call = at(&p, T0 + 50);
	ck_assert_int_eq(circuit_table_record_failure(small, "third", &call, &v, NULL),
	    CT_CAPACITY);
	ck_assert(!v.stored);
	circuit_table_stats(small, &st);
	ck_assert_uint_eq(st.capacity_refusals, 1);
	ck_assert_uint_eq(st.reclaimed_capacity, 1);
	ck_assert_uint_eq(st.circuits, 2);
	circuit_table_free(small);
}
END_TEST

START_TEST(owner_release_frees_all_its_slots)
{
	cb_policy p = policy();
	ct_owner conn1 = { 0 }, conn2 = { 0 };
	ct_slot_grant grant;
	bool acquired;
	ct_stats st;

	p.half_open_max = 3;
	ck_assert_int_eq(acquire(table, "a", &p, T0, &conn1, &acquired, &grant), CT_OK);
	ck_assert_int_eq(acquire(table, "a", &p, T0, &conn1, &acquired, &grant), CT_OK);
	ck_assert_int_eq(acquire(table, "b", &p, T0, &conn1, &acquired, &grant), CT_OK);
	ck_assert_int_eq(acquire(table, "a", &p, T0, &conn2, &acquired, &grant), CT_OK);
	ck_assert(acquired);
	ck_assert_int_eq(acquire(table, "a", &p, T0, &conn2, &acquired, &grant), CT_OK);
	ck_assert(!acquired);
	circuit_table_release_owner(table, &conn1);
	ck_assert_ptr_null(conn1.slots);
	circuit_table_stats(table, &st);
	ck_assert_int_eq(st.slots, 1);
	/* conn2's slot survives; two of "a"'s three are free again. */
	ck_assert_int_eq(acquire(table, "a", &p, T0, &conn2, &acquired, &grant), CT_OK);
	ck_assert(acquired);
	/* A slot released by token leaves its owner's list consistent. */
	ck_assert(circuit_table_release_slot(table, "a", grant.token, T0));
	circuit_table_release_owner(table, &conn2);
	circuit_table_stats(table, &st);
	ck_assert_int_eq(st.slots, 0);
}
END_TEST

START_TEST(max_slots_bounds_all_circuits)
{
	cb_policy p = policy();
	ct_slot_grant grant;
	bool acquired;
	ct_stats st;

	p.half_open_max = CB_HALF_OPEN_MAX;
	circuit_table_set_max_slots(table, 3);
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(acquire(table, i == 0 ? "a" : "b", &p, T0, NULL, &acquired,
				     &grant),
		    CT_OK);
	ck_assert_int_eq(acquire(table, "c", &p, T0, NULL, &acquired, &grant), CT_SLOTS);
	ck_assert(!acquired);
	circuit_table_stats(table, &st);
	ck_assert_uint_eq(st.slot_refusals, 1);
	ck_assert_uint_eq(st.slots, 3);
}
END_TEST

START_TEST(allow_closed_open_and_elapsed)
{
	cb_policy p = policy();
	ct_allow a;
	ct_change change;
	ct_view v;

	trip("c", &p, T0);
	ck_assert_int_eq(allow_at("c", &p, T0 + 400, &a, &change), CT_OK);
	ck_assert(!a.allowed);
	ck_assert_int_eq(a.state, CB_STATE_OPEN);
	ck_assert_int_eq(a.retry_after_ms, 600);
	ck_assert_int_eq(change.reason, CB_REASON_NONE);
	/* A clock behind opened_at counts as no time elapsed: never more than
	 * the break. */
	ck_assert_int_eq(allow_at("c", &p, T0 - 5000, &a, NULL), CT_OK);
	ck_assert_int_eq(a.retry_after_ms, 1000);
	/* Break elapsed: moves to half_open once and hands out one permit. */
	ck_assert_int_eq(allow_at("c", &p, T0 + 1000, &a, &change), CT_OK);
	ck_assert(a.allowed);
	ck_assert(a.has_permit);
	ck_assert_int_eq(a.state, CB_STATE_HALF_OPEN);
	ck_assert_int_eq(a.permit.expires_at, T0 + 1500);
	ck_assert_int_eq(change.from, CB_STATE_OPEN);
	ck_assert_int_eq(change.to, CB_STATE_HALF_OPEN);
	ck_assert_int_eq(change.reason, CB_REASON_BREAK_ELAPSED);
	/* The next caller finds half_open with no free slot: refused, with the
	 * time until the held permit expires as the hint; no new transition. */
	ck_assert_int_eq(allow_at("c", &p, T0 + 1100, &a, &change), CT_OK);
	ck_assert(!a.allowed);
	ck_assert(!a.has_permit);
	ck_assert_int_eq(a.state, CB_STATE_HALF_OPEN);
	ck_assert_int_eq(a.retry_after_ms, 400);
	ck_assert_int_eq(change.reason, CB_REASON_NONE);
	/* An expired permit frees the slot for the next trial. */
	ck_assert_int_eq(allow_at("c", &p, T0 + 1500, &a, NULL), CT_OK);
	ck_assert(a.allowed);
	/* Every refusal counted. */
	v = view_of("c", T0 + 1500);
	ck_assert_uint_eq(v.totals.rejected, 3);
	/* Closed: allowed without a permit. */
	ck_assert_int_eq(allow_at("fresh", &p, T0, &a, NULL), CT_OK);
	ck_assert(a.allowed);
	ck_assert(!a.has_permit);
	ck_assert_int_eq(a.state, CB_STATE_CLOSED);
}
END_TEST

START_TEST(held_open_stays_open_until_ttl)
{
	cb_policy p = policy();
	ct_hold_request req = { .ttl_ms = 5000,
		.by_uid = 1000,
		.by_user = "alice",
		.reason = "deploy" };
	ct_call call = at(&p, T0);
	ct_change change;
	ct_allow a;
	ct_view v;
	bool applied, released;

	ck_assert_int_eq(circuit_table_set_state(table, "h", CB_STATE_OPEN, &req, &call, &v,
			     &change),
	    CT_OK);
	ck_assert(v.hold.held);
	ck_assert_int_eq(v.hold.state, CB_STATE_OPEN);
	ck_assert_int_eq(v.hold.until, T0 + 5000);
	ck_assert_str_eq(v.hold.by_user, "alice");
	ck_assert_str_eq(v.hold.reason, "deploy");
	ck_assert_int_eq(change.reason, CB_REASON_HELD);
	/* Past break_ms: still refused, the hint counts down to the hold's end. */
	ck_assert_int_eq(allow_at("h", &p, T0 + 2000, &a, NULL), CT_OK);
	ck_assert(!a.allowed);
	ck_assert_int_eq(a.state, CB_STATE_OPEN);
	ck_assert_int_eq(a.retry_after_ms, 3000);
	/* No rule moves it, and cas refuses. */
	succeed_at(table, "h", &p, T0 + 2100);
	call = at(&p, T0 + 2200);
	ck_assert_int_eq(circuit_table_cas(table, "h", CB_STATE_OPEN, CB_STATE_HALF_OPEN, &call,
			     &applied, &v, NULL),
	    CT_OK);
	ck_assert(!applied);
	ck_assert_int_eq(v.snap.state, CB_STATE_OPEN);
	/* At its ttl the hold ends: half_open, trials decide. */
	circuit_table_get(table, "h", T0 + 5000, &v, &change);
	ck_assert(!v.hold.held);
	ck_assert_int_eq(v.snap.state, CB_STATE_HALF_OPEN);
	ck_assert_int_eq(change.reason, CB_REASON_HOLD_EXPIRED);
	/* release of an unheld circuit changes nothing. */
	circuit_table_release(table, "h", &call, &released, &v, NULL);
	ck_assert(!released);
	ck_assert_int_eq(v.snap.state, CB_STATE_HALF_OPEN);
}
END_TEST

START_TEST(held_closed_never_opens_and_release_resets)
{
	cb_policy p = policy();
	ct_hold_request req = { .by_uid = 0, .by_user = "root" };
	ct_call call = at(&p, T0);
	ct_allow a;
	ct_view v;
	bool released;

	ck_assert_int_eq(circuit_table_set_state(table, "k", CB_STATE_CLOSED, &req, &call, &v,
			     NULL),
	    CT_OK);
	ck_assert_int_eq(v.hold.until, CB_TIME_NONE);
	for (int i = 0; i < 10; i++)
		v = fail_at(table, "k", &p, T0 + i, CT_OK);
	ck_assert_int_eq(v.snap.state, CB_STATE_CLOSED);
	ck_assert_int_eq(v.snap.failure_count, 10);
	ck_assert_uint_eq(v.totals.failures, 10);
	ck_assert_int_eq(allow_at("k", &p, T0 + 20, &a, NULL), CT_OK);
	ck_assert(a.allowed);
	/* Held circuits are pinned: never reclaimed. */
	circuit_table_set_idle_reclaim(table, 1);
	ck_assert_uint_eq(circuit_table_reclaim_idle(table, T0 + 100000, 10), 0);
	circuit_table_release(table, "k", &call, &released, &v, NULL);
	ck_assert(released);
	ck_assert_int_eq(v.snap.state, CB_STATE_CLOSED);
	ck_assert_int_eq(v.snap.failure_count, 0);
	/* set_state without hold clears a hold. */
	ck_assert_int_eq(circuit_table_set_state(table, "k", CB_STATE_OPEN, &req, &call, &v, NULL),
	    CT_OK);
	ck_assert_int_eq(circuit_table_set_state(table, "k", CB_STATE_OPEN, NULL, &call, &v, NULL),
	    CT_OK);
	ck_assert(!v.hold.held);
}
END_TEST

/* Count visits, and ended holds. */
static void
count_visit(const char *name, const ct_view *view, void *arg)
{
	int *n = arg;

	ck_assert_ptr_nonnull(name);
	(*n)++;
}

static void
count_change(const char *name, const ct_change *change, void *arg)
{
	int *n = arg;

	ck_assert_int_eq(change->reason, CB_REASON_HOLD_EXPIRED);
	(*n)++;
}

START_TEST(expire_holds_and_pinned_walk)
{
	cb_policy p = policy();
	ct_hold_request req = { .ttl_ms = 100 };
	ct_call call = at(&p, T0);
	ct_view v;
	int pinned = 0, ended = 0;

	circuit_table_set_state(table, "h1", CB_STATE_OPEN, &req, &call, &v, NULL);
	req.ttl_ms = 500;
	circuit_table_set_state(table, "h2", CB_STATE_OPEN, &req, &call, &v, NULL);
	trip("o", &p, T0);
	succeed_at(table, "closed", &p, T0);
	circuit_table_foreach_pinned(table, count_visit, &pinned);
	ck_assert_int_eq(pinned, 3);
	circuit_table_expire_holds(table, T0 + 100, count_change, &ended);
	ck_assert_int_eq(ended, 1);
	ck_assert_int_eq(view_of("h1", T0).snap.state, CB_STATE_HALF_OPEN);
	ck_assert(view_of("h2", T0).hold.held);
}
END_TEST

/* The reload's one walk: which circuits changed, and what renewed saw. */
typedef struct renew_seen {
	const char *changed; /* the one circuit whose policy changed */
	int calls;
	uint32_t rev;
	int64_t failures;
} renew_seen;

static bool
renew_changed(const char *name, const ct_view *view, void *arg)
{
	(void)view;
	return strcmp(name, ((renew_seen *)arg)->changed) == 0;
}

static void
renew_renewed(const char *name, const ct_view *view, void *arg)
{
	renew_seen *seen = arg;

	ck_assert_str_eq(name, seen->changed);
	seen->calls++;
	seen->rev = view->policy_rev;
	seen->failures = view->totals.failures;
}

/* renew_policies gives a changed circuit a new rev and calls renewed with
 * it (once, after the renewal); the others keep theirs and are not named. */
START_TEST(renew_policies_calls_renewed_after)
{
	cb_policy p = policy();
	renew_seen seen = { .changed = "a" };
	uint32_t a0, b0, unstored0;

	fail_at(table, "a", &p, T0, CT_OK);
	succeed_at(table, "b", &p, T0);
	a0 = circuit_table_policy_rev(table, "a");
	b0 = circuit_table_policy_rev(table, "b");
	unstored0 = circuit_table_policy_rev(table, "none");
	circuit_table_renew_policies(table, T0, renew_changed, renew_renewed, &seen);
	ck_assert_int_eq(seen.calls, 1);
	ck_assert_uint_ne(seen.rev, a0);
	ck_assert_uint_eq(seen.rev, circuit_table_policy_rev(table, "a"));
	ck_assert_int_eq(seen.failures, 1);
	ck_assert_uint_eq(circuit_table_policy_rev(table, "b"), b0);
	ck_assert_uint_ne(circuit_table_policy_rev(table, "none"), unstored0);
	/* renewed may be NULL. */
	circuit_table_renew_policies(table, T0, renew_changed, NULL, &seen);
	ck_assert_int_eq(seen.calls, 1);
	ck_assert_uint_ne(circuit_table_policy_rev(table, "a"), seen.rev);
}
END_TEST

START_TEST(declared_policies_are_interned)
{
	cb_policy p = policy();
	proto_ctx declared = { 0 }, other = { 0 };
	ct_call call = at(&p, T0);
	ct_view v1, v2;
	ct_stats st;
	bool stored;

	proto_ctx_set(&declared, PROTO_CTX_BREAK_MS, 100);
	proto_ctx_set(&declared, PROTO_CTX_NOW, T0); /* not policy: not kept */
	proto_ctx_set(&other, PROTO_CTX_BREAK_MS, 100);
	call.declared = &declared;
	circuit_table_record_failure(table, "a", &call, &v1, NULL);
	call.declared = &other;
	circuit_table_record_failure(table, "b", &call, &v2, NULL);
	ck_assert_ptr_eq(v1.declared, v2.declared);
	ck_assert(!proto_ctx_has(v1.declared, PROTO_CTX_NOW));
	ck_assert_int_eq(v1.declared->value[PROTO_CTX_BREAK_MS], 100);
	/* A later request's ctx never replaces what the creator declared. */
	proto_ctx_set(&other, PROTO_CTX_BREAK_MS, 5);
	circuit_table_record_failure(table, "a", &call, &v1, NULL);
	ck_assert_int_eq(circuit_table_use(table, "a", T0, &stored)->value[PROTO_CTX_BREAK_MS],
	    100);
	circuit_table_stats(table, &st);
	ck_assert_uint_eq(st.policies, 1);
	circuit_table_delete(table, "a");
	circuit_table_delete(table, "b");
	circuit_table_stats(table, &st);
	ck_assert_uint_eq(st.policies, 0);
}
END_TEST

START_TEST(restore_keeps_snapshot_and_hold)
{
	cb_policy p = policy();
	ct_view in, out;

	memset(&in, 0, sizeof in);
	in.snap.state = CB_STATE_OPEN;
	in.snap.failure_count = 3;
	in.snap.last_failure_at = T0 - 5;
	in.snap.opened_at = T0;
	in.totals.failures = 7;
	in.hold.held = true;
	in.hold.state = CB_STATE_OPEN;
	in.hold.since = T0;
	in.hold.until = CB_TIME_NONE;
	in.hold.by_uid = 1000;
	in.hold.by_user = "alice";
	in.hold.reason = "incident";
	ck_assert_int_eq(circuit_table_restore(table, "r", &in, T0), CT_OK);
	out = view_of("r", T0 + 100000);
	ck_assert_int_eq(out.snap.state, CB_STATE_OPEN);
	ck_assert_int_eq(out.snap.opened_at, T0);
	ck_assert_uint_eq(out.totals.failures, 7);
	ck_assert(out.hold.held);
	ck_assert_str_eq(out.hold.reason, "incident");
	(void)p;
}
END_TEST

START_TEST(slot_tokens_look_random_and_differ)
{
	cb_policy p = policy();
	circuit_table *other = circuit_table_new(10, random_instance());
	ct_slot_grant g1, g2;
	bool acquired;

	ck_assert_int_eq(acquire(table, "a", &p, T0, NULL, &acquired, &g1), CT_OK);
	ck_assert_int_eq(acquire(other, "a", &p, T0, NULL, &acquired, &g2), CT_OK);
	ck_assert_str_ne(g1.token, g2.token);
	ck_assert_uint_lt(strlen(g1.token), CT_TOKEN_SIZE);
	/* Not a counter from zero: the instance id leads the token. */
	ck_assert(strncmp(g1.token, "0000000000000000", 16) != 0 ||
	    strncmp(g2.token, "0000000000000000", 16) != 0);
	circuit_table_free(other);
}
END_TEST

/* Protocol 3: tickets bound what is in flight; trials need a trial slot
 * and a ticket; an owner's tickets go back at once; expired ones free on
 * the request's clock; a copy's restore keeps them. */
START_TEST(tickets_bound_in_flight)
{
	cb_policy p = policy();
	ct_owner owner = { 0 };
	ct_call call = at(&p, T0);
	ct_allow a;
	ct_view v;
	char first[CT_TOKEN_SIZE];

	p.max_concurrent = 2;
	p.half_open_max = 5;
	call.owner = &owner;
	for (int i = 0; i < 2; i++) {
		ck_assert_int_eq(circuit_table_allow(table, "t", &call, &a, &v, NULL), CT_OK);
		ck_assert(a.allowed && a.has_permit);
		ck_assert_int_eq(a.permit.expires_at, T0 + 500);
		if (i == 0)
			memcpy(first, a.permit.token, sizeof first);
	}
	ck_assert_uint_eq(v.in_flight, 2);
	ck_assert_int_eq(circuit_table_allow(table, "t", &call, &a, &v, NULL), CT_OK);
	ck_assert(!a.allowed);
	ck_assert_int_eq(a.reason, CT_REFUSED_CONCURRENCY);
	ck_assert_uint_eq(a.in_flight, 2);
	ck_assert_uint_eq(v.totals.rejected_concurrency, 1);
	ck_assert_uint_eq(v.totals.rejected, 0);
	/* A waiting caller's refusal is not counted (it counts its end). */
	call.wait = true;
	ck_assert_int_eq(circuit_table_allow(table, "t", &call, &a, &v, NULL), CT_OK);
	ck_assert_uint_eq(v.totals.rejected_concurrency, 1);
	circuit_table_count_waited(table, "t");
	ck_assert_uint_eq(view_of("t", T0).totals.rejected_concurrency, 2);
	call.wait = false;
	/* A copy refreshed (restore) keeps its tickets and its own counts. */
	v = view_of("t", T0);
	v.totals.rejected_concurrency = 0;
	ck_assert_int_eq(circuit_table_restore(table, "t", &v, T0), CT_OK);
	v = view_of("t", T0);
	ck_assert_uint_eq(v.in_flight, 2);
	ck_assert_uint_eq(v.totals.rejected_concurrency, 2);
	ck_assert(circuit_table_release_slot(table, "t", first, T0 + 1));
	ck_assert_uint_eq(view_of("t", T0 + 1).in_flight, 1);
	/* The owner closes: its last ticket goes back. */
	circuit_table_release_owner(table, &owner);
	ck_assert_uint_eq(view_of("t", T0 + 1).in_flight, 0);
	/* Expired on the request's clock: free again. */
	call.owner = NULL;
	for (int i = 0; i < 2; i++)
		ck_assert_int_eq(circuit_table_allow(table, "t", &call, &a, NULL, NULL), CT_OK);
	call.now = T0 + 499;
	ck_assert_int_eq(circuit_table_allow(table, "t", &call, &a, NULL, NULL), CT_OK);
	ck_assert(!a.allowed);
	call.now = T0 + 500;
	ck_assert_int_eq(circuit_table_allow(table, "t", &call, &a, NULL, NULL), CT_OK);
	ck_assert(a.allowed);
	/* half_open: a trial slot is free but no ticket. */
	trip("t", &p, T0 + 600);
	call.now = T0 + 1600;
	for (int i = 0; i < 2; i++) {
		ck_assert_int_eq(circuit_table_allow(table, "t", &call, &a, NULL, NULL), CT_OK);
		ck_assert(a.allowed && a.has_permit && a.state == CB_STATE_HALF_OPEN);
	}
	ck_assert_int_eq(circuit_table_allow(table, "t", &call, &a, NULL, NULL), CT_OK);
	ck_assert(!a.allowed && a.state == CB_STATE_HALF_OPEN);
	ck_assert_int_eq(a.reason, CT_REFUSED_CONCURRENCY);
}
END_TEST

/* §3's rule over the request's clock, and first attempts never refused. */
START_TEST(retry_budget_rule)
{
	cb_policy p = policy();
	ct_call call = at(&p, T0);
	ct_allow a;
	ct_view v;

	p.retry_budget_percent = 50;
	p.retry_min_per_s = 0;
	for (int i = 0; i < 4; i++)
		ck_assert_int_eq(circuit_table_allow(table, "r", &call, &a, NULL, NULL), CT_OK);
	call.retry = true;
	call.now = T0 + 3500;
	for (int i = 0; i < 2; i++) {
		ck_assert_int_eq(circuit_table_allow(table, "r", &call, &a, NULL, NULL), CT_OK);
		ck_assert(a.allowed);
	}
	ck_assert_int_eq(circuit_table_allow(table, "r", &call, &a, &v, NULL), CT_OK);
	ck_assert(!a.allowed);
	ck_assert_int_eq(a.reason, CT_REFUSED_RETRY_BUDGET);
	/* The retries of second T0/1000 + 3 leave at T0 + 13000. */
	ck_assert_int_eq(a.retry_after_ms, 13000 - 3500);
	ck_assert_uint_eq(v.totals.retries, 2);
	ck_assert_uint_eq(v.totals.rejected_retry, 1);
	/* A waiter's attempt again is not judged by the budget twice. */
	call.again = true;
	ck_assert_int_eq(circuit_table_allow(table, "r", &call, &a, NULL, NULL), CT_OK);
	ck_assert(a.allowed);
	call.again = false;
	call.retry = false;
	ck_assert_int_eq(circuit_table_allow(table, "r", &call, &a, NULL, NULL), CT_OK);
	ck_assert(a.allowed);
	/* Ten seconds on: the first attempts of T0 left too, so no retry. */
	call.retry = true;
	call.now = T0 + 10000;
	ck_assert_int_eq(circuit_table_allow(table, "r", &call, &a, NULL, NULL), CT_OK);
	ck_assert(!a.allowed);
	ck_assert_int_eq(a.retry_after_ms, 3000);
}
END_TEST

/* ---- counted successes: in bulk as one by one ------------------------- */

/* check's assertions write a mark each (a system call): these loops
 * assert only what failed. */
#define CHECK_MSG(cond, ...)                                                                       \
	do {                                                                                       \
		if (!(cond))                                                                       \
			ck_abort_msg(__VA_ARGS__);                                                 \
	} while (0)
#define CHECK_OK(expr) CHECK_MSG((expr) == CT_OK, "%s failed", #expr)

/* A random policy of one of the rules a counted success meets. */
static cb_policy
random_policy(uint64_t *rng)
{
	cb_policy p;

	breaker_policy_default(&p);
	p.failure_threshold = 1 + (int64_t)test_below(rng, 5);
	p.success_threshold = 1 + (int64_t)test_below(rng, 5);
	p.break_ms = 500 + (int64_t)test_below(rng, 2500);
	p.slot_ttl_ms = p.break_ms;
	p.half_open_max = 1 + (int64_t)test_below(rng, 3);
	if (test_below(rng, 3) == 0)
		p.max_gap_ms = 100 + (int64_t)test_below(rng, 2000);
	switch (test_below(rng, 3)) {
	case 0:
		p.trip = CB_TRIP_CONSECUTIVE;
		break;
	case 1:
		p.trip = CB_TRIP_RATE;
		p.window = CB_WINDOW_COUNT;
		p.window_size = 1 + (int64_t)test_below(rng, 30);
		break;
	default:
		p.trip = CB_TRIP_RATE;
		p.window = CB_WINDOW_TIME;
		p.window_size = CB_WINDOW_TIME_MIN + (int64_t)test_below(rng, 4000);
		break;
	}
	p.minimum_calls = 1 + (int64_t)test_below(rng, 40);
	p.failure_rate = 1 + (int64_t)test_below(rng, 100);
	if (test_below(rng, 2) == 0) {
		p.slow_call_ms = 100;
		p.slow_call_rate = 1 + (int64_t)test_below(rng, 100);
	}
	if (test_below(rng, 4) == 0) {
		p.min_reporters = 2 + (int64_t)test_below(rng, 2);
		p.reporter_window_ms = 500 + (int64_t)test_below(rng, 3000);
	}
	return p;
}

/* Two views of one circuit alike (the pointers' contents compared). */
static void
views_equal(const ct_view *a, const ct_view *b, const char *where, int step)
{
	CHECK_MSG(a->stored == b->stored, "%s %d: stored", where, step);
	CHECK_MSG(memcmp(&a->snap, &b->snap, sizeof a->snap) == 0,
	    "%s %d: snapshot %s/%lld/%lld vs %s/%lld/%lld", where, step,
	    breaker_state_name(a->snap.state), (long long)a->snap.failure_count,
	    (long long)a->snap.success_count, breaker_state_name(b->snap.state),
	    (long long)b->snap.failure_count, (long long)b->snap.success_count);
	CHECK_MSG(memcmp(&a->totals, &b->totals, sizeof a->totals) == 0, "%s %d: totals", where,
	    step);
	CHECK_MSG(a->has_window == b->has_window, "%s %d: window", where, step);
	CHECK_MSG(a->window.calls == b->window.calls && a->window.failures == b->window.failures &&
		a->window.slow == b->window.slow,
	    "%s %d: window %u/%u/%u vs %u/%u/%u", where, step, a->window.calls, a->window.failures,
	    a->window.slow, b->window.calls, b->window.failures, b->window.slow);
	CHECK_MSG((a->transitions == NULL) == (b->transitions == NULL), "%s %d: transitions", where,
	    step);
	if (a->transitions != NULL)
		CHECK_MSG(memcmp(a->transitions, b->transitions,
			      sizeof a->transitions[0] * CB_STATE_COUNT * CB_STATE_COUNT) == 0,
		    "%s %d: transitions", where, step);
	CHECK_MSG((a->reporters == NULL) == (b->reporters == NULL), "%s %d: reporters", where,
	    step);
	if (a->reporters != NULL) {
		CHECK_MSG(a->reporters->slots == b->reporters->slots, "%s %d: reporters", where,
		    step);
		CHECK_MSG(memcmp(a->reporters->r, b->reporters->r,
			      sizeof a->reporters->r[0] * a->reporters->slots) == 0,
		    "%s %d: reporters", where, step);
	}
	CHECK_MSG(a->hold.held == b->hold.held, "%s %d: hold", where, step);
}

/* The change a run of calls made, as one call reports it: the first
 * `from`, the last change's `to` and reason. */
static void
change_add(ct_change *run, const ct_change *one, bool first)
{
	if (first)
		run->from = one->from;
	if (first || one->reason != CB_REASON_NONE) {
		run->to = one->to;
		run->reason = one->reason;
	}
}

/* How many successes a counted step carries: mostly about a window's
 * worth, at times many. */
static uint64_t
random_count(uint64_t *rng)
{
	switch (test_below(rng, 8)) {
	case 0:
		return 1;
	case 1:
		return 1 + test_below(rng, 2000);
	case 2:
		return 1 + test_below(rng, 300);
	case 3:
	case 4:
		return 2 + test_below(rng, 4);
	default:
		return 1 + test_below(rng, 60);
	}
}

/* Thousands of random sequences over the rules: a record_successes of N
 * leaves the circuit as N record_success calls do (and answers the same
 * view and change), whatever came before: failures, allows into
 * half_open, holds, time passing. */
START_TEST(counted_successes_equal_one_by_one)
{
	uint64_t rng = 0xc0a7ed5;
	const int sequences = 3000, steps = 40;
	uint64_t counted = 0;

	for (int seq = 0; seq < sequences; seq++) {
		circuit_table *one = circuit_table_new(10, 1), *bulk = circuit_table_new(10, 1);
		cb_policy p = random_policy(&rng);
		int64_t now = T0 + (int64_t)test_below(&rng, 1000);

		ck_assert_ptr_nonnull(one);
		ck_assert_ptr_nonnull(bulk);
		for (int step = 0; step < steps; step++) {
			ct_call call = at(&p, now);
			ct_view va, vb;
			ct_change ca, cb, c1;
			ct_allow aa, ab;
			ct_hold_request hold = { .ttl_ms = 0 };
			uint64_t n;
			size_t what = test_below(&rng, 16);

			call.reporter = 1 + (int64_t)test_below(&rng, 3);
			call.duration_ms = test_below(&rng, 3) == 0
			    ? 100 + (int64_t)test_below(&rng, 50)
			    : (int64_t)test_below(&rng, 100);
			if (what < 7) {
				n = random_count(&rng);
				counted += n;
				CHECK_OK(
				    circuit_table_record_successes(bulk, "c", &call, n, &vb, &cb));
				for (uint64_t i = 0; i < n; i++) {
					CHECK_OK(circuit_table_record_success(one, "c", &call, &va,
					    &c1));
					change_add(&ca, &c1, i == 0);
				}
				CHECK_MSG(ca.from == cb.from && ca.to == cb.to &&
					ca.reason == cb.reason,
				    "seq %d step %d: change %d->%d (%d) vs %d->%d (%d), n %llu",
				    seq, step, ca.from, ca.to, ca.reason, cb.from, cb.to, cb.reason,
				    (unsigned long long)n);
			} else if (what < 11) {
				CHECK_OK(circuit_table_record_failure(bulk, "c", &call, &vb, NULL));
				CHECK_OK(circuit_table_record_failure(one, "c", &call, &va, NULL));
			} else if (what < 13) {
				CHECK_OK(circuit_table_allow(bulk, "c", &call, &ab, &vb, NULL));
				CHECK_OK(circuit_table_allow(one, "c", &call, &aa, &va, NULL));
				CHECK_MSG(aa.allowed == ab.allowed, "allow");
			} else if (what == 13 && test_below(&rng, 4) == 0) {
				/* An operator's hold (open or closed), or its end. */
				cb_state s = test_below(&rng, 2) ? CB_STATE_OPEN : CB_STATE_CLOSED;

				hold.ttl_ms = (int64_t)test_below(&rng, 3000);
				CHECK_OK(
				    circuit_table_set_state(bulk, "c", s, &hold, &call, &vb, NULL));
				CHECK_OK(
				    circuit_table_set_state(one, "c", s, &hold, &call, &va, NULL));
			} else if (what == 14 && test_below(&rng, 3) == 0) {
				bool released;

				circuit_table_release(bulk, "c", &call, &released, &vb, NULL);
				circuit_table_release(one, "c", &call, &released, &va, NULL);
			} else {
				now += (int64_t)test_below(&rng, 1500);
				circuit_table_get(bulk, "c", now, &vb, NULL);
				circuit_table_get(one, "c", now, &va, NULL);
			}
			views_equal(&va, &vb, "counted", seq * 1000 + step);
		}
		circuit_table_free(one);
		circuit_table_free(bulk);
	}
	/* (The sequences did count: a case that stopped early would not.) */
	ck_assert_uint_gt(counted, 100000);
}
END_TEST

/* The bulk path's cost: a count window takes fewer pushes than its size
 * (or is written whole), a time window one, whatever the count (a million
 * here, 5000 times: instant). */
START_TEST(counted_successes_do_not_loop_count_times)
{
	cb_policy p = policy();
	ct_call call = at(&p, T0);
	ct_view v;

	p.trip = CB_TRIP_RATE;
	p.window = CB_WINDOW_TIME;
	p.window_size = 60000;
	ck_assert_int_eq(circuit_table_record_failure(table, "t", &call, &v, NULL), CT_OK);
	for (int i = 0; i < 5000; i++)
		ck_assert_int_eq(circuit_table_record_successes(table, "t", &call,
				     PROTO_SUCCESS_COUNT_MAX, &v, NULL),
		    CT_OK);
	ck_assert_uint_eq(v.totals.successes, 5000 * (uint64_t)PROTO_SUCCESS_COUNT_MAX);
	/* The window's 32-bit counts stop at CB_WINDOW_CALLS_MAX, not wrap. */
	ck_assert_uint_eq(v.window.calls, CB_WINDOW_CALLS_MAX);
	ck_assert_uint_eq(v.window.failures, 1);
	ck_assert_int_eq(v.snap.state, CB_STATE_CLOSED);
	/* The largest count window, replaced whole by each line. */
	p.window = CB_WINDOW_COUNT;
	p.window_size = CB_WINDOW_COUNT_MAX;
	ck_assert_int_eq(circuit_table_record_failure(table, "c", &call, &v, NULL), CT_OK);
	for (int i = 0; i < 5000; i++)
		ck_assert_int_eq(circuit_table_record_successes(table, "c", &call,
				     PROTO_SUCCESS_COUNT_MAX, &v, NULL),
		    CT_OK);
	ck_assert_uint_eq(v.window.calls, CB_WINDOW_COUNT_MAX);
	ck_assert_uint_eq(v.window.failures, 0);
	ck_assert_uint_eq(v.totals.successes, 5000 * (uint64_t)PROTO_SUCCESS_COUNT_MAX);
}
END_TEST

static Suite *
table_suite(void)
{
	Suite *suite = suite_create("circuit table");
	TCase *tc = tcase_create("table");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, writes_create_reads_do_not);
	tcase_add_test(tc, tickets_bound_in_flight);
	tcase_add_test(tc, retry_budget_rule);
	tcase_add_test(tc, counted_successes_equal_one_by_one);
	tcase_add_test(tc, counted_successes_do_not_loop_count_times);
	tcase_add_test(tc, idle_closed_circuits_are_reclaimed);
	tcase_add_test(tc, capacity_reclaims_longest_idle_first);
	tcase_add_test(tc, owner_release_frees_all_its_slots);
	tcase_add_test(tc, max_slots_bounds_all_circuits);
	tcase_add_test(tc, allow_closed_open_and_elapsed);
	tcase_add_test(tc, held_open_stays_open_until_ttl);
	tcase_add_test(tc, held_closed_never_opens_and_release_resets);
	tcase_add_test(tc, expire_holds_and_pinned_walk);
	tcase_add_test(tc, declared_policies_are_interned);
	tcase_add_test(tc, renew_policies_calls_renewed_after);
	tcase_add_test(tc, restore_keeps_snapshot_and_hold);
	tcase_add_test(tc, slot_tokens_look_random_and_differ);
	suite_add_tcase(suite, tc);
	return suite;
}

int
main(void)
{
	return check_run(contract_suite(&memory_impl), table_suite(), NULL);
}
