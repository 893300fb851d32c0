/* SPDX-License-Identifier: Apache-2.0 */
/*
 * circuit-table.h — name -> circuit: snapshot, totals, the policy its
 * creating request declared, an operator's hold, half-open slots, and the
 * circuit's lifetime (protocol 2, §1, §2, §4).
 *
 * Every store operation of the spec is one function, O(1) per call (uthash
 * for names and slot tokens, linked lists for idleness). Pure like
 * breaker.c: callers pass the decision clock (`now`, ctx.now or the real
 * clock) and the owner's clock (`clock`, what idleness is measured on);
 * nothing here reads a clock or does I/O, so cbd and libcbclient's local
 * store share it. Not thread-safe: the daemon is single-threaded and the
 * client wraps it in a mutex.
 *
 * Lifetime: a circuit is created by a write (an outcome, allow, acquire,
 * a force or a hold; never by a read, a failed cas, a release or an
 * ignored outcome) and stays while it is used. A circuit that is closed,
 * not held and holds no slot is reclaimable: it sits on an idle list kept
 * in order of last use, and circuit_table_reclaim_idle() drops those idle
 * longer than a bound. At max_circuits, a creation first reclaims the
 * longest-idle reclaimable circuit; only when there is none is it refused
 * (CT_CAPACITY). The other circuits (open, half_open, held, holding slots)
 * sit on a pinned list, which is what the state file walks.
 *
 * Policy: the table stores the policy members the creating request
 * declared (interned: circuits declaring the same members share one copy)
 * but never resolves a policy itself; callers resolve it (config section,
 * declared members, [defaults], built-in) and pass the effective policy in.
 */
#ifndef CBD_CIRCUIT_TABLE_H
#define CBD_CIRCUIT_TABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "breaker.h"
#include "proto.h"

/* Longest circuit name in bytes (the protocol's). */
#define CT_NAME_MAX PROTO_NAME_MAX
/* Longest hold reason in bytes (protocol 2, §4). */
#define CT_REASON_MAX 256
/* Longest user name kept with a hold. */
#define CT_USER_MAX 64
/* Room for a slot token and its NUL: 16 hex digits of the table's random
 * instance id, '-', 16 hex digits of a per-table counter. */
#define CT_TOKEN_SIZE 40
/* Idle circuits reclaimed by one request on its way (amortised cleanup). */
#define CT_RECLAIM_PER_USE 2

typedef struct circuit_table circuit_table;
struct circuit;
typedef struct ct_slot ct_slot;

/* Who holds slots (one per daemon connection): released all at once by
 * circuit_table_release_owner(). Embed it and zero it before use. */
typedef struct ct_owner {
	ct_slot *slots;
} ct_owner;

typedef enum ct_status {
	CT_OK = 0,
	CT_CAPACITY, /* max_circuits reached, nothing reclaimable: not created */
	CT_NOMEM, /* allocation failed: nothing changed */
	CT_SLOTS, /* max_slots reached: no slot taken */
} ct_status;

/* A state or hold change made by one call, for logging (reason NONE: no
 * change). A hold placed or ended may leave the state as it was. */
typedef struct ct_change {
	cb_state from;
	cb_state to;
	cb_reason reason;
} ct_change;

/* Counts since the circuit was created (protocol 2's snapshot `totals`). */
typedef struct ct_totals {
	uint64_t successes;
	uint64_t failures;
	uint64_t ignored;
	uint64_t slow;
	uint64_t rejected; /* allow refusals by the breaker (open, held, half_open_full) */
	/* protocol 3 */
	uint64_t rejected_concurrency; /* allow refusals for want of a ticket */
	uint64_t retries; /* retries granted (allow with retry) */
	uint64_t rejected_retry; /* retries refused by the retry budget */
} ct_totals;

/* An operator's hold. The strings belong to the table (valid until the
 * next call that changes the table). */
typedef struct ct_hold {
	bool held;
	cb_state state; /* open or closed */
	int64_t since;
	int64_t until; /* CB_TIME_NONE: no ttl */
	int64_t by_uid;
	const char *by_user; /* "" when unknown */
	const char *reason; /* NULL when none */
} ct_hold;

