/*
 * circuit-table.c — name -> circuit (snapshot + half-open slots); see
 * circuit-table.h for the contract.
 *
 * Cost of one circuit on x86_64: the struct below is 128 bytes (uthash
 * handle 56, snapshot 40, slot list 16, counts 16) plus the name and its
 * NUL, plus malloc's 16-byte header, plus about 8 bytes of uthash bucket
 * array per circuit: ~170 bytes for a 16-byte name. A held slot costs 168
 * bytes (two list links, a hash handle, the token).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Out-of-memory in uthash must never exit the process (libcbclient links
 * this file): the add is undone and we report CT_NOMEM. */
#define HASH_NONFATAL_OOM 1
static _Thread_local int hash_oom;
#define uthash_nonfatal_oom(obj) (hash_oom = 1)
#include <uthash.h>

#include "circuit-table.h"

typedef struct circuit circuit;

struct ct_slot {
	/* The circuit's slots, ordered by expires_at (oldest first). */
	ct_slot *prev, *next;
	/* The owner's slots, unordered. */
	ct_slot *owner_prev, *owner_next;
	circuit *circuit;
	ct_owner *owner;
	int64_t expires_at;
	UT_hash_handle hh; /* token -> slot */
	char token[CT_TOKEN_SIZE];
};

struct circuit {
	UT_hash_handle hh; /* name -> circuit */
	cb_snapshot snap;
	ct_slot *slots_head, *slots_tail;
	uint64_t slot_count;
	size_t name_len;
	char name[];
};

struct circuit_table {
	circuit *circuits;
	ct_slot *slots_by_token;
	uint64_t max_circuits;
	uint64_t instance_id;
	uint64_t next_token;
	ct_stats stats;
};

circuit_table *
circuit_table_new(uint64_t max_circuits, uint64_t instance_id)
{
	circuit_table *table = calloc(1, sizeof *table);

	if (table == NULL)
		return NULL;
	table->max_circuits = max_circuits;
	table->instance_id = instance_id;
	table->next_token = 1;
	return table;
}

/* Unlink a slot from its circuit, owner and token hash, then free it. */
static void
slot_free(circuit_table *table, ct_slot *slot)
{
	circuit *c = slot->circuit;

	if (slot->prev != NULL)
		slot->prev->next = slot->next;
	else
		c->slots_head = slot->next;
	if (slot->next != NULL)
		slot->next->prev = slot->prev;
	else
		c->slots_tail = slot->prev;
	c->slot_count--;

	if (slot->owner != NULL) {
		if (slot->owner_prev != NULL)
			slot->owner_prev->owner_next = slot->owner_next;
		else
			slot->owner->slots = slot->owner_next;
		if (slot->owner_next != NULL)
			slot->owner_next->owner_prev = slot->owner_prev;
	}
	HASH_DEL(table->slots_by_token, slot);
	table->stats.slots--;
	free(slot);
}

/* Free a circuit and all its slots (it must already be out of the hash). */
static void
circuit_free_slots(circuit_table *table, circuit *c)
{
	while (c->slots_head != NULL)
		slot_free(table, c->slots_head);
}

void
circuit_table_free(circuit_table *table)
{
	circuit *c, *tmp;

	if (table == NULL)
		return;
	HASH_ITER (hh, table->circuits, c, tmp) {
		HASH_DEL(table->circuits, c);
		circuit_free_slots(table, c);
		free(c);
	}
	free(table);
}

void
circuit_table_set_max_circuits(circuit_table *table, uint64_t max_circuits)
{
	table->max_circuits = max_circuits;
}

void
circuit_table_stats(const circuit_table *table, ct_stats *out)
{
	*out = table->stats;
}

const char *
circuit_table_status_text(ct_status status)
{
	switch (status) {
	case CT_OK:
		return "ok";
	case CT_CAPACITY:
		return "max_circuits reached: no new circuit can be created";
	case CT_NOMEM:
		return "out of memory";
	}
	return "unknown status";
}

