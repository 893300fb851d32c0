/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store-contract.c — the store contract suite (see store-contract.h): the
 * spec's state-machine rules and store operations, phrased only through
 * contract_impl so that every store runs the same cases.
 */
#include <stdlib.h>
#include <string.h>

#include "store-contract.h"

#define MINUTE_MS INT64_C(60000)
/* A base time well away from 0 so that "now - x" arithmetic is exercised. */
#define T0 INT64_C(1700000000000)
/* The store each case uses, made by the fixture; capacity cases make more. */
#define CONTRACT_MAX_CIRCUITS 1000

static const contract_impl *impl;
static void *store;

static void
setup(void)
{
	store = impl->create(CONTRACT_MAX_CIRCUITS);
	ck_assert_msg(store != NULL, "%s: create failed", impl->name);
}

static void
teardown(void)
{
	impl->teardown(store);
	store = NULL;
}

/* A policy with small numbers so that cases stay short. */
static cb_policy
policy_small(void)
{
	cb_policy p;

	breaker_policy_default(&p);
	p.failure_threshold = 3;
	p.success_threshold = 2;
	p.break_ms = 10000;
	p.half_open_max = 1;
	p.slot_ttl_ms = 5000;
	p.max_gap_ms = 0;
	return p;
}

static cb_snapshot
failure_at(const char *name, const cb_policy *p, int64_t now)
{
	cb_snapshot s;

	ck_assert_int_eq(impl->record_failure(store, name, p, now, &s), CONTRACT_OK);
	return s;
}

static cb_snapshot
success_at(const char *name, const cb_policy *p, int64_t now)
{
	cb_snapshot s;

	ck_assert_int_eq(impl->record_success(store, name, p, now, &s), CONTRACT_OK);
	return s;
}

static cb_snapshot
snapshot_at(const char *name, const cb_policy *p, int64_t now)
{
	cb_snapshot s;

	ck_assert_int_eq(impl->get(store, name, p, now, &s), CONTRACT_OK);
	return s;
}

static cb_snapshot
forced(const char *name, cb_state state, const cb_policy *p, int64_t now)
{
	cb_snapshot s;

	ck_assert_int_eq(impl->set_state(store, name, state, p, now, &s), CONTRACT_OK);
	return s;
}

static void
assert_initial(const cb_snapshot *s)
{
	ck_assert_int_eq(s->state, CB_STATE_CLOSED);
	ck_assert_int_eq(s->failure_count, 0);
	ck_assert_int_eq(s->success_count, 0);
	ck_assert_int_eq(s->last_failure_at, CB_TIME_NONE);
	ck_assert_int_eq(s->opened_at, CB_TIME_NONE);
}

/* Trip `name` open at `now` with p's threshold of failures. */
static cb_snapshot
trip(const char *name, const cb_policy *p, int64_t now)
{
	cb_snapshot s;

	for (int64_t i = 0; i < p->failure_threshold; i++)
		s = failure_at(name, p, now);
	ck_assert_int_eq(s.state, CB_STATE_OPEN);
	return s;
}

static bool
acquire(const char *name, const cb_policy *p, int64_t now, char *token, int64_t *expires)
{
	bool acquired = false;
	char scratch[CONTRACT_TOKEN_SIZE];
	int64_t exp_scratch;

	ck_assert_int_eq(impl->acquire_slot(store, name, p, now, &acquired,
			     token != NULL ? token : scratch,
			     expires != NULL ? expires : &exp_scratch),
	    CONTRACT_OK);
	return acquired;
}

START_TEST(initial_snapshot_for_unknown_name)
{
	cb_policy p = policy_small();
	cb_snapshot s = snapshot_at("never-seen", &p, T0);

	assert_initial(&s);
}
END_TEST