/* What a hold is placed with (set_state with hold). */
typedef struct ct_hold_request {
	int64_t ttl_ms; /* 0: no ttl */
	int64_t by_uid;
	const char *by_user; /* may be NULL; cut to CT_USER_MAX */
	const char *reason; /* may be NULL; cut to CT_REASON_MAX */
} ct_hold_request;

/* A circuit as read back: the initial one (stored false) when unknown.
 * The pointers belong to the table (valid until it next changes). */
typedef struct ct_view {
	bool stored;
	cb_snapshot snap;
	ct_totals totals;
	ct_hold hold;
	const proto_ctx *declared; /* the creating request's policy; NULL: none */
	uint64_t slots; /* held now */
	uint64_t in_flight; /* tickets held now (max_concurrent; expired ones not yet pruned) */
	bool has_window; /* the rate rule's window, read at the call's now */
	cb_window_counts window;
	const cb_reporters *reporters; /* min_reporters > 1: recent reporters */
	const uint32_t *transitions; /* [from * CB_STATE_COUNT + to]; NULL: none yet */
	/* Protocol 3: equal for two views of one circuit with the same
	 * effective policy; a new one at creation and when
	 * circuit_table_renew_policies says the policy changed. A circuit not
	 * stored has the table's, renewed by every such walk. Never 0. */
	uint32_t policy_rev;
} ct_view;

/* What every call that may change a circuit takes. */
typedef struct ct_call {
	const cb_policy *policy; /* effective policy of the circuit */
	const proto_ctx *declared; /* the request's ctx: kept when it creates */
	int64_t now; /* decision clock */
	int64_t clock; /* owner's clock: idleness */
	ct_owner *owner; /* slots' holder; may be NULL */
	int64_t duration_ms; /* the call's duration (slow calls); 0: not given */
	int64_t reporter; /* who reports (min_reporters): a process id */
	/* allow (protocol 3): a retry (the retry budget); the caller will
	 * wait for a ticket (a refusal for want of one is not counted: see
	 * circuit_table_count_waited); a waiter's attempt again (its first
	 * attempt was counted and its retry judged by the budget already). */
	bool retry;
	bool wait;
	bool again;
	/* The circuit circuit_table_use found for this request's name (NULL:
	 * look the name up): a request looks its circuit up once. The caller
	 * sets it just before the call on that name and clears it after,
	 * nothing having run in between that may free a circuit. */
	struct circuit *found;
} ct_call;

/* A slot as handed to its holder. */
typedef struct ct_slot_grant {
	char token[CT_TOKEN_SIZE];
	int64_t expires_at;
} ct_slot_grant;

/* Why allow refused (protocol 3, §2: the reply's `reason`). */
typedef enum ct_refusal {
	CT_REFUSED_NONE = 0,
	CT_REFUSED_OPEN,
	CT_REFUSED_HELD,
	CT_REFUSED_HALF_OPEN_FULL,
	CT_REFUSED_CONCURRENCY,
	CT_REFUSED_RETRY_BUDGET,
} ct_refusal;

/* The answer to allow. */
typedef struct ct_allow {
	bool allowed;
	cb_state state;
	ct_refusal reason; /* when refused */
	uint64_t in_flight; /* refused for concurrency: tickets held */
	int64_t retry_after_ms; /* when refused: a hint for the next attempt */
	bool has_permit; /* a slot (half_open) or a ticket (max_concurrent) was taken */
	ct_slot_grant permit;
} ct_allow;

/* Counters kept by the table, reported by the daemon's stats op. */
typedef struct ct_stats {
	uint64_t circuits; /* stored now */
	uint64_t slots; /* held now (expired ones not yet pruned included) */
	uint64_t held; /* circuits held now */
	uint64_t capacity_refusals; /* creations refused at max_circuits */
	uint64_t slot_refusals; /* slots refused at max_slots */
	uint64_t slots_expired; /* slots pruned because their ttl ran out */
	uint64_t reclaimed_idle; /* dropped after idle_reclaim_ms */
	uint64_t reclaimed_capacity; /* dropped to make room at max_circuits */
	uint64_t policies; /* distinct declared policies stored */
} ct_stats;