static circuit *
circuit_find(circuit_table *table, const char *name)
{
	circuit *c;

	HASH_FIND(hh, table->circuits, name, strlen(name), c);
	return c;
}

/* Store a new circuit with the initial snapshot, within max_circuits. */
static ct_status
circuit_create(circuit_table *table, const char *name, circuit **out)
{
	size_t len = strlen(name);
	circuit *c;

	if (table->stats.circuits >= table->max_circuits) {
		table->stats.capacity_refusals++;
		return CT_CAPACITY;
	}
	c = calloc(1, sizeof *c + len + 1);
	if (c == NULL)
		return CT_NOMEM;
	memcpy(c->name, name, len + 1);
	c->name_len = len;
	breaker_snapshot_init(&c->snap);
	hash_oom = 0;
	HASH_ADD_KEYPTR(hh, table->circuits, c->name, len, c);
	if (hash_oom) {
		free(c);
		return CT_NOMEM;
	}
	table->stats.circuits++;
	*out = c;
	return CT_OK;
}

/* Drop a circuit that has nothing worth storing (see the storage rule). */
static void
circuit_drop_if_idle(circuit_table *table, circuit *c)
{
	if (c->slot_count > 0 || !breaker_snapshot_is_initial(&c->snap))
		return;
	HASH_DEL(table->circuits, c);
	table->stats.circuits--;
	free(c);
}

/* Store `next` as name's snapshot: creates the circuit when it is new and
 * `next` is worth storing; drops it when it becomes idle. */
static ct_status
circuit_store(circuit_table *table, const char *name, circuit *c, const cb_snapshot *next)
{
	ct_status status;

	if (c == NULL) {
		if (breaker_snapshot_is_initial(next))
			return CT_OK;
		status = circuit_create(table, name, &c);
		if (status != CT_OK)
			return status;
	}
	c->snap = *next;
	circuit_drop_if_idle(table, c);
	return CT_OK;
}

bool
circuit_table_get(circuit_table *table, const char *name, cb_snapshot *out)
{
	circuit *c = circuit_find(table, name);

	if (c == NULL) {
		breaker_snapshot_init(out);
		return false;
	}
	*out = c->snap;
	return true;
}

static void
change_set(ct_change *change, cb_state from, cb_state to, cb_reason reason)
{
	if (change == NULL)
		return;
	change->from = from;
	change->to = to;
	change->reason = reason;
}

/* The stored snapshot of c, or the initial one when c is not stored. */
static void
circuit_snapshot(const circuit *c, cb_snapshot *out)
{
	if (c != NULL)
		*out = c->snap;
	else
		breaker_snapshot_init(out);
}

/* Store `next` (moved from state `from` for `reason`) as name's snapshot
 * and report it. When it cannot be stored nothing changes: `out` is the
 * current snapshot and the change is NONE. */
static ct_status
commit(circuit_table *table, const char *name, circuit *c, cb_state from, const cb_snapshot *next,
    cb_reason reason, cb_snapshot *out, ct_change *change)
{
	ct_status status = circuit_store(table, name, c, next);

	if (status != CT_OK) {
		circuit_table_get(table, name, out);
		change_set(change, from, from, CB_REASON_NONE);
		return status;
	}
	*out = *next;
	change_set(change, from, next->state, reason);
	return CT_OK;
}

/* Shared body of record_success and record_failure. */
static ct_status
record_outcome(circuit_table *table, const char *name, const cb_policy *policy, int64_t now,
    bool success, cb_snapshot *out, ct_change *change)
{
	circuit *c = circuit_find(table, name);
	cb_snapshot next;
	cb_reason reason;

	circuit_snapshot(c, &next);
	cb_state from = next.state;
	if (success)
		reason = breaker_on_success(&next, policy, now);
	else
		reason = breaker_on_failure(&next, policy, now);
	return commit(table, name, c, from, &next, reason, out, change);
}