START_TEST(closed_failure_counts_and_stamps)
{
	cb_policy p = policy_small();
	cb_snapshot s = failure_at("c", &p, T0);

	ck_assert_int_eq(s.state, CB_STATE_CLOSED);
	ck_assert_int_eq(s.failure_count, 1);
	ck_assert_int_eq(s.last_failure_at, T0);
	ck_assert_int_eq(s.opened_at, CB_TIME_NONE);
	s = failure_at("c", &p, T0 + 7);
	ck_assert_int_eq(s.failure_count, 2);
	ck_assert_int_eq(s.last_failure_at, T0 + 7);
	s = snapshot_at("c", &p, T0 + 8);
	ck_assert_int_eq(s.failure_count, 2);
}
END_TEST

START_TEST(closed_opens_at_failure_threshold)
{
	cb_policy p = policy_small();
	cb_snapshot s;

	failure_at("c", &p, T0);
	s = failure_at("c", &p, T0 + 1);
	ck_assert_int_eq(s.state, CB_STATE_CLOSED);
	s = failure_at("c", &p, T0 + 2);
	ck_assert_int_eq(s.state, CB_STATE_OPEN);
	ck_assert_int_eq(s.failure_count, 3);
	ck_assert_int_eq(s.opened_at, T0 + 2);
	ck_assert_int_eq(s.last_failure_at, T0 + 2);
	ck_assert_int_eq(s.success_count, 0);
}
END_TEST

START_TEST(closed_success_resets_failures)
{
	cb_policy p = policy_small();
	cb_snapshot s;

	failure_at("c", &p, T0);
	failure_at("c", &p, T0 + 1);
	s = success_at("c", &p, T0 + 2);
	ck_assert_int_eq(s.state, CB_STATE_CLOSED);
	ck_assert_int_eq(s.failure_count, 0);
	ck_assert_int_eq(s.last_failure_at, T0 + 1);
	/* The chain starts again: two more failures do not trip. */
	failure_at("c", &p, T0 + 3);
	s = failure_at("c", &p, T0 + 4);
	ck_assert_int_eq(s.state, CB_STATE_CLOSED);
	ck_assert_int_eq(s.failure_count, 2);
}
END_TEST

START_TEST(success_on_fresh_name_reads_initial)
{
	cb_policy p = policy_small();
	cb_snapshot s = success_at("fresh", &p, T0);

	assert_initial(&s);
	s = snapshot_at("fresh", &p, T0);
	assert_initial(&s);
}
END_TEST

START_TEST(open_success_is_a_straggler)
{
	cb_policy p = policy_small();
	cb_snapshot before = trip("c", &p, T0);
	cb_snapshot s = success_at("c", &p, T0 + 100);

	ck_assert_int_eq(s.state, CB_STATE_OPEN);
	ck_assert_int_eq(s.failure_count, before.failure_count);
	ck_assert_int_eq(s.success_count, 0);
	ck_assert_int_eq(s.opened_at, before.opened_at);
	ck_assert_int_eq(s.last_failure_at, before.last_failure_at);
}
END_TEST

START_TEST(open_failure_never_extends_break)
{
	cb_policy p = policy_small();
	cb_snapshot before = trip("c", &p, T0);
	cb_snapshot s = failure_at("c", &p, T0 + 9000);

	ck_assert_int_eq(s.state, CB_STATE_OPEN);
	ck_assert_int_eq(s.opened_at, T0);
	ck_assert_int_eq(s.last_failure_at, T0 + 9000);
	ck_assert_int_eq(s.failure_count, before.failure_count);
	/* The stored circuit keeps the original window too. */
	s = snapshot_at("c", &p, T0 + 9001);
	ck_assert_int_eq(s.opened_at, T0);
}
END_TEST

