/*
 * check_circuit_table.c — the store contract suite against the in-memory
 * circuit table, plus what only the table has: slot owners, allow, the
 * storage rule and its counters.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "check-run.h"
#include "circuit-table.h"
#include "store-contract.h"

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
	case CT_NOMEM:
		break;
	}
	return CONTRACT_ERROR;
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
	circuit_table_get(store, name, out);
	return CONTRACT_OK;
}

static contract_status
mem_record_success(void *store, const char *name, const cb_policy *policy, int64_t now,
    cb_snapshot *out)
{
	return status_of(circuit_table_record_success(store, name, policy, now, out, NULL));
}

static contract_status
mem_record_failure(void *store, const char *name, const cb_policy *policy, int64_t now,
    cb_snapshot *out)
{
	return status_of(circuit_table_record_failure(store, name, policy, now, out, NULL));
}

static contract_status
mem_cas(void *store, const char *name, cb_state from, cb_state to, const cb_policy *policy,
    int64_t now, bool *applied, cb_snapshot *out)
{
	return status_of(circuit_table_cas(store, name, from, to, now, applied, out, NULL));
}

static contract_status
mem_set_state(void *store, const char *name, cb_state state, const cb_policy *policy, int64_t now,
    cb_snapshot *out)
{
	return status_of(circuit_table_set_state(store, name, state, now, out, NULL));
}

static contract_status
mem_acquire_slot(void *store, const char *name, const cb_policy *policy, int64_t now,
    bool *acquired, char token[CONTRACT_TOKEN_SIZE], int64_t *expires_at)
{
	ct_slot_grant grant;
	ct_status status =
	    circuit_table_acquire_slot(store, name, policy, now, NULL, acquired, &grant);

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

static void
trip(const char *name, const cb_policy *p, int64_t now)
{
	cb_snapshot s;

	for (int64_t i = 0; i < p->failure_threshold; i++)
		ck_assert_int_eq(circuit_table_record_failure(table, name, p, now, &s, NULL),
		    CT_OK);
	ck_assert_int_eq(s.state, CB_STATE_OPEN);
}

static uint64_t
stored_circuits(void)
{
	ct_stats st;

	circuit_table_stats(table, &st);
	return st.circuits;
}

START_TEST(reads_and_noop_writes_store_nothing)
{
	cb_policy p = policy();
	cb_snapshot s;
	ct_allow allow;

	ck_assert(!circuit_table_get(table, "a", &s));
	ck_assert_int_eq(circuit_table_record_success(table, "a", &p, T0, &s, NULL), CT_OK);
	ck_assert_int_eq(circuit_table_allow(table, "a", &p, T0, NULL, &allow, NULL), CT_OK);
	ck_assert(allow.allowed);
	ck_assert_int_eq(stored_circuits(), 0);
	ck_assert_int_eq(circuit_table_record_failure(table, "a", &p, T0, &s, NULL), CT_OK);
	ck_assert_int_eq(stored_circuits(), 1);
}
END_TEST

START_TEST(circuit_back_to_initial_is_dropped)
{
	cb_policy p = policy();
	cb_snapshot s;
	bool acquired;
	ct_slot_grant grant;

	ck_assert_int_eq(circuit_table_set_state(table, "x", CB_STATE_OPEN, T0, &s, NULL), CT_OK);
	ck_assert_int_eq(stored_circuits(), 1);
	ck_assert_int_eq(circuit_table_set_state(table, "x", CB_STATE_CLOSED, T0, &s, NULL), CT_OK);
	ck_assert_int_eq(stored_circuits(), 0);
	/* A slot keeps an otherwise initial circuit stored until released. */
	ck_assert_int_eq(circuit_table_acquire_slot(table, "y", &p, T0, NULL, &acquired, &grant),
	    CT_OK);
	ck_assert(acquired);
	ck_assert_int_eq(stored_circuits(), 1);
	ck_assert(circuit_table_release_slot(table, "y", grant.token, T0 + 1));
	ck_assert_int_eq(stored_circuits(), 0);
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
	ck_assert_int_eq(circuit_table_acquire_slot(table, "a", &p, T0, &conn1, &acquired, &grant),
	    CT_OK);
	ck_assert_int_eq(circuit_table_acquire_slot(table, "a", &p, T0, &conn1, &acquired, &grant),
	    CT_OK);
	ck_assert_int_eq(circuit_table_acquire_slot(table, "b", &p, T0, &conn1, &acquired, &grant),
	    CT_OK);
	ck_assert_int_eq(circuit_table_acquire_slot(table, "a", &p, T0, &conn2, &acquired, &grant),
	    CT_OK);
	ck_assert(acquired);
	ck_assert_int_eq(circuit_table_acquire_slot(table, "a", &p, T0, &conn2, &acquired, &grant),
	    CT_OK);
	ck_assert(!acquired);
	circuit_table_release_owner(table, &conn1);
	ck_assert_ptr_null(conn1.slots);
	circuit_table_stats(table, &st);
	ck_assert_int_eq(st.slots, 1);
	/* conn2's slot survives; two of "a"'s three are free again. */
	ck_assert_int_eq(circuit_table_acquire_slot(table, "a", &p, T0, &conn2, &acquired, &grant),
	    CT_OK);
	ck_assert(acquired);
	/* A slot released by token leaves its owner's list consistent. */
	ck_assert(circuit_table_release_slot(table, "a", grant.token, T0));
	circuit_table_release_owner(table, &conn2);
	circuit_table_stats(table, &st);
	ck_assert_int_eq(st.slots, 0);
	ck_assert_int_eq(st.circuits, 0);
}
END_TEST