/* Called by the walks below for each circuit. */
typedef void (*ct_visit_fn)(const char *name, const ct_view *view, void *arg);
/* Whether name's effective policy changed (a reload): pure, must not
 * change the table. */
typedef bool (*ct_policy_changed_fn)(const char *name, const ct_view *view, void *arg);
/* Called with each circuit's name just before a reclaim drops it. */
typedef void (*ct_reclaim_fn)(const char *name, void *arg);
/* Called for each hold ended by circuit_table_expire_holds. */
typedef void (*ct_change_fn)(const char *name, const ct_change *change, void *arg);

/* A table holding at most max_circuits; instance_id should be random so
 * that tokens differ across restarts. NULL when out of memory. */
circuit_table *circuit_table_new(uint64_t max_circuits, uint64_t instance_id);
void circuit_table_free(circuit_table *table);

/* Change the bounds; circuits already stored beyond them stay. */
void circuit_table_set_max_circuits(circuit_table *table, uint64_t max_circuits);
/* Slots held at once across all circuits (0: no bound). */
void circuit_table_set_max_slots(circuit_table *table, uint64_t max_slots);
/* Reclaim closed idle circuits after this long on the owner's clock
 * (0: only at max_circuits). */
void circuit_table_set_idle_reclaim(circuit_table *table, int64_t idle_ms);

void circuit_table_stats(const circuit_table *table, ct_stats *out);

/* Be told of every reclaimed circuit (fn may be NULL). */
void circuit_table_set_reclaim_hook(circuit_table *table, ct_reclaim_fn fn, void *arg);

/* Note that a request named `name` at `clock` (idleness), and reclaim up
 * to CT_RECLAIM_PER_USE idle circuits on the way. Returns the policy the
 * circuit's creating request declared (NULL when none or not stored);
 * *stored says whether the circuit exists. */
const proto_ctx *circuit_table_use(circuit_table *table, const char *name, int64_t clock,
    bool *stored);
/* The same; *found is the circuit (NULL when not stored), for ct_call's
 * found. */
const proto_ctx *circuit_table_use_found(circuit_table *table, const char *name, int64_t clock,
    bool *stored, struct circuit **found);

/* The circuit of `name` at `now` (the initial one when not stored); never
 * creates. A hold whose ttl has passed at `now` ends here (change). */
void circuit_table_get(circuit_table *table, const char *name, int64_t now, ct_view *out,
    ct_change *change);
/* The same for a request: at call->now, its circuit call->found when set. */
void circuit_table_get_call(circuit_table *table, const char *name, const ct_call *call,
    ct_view *out, ct_change *change);

/* The stored circuit of `name` as it is (no clock applied, nothing
 * changed); false when not stored. */
bool circuit_table_peek(circuit_table *table, const char *name, ct_view *out);
/* The same with its window read at now, as the walks read it (not a use:
 * the circuit keeps its place among the most recently used). */
bool circuit_table_peek_at(circuit_table *table, const char *name, int64_t now, ct_view *out);

/* Apply an outcome; `out` is the circuit after it. change may be NULL.
 * An ignored outcome counts in totals of a stored circuit only. */
ct_status circuit_table_record_success(circuit_table *table, const char *name, const ct_call *call,
    ct_view *out, ct_change *change);
/* `count` successes alike (>= 1), exactly as `count`
 * circuit_table_record_success calls in a row would leave the circuit
 * (totals, window, transitions; `out` the view after the last; `change`
 * the first state and the last, which at most one transition moves), at a
 * cost that does not grow with count. */
ct_status circuit_table_record_successes(circuit_table *table, const char *name,
    const ct_call *call, uint64_t count, ct_view *out, ct_change *change);
ct_status circuit_table_record_failure(circuit_table *table, const char *name, const ct_call *call,
    ct_view *out, ct_change *change);