START_TEST(half_open_successes_close)
{
	cb_policy p = policy_small();
	cb_snapshot s;

	trip("c", &p, T0);
	forced("c", CB_STATE_HALF_OPEN, &p, T0 + 10000);
	s = success_at("c", &p, T0 + 10001);
	ck_assert_int_eq(s.state, CB_STATE_HALF_OPEN);
	ck_assert_int_eq(s.success_count, 1);
	s = success_at("c", &p, T0 + 10002);
	ck_assert_int_eq(s.state, CB_STATE_CLOSED);
	ck_assert_int_eq(s.success_count, 0);
	ck_assert_int_eq(s.failure_count, 0);
	ck_assert_int_eq(s.opened_at, CB_TIME_NONE);
	ck_assert_int_eq(s.last_failure_at, T0);
}
END_TEST

START_TEST(half_open_failure_reopens)
{
	cb_policy p = policy_small();
	cb_snapshot s;

	trip("c", &p, T0);
	forced("c", CB_STATE_HALF_OPEN, &p, T0 + 10000);
	success_at("c", &p, T0 + 10001);
	s = failure_at("c", &p, T0 + 10002);
	ck_assert_int_eq(s.state, CB_STATE_OPEN);
	ck_assert_int_eq(s.opened_at, T0 + 10002);
	ck_assert_int_eq(s.last_failure_at, T0 + 10002);
	ck_assert_int_eq(s.success_count, 0);
}
END_TEST

/* The table: failures at 0 s, 50 s, 100 s continue a run; one at
 * 180 s (80 s after the last, past a 60 s gap) starts again at 1. */
START_TEST(max_gap_table)
{
	cb_policy p = policy_small();
	cb_snapshot s;

	p.failure_threshold = 10;
	p.max_gap_ms = MINUTE_MS;
	ck_assert_int_eq(failure_at("g", &p, T0).failure_count, 1);
	ck_assert_int_eq(failure_at("g", &p, T0 + 50000).failure_count, 2);
	ck_assert_int_eq(failure_at("g", &p, T0 + 100000).failure_count, 3);
	s = failure_at("g", &p, T0 + 180000);
	ck_assert_int_eq(s.failure_count, 1);
	ck_assert_int_eq(s.last_failure_at, T0 + 180000);
	/* Exactly max_gap_ms later still continues. */
	ck_assert_int_eq(failure_at("g", &p, T0 + 180000 + MINUTE_MS).failure_count, 2);
	ck_assert_int_eq(failure_at("g", &p, T0 + 180001 + 2 * MINUTE_MS).failure_count, 1);
}
END_TEST

START_TEST(no_max_gap_chain_always_continues)
{
	cb_policy p = policy_small();

	p.failure_threshold = 10;
	failure_at("g", &p, T0);
	ck_assert_int_eq(failure_at("g", &p, T0 + 1000 * MINUTE_MS).failure_count, 2);
}
END_TEST

START_TEST(max_gap_reset_can_still_trip)
{
	cb_policy p = policy_small();
	cb_snapshot s;

	p.max_gap_ms = 1000;
	failure_at("g", &p, T0);
	failure_at("g", &p, T0 + 500);
	s = failure_at("g", &p, T0 + 5000); /* gap broken: 1 */
	ck_assert_int_eq(s.state, CB_STATE_CLOSED);
	failure_at("g", &p, T0 + 5100);
	s = failure_at("g", &p, T0 + 5200);
	ck_assert_int_eq(s.state, CB_STATE_OPEN);
	ck_assert_int_eq(s.opened_at, T0 + 5200);
}
END_TEST