START_TEST(allow_closed_open_and_elapsed)
{
	cb_policy p = policy();
	ct_allow a;
	ct_change change;

	trip("c", &p, T0);
	ck_assert_int_eq(circuit_table_allow(table, "c", &p, T0 + 400, NULL, &a, &change), CT_OK);
	ck_assert(!a.allowed);
	ck_assert_int_eq(a.state, CB_STATE_OPEN);
	ck_assert_int_eq(a.retry_after_ms, 600);
	ck_assert_int_eq(change.reason, CB_REASON_NONE);
	/* Break elapsed: moves to half_open once and hands out one permit. */
	ck_assert_int_eq(circuit_table_allow(table, "c", &p, T0 + 1000, NULL, &a, &change), CT_OK);
	ck_assert(a.allowed);
	ck_assert(a.has_permit);
	ck_assert_int_eq(a.state, CB_STATE_HALF_OPEN);
	ck_assert_int_eq(a.permit.expires_at, T0 + 1500);
	ck_assert_int_eq(change.from, CB_STATE_OPEN);
	ck_assert_int_eq(change.to, CB_STATE_HALF_OPEN);
	ck_assert_int_eq(change.reason, CB_REASON_BREAK_ELAPSED);
	/* The next caller finds half_open with no free slot: refused, with the
	 * time until the held permit expires as the hint; no new transition. */
	ck_assert_int_eq(circuit_table_allow(table, "c", &p, T0 + 1100, NULL, &a, &change), CT_OK);
	ck_assert(!a.allowed);
	ck_assert(!a.has_permit);
	ck_assert_int_eq(a.state, CB_STATE_HALF_OPEN);
	ck_assert_int_eq(a.retry_after_ms, 400);
	ck_assert_int_eq(change.reason, CB_REASON_NONE);
	/* An expired permit frees the slot for the next trial. */
	ck_assert_int_eq(circuit_table_allow(table, "c", &p, T0 + 1500, NULL, &a, NULL), CT_OK);
	ck_assert(a.allowed);
	/* Closed: allowed without a permit. */
	ck_assert_int_eq(circuit_table_allow(table, "fresh", &p, T0, NULL, &a, NULL), CT_OK);
	ck_assert(a.allowed);
	ck_assert(!a.has_permit);
	ck_assert_int_eq(a.state, CB_STATE_CLOSED);
}
END_TEST

