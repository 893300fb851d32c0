/*
 * circuit-table.h — name -> circuit (snapshot + half-open slots).
 *
 * The store of protocol v1 in memory: every store operation of the spec as
 * one function, O(1) per call (uthash for names and for slot tokens). Pure
 * like breaker.c: callers pass `now` and a random instance id at creation;
 * nothing here reads a clock or does I/O, so cbd and libcbclient's local
 * store share it. Not thread-safe: the daemon is single-threaded and the
 * client wraps it in a mutex.
 *
 * Storage rule: a circuit is stored only while its snapshot differs from
 * the initial snapshot or it holds slots. Reads never create one; a write
 * whose result is the initial snapshot (a success on a fresh name) stores
 * nothing, and a circuit that returns to it is dropped. Only creation can
 * hit max_circuits (CT_CAPACITY); existing circuits always keep working.
 */
#ifndef CBD_CIRCUIT_TABLE_H
#define CBD_CIRCUIT_TABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "breaker.h"

/* Longest circuit name in bytes (spec: 1..256). */
#define CT_NAME_MAX 256
/* Room for a slot token and its NUL: 16 hex digits of the table's random
 * instance id, '-', 16 hex digits of a per-table counter. */
#define CT_TOKEN_SIZE 40

typedef struct circuit_table circuit_table;
typedef struct ct_slot ct_slot;

/* Who holds slots (one per daemon connection): released all at once by
 * circuit_table_release_owner(). Embed it and zero it before use. */
typedef struct ct_owner {
	ct_slot *slots;
} ct_owner;

typedef enum ct_status {
	CT_OK = 0,
	CT_CAPACITY, /* max_circuits reached: the new circuit was not created */
	CT_NOMEM, /* allocation failed: nothing changed */
} ct_status;

/* A state change made by one call, for logging (reason NONE: no change). */
typedef struct ct_change {
	cb_state from;
	cb_state to;
	cb_reason reason;
} ct_change;

/* A slot as handed to its holder. */
typedef struct ct_slot_grant {
	char token[CT_TOKEN_SIZE];
	int64_t expires_at;
} ct_slot_grant;

/* The answer to allow. */
typedef struct ct_allow {
	bool allowed;
	cb_state state;
	int64_t retry_after_ms; /* when refused: a hint for the next attempt */
	bool has_permit; /* allowed in half_open: a slot was taken */
	ct_slot_grant permit;
} ct_allow;

/* Counters kept by the table, reported by the daemon's stats op. */
typedef struct ct_stats {
	uint64_t circuits; /* stored now */
	uint64_t slots; /* held now (expired ones not yet pruned included) */
	uint64_t capacity_refusals; /* creations refused at max_circuits */
	uint64_t slots_expired; /* slots pruned because their ttl ran out */
} ct_stats;

/* Called by circuit_table_foreach for each stored circuit. */
typedef void (*ct_visit_fn)(const char *name, const cb_snapshot *snap, void *arg);

/* A table holding at most max_circuits; instance_id should be random so
 * that tokens differ across restarts. NULL when out of memory. */
circuit_table *circuit_table_new(uint64_t max_circuits, uint64_t instance_id);
void circuit_table_free(circuit_table *table);

/* Change the bound; circuits already stored beyond it stay. */
void circuit_table_set_max_circuits(circuit_table *table, uint64_t max_circuits);

void circuit_table_stats(const circuit_table *table, ct_stats *out);

/* The snapshot of `name` (the initial one when not stored); never creates.
 * Returns whether the circuit is stored. */
bool circuit_table_get(circuit_table *table, const char *name, cb_snapshot *out);

/* Apply an outcome; `out` is the snapshot after it. change may be NULL. */
ct_status circuit_table_record_success(circuit_table *table, const char *name,
    const cb_policy *policy, int64_t now, cb_snapshot *out, ct_change *change);
ct_status circuit_table_record_failure(circuit_table *table, const char *name,
    const cb_policy *policy, int64_t now, cb_snapshot *out, ct_change *change);

/* Force `to` when the state is `from`. *applied says which; `out` is the new
 * snapshot when applied, the current one when not. A failed cas never
 * creates a circuit. */
ct_status circuit_table_cas(circuit_table *table, const char *name, cb_state from, cb_state to,
    int64_t now, bool *applied, cb_snapshot *out, ct_change *change);

/* Force `state` unconditionally (admin). */
ct_status circuit_table_set_state(circuit_table *table, const char *name, cb_state state,
    int64_t now, cb_snapshot *out, ct_change *change);

/* Take a slot if fewer than policy->half_open_max unexpired slots are held.
 * owner may be NULL (the slot then lives until released or expired). */
ct_status circuit_table_acquire_slot(circuit_table *table, const char *name,
    const cb_policy *policy, int64_t now, ct_owner *owner, bool *acquired, ct_slot_grant *grant);

/* Release a slot of `name` by token; unknown or expired tokens, or a token
 * of another circuit, are a no-op. Returns whether a slot was released. */
bool circuit_table_release_slot(circuit_table *table, const char *name, const char *token,
    int64_t now);

/* Release every slot held by owner (a connection that closed). */
void circuit_table_release_owner(circuit_table *table, ct_owner *owner);

/* The sidecar's "may I call?": see protocol-v1.md, op allow. */
ct_status circuit_table_allow(circuit_table *table, const char *name, const cb_policy *policy,
    int64_t now, ct_owner *owner, ct_allow *out, ct_change *change);

/* Drop a circuit and its slots; returns whether it existed. */
bool circuit_table_delete(circuit_table *table, const char *name);

/* Visit stored circuits in an unspecified order. The callback must not
 * change the table. */
void circuit_table_foreach(circuit_table *table, ct_visit_fn visit, void *arg);

/* Text for a status ("max_circuits reached"). */
const char *circuit_table_status_text(ct_status status);

#endif