START_TEST(forced_states)
{
	cb_policy p = policy_small();
	cb_snapshot s;

	failure_at("f", &p, T0);
	s = forced("f", CB_STATE_OPEN, &p, T0 + 10);
	ck_assert_int_eq(s.state, CB_STATE_OPEN);
	ck_assert_int_eq(s.opened_at, T0 + 10);
	ck_assert_int_eq(s.failure_count, 1);
	ck_assert_int_eq(s.success_count, 0);
	s = forced("f", CB_STATE_HALF_OPEN, &p, T0 + 20);
	ck_assert_int_eq(s.state, CB_STATE_HALF_OPEN);
	ck_assert_int_eq(s.success_count, 0);
	ck_assert_int_eq(s.opened_at, T0 + 10);
	s = success_at("f", &p, T0 + 21);
	ck_assert_int_eq(s.success_count, 1);
	s = forced("f", CB_STATE_HALF_OPEN, &p, T0 + 22);
	ck_assert_int_eq(s.success_count, 0);
	s = forced("f", CB_STATE_CLOSED, &p, T0 + 30);
	ck_assert_int_eq(s.state, CB_STATE_CLOSED);
	ck_assert_int_eq(s.failure_count, 0);
	ck_assert_int_eq(s.success_count, 0);
	ck_assert_int_eq(s.opened_at, CB_TIME_NONE);
	ck_assert_int_eq(s.last_failure_at, T0);
	s = snapshot_at("f", &p, T0 + 31);
	ck_assert_int_eq(s.state, CB_STATE_CLOSED);
	ck_assert_int_eq(s.last_failure_at, T0);
}
END_TEST

START_TEST(force_open_on_fresh_name)
{
	cb_policy p = policy_small();
	cb_snapshot s = forced("new", CB_STATE_OPEN, &p, T0);

	ck_assert_int_eq(s.state, CB_STATE_OPEN);
	ck_assert_int_eq(s.opened_at, T0);
	s = snapshot_at("new", &p, T0 + 1);
	ck_assert_int_eq(s.state, CB_STATE_OPEN);
}
END_TEST

START_TEST(cas_applies_once)
{
	cb_policy p = policy_small();
	cb_snapshot s;
	bool applied;

	trip("c", &p, T0);
	ck_assert_int_eq(impl->cas(store, "c", CB_STATE_OPEN, CB_STATE_HALF_OPEN, &p, T0 + 10000,
			     &applied, &s),
	    CONTRACT_OK);
	ck_assert(applied);
	ck_assert_int_eq(s.state, CB_STATE_HALF_OPEN);
	ck_assert_int_eq(s.success_count, 0);
	/* The loser of the race sees "not applied" and the current snapshot. */
	ck_assert_int_eq(impl->cas(store, "c", CB_STATE_OPEN, CB_STATE_HALF_OPEN, &p, T0 + 10000,
			     &applied, &s),
	    CONTRACT_OK);
	ck_assert(!applied);
	ck_assert_int_eq(s.state, CB_STATE_HALF_OPEN);
	ck_assert_int_eq(s.opened_at, T0);
}
END_TEST

START_TEST(cas_to_open_and_closed_force_rules)
{
	cb_policy p = policy_small();
	cb_snapshot s;
	bool applied;

	failure_at("c", &p, T0);
	ck_assert_int_eq(impl->cas(store, "c", CB_STATE_CLOSED, CB_STATE_OPEN, &p, T0 + 5, &applied,
			     &s),
	    CONTRACT_OK);
	ck_assert(applied);
	ck_assert_int_eq(s.state, CB_STATE_OPEN);
	ck_assert_int_eq(s.opened_at, T0 + 5);
	ck_assert_int_eq(impl->cas(store, "c", CB_STATE_OPEN, CB_STATE_CLOSED, &p, T0 + 6, &applied,
			     &s),
	    CONTRACT_OK);
	ck_assert(applied);
	ck_assert_int_eq(s.state, CB_STATE_CLOSED);
	ck_assert_int_eq(s.failure_count, 0);
	ck_assert_int_eq(s.opened_at, CB_TIME_NONE);
}
END_TEST

START_TEST(cas_on_unknown_name_sees_initial)
{
	cb_policy p = policy_small();
	cb_snapshot s;
	bool applied = true;

	ck_assert_int_eq(impl->cas(store, "nobody", CB_STATE_OPEN, CB_STATE_CLOSED, &p, T0,
			     &applied, &s),
	    CONTRACT_OK);
	ck_assert(!applied);
	assert_initial(&s);
}
END_TEST