START_TEST(counters_count_limits)
{
	cb_policy p = policy();
	circuit_table *small = circuit_table_new(1, random_instance());
	cb_snapshot s;
	bool acquired;
	ct_slot_grant grant;
	ct_stats st;

	ck_assert_int_eq(circuit_table_record_failure(small, "a", &p, T0, &s, NULL), CT_OK);
	ck_assert_int_eq(circuit_table_record_failure(small, "b", &p, T0, &s, NULL), CT_CAPACITY);
	ck_assert_int_eq(circuit_table_acquire_slot(small, "b", &p, T0, NULL, &acquired, &grant),
	    CT_CAPACITY);
	ck_assert_int_eq(circuit_table_acquire_slot(small, "a", &p, T0, NULL, &acquired, &grant),
	    CT_OK);
	ck_assert(!circuit_table_release_slot(small, "a", grant.token, T0 + p.slot_ttl_ms));
	circuit_table_stats(small, &st);
	ck_assert_int_eq(st.capacity_refusals, 2);
	ck_assert_int_eq(st.slots_expired, 1);
	ck_assert_int_eq(st.circuits, 1);
	/* Raising the bound lets new circuits in. */
	circuit_table_set_max_circuits(small, 2);
	ck_assert_int_eq(circuit_table_record_failure(small, "b", &p, T0, &s, NULL), CT_OK);
	circuit_table_free(small);
}
END_TEST

/* Record what foreach visits. */
static void
count_open(const char *name, const cb_snapshot *snap, void *arg)
{
	int *open = arg;

	ck_assert_ptr_nonnull(name);
	if (snap->state == CB_STATE_OPEN)
		(*open)++;
}

START_TEST(foreach_visits_stored_circuits)
{
	cb_policy p = policy();
	cb_snapshot s;
	int open = 0;

	trip("a", &p, T0);
	trip("b", &p, T0);
	ck_assert_int_eq(circuit_table_record_failure(table, "c", &p, T0, &s, NULL), CT_OK);
	circuit_table_foreach(table, count_open, &open);
	ck_assert_int_eq(open, 2);
	ck_assert_int_eq(stored_circuits(), 3);
}
END_TEST

START_TEST(slot_tokens_look_random_and_differ)
{
	cb_policy p = policy();
	circuit_table *other = circuit_table_new(10, random_instance());
	ct_slot_grant g1, g2;
	bool acquired;

	ck_assert_int_eq(circuit_table_acquire_slot(table, "a", &p, T0, NULL, &acquired, &g1),
	    CT_OK);
	ck_assert_int_eq(circuit_table_acquire_slot(other, "a", &p, T0, NULL, &acquired, &g2),
	    CT_OK);
	ck_assert_str_ne(g1.token, g2.token);
	ck_assert_uint_lt(strlen(g1.token), CT_TOKEN_SIZE);
	/* Not a counter from zero: the instance id leads the token. */
	ck_assert(strncmp(g1.token, "0000000000000000", 16) != 0 ||
	    strncmp(g2.token, "0000000000000000", 16) != 0);
	circuit_table_free(other);
}
END_TEST

static Suite *
table_suite(void)
{
	Suite *suite = suite_create("circuit table");
	TCase *tc = tcase_create("table");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, reads_and_noop_writes_store_nothing);
	tcase_add_test(tc, circuit_back_to_initial_is_dropped);
	tcase_add_test(tc, owner_release_frees_all_its_slots);
	tcase_add_test(tc, allow_closed_open_and_elapsed);
	tcase_add_test(tc, counters_count_limits);
	tcase_add_test(tc, foreach_visits_stored_circuits);
	tcase_add_test(tc, slot_tokens_look_random_and_differ);
	suite_add_tcase(suite, tc);
	return suite;
}

int
main(void)
{
	return check_run(contract_suite(&memory_impl), table_suite(), NULL);
}