ct_status
circuit_table_record_success(circuit_table *table, const char *name, const cb_policy *policy,
    int64_t now, cb_snapshot *out, ct_change *change)
{
	return record_outcome(table, name, policy, now, true, out, change);
}

ct_status
circuit_table_record_failure(circuit_table *table, const char *name, const cb_policy *policy,
    int64_t now, cb_snapshot *out, ct_change *change)
{
	return record_outcome(table, name, policy, now, false, out, change);
}

/* Force a state on name, creating the circuit when needed. */
static ct_status
force_state(circuit_table *table, const char *name, circuit *c, cb_state state, int64_t now,
    cb_reason why, cb_snapshot *out, ct_change *change)
{
	cb_snapshot next;

	circuit_snapshot(c, &next);
	cb_state from = next.state;
	breaker_force(&next, state, now);
	return commit(table, name, c, from, &next, from == state ? CB_REASON_NONE : why, out,
	    change);
}

ct_status
circuit_table_cas(circuit_table *table, const char *name, cb_state from, cb_state to, int64_t now,
    bool *applied, cb_snapshot *out, ct_change *change)
{
	circuit *c = circuit_find(table, name);
	ct_status status;

	circuit_table_get(table, name, out);
	if (out->state != from) {
		*applied = false;
		change_set(change, out->state, out->state, CB_REASON_NONE);
		return CT_OK;
	}
	status = force_state(table, name, c, to, now, CB_REASON_CAS, out, change);
	*applied = status == CT_OK;
	return status;
}

ct_status
circuit_table_set_state(circuit_table *table, const char *name, cb_state state, int64_t now,
    cb_snapshot *out, ct_change *change)
{
	return force_state(table, name, circuit_find(table, name), state, now, CB_REASON_FORCED,
	    out, change);
}

/* Free the circuit's slots whose ttl ran out (they are sorted by expiry). */
static void
slots_prune_expired(circuit_table *table, circuit *c, int64_t now)
{
	while (c->slots_head != NULL && now >= c->slots_head->expires_at) {
		slot_free(table, c->slots_head);
		table->stats.slots_expired++;
	}
}

/* Insert a slot keeping the circuit's list sorted by expires_at; with one
 * ttl per circuit this is an append. */
static void
slot_link_sorted(circuit *c, ct_slot *slot)
{
	ct_slot *after = c->slots_tail;

	while (after != NULL && after->expires_at > slot->expires_at)
		after = after->prev;
	slot->prev = after;
	slot->next = after != NULL ? after->next : c->slots_head;
	if (slot->next != NULL)
		slot->next->prev = slot;
	else
		c->slots_tail = slot;
	if (after != NULL)
		after->next = slot;
	else
		c->slots_head = slot;
	c->slot_count++;
}

/* Take a slot on an existing circuit c if one is free. */
static ct_status
slot_take(circuit_table *table, circuit *c, const cb_policy *policy, int64_t now, ct_owner *owner,
    bool *acquired, ct_slot_grant *grant)
{
	ct_slot *slot;

	slots_prune_expired(table, c, now);
	*acquired = false;
	if (c->slot_count >= (uint64_t)policy->half_open_max)
		return CT_OK;
	slot = calloc(1, sizeof *slot);
	if (slot == NULL)
		return CT_NOMEM;
	snprintf(slot->token, sizeof slot->token, "%016" PRIx64 "-%016" PRIx64, table->instance_id,
	    table->next_token);
	hash_oom = 0;
	HASH_ADD_STR(table->slots_by_token, token, slot);
	if (hash_oom) {
		free(slot);
		return CT_NOMEM;
	}
	table->next_token++;
	slot->circuit = c;
	slot->expires_at = now + policy->slot_ttl_ms;
	slot_link_sorted(c, slot);
	if (owner != NULL) {
		slot->owner = owner;
		slot->owner_next = owner->slots;
		if (owner->slots != NULL)
			owner->slots->owner_prev = slot;
		owner->slots = slot;
	}
	table->stats.slots++;
	*acquired = true;
	memcpy(grant->token, slot->token, sizeof grant->token);
	grant->expires_at = slot->expires_at;
	return CT_OK;
}