START_TEST(slots_bounded_by_half_open_max)
{
	cb_policy p = policy_small();
	char t1[CONTRACT_TOKEN_SIZE], t2[CONTRACT_TOKEN_SIZE];
	int64_t expires;

	p.half_open_max = 2;
	ck_assert(acquire("s", &p, T0, t1, &expires));
	ck_assert_int_eq(expires, T0 + p.slot_ttl_ms);
	ck_assert(acquire("s", &p, T0 + 1, t2, NULL));
	ck_assert_str_ne(t1, t2);
	ck_assert(!acquire("s", &p, T0 + 2, NULL, NULL));
	/* Another circuit has its own slots. */
	ck_assert(acquire("other", &p, T0 + 2, NULL, NULL));
	/* Releasing one frees exactly one. */
	ck_assert_int_eq(impl->release_slot(store, "s", t1, &p, T0 + 3), CONTRACT_OK);
	ck_assert(acquire("s", &p, T0 + 4, NULL, NULL));
	ck_assert(!acquire("s", &p, T0 + 5, NULL, NULL));
}
END_TEST

START_TEST(slots_do_not_depend_on_state)
{
	cb_policy p = policy_small();

	ck_assert(acquire("closed-one", &p, T0, NULL, NULL));
	trip("open-one", &p, T0);
	ck_assert(acquire("open-one", &p, T0, NULL, NULL));
	ck_assert(!acquire("open-one", &p, T0, NULL, NULL));
}
END_TEST

START_TEST(release_unknown_or_expired_is_noop)
{
	cb_policy p = policy_small();
	char t1[CONTRACT_TOKEN_SIZE], t2[CONTRACT_TOKEN_SIZE];

	ck_assert(acquire("s", &p, T0, t1, NULL));
	ck_assert_int_eq(impl->release_slot(store, "s", "no-such-token", &p, T0 + 1), CONTRACT_OK);
	/* A token of another circuit does not release this one's slot. */
	ck_assert_int_eq(impl->release_slot(store, "other", t1, &p, T0 + 1), CONTRACT_OK);
	ck_assert(!acquire("s", &p, T0 + 2, NULL, NULL));
	/* Releasing twice is harmless. */
	ck_assert_int_eq(impl->release_slot(store, "s", t1, &p, T0 + 3), CONTRACT_OK);
	ck_assert_int_eq(impl->release_slot(store, "s", t1, &p, T0 + 4), CONTRACT_OK);
	/* An expired token's release is a no-op and does not free a live slot. */
	ck_assert(acquire("s", &p, T0 + 10, t1, NULL));
	ck_assert_int_eq(impl->release_slot(store, "s", t1, &p, T0 + 10 + p.slot_ttl_ms),
	    CONTRACT_OK);
	ck_assert(acquire("s", &p, T0 + 10 + p.slot_ttl_ms, t2, NULL));
	ck_assert_int_eq(impl->release_slot(store, "s", t1, &p, T0 + 11 + p.slot_ttl_ms),
	    CONTRACT_OK);
	ck_assert(!acquire("s", &p, T0 + 12 + p.slot_ttl_ms, NULL, NULL));
}
END_TEST

START_TEST(slot_expiry_in_virtual_time)
{
	cb_policy p = policy_small();
	int64_t expires;

	ck_assert(acquire("s", &p, T0, NULL, &expires));
	ck_assert_int_eq(expires, T0 + 5000);
	ck_assert(!acquire("s", &p, T0 + 4999, NULL, NULL));
	/* Expired once now >= expires_at. */
	ck_assert(acquire("s", &p, T0 + 5000, NULL, &expires));
	ck_assert_int_eq(expires, T0 + 10000);
	/* The ttl of the policy the circuit was created with is honoured (a
	 * circuit owns its policy: protocol 2, §1). */
	p.slot_ttl_ms = 1;
	ck_assert(acquire("s1", &p, T0 + 10000, NULL, &expires));
	ck_assert_int_eq(expires, T0 + 10001);
	ck_assert(acquire("s1", &p, T0 + 10001, NULL, &expires));
}
END_TEST