void circuit_table_record_ignore(circuit_table *table, const char *name, const ct_call *call,
    ct_view *out, ct_change *change);
/* `count` calls a client refused on its own (protocol 3, §6): added to
 * totals.rejected of a stored circuit; nothing else changes. */
void circuit_table_record_rejected(circuit_table *table, const char *name, const ct_call *call,
    uint64_t count, ct_view *out, ct_change *change);

/* Force `to` when the state is `from` and the circuit is not held.
 * *applied says which; `out` is the new circuit when applied, the current
 * one when not. A failed cas never creates a circuit. */
ct_status circuit_table_cas(circuit_table *table, const char *name, cb_state from, cb_state to,
    const ct_call *call, bool *applied, ct_view *out, ct_change *change);

/* Force `state` unconditionally (admin). With hold (may be NULL) the state
 * is held (open or closed only) until its ttl or a release; without, any
 * hold is cleared. */
ct_status circuit_table_set_state(circuit_table *table, const char *name, cb_state state,
    const ct_hold_request *hold, const ct_call *call, ct_view *out, ct_change *change);

/* End name's hold (admin): *released false when it was not held. */
void circuit_table_release(circuit_table *table, const char *name, const ct_call *call,
    bool *released, ct_view *out, ct_change *change);

/* Take a slot if fewer than policy->half_open_max unexpired slots are held
 * (CT_SLOTS past max_slots). */
ct_status circuit_table_acquire_slot(circuit_table *table, const char *name, const ct_call *call,
    bool *acquired, ct_slot_grant *grant);

/* Release a slot of `name` by token; unknown or expired tokens, or a token
 * of another circuit, are a no-op. Returns whether a slot was released. */
bool circuit_table_release_slot(circuit_table *table, const char *name, const char *token,
    int64_t now);

/* Release every slot held by owner (a connection that closed). */
void circuit_table_release_owner(circuit_table *table, ct_owner *owner);

/* The sidecar's "may I call?": see proto/PROTOCOL.md §8, allow; a held open
 * circuit refuses, a held closed one allows. The checks in order: the
 * breaker (open, held, half-open slots), the retry budget (call->retry),
 * the bulkhead (policy->max_concurrent: a ticket, a slot with the
 * policy's slot_ttl_ms, taken with the half-open trial's slot when
 * half_open). `view` gets the circuit too (may be NULL). */
ct_status circuit_table_allow(circuit_table *table, const char *name, const ct_call *call,
    ct_allow *out, ct_view *view, ct_change *change);

/* Room for one more circuit, as a creation would make it: at
 * max_circuits the longest-idle reclaimable circuit goes; CT_CAPACITY
 * (counted) when there is none. For a store kept elsewhere (fleet mode)
 * whose copies live here. */
ct_status circuit_table_make_room(circuit_table *table, int64_t clock);

/* Fleet mode: allow whose breaker was judged elsewhere (in Redis), `out`
 * its answer (allowed, state, and a trial slot held there as permit);
 * this host's part: the attempt counted in the retry budget, and when
 * the breaker granted, the retry budget and the bulkhead (a ticket named
 * as the trial slot, when there is one). `out` becomes the answer; a
 * refusal here leaves has_permit false (the caller gives back the trial
 * slot). */
ct_status circuit_table_allow_local(circuit_table *table, const char *name, const ct_call *call,
    ct_allow *out);

/* A refusal for want of a ticket made by an allow that waited
 * (call->wait) and got none: counted in totals.rejected_concurrency. */
void circuit_table_count_waited(circuit_table *table, const char *name);

/* The earliest expiry (on the clock of the requests that took them) of
 * name's slots and tickets; false when it holds none. */
bool circuit_table_next_expiry(circuit_table *table, const char *name, int64_t *at);

/* Wire name of a refusal ("open", "held", "half_open_full", "concurrency",
 * "retry_budget"); NULL for none. */
const char *circuit_table_refusal_name(ct_refusal reason);

/* Drop a circuit and its slots; returns whether it existed. */
bool circuit_table_delete(circuit_table *table, const char *name);