ct_status
circuit_table_acquire_slot(circuit_table *table, const char *name, const cb_policy *policy,
    int64_t now, ct_owner *owner, bool *acquired, ct_slot_grant *grant)
{
	circuit *c = circuit_find(table, name);
	ct_status status;

	*acquired = false;
	if (c == NULL) {
		status = circuit_create(table, name, &c);
		if (status != CT_OK)
			return status;
	}
	status = slot_take(table, c, policy, now, owner, acquired, grant);
	circuit_drop_if_idle(table, c);
	return status;
}

bool
circuit_table_release_slot(circuit_table *table, const char *name, const char *token, int64_t now)
{
	ct_slot *slot;
	circuit *c;

	if (strlen(token) >= CT_TOKEN_SIZE)
		return false;
	HASH_FIND_STR(table->slots_by_token, token, slot);
	if (slot == NULL || strcmp(slot->circuit->name, name) != 0)
		return false;
	c = slot->circuit;
	bool live = now < slot->expires_at;
	if (!live)
		table->stats.slots_expired++;
	slot_free(table, slot);
	circuit_drop_if_idle(table, c);
	return live;
}

void
circuit_table_release_owner(circuit_table *table, ct_owner *owner)
{
	while (owner->slots != NULL) {
		circuit *c = owner->slots->circuit;

		slot_free(table, owner->slots);
		circuit_drop_if_idle(table, c);
	}
}

ct_status
circuit_table_allow(circuit_table *table, const char *name, const cb_policy *policy, int64_t now,
    ct_owner *owner, ct_allow *out, ct_change *change)
{
	circuit *c = circuit_find(table, name);
	ct_status status;
	bool acquired;

	memset(out, 0, sizeof *out);
	change_set(change, CB_STATE_CLOSED, CB_STATE_CLOSED, CB_REASON_NONE);
	if (c == NULL) {
		/* Unknown reads as initial: closed, allowed, nothing stored. */
		out->allowed = true;
		out->state = CB_STATE_CLOSED;
		return CT_OK;
	}
	cb_state from = c->snap.state;
	cb_reason reason = breaker_on_allow(&c->snap, policy, now);
	change_set(change, from, c->snap.state, reason);
	out->state = c->snap.state;
	switch (c->snap.state) {
	case CB_STATE_CLOSED:
		out->allowed = true;
		return CT_OK;
	case CB_STATE_OPEN:
		out->retry_after_ms = breaker_retry_after_ms(&c->snap, policy, now);
		return CT_OK;
	case CB_STATE_HALF_OPEN:
		break;
	}
	status = slot_take(table, c, policy, now, owner, &acquired, &out->permit);
	if (status != CT_OK)
		return status;
	out->allowed = acquired;
	out->has_permit = acquired;
	if (!acquired && c->slots_head != NULL)
		/* Refused: the earliest a held slot frees up on its own. */
		out->retry_after_ms = c->slots_head->expires_at - now;
	return CT_OK;
}

bool
circuit_table_delete(circuit_table *table, const char *name)
{
	circuit *c = circuit_find(table, name);

	if (c == NULL)
		return false;
	circuit_free_slots(table, c);
	HASH_DEL(table->circuits, c);
	table->stats.circuits--;
	free(c);
	return true;
}

void
circuit_table_foreach(circuit_table *table, ct_visit_fn visit, void *arg)
{
	circuit *c, *tmp;

	HASH_ITER (hh, table->circuits, c, tmp)
		visit(c->name, &c->snap, arg);
}