START_TEST(delete_drops_circuit_and_slots)
{
	cb_policy p = policy_small();
	cb_snapshot s;
	bool existed = false;

	trip("d", &p, T0);
	ck_assert(acquire("d", &p, T0, NULL, NULL));
	ck_assert_int_eq(impl->delete_circuit(store, "d", &existed), CONTRACT_OK);
	ck_assert(existed);
	s = snapshot_at("d", &p, T0 + 1);
	assert_initial(&s);
	ck_assert(acquire("d", &p, T0 + 1, NULL, NULL));
	ck_assert_int_eq(impl->delete_circuit(store, "nothing", &existed), CONTRACT_OK);
	ck_assert(!existed);
}
END_TEST

START_TEST(tokens_unique_across_restarts)
{
	cb_policy p = policy_small();
	char t1[CONTRACT_TOKEN_SIZE], t2[CONTRACT_TOKEN_SIZE];
	void *second;
	bool acquired = false;
	int64_t expires;

	ck_assert(acquire("s", &p, T0, t1, NULL));
	second = impl->create(CONTRACT_MAX_CIRCUITS);
	ck_assert_ptr_nonnull(second);
	ck_assert_int_eq(impl->acquire_slot(second, "s", &p, T0, &acquired, t2, &expires),
	    CONTRACT_OK);
	impl->teardown(second);
	ck_assert(acquired);
	ck_assert_str_ne(t1, t2);
}
END_TEST

/* Protocol 2, §2: at max_circuits a creation first reclaims the
 * longest-idle closed circuit; only when none is reclaimable is it refused,
 * and then nothing changes. */
START_TEST(capacity_refuses_new_keeps_existing)
{
	cb_policy p = policy_small();
	cb_snapshot s;
	void *full_store = impl->create(2);
	void *saved = store;
	bool applied = true, acquired = true, existed = false;
	char token[CONTRACT_TOKEN_SIZE];
	int64_t expires;

	ck_assert_ptr_nonnull(full_store);
	store = full_store;
	trip("a", &p, T0);
	trip("b", &p, T0);
	ck_assert_int_eq(impl->record_failure(store, "c", &p, T0, &s), CONTRACT_CAPACITY);
	ck_assert_int_eq(impl->record_success(store, "c", &p, T0, &s), CONTRACT_CAPACITY);
	ck_assert_int_eq(impl->set_state(store, "c", CB_STATE_OPEN, &p, T0, &s), CONTRACT_CAPACITY);
	ck_assert_int_eq(impl->acquire_slot(store, "c", &p, T0, &acquired, token, &expires),
	    CONTRACT_CAPACITY);
	/* Reads, failed cas and releases never create or fail. */
	s = snapshot_at("c", &p, T0);
	assert_initial(&s);
	ck_assert_int_eq(impl->cas(store, "c", CB_STATE_OPEN, CB_STATE_CLOSED, &p, T0, &applied,
			     &s),
	    CONTRACT_OK);
	ck_assert(!applied);
	ck_assert_int_eq(impl->release_slot(store, "c", "nope", &p, T0), CONTRACT_OK);
	/* Existing circuits keep working. */
	s = success_at("a", &p, T0 + 1);
	ck_assert_int_eq(s.state, CB_STATE_OPEN);
	ck_assert(acquire("b", &p, T0 + 3, NULL, NULL));
	/* Deleting one makes room. */
	ck_assert_int_eq(impl->delete_circuit(store, "a", &existed), CONTRACT_OK);
	ck_assert(existed);
	s = failure_at("c", &p, T0 + 4);
	ck_assert_int_eq(s.failure_count, 1);
	store = saved;
	impl->teardown(full_store);
}
END_TEST