/* Store a circuit as read from the state file (replacing one of that
 * name): view's snapshot, totals, declared policy (may be NULL) and hold.
 * Subject to max_circuits like any creation. */
ct_status circuit_table_restore(circuit_table *table, const char *name, const ct_view *view,
    int64_t clock);

/* Count a state change of name's circuit made elsewhere (fleet mode: in
 * Redis) in its transitions (metrics). Nothing when name is not stored. */
void circuit_table_count_transition(circuit_table *table, const char *name, cb_state from,
    cb_state to);

/* Pin (or unpin) name's circuit for a slot held elsewhere (fleet mode: in
 * Redis) by this process: a pinned circuit is never reclaimed. A restore
 * keeps the pins of the circuit it replaces. False when name is not
 * stored (pin), or holds no pin (unpin). */
bool circuit_table_pin(circuit_table *table, const char *name, bool pin);

/* name's policy_rev (ct_view's), stored or not. */
uint32_t circuit_table_policy_rev(circuit_table *table, const char *name);

/* The configuration changed: a new policy_rev for circuits not stored,
 * and for each stored circuit `changed` says changed; then `renewed` (may
 * be NULL) is called with that circuit's view at now, its new policy_rev
 * in it. One walk of the table. renewed must not change the table. */
void circuit_table_renew_policies(circuit_table *table, int64_t now, ct_policy_changed_fn changed,
    ct_visit_fn renewed, void *arg);

/* End every hold whose ttl has passed at `now`, calling fn for each. */
void circuit_table_expire_holds(circuit_table *table, int64_t now, ct_change_fn fn, void *arg);

/* Reclaim up to `max` circuits idle for idle_reclaim_ms at `clock`;
 * returns how many. */
uint64_t circuit_table_reclaim_idle(circuit_table *table, int64_t clock, uint64_t max);

/* Time left before `view`'s circuit lets a trial through: the hold's
 * end (or the break, with no ttl) while held open, else the break. */
int64_t circuit_table_retry_after(const ct_view *view, const cb_policy *policy, int64_t now);

/* Visit stored circuits in an unspecified order (windows read at now);
 * foreach_pinned only those that are open, half_open, held or hold slots.
 * The callback must not change the table. */
void circuit_table_foreach(circuit_table *table, int64_t now, ct_visit_fn visit, void *arg);
void circuit_table_foreach_pinned(circuit_table *table, ct_visit_fn visit, void *arg);

/* A walk over every circuit in steps (list answered across turns of the
 * event loop): it survives changes to the table between steps. Every
 * circuit stored for the whole walk is visited once; one created during
 * it is visited at most once; one re-created (restored) may be visited
 * twice. Embed it; the table keeps a link to it while it is open. */
typedef struct ct_cursor {
	struct ct_cursor *prev, *next; /* the table's open cursors */
	struct circuit *at; /* the next circuit to visit; NULL: done */
} ct_cursor;

/* Start a walk at the first circuit. */
void circuit_table_cursor_open(circuit_table *table, ct_cursor *cursor);
/* Visit up to max circuits (windows read at now) from where the walk
 * stands; returns how many. The callback must not change the table.
 * Done when cursor->at is NULL. */
uint64_t circuit_table_cursor_next(circuit_table *table, ct_cursor *cursor, int64_t now,
    uint64_t max, ct_visit_fn visit, void *arg);
/* Put the walk back on circuit `name` (it is visited next), when stored. */
void circuit_table_cursor_seek(circuit_table *table, ct_cursor *cursor, const char *name);
/* End a walk (done or not). */
void circuit_table_cursor_close(circuit_table *table, ct_cursor *cursor);

/* Visit at most max circuits: those that are open, half_open, held or hold
 * slots, then closed ones, most recently used first. Returns how many. */
uint64_t circuit_table_foreach_recent(circuit_table *table, int64_t now, uint64_t max,
    ct_visit_fn visit, void *arg);

/* Text for a status ("max_circuits reached"). */
const char *circuit_table_status_text(ct_status status);

#endif