START_TEST(capacity_reclaims_an_idle_closed_circuit)
{
	cb_policy p = policy_small();
	cb_snapshot s;
	void *full_store = impl->create(2);
	void *saved = store;

	ck_assert_ptr_nonnull(full_store);
	store = full_store;
	failure_at("old", &p, T0);
	trip("open", &p, T0);
	/* "old" is closed and idle: it makes room for "new". */
	s = failure_at("new", &p, T0 + 1);
	ck_assert_int_eq(s.failure_count, 1);
	s = snapshot_at("old", &p, T0 + 2);
	assert_initial(&s);
	s = snapshot_at("open", &p, T0 + 2);
	ck_assert_int_eq(s.state, CB_STATE_OPEN);
	store = saved;
	impl->teardown(full_store);
}
END_TEST

START_TEST(names_are_exact)
{
	cb_policy p = policy_small();
	cb_snapshot s;

	trip("payments", &p, T0);
	s = snapshot_at("Payments", &p, T0);
	ck_assert_int_eq(s.state, CB_STATE_CLOSED);
	s = snapshot_at("payments ", &p, T0);
	ck_assert_int_eq(s.state, CB_STATE_CLOSED);
	s = failure_at("zahlungen-\xc3\xa4", &p, T0);
	ck_assert_int_eq(s.failure_count, 1);
	s = snapshot_at("zahlungen-\xc3\xa4", &p, T0);
	ck_assert_int_eq(s.failure_count, 1);
}
END_TEST

Suite *
contract_suite(const contract_impl *contract)
{
	Suite *suite = suite_create(contract->name);
	TCase *tc;

	impl = contract;
	tc = tcase_create("state machine");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, initial_snapshot_for_unknown_name);
	tcase_add_test(tc, closed_failure_counts_and_stamps);
	tcase_add_test(tc, closed_opens_at_failure_threshold);
	tcase_add_test(tc, closed_success_resets_failures);
	tcase_add_test(tc, success_on_fresh_name_reads_initial);
	tcase_add_test(tc, open_success_is_a_straggler);
	tcase_add_test(tc, open_failure_never_extends_break);
	tcase_add_test(tc, half_open_successes_close);
	tcase_add_test(tc, half_open_failure_reopens);
	tcase_add_test(tc, max_gap_table);
	tcase_add_test(tc, no_max_gap_chain_always_continues);
	tcase_add_test(tc, max_gap_reset_can_still_trip);
	tcase_add_test(tc, forced_states);
	tcase_add_test(tc, force_open_on_fresh_name);
	tcase_add_test(tc, names_are_exact);
	suite_add_tcase(suite, tc);

	tc = tcase_create("cas");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, cas_applies_once);
	tcase_add_test(tc, cas_to_open_and_closed_force_rules);
	tcase_add_test(tc, cas_on_unknown_name_sees_initial);
	suite_add_tcase(suite, tc);

	tc = tcase_create("slots");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, slots_bounded_by_half_open_max);
	tcase_add_test(tc, slots_do_not_depend_on_state);
	tcase_add_test(tc, release_unknown_or_expired_is_noop);
	tcase_add_test(tc, slot_expiry_in_virtual_time);
	tcase_add_test(tc, tokens_unique_across_restarts);
	suite_add_tcase(suite, tc);

	tc = tcase_create("lifecycle");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, delete_drops_circuit_and_slots);
	tcase_add_test(tc, capacity_refuses_new_keeps_existing);
	/* Fleet runs (tests/fleet-suites.sh): cbd's max_circuits bounds its
	 * own copies; a circuit it reclaims stays in Redis for the fleet. */
	if (getenv("CBD_TEST_REDIS_SOCKET") == NULL)
		tcase_add_test(tc, capacity_reclaims_an_idle_closed_circuit);
	suite_add_tcase(suite, tc);
	return suite;
}
