/* SPDX-License-Identifier: Apache-2.0 */
/*
 * circuit-table.c — name -> circuit; see circuit-table.h for the contract.
 *
 * A closed circuit is one allocation: the struct below (uthash handle,
 * list links, snapshot, totals, last use, declared policy, extension,
 * name length and list tag) with its name and NUL, plus its share of
 * uthash's buckets. Slots and holds live in an extension allocated only
 * while a circuit has either; the declared policy is interned, so
 * circuits declaring the same members share one copy. (Bytes per circuit,
 * as tests/bench-authority measures them: README.md, "Benchmarks".)
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

/* The tables' hash: 8 bytes a step, a multiply and a shift each, then
 * murmur3's finalizer (uthash takes the low bits). uthash's default
 * (Jenkins) is 12 bytes a step of a dozen operations each, plus a
 * byte-at-a-time tail: for a request's one lookup of a 10- to 40-byte
 * name it was most of the lookup. Neither is seeded. */
static inline unsigned
ct_hash(const void *key, size_t len)
{
	const unsigned char *p = key;
	uint64_t h = UINT64_C(0x9e3779b97f4a7c15) ^ len, w;

	for (; len >= 8; p += 8, len -= 8) {
		memcpy(&w, p, 8);
		h = (h ^ w) * UINT64_C(0xff51afd7ed558ccd);
		h ^= h >> 29;
	}
	if (len >= 4) {
		uint32_t a, b;

		memcpy(&a, p, 4);
		memcpy(&b, p + len - 4, 4);
		h = (h ^ (a | (uint64_t)b << 32)) * UINT64_C(0xc4ceb9fe1a85ec53);
	} else if (len > 0) {
		h = (h ^ (p[0] | (uint64_t)p[len / 2] << 8 | (uint64_t)p[len - 1] << 16)) *
		    UINT64_C(0xc4ceb9fe1a85ec53);
	}
	h ^= h >> 33;
	h *= UINT64_C(0xff51afd7ed558ccd);
	h ^= h >> 33;
	return (unsigned)h;
}
#define HASH_FUNCTION(keyptr, keylen, hashv) ((hashv) = ct_hash((keyptr), (size_t)(keylen)))
#include <uthash.h>

#include "circuit-table.h"

typedef struct circuit circuit;

/* Which list a circuit is on. */
enum {
	LIST_NONE = 0,
	LIST_IDLE, /* reclaimable, oldest use first */
	LIST_PINNED, /* open, half_open, held or holding slots */
};

struct ct_slot {
	/* The circuit's slots, ordered by expires_at (oldest first). */
	ct_slot *prev, *next;
	/* The owner's slots, unordered. */
	ct_slot *owner_prev, *owner_next;
	circuit *circuit;
	ct_owner *owner;
	int64_t expires_at;
	uint8_t kind; /* SLOT_TRIAL, SLOT_TICKET or both */
	UT_hash_handle hh; /* token -> slot */
	char token[CT_TOKEN_SIZE];
};

/* What a slot counts as: a trial (half_open_max: acquire_slot, allow in
 * half_open) and/or a ticket (max_concurrent: allow with a limit). */
#define SLOT_TRIAL 1u
#define SLOT_TICKET 2u

/* The retry budget's counts: one bucket a second of the request's clock,
 * CB_RETRY_WINDOW_S of them, bucket i holding second sec[i]. */
typedef struct ct_budget {
	int64_t sec[CB_RETRY_WINDOW_S];
	uint64_t first[CB_RETRY_WINDOW_S];
	uint64_t retries[CB_RETRY_WINDOW_S];
} ct_budget;

/* An interned declared policy, shared by every circuit declaring it. */
typedef struct ct_layer {
	UT_hash_handle hh; /* keyed by ctx's bytes */
	uint64_t refs;
	proto_ctx ctx;
} ct_layer;

/* What few circuits need: slots, an operator's hold, the rate rule's
 * window and the recent reporters of min_reporters. */
typedef struct circuit_ext {
	cb_window *window;
	cb_reporters *reporters;
	uint32_t *transitions; /* [from * CB_STATE_COUNT + to], for metrics */
	ct_slot *slots_head, *slots_tail;
	uint64_t slot_count;
	uint64_t trial_count; /* slots that are trials */
	uint64_t ticket_count; /* slots that are tickets */
	ct_budget *budget; /* retry_budget_percent set: the retry budget's counts */
	/* Protocol 3's totals of the bulkhead and the retry budget: here, not
	 * in every circuit (few circuits have either; a closed circuit's
	 * bytes are the table's size). */
	uint64_t rejected_concurrency;
	uint64_t retries;
	uint64_t rejected_retry;
	/* Slots held elsewhere (fleet mode: in Redis) by this process's
	 * connections: the circuit is not reclaimed while any is. */
	uint32_t pins;
	bool held;
	cb_state hold_state;
	int64_t hold_since;
	int64_t hold_until;
	int64_t hold_uid;
	char *hold_user;
	char *hold_reason;
	circuit *held_prev, *held_next; /* the table's held circuits */
} circuit_ext;

/* The totals every circuit keeps (ct_totals' first five). */
typedef struct circuit_totals {
	uint64_t successes;
	uint64_t failures;
	uint64_t ignored;
	uint64_t slow;
	uint64_t rejected;
} circuit_totals;

/* Add one to an extension's count of c (lost only for lack of memory). */
#define EXT_COUNT(c, field)                                                                        \
	do {                                                                                       \
		circuit_ext *x_ = ext_need(c);                                                     \
		if (x_ != NULL)                                                                    \
			x_->field++;                                                               \
	} while (0)

struct circuit {
	UT_hash_handle hh; /* name -> circuit */
	circuit *prev, *next; /* idle or pinned list */
	cb_snapshot snap;
	circuit_totals totals; /* ct_totals but the ext's three */
	int64_t used_at; /* owner's clock */
	ct_layer *declared;
	circuit_ext *ext;
	uint32_t policy_rev; /* protocol 3: renewed when its policy changes */
	uint16_t name_len;
	uint8_t list;
	char name[];
};

struct circuit_table {
	circuit *circuits;
	/* The circuit last found: a request looks its circuit up two or
	 * three times (its policy, then its op). */
	circuit *found;
	ct_slot *slots_by_token;
	ct_layer *layers;
	circuit *idle_head, *idle_tail;
	circuit *pinned_head;
	circuit *held_head;
	uint64_t max_circuits;
	uint64_t max_slots;
	int64_t idle_ms;
	uint64_t instance_id;
	uint64_t next_token;
	ct_reclaim_fn on_reclaim;
	void *on_reclaim_arg;
	ct_cursor *cursors; /* open walks (circuit_table_cursor_*) */
	uint32_t last_rev; /* the last policy_rev handed out */
	uint32_t unstored_rev; /* the policy_rev of circuits not stored */
	ct_stats stats;
};

/* A policy_rev never handed out before (until 2^32 - 1 have been: then
 * they start again at 1; 0 is never one). */
static uint32_t
rev_next(circuit_table *table)
{
	if (++table->last_rev == 0)
		table->last_rev = 1;
	return table->last_rev;
}

circuit_table *
circuit_table_new(uint64_t max_circuits, uint64_t instance_id)
{
	circuit_table *table = calloc(1, sizeof *table);

	if (table == NULL)
		return NULL;
	table->max_circuits = max_circuits;
	table->instance_id = instance_id;
	table->next_token = 1;
	table->unstored_rev = rev_next(table);
	return table;
}

void
circuit_table_set_max_circuits(circuit_table *table, uint64_t max_circuits)
{
	table->max_circuits = max_circuits;
}

void
circuit_table_set_max_slots(circuit_table *table, uint64_t max_slots)
{
	table->max_slots = max_slots;
}

void
circuit_table_set_idle_reclaim(circuit_table *table, int64_t idle_ms)
{
	table->idle_ms = idle_ms;
}

void
circuit_table_set_reclaim_hook(circuit_table *table, ct_reclaim_fn fn, void *arg)
{
	table->on_reclaim = fn;
	table->on_reclaim_arg = arg;
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
	case CT_SLOTS:
		return "max_slots reached: no slot can be taken";
	}
	return "unknown status";
}

/* ---- declared policies ---------------------------------------------- */

/* The interned copy of ctx's policy members; NULL when it has none (or
 * out of memory: *nomem). */
static ct_layer *
layer_get(circuit_table *table, const proto_ctx *ctx, bool *nomem)
{
	proto_ctx key;
	ct_layer *layer;

	*nomem = false;
	if (ctx == NULL || (ctx->present & PROTO_CTX_POLICY_MASK) == 0)
		return NULL;
	/* A normalized key: no padding garbage, no clock, absent members 0. */
	memset(&key, 0, sizeof key);
	for (int k = 0; k < PROTO_CTX_KEY_COUNT; k++) {
		if ((PROTO_CTX_POLICY_MASK & (UINT32_C(1) << k)) &&
		    proto_ctx_has(ctx, (proto_ctx_key)k))
			proto_ctx_set(&key, (proto_ctx_key)k, ctx->value[k]);
	}
	if (proto_ctx_has(ctx, PROTO_CTX_PRESET))
		proto_ctx_set_preset(&key, ctx->preset);
	HASH_FIND(hh, table->layers, &key, sizeof key, layer);
	if (layer != NULL) {
		layer->refs++;
		return layer;
	}
	layer = calloc(1, sizeof *layer);
	if (layer == NULL) {
		*nomem = true;
		return NULL;
	}
	layer->ctx = key;
	layer->refs = 1;
	hash_oom = 0;
	HASH_ADD(hh, table->layers, ctx, sizeof layer->ctx, layer);
	if (hash_oom) {
		free(layer);
		*nomem = true;
		return NULL;
	}
	table->stats.policies++;
	return layer;
}

static void
layer_put(circuit_table *table, ct_layer *layer)
{
	if (layer == NULL || --layer->refs > 0)
		return;
	HASH_DEL(table->layers, layer);
	table->stats.policies--;
	free(layer);
}

/* ---- lists ------------------------------------------------------------ */

static bool
circuit_held(const circuit *c)
{
	return c->ext != NULL && c->ext->held;
}

static uint64_t
circuit_slots(const circuit *c)
{
	return c->ext != NULL ? c->ext->slot_count : 0;
}

/* Closed, not held, no slot (here or pinned): may be dropped when idle. */
static bool
circuit_reclaimable(const circuit *c)
{
	return c->snap.state == CB_STATE_CLOSED && !circuit_held(c) && circuit_slots(c) == 0 &&
	    (c->ext == NULL || c->ext->pins == 0);
}

static void
list_unlink(circuit_table *table, circuit *c)
{
	switch (c->list) {
	case LIST_IDLE:
		if (c->prev != NULL)
			c->prev->next = c->next;
		else
			table->idle_head = c->next;
		if (c->next != NULL)
			c->next->prev = c->prev;
		else
			table->idle_tail = c->prev;
		break;
	case LIST_PINNED:
		if (c->prev != NULL)
			c->prev->next = c->next;
		else
			table->pinned_head = c->next;
		if (c->next != NULL)
			c->next->prev = c->prev;
		break;
	}
	c->prev = c->next = NULL;
	c->list = LIST_NONE;
}

/* Link c into the idle list by its last use; a circuit used just now goes
 * at the tail at once. */
static void
idle_link(circuit_table *table, circuit *c)
{
	circuit *after = table->idle_tail;

	while (after != NULL && after->used_at > c->used_at)
		after = after->prev;
	c->prev = after;
	c->next = after != NULL ? after->next : table->idle_head;
	if (c->next != NULL)
		c->next->prev = c;
	else
		table->idle_tail = c;
	if (after != NULL)
		after->next = c;
	else
		table->idle_head = c;
	c->list = LIST_IDLE;
}

/* Put c on the list its state calls for. */
static void
circuit_relist(circuit_table *table, circuit *c)
{
	int want = circuit_reclaimable(c) ? LIST_IDLE : LIST_PINNED;

	if (c->list == want)
		return;
	list_unlink(table, c);
	if (want == LIST_IDLE) {
		idle_link(table, c);
		return;
	}
	c->next = table->pinned_head;
	if (c->next != NULL)
		c->next->prev = c;
	table->pinned_head = c;
	c->list = LIST_PINNED;
}

/* c was used at clock: it becomes the youngest idle circuit. */
static void
circuit_touch(circuit_table *table, circuit *c, int64_t clock)
{
	c->used_at = clock;
	if (c->list == LIST_IDLE && table->idle_tail != c) {
		list_unlink(table, c);
		idle_link(table, c);
	}
}

/* ---- slots and holds ---------------------------------------------------- */

/* c's extension, made when missing; NULL when out of memory. */
static circuit_ext *
ext_need(circuit *c)
{
	if (c->ext == NULL)
		c->ext = calloc(1, sizeof *c->ext);
	return c->ext;
}

/* Free c's extension once it holds nothing. */
static void
ext_trim(circuit *c)
{
	if (c->ext == NULL || c->ext->slot_count > 0 || c->ext->pins > 0 || c->ext->held ||
	    c->ext->window != NULL || c->ext->reporters != NULL || c->ext->transitions != NULL ||
	    c->ext->budget != NULL || c->ext->rejected_concurrency > 0 || c->ext->retries > 0 ||
	    c->ext->rejected_retry > 0)
		return;
	free(c->ext);
	c->ext = NULL;
}

/* Every transition empties the window (spec §3), and counts (metrics;
 * a count lost for lack of memory is the only loss). */
static void
transition_done(circuit *c, cb_state from)
{
	circuit_ext *x;

	if (c->snap.state == from)
		return;
	x = ext_need(c);
	if (x == NULL)
		return;
	if (x->window != NULL)
		window_reset(x->window);
	if (x->transitions == NULL)
		x->transitions = calloc(CB_STATE_COUNT * CB_STATE_COUNT, sizeof *x->transitions);
	if (x->transitions != NULL)
		x->transitions[from * CB_STATE_COUNT + c->snap.state]++;
}

/* Make c's window and reporters fit its policy: allocated for the rate
 * rule and for min_reporters > 1, freed when the policy no longer needs
 * them, and made anew when a reload changed the window's shape. False
 * when out of memory. */
static bool
ext_fit_policy(circuit *c, const cb_policy *p)
{
	bool rate = p->trip == CB_TRIP_RATE, gate = p->min_reporters > 1;
	circuit_ext *x = c->ext;

	if (x == NULL && !rate && !gate)
		return true;
	if (x == NULL && (x = ext_need(c)) == NULL)
		return false;
	if (x->window != NULL && (!rate || !window_fits(x->window, p->window, p->window_size))) {
		free(x->window);
		x->window = NULL;
	}
	if (rate && x->window == NULL) {
		x->window = malloc(window_bytes(p->window, p->window_size));
		if (x->window == NULL)
			return false;
		window_init(x->window, p->window, p->window_size);
	}
	if (x->reporters != NULL && (!gate || x->reporters->slots != (uint32_t)p->min_reporters)) {
		free(x->reporters);
		x->reporters = NULL;
	}
	if (gate && x->reporters == NULL) {
		x->reporters = malloc(breaker_reporters_bytes(p->min_reporters));
		if (x->reporters == NULL)
			return false;
		breaker_reporters_init(x->reporters, p->min_reporters);
	}
	ext_trim(c);
	return true;
}

/* Unlink a slot from its circuit (none: a circuit that could not be
 * restored), owner and token hash, then free it. */
static void
slot_free(circuit_table *table, ct_slot *slot)
{
	circuit_ext *x = slot->circuit != NULL ? slot->circuit->ext : NULL;

	if (x != NULL) {
		if (slot->prev != NULL)
			slot->prev->next = slot->next;
		else
			x->slots_head = slot->next;
		if (slot->next != NULL)
			slot->next->prev = slot->prev;
		else
			x->slots_tail = slot->prev;
		x->slot_count--;
		x->trial_count -= (slot->kind & SLOT_TRIAL) != 0;
		x->ticket_count -= (slot->kind & SLOT_TICKET) != 0;
	}
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

/* Clear c's hold (the state stays as it is). */
static void
hold_clear(circuit_table *table, circuit *c)
{
	circuit_ext *x = c->ext;

	if (x == NULL || !x->held)
		return;
	if (x->held_prev != NULL)
		x->held_prev->ext->held_next = x->held_next;
	else
		table->held_head = x->held_next;
	if (x->held_next != NULL)
		x->held_next->ext->held_prev = x->held_prev;
	x->held_prev = x->held_next = NULL;
	free(x->hold_user);
	free(x->hold_reason);
	x->hold_user = x->hold_reason = NULL;
	x->held = false;
	table->stats.held--;
}

/* A copy of text cut to at most max bytes (on a UTF-8 boundary); NULL
 * when text is NULL. *nomem on allocation failure. */
static char *
text_copy(const char *text, size_t max, bool *nomem)
{
	size_t len;
	char *copy;

	if (text == NULL)
		return NULL;
	len = strlen(text);
	if (len > max) {
		len = max;
		while (len > 0 && ((unsigned char)text[len] & 0xc0) == 0x80)
			len--;
	}
	copy = malloc(len + 1);
	if (copy == NULL) {
		*nomem = true;
		return NULL;
	}
	memcpy(copy, text, len);
	copy[len] = '\0';
	return copy;
}

/* Hold c in its current state (open or closed) from since until `until`
 * (CB_TIME_NONE: no ttl). False when out of memory (nothing changed). */
static bool
hold_set(circuit_table *table, circuit *c, int64_t since, int64_t until, int64_t uid,
    const char *user, const char *reason)
{
	bool nomem = false;
	char *user_copy = text_copy(user != NULL ? user : "", CT_USER_MAX, &nomem);
	char *reason_copy = text_copy(reason, CT_REASON_MAX, &nomem);
	circuit_ext *x = nomem ? NULL : ext_need(c);

	if (x == NULL) {
		free(user_copy);
		free(reason_copy);
		return false;
	}
	hold_clear(table, c);
	x->held = true;
	x->hold_state = c->snap.state;
	x->hold_since = since;
	x->hold_until = until;
	x->hold_uid = uid;
	x->hold_user = user_copy;
	x->hold_reason = reason_copy;
	x->held_prev = NULL;
	x->held_next = table->held_head;
	if (x->held_next != NULL)
		x->held_next->ext->held_prev = c;
	table->held_head = c;
	table->stats.held++;
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

/* A later change within the same call: keep the first `from`. */
static void
change_merge(ct_change *change, cb_state to, cb_reason reason)
{
	if (change == NULL || reason == CB_REASON_NONE)
		return;
	change->to = to;
	change->reason = reason;
}

/* End c's hold when its ttl has passed at now; true when it ended. */
static bool
hold_expire(circuit_table *table, circuit *c, int64_t now, ct_change *change)
{
	circuit_ext *x = c->ext;
	cb_reason reason;

	if (x == NULL || !x->held || x->hold_until == CB_TIME_NONE || now < x->hold_until)
		return false;
	cb_state from = c->snap.state;

	reason = breaker_hold_end(&c->snap, x->hold_state, now);
	transition_done(c, from);
	hold_clear(table, c);
	ext_trim(c);
	circuit_relist(table, c);
	change_merge(change, c->snap.state, reason);
	return true;
}

/* ---- circuits ------------------------------------------------------------ */

static circuit *
circuit_find(circuit_table *table, const char *name)
{
	circuit *c = table->found;
	size_t len = strlen(name);

	/* (The length first: most misses end there or a byte or two in.
	 * name_len is 16 bits: the NUL says a longer name ends there too.) */
	if (c != NULL && c->name_len == len && c->name[len] == '\0' &&
	    memcmp(c->name, name, len) == 0)
		return c;
	HASH_FIND(hh, table->circuits, name, len, c);
	if (c != NULL)
		table->found = c;
	return c;
}

/* Free a circuit, its slots, hold and policy reference. */
static void
circuit_destroy(circuit_table *table, circuit *c)
{
	/* A walk standing on c moves on to the circuit after it. */
	for (ct_cursor *cur = table->cursors; cur != NULL; cur = cur->next) {
		if (cur->at == c)
			cur->at = c->hh.next;
	}
	if (c->ext != NULL) {
		while (c->ext->slots_head != NULL)
			slot_free(table, c->ext->slots_head);
		hold_clear(table, c);
		free(c->ext->window);
		free(c->ext->reporters);
		free(c->ext->transitions);
		free(c->ext->budget);
		free(c->ext);
	}
	if (table->found == c)
		table->found = NULL;
	list_unlink(table, c);
	HASH_DEL(table->circuits, c);
	layer_put(table, c->declared);
	table->stats.circuits--;
	free(c);
}

/* Drop the longest-idle reclaimable circuit; with only_expired, only when
 * it has been idle for idle_ms at clock. True when one was dropped. */
static bool
reclaim_one(circuit_table *table, int64_t clock, bool only_expired)
{
	circuit *c = table->idle_head;

	if (c == NULL)
		return false;
	if (only_expired && (table->idle_ms <= 0 || clock - c->used_at < table->idle_ms))
		return false;
	if (only_expired)
		table->stats.reclaimed_idle++;
	else
		table->stats.reclaimed_capacity++;
	if (table->on_reclaim != NULL)
		table->on_reclaim(c->name, table->on_reclaim_arg);
	circuit_destroy(table, c);
	return true;
}

ct_status
circuit_table_make_room(circuit_table *table, int64_t clock)
{
	if (table->stats.circuits >= table->max_circuits && !reclaim_one(table, clock, false)) {
		table->stats.capacity_refusals++;
		return CT_CAPACITY;
	}
	return CT_OK;
}

/* Store a new closed circuit declaring `declared`, within max_circuits. */
static ct_status
circuit_create(circuit_table *table, const char *name, const proto_ctx *declared, int64_t clock,
    circuit **out)
{
	size_t len = strlen(name);
	bool nomem;
	circuit *c;

	if (table->stats.circuits >= table->max_circuits && !reclaim_one(table, clock, false)) {
		table->stats.capacity_refusals++;
		return CT_CAPACITY;
	}
	c = calloc(1, sizeof *c + len + 1);
	if (c == NULL)
		return CT_NOMEM;
	c->declared = layer_get(table, declared, &nomem);
	if (nomem) {
		free(c);
		return CT_NOMEM;
	}
	memcpy(c->name, name, len + 1);
	c->name_len = (uint16_t)len;
	c->policy_rev = rev_next(table);
	c->used_at = clock;
	breaker_snapshot_init(&c->snap);
	hash_oom = 0;
	HASH_ADD_KEYPTR(hh, table->circuits, c->name, len, c);
	if (hash_oom) {
		layer_put(table, c->declared);
		free(c);
		return CT_NOMEM;
	}
	table->stats.circuits++;
	circuit_relist(table, c);
	*out = c;
	return CT_OK;
}

/* The circuit of name, created for a write when missing. */
static ct_status
circuit_for_write(circuit_table *table, const char *name, const ct_call *call, circuit **out)
{
	*out = call->found != NULL ? call->found : circuit_find(table, name);
	if (*out != NULL)
		return CT_OK;
	return circuit_create(table, name, call->declared, call->clock, out);
}

static void
view_fill(const circuit_table *table, const circuit *c, ct_view *out)
{
	if (c == NULL || c->ext != NULL) {
		memset(out, 0, sizeof *out);
	} else {
		/* A closed circuit without extension (most): every member set
		 * below or here, without clearing the window's counts first. */
		out->hold = (ct_hold){ .held = false };
		out->slots = out->in_flight = 0;
		out->has_window = false;
		out->window = (cb_window_counts){ 0 };
		out->reporters = NULL;
		out->transitions = NULL;
	}
	if (c == NULL) {
		breaker_snapshot_init(&out->snap);
		out->hold.until = CB_TIME_NONE;
		out->policy_rev = table->unstored_rev;
		return;
	}
	out->stored = true;
	out->policy_rev = c->policy_rev;
	out->snap = c->snap;
	out->totals = (ct_totals){ .successes = c->totals.successes,
		.failures = c->totals.failures,
		.ignored = c->totals.ignored,
		.slow = c->totals.slow,
		.rejected = c->totals.rejected };
	if (c->ext != NULL) {
		out->totals.rejected_concurrency = c->ext->rejected_concurrency;
		out->totals.retries = c->ext->retries;
		out->totals.rejected_retry = c->ext->rejected_retry;
	}
	out->declared = c->declared != NULL ? &c->declared->ctx : NULL;
	out->hold.until = CB_TIME_NONE;
	if (c->ext != NULL) {
		out->slots = c->ext->slot_count;
		out->in_flight = c->ext->ticket_count;
		out->has_window = c->ext->window != NULL;
		if (c->ext->window != NULL)
			out->window = c->ext->window->counts;
		out->reporters = c->ext->reporters;
		out->transitions = c->ext->transitions;
		if (c->ext->held) {
			out->hold.held = true;
			out->hold.state = c->ext->hold_state;
			out->hold.since = c->ext->hold_since;
			out->hold.until = c->ext->hold_until;
			out->hold.by_uid = c->ext->hold_uid;
			out->hold.by_user = c->ext->hold_user != NULL ? c->ext->hold_user : "";
			out->hold.reason = c->ext->hold_reason;
		}
	}
}

/* view_fill, with a time window's expired buckets dropped at now. */
static void
view_at(const circuit_table *table, circuit *c, int64_t now, ct_view *out)
{
	if (c != NULL && c->ext != NULL && c->ext->window != NULL)
		window_counts(c->ext->window, now);
	view_fill(table, c, out);
}

void
circuit_table_free(circuit_table *table)
{
	circuit *c, *tmp;

	if (table == NULL)
		return;
	HASH_ITER (hh, table->circuits, c, tmp)
		circuit_destroy(table, c);
	free(table);
}

const proto_ctx *
circuit_table_use(circuit_table *table, const char *name, int64_t clock, bool *stored)
{
	struct circuit *found;

	return circuit_table_use_found(table, name, clock, stored, &found);
}

const proto_ctx *
circuit_table_use_found(circuit_table *table, const char *name, int64_t clock, bool *stored,
    struct circuit **found)
{
	circuit *c;

	for (int i = 0; i < CT_RECLAIM_PER_USE; i++) {
		if (!reclaim_one(table, clock, true))
			break;
	}
	c = circuit_find(table, name);
	*stored = c != NULL;
	*found = c;
	if (c == NULL)
		return NULL;
	circuit_touch(table, c, clock);
	return c->declared != NULL ? &c->declared->ctx : NULL;
}

static void
get_at(circuit_table *table, circuit *c, int64_t now, ct_view *out, ct_change *change)
{
	change_set(change, c != NULL ? c->snap.state : CB_STATE_CLOSED,
	    c != NULL ? c->snap.state : CB_STATE_CLOSED, CB_REASON_NONE);
	if (c != NULL)
		hold_expire(table, c, now, change);
	view_at(table, c, now, out);
}

void
circuit_table_get(circuit_table *table, const char *name, int64_t now, ct_view *out,
    ct_change *change)
{
	get_at(table, circuit_find(table, name), now, out, change);
}

void
circuit_table_get_call(circuit_table *table, const char *name, const ct_call *call, ct_view *out,
    ct_change *change)
{
	get_at(table, call->found != NULL ? call->found : circuit_find(table, name), call->now, out,
	    change);
}

/* Shared body of the outcomes: 0 ignore, 1 `count` successes alike, 2
 * failure, 3 `count` refusals made by a client on its own (counted,
 * nothing else). Inlined in each: outcome and count are constants there
 * but for counted successes and refusals (one success costs what it did
 * before counts). */
static inline __attribute__((always_inline)) ct_status
record_outcome(circuit_table *table, const char *name, const ct_call *call, int outcome,
    uint64_t count, ct_view *out, ct_change *change)
{
	circuit *c = call->found != NULL ? call->found : circuit_find(table, name);
	const cb_policy *policy = call->policy;
	cb_policy held; /* the policy as a held circuit applies it */
	cb_outcome o = { .failure = outcome == 2, .reporter = call->reporter };
	cb_reason reason;
	cb_state from;
	ct_status status;

	change_set(change, c != NULL ? c->snap.state : CB_STATE_CLOSED,
	    c != NULL ? c->snap.state : CB_STATE_CLOSED, CB_REASON_NONE);
	/* An ignored call or a client's refusals create nothing. */
	if ((outcome == 0 || outcome == 3) && c == NULL) {
		view_fill(table, NULL, out);
		return CT_OK;
	}
	status = circuit_for_write(table, name, call, &c);
	if (status != CT_OK) {
		view_fill(table, NULL, out);
		return status;
	}
	hold_expire(table, c, call->now, change);
	if (outcome == 0 || outcome == 3) {
		if (outcome == 0)
			c->totals.ignored++;
		else
			c->totals.rejected += count;
		view_at(table, c, call->now, out);
		return CT_OK;
	}
	if (!ext_fit_policy(c, policy)) {
		view_at(table, c, call->now, out);
		return CT_NOMEM;
	}
	o.slow = policy->slow_call_ms > 0 && call->duration_ms >= policy->slow_call_ms;
	c->totals.slow += o.slow ? count : 0;
	if (o.failure)
		c->totals.failures++;
	else
		c->totals.successes += count;
	o.window = policy->trip == CB_TRIP_RATE && c->ext != NULL ? c->ext->window : NULL;
	o.reporters = c->ext != NULL ? c->ext->reporters : NULL;
	/* A held circuit counts its calls but no rule moves it: held open
	 * only sees stragglers; held closed never reaches a threshold. */
	if (circuit_held(c)) {
		held = *policy;
		held.trip = CB_TRIP_CONSECUTIVE;
		held.failure_threshold = CB_COUNT_MAX;
		policy = &held;
		o.window = NULL;
	}
	from = c->snap.state;
	if (count == 1) {
		reason = breaker_on_outcome(&c->snap, policy, call->now, &o);
		change_merge(change, c->snap.state, reason);
		transition_done(c, from);
	} else {
		/* `count` successes alike: in bulk, a step for each transition
		 * (the window emptied between them, as between separate calls). */
		do {
			uint64_t n = count;

			from = c->snap.state;
			reason = breaker_on_successes(&c->snap, policy, call->now, &o, &n);
			change_merge(change, c->snap.state, reason);
			transition_done(c, from);
			count -= n;
		} while (count > 0);
	}
	circuit_relist(table, c);
	view_at(table, c, call->now, out);
	return CT_OK;
}

ct_status
circuit_table_record_success(circuit_table *table, const char *name, const ct_call *call,
    ct_view *out, ct_change *change)
{
	return record_outcome(table, name, call, 1, 1, out, change);
}

ct_status
circuit_table_record_successes(circuit_table *table, const char *name, const ct_call *call,
    uint64_t count, ct_view *out, ct_change *change)
{
	return record_outcome(table, name, call, 1, count < 1 ? 1 : count, out, change);
}

ct_status
circuit_table_record_failure(circuit_table *table, const char *name, const ct_call *call,
    ct_view *out, ct_change *change)
{
	return record_outcome(table, name, call, 2, 1, out, change);
}

void
circuit_table_record_ignore(circuit_table *table, const char *name, const ct_call *call,
    ct_view *out, ct_change *change)
{
	record_outcome(table, name, call, 0, 1, out, change);
}

void
circuit_table_record_rejected(circuit_table *table, const char *name, const ct_call *call,
    uint64_t count, ct_view *out, ct_change *change)
{
	record_outcome(table, name, call, 3, count, out, change);
}

ct_status
circuit_table_cas(circuit_table *table, const char *name, cb_state from, cb_state to,
    const ct_call *call, bool *applied, ct_view *out, ct_change *change)
{
	circuit *c = circuit_find(table, name);
	cb_state current;
	ct_status status;

	*applied = false;
	change_set(change, c != NULL ? c->snap.state : CB_STATE_CLOSED,
	    c != NULL ? c->snap.state : CB_STATE_CLOSED, CB_REASON_NONE);
	if (c != NULL)
		hold_expire(table, c, call->now, change);
	current = c != NULL ? c->snap.state : CB_STATE_CLOSED;
	if (current != from || (c != NULL && circuit_held(c))) {
		view_at(table, c, call->now, out);
		return CT_OK;
	}
	status = circuit_for_write(table, name, call, &c);
	if (status != CT_OK) {
		view_fill(table, NULL, out);
		return status;
	}
	breaker_force(&c->snap, to, call->now);
	change_merge(change, to, from == to ? CB_REASON_NONE : CB_REASON_CAS);
	transition_done(c, from);
	circuit_relist(table, c);
	*applied = true;
	view_at(table, c, call->now, out);
	return CT_OK;
}

ct_status
circuit_table_set_state(circuit_table *table, const char *name, cb_state state,
    const ct_hold_request *hold, const ct_call *call, ct_view *out, ct_change *change)
{
	circuit *c;
	cb_snapshot before;
	ct_status status = circuit_for_write(table, name, call, &c);

	if (status != CT_OK) {
		change_set(change, CB_STATE_CLOSED, CB_STATE_CLOSED, CB_REASON_NONE);
		view_fill(table, NULL, out);
		return status;
	}
	before = c->snap;
	change_set(change, before.state, before.state, CB_REASON_NONE);
	breaker_force(&c->snap, state, call->now);
	/* Every transition empties the window, forced ones too. */
	transition_done(c, before.state);
	if (hold != NULL) {
		int64_t until = hold->ttl_ms > 0 ? call->now + hold->ttl_ms : CB_TIME_NONE;

		if (!hold_set(table, c, call->now, until, hold->by_uid, hold->by_user,
			hold->reason)) {
			c->snap = before;
			circuit_relist(table, c);
			view_fill(table, c, out);
			return CT_NOMEM;
		}
		change_merge(change, state, CB_REASON_HELD);
	} else {
		bool was_held = circuit_held(c);

		hold_clear(table, c);
		ext_trim(c);
		change_merge(change, state,
		    before.state != state || was_held ? CB_REASON_FORCED : CB_REASON_NONE);
	}
	circuit_relist(table, c);
	view_at(table, c, call->now, out);
	return CT_OK;
}

void
circuit_table_release(circuit_table *table, const char *name, const ct_call *call, bool *released,
    ct_view *out, ct_change *change)
{
	circuit *c = circuit_find(table, name);

	*released = false;
	change_set(change, c != NULL ? c->snap.state : CB_STATE_CLOSED,
	    c != NULL ? c->snap.state : CB_STATE_CLOSED, CB_REASON_NONE);
	if (c != NULL && circuit_held(c)) {
		cb_state from = c->snap.state;

		breaker_hold_end(&c->snap, c->ext->hold_state, call->now);
		transition_done(c, from);
		hold_clear(table, c);
		ext_trim(c);
		circuit_relist(table, c);
		change_merge(change, c->snap.state, CB_REASON_RELEASED);
		*released = true;
	}
	view_at(table, c, call->now, out);
}

/* Free the circuit's slots whose ttl ran out (they are sorted by expiry). */
static void
slots_prune_expired(circuit_table *table, circuit *c, int64_t now)
{
	while (
	    c->ext != NULL && c->ext->slots_head != NULL && now >= c->ext->slots_head->expires_at) {
		slot_free(table, c->ext->slots_head);
		table->stats.slots_expired++;
	}
}

/* Insert a slot keeping the circuit's list sorted by expires_at; with one
 * ttl per circuit this is an append. */
static void
slot_link_sorted(circuit_ext *x, ct_slot *slot)
{
	ct_slot *after = x->slots_tail;

	while (after != NULL && after->expires_at > slot->expires_at)
		after = after->prev;
	slot->prev = after;
	slot->next = after != NULL ? after->next : x->slots_head;
	if (slot->next != NULL)
		slot->next->prev = slot;
	else
		x->slots_tail = slot;
	if (after != NULL)
		after->next = slot;
	else
		x->slots_head = slot;
	x->slot_count++;
}

/* "%016x-%016x" of id and n into token (CT_TOKEN_SIZE), without printf:
 * every allow of a circuit with a ticket makes one. */
static void
token_format(char *token, uint64_t id, uint64_t n)
{
	static const char hex[] = "0123456789abcdef";

	for (int i = 15; i >= 0; i--, id >>= 4)
		token[i] = hex[id & 0xf];
	token[16] = '-';
	for (int i = 32; i >= 17; i--, n >>= 4)
		token[i] = hex[n & 0xf];
	token[33] = '\0';
}

/* Take a slot on an existing circuit c if one is free. */
static ct_status
slot_take(circuit_table *table, circuit *c, const ct_call *call, unsigned kind, const char *token,
    bool *acquired, ct_slot_grant *grant)
{
	circuit_ext *x;
	ct_slot *slot;

	slots_prune_expired(table, c, call->now);
	*acquired = false;
	if ((kind & SLOT_TRIAL) && c->ext != NULL &&
	    c->ext->trial_count >= (uint64_t)call->policy->half_open_max)
		return CT_OK;
	if ((kind & SLOT_TICKET) && c->ext != NULL &&
	    c->ext->ticket_count >= (uint64_t)call->policy->max_concurrent)
		return CT_OK;
	if (table->max_slots > 0 && table->stats.slots >= table->max_slots) {
		table->stats.slot_refusals++;
		return CT_SLOTS;
	}
	x = ext_need(c);
	slot = x != NULL ? calloc(1, sizeof *slot) : NULL;
	if (slot == NULL)
		return CT_NOMEM;
	if (token != NULL)
		snprintf(slot->token, sizeof slot->token, "%s", token);
	else
		token_format(slot->token, table->instance_id, table->next_token);
	hash_oom = 0;
	HASH_ADD_STR(table->slots_by_token, token, slot);
	if (hash_oom) {
		free(slot);
		return CT_NOMEM;
	}
	table->next_token++;
	slot->circuit = c;
	slot->expires_at = call->now + call->policy->slot_ttl_ms;
	slot->kind = (uint8_t)kind;
	slot_link_sorted(x, slot);
	x->trial_count += (kind & SLOT_TRIAL) != 0;
	x->ticket_count += (kind & SLOT_TICKET) != 0;
	if (call->owner != NULL) {
		slot->owner = call->owner;
		slot->owner_next = call->owner->slots;
		if (call->owner->slots != NULL)
			call->owner->slots->owner_prev = slot;
		call->owner->slots = slot;
	}
	table->stats.slots++;
	*acquired = true;
	memcpy(grant->token, slot->token, sizeof grant->token);
	grant->expires_at = slot->expires_at;
	return CT_OK;
}

ct_status
circuit_table_acquire_slot(circuit_table *table, const char *name, const ct_call *call,
    bool *acquired, ct_slot_grant *grant)
{
	circuit *c;
	ct_status status = circuit_for_write(table, name, call, &c);

	*acquired = false;
	if (status != CT_OK)
		return status;
	hold_expire(table, c, call->now, NULL);
	status = slot_take(table, c, call, SLOT_TRIAL, NULL, acquired, grant);
	ext_trim(c);
	circuit_relist(table, c);
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
	ext_trim(c);
	circuit_relist(table, c);
	return live;
}

void
circuit_table_release_owner(circuit_table *table, ct_owner *owner)
{
	while (owner->slots != NULL) {
		circuit *c = owner->slots->circuit;

		slot_free(table, owner->slots);
		ext_trim(c);
		circuit_relist(table, c);
	}
}

int64_t
circuit_table_retry_after(const ct_view *view, const cb_policy *policy, int64_t now)
{
	const ct_hold *h = &view->hold;

	if (h->held && h->state == CB_STATE_OPEN) {
		if (h->until == CB_TIME_NONE)
			return policy->break_ms;
		if (now >= h->until)
			return 0;
		/* A clock behind the hold's start counts as no time elapsed. */
		return now > h->since ? h->until - now : h->until - h->since;
	}
	return breaker_retry_after_ms(&view->snap, policy, now);
}

/* The bucket of second sec in b, emptied when it held an older second
 * (a clock gone back counts in the newer bucket it finds). */
static unsigned
budget_bucket(ct_budget *b, int64_t sec)
{
	unsigned i =
	    (unsigned)(((sec % CB_RETRY_WINDOW_S) + CB_RETRY_WINDOW_S) % CB_RETRY_WINDOW_S);

	if (b->sec[i] < sec) {
		b->sec[i] = sec;
		b->first[i] = 0;
		b->retries[i] = 0;
	}
	return i;
}

/* ⌊now / 1000⌋, rounding down for a clock before the epoch too. */
static int64_t
budget_second(int64_t now)
{
	return now >= 0 ? now / 1000 : -((-now + 999) / 1000);
}

/* c's retry budget counts, made when its policy has a budget; NULL when
 * it has none (or out of memory: the budget is not applied then). */
static ct_budget *
budget_need(circuit *c, const cb_policy *policy)
{
	circuit_ext *x = c->ext;

	if (policy->retry_budget_percent < 0) {
		if (x != NULL && x->budget != NULL) {
			free(x->budget);
			x->budget = NULL;
		}
		return NULL;
	}
	if (x == NULL && (x = ext_need(c)) == NULL)
		return NULL;
	if (x->budget == NULL) {
		x->budget = malloc(sizeof *x->budget);
		if (x->budget == NULL)
			return NULL;
		for (unsigned i = 0; i < CB_RETRY_WINDOW_S; i++) {
			x->budget->sec[i] = INT64_MIN;
			x->budget->first[i] = x->budget->retries[i] = 0;
		}
	}
	return x->budget;
}

/* Protocol 3, §3: may one more retry go at now? Over the buckets of the
 * last CB_RETRY_WINDOW_S seconds, retries (counting this one) <=
 * max(retry_min_per_s * 10, first attempts * percent / 100). When not,
 * *retry_after_ms: until the oldest retry leaves the window. */
static bool
budget_grants(const ct_budget *b, const cb_policy *p, int64_t now, int64_t *retry_after_ms)
{
	int64_t cur = budget_second(now), oldest = INT64_MAX;
	uint64_t first = 0, retries = 0;

	for (unsigned i = 0; i < CB_RETRY_WINDOW_S; i++) {
		if (b->sec[i] > cur || b->sec[i] <= cur - CB_RETRY_WINDOW_S)
			continue;
		first += b->first[i];
		retries += b->retries[i];
		if (b->retries[i] > 0 && b->sec[i] < oldest)
			oldest = b->sec[i];
	}
	retries++;
	if (retries <= (uint64_t)p->retry_min_per_s * CB_RETRY_WINDOW_S ||
	    retries * 100 <= first * (uint64_t)p->retry_budget_percent)
		return true;
	/* No retry in the window to leave it: the next second's bucket. */
	if (oldest == INT64_MAX)
		oldest = cur - CB_RETRY_WINDOW_S + 1;
	*retry_after_ms = (oldest + CB_RETRY_WINDOW_S) * 1000 - now;
	return false;
}

const char *
circuit_table_refusal_name(ct_refusal reason)
{
	switch (reason) {
	case CT_REFUSED_NONE:
		break;
	case CT_REFUSED_OPEN:
		return "open";
	case CT_REFUSED_HELD:
		return "held";
	case CT_REFUSED_HALF_OPEN_FULL:
		return "half_open_full";
	case CT_REFUSED_CONCURRENCY:
		return "concurrency";
	case CT_REFUSED_RETRY_BUDGET:
		return "retry_budget";
	}
	return NULL;
}

/* c's retry budget, with call counted when it is a first attempt (the
 * budget counts every first attempt, granted or not); NULL when the
 * policy has no budget, or for a waiting allow's later attempt (counted
 * when it came). */
static ct_budget *
budget_count_first(circuit *c, const ct_call *call)
{
	ct_budget *budget;

	if (call->again)
		return NULL;
	budget = budget_need(c, call->policy);
	if (budget != NULL && !call->retry)
		budget->first[budget_bucket(budget, budget_second(call->now))]++;
	return budget;
}

/* allow past the breaker: the retry budget (2), then the bulkhead (3),
 * then the grant, taking a slot of `kind` (a trial) and a ticket when
 * the policy has a limit, named token (NULL: a new one). */
static ct_status
allow_admit(circuit_table *table, circuit *c, const ct_call *call, ct_budget *budget, unsigned kind,
    const char *token, ct_allow *out)
{
	const cb_policy *policy = call->policy;
	ct_status status;
	bool acquired;

	/* 2. The retry budget. */
	if (call->retry && budget != NULL &&
	    !budget_grants(budget, policy, call->now, &out->retry_after_ms)) {
		EXT_COUNT(c, rejected_retry);
		out->reason = CT_REFUSED_RETRY_BUDGET;
		return CT_OK;
	}
	/* 3. The bulkhead. */
	if (policy->max_concurrent > 0) {
		kind |= SLOT_TICKET;
		slots_prune_expired(table, c, call->now);
		if (c->ext != NULL && c->ext->ticket_count >= (uint64_t)policy->max_concurrent) {
			if (!call->wait)
				EXT_COUNT(c, rejected_concurrency);
			out->reason = CT_REFUSED_CONCURRENCY;
			out->in_flight = c->ext->ticket_count;
			return CT_OK;
		}
	}
	if (kind != 0) {
		status = slot_take(table, c, call, kind, token, &acquired, &out->permit);
		if (status != CT_OK)
			return status;
		if (!acquired) {
			c->totals.rejected++;
			out->reason = CT_REFUSED_HALF_OPEN_FULL;
			return CT_OK;
		}
		out->has_permit = true;
	}
	out->allowed = true;
	if (call->retry) {
		EXT_COUNT(c, retries);
		if (c->ext != NULL && c->ext->budget != NULL)
			c->ext->budget
			    ->retries[budget_bucket(c->ext->budget, budget_second(call->now))]++;
	}
	return CT_OK;
}

ct_status
circuit_table_allow_local(circuit_table *table, const char *name, const ct_call *call,
    ct_allow *out)
{
	ct_budget *budget;
	ct_slot_grant elsewhere = out->permit;
	bool had_permit = out->has_permit;
	circuit *c;
	ct_status status = circuit_for_write(table, name, call, &c);

	if (status != CT_OK)
		return status;
	budget = budget_count_first(c, call);
	if (out->allowed) {
		out->allowed = false;
		out->has_permit = false;
		status = allow_admit(table, c, call, budget, 0, had_permit ? elsewhere.token : NULL,
		    out);
		/* No ticket taken (no limit): the trial slot held elsewhere is
		 * the permit. */
		if (out->allowed && !out->has_permit && had_permit) {
			out->has_permit = true;
			out->permit = elsewhere;
		}
	}
	ext_trim(c);
	circuit_relist(table, c);
	return status;
}

ct_status
circuit_table_allow(circuit_table *table, const char *name, const ct_call *call, ct_allow *out,
    ct_view *view, ct_change *change)
{
	const cb_policy *policy = call->policy;
	ct_budget *budget;
	ct_view scratch;
	circuit *c;
	ct_status status;
	unsigned kind = 0;

	if (view == NULL)
		view = &scratch;
	memset(out, 0, sizeof *out);
	change_set(change, CB_STATE_CLOSED, CB_STATE_CLOSED, CB_REASON_NONE);
	status = circuit_for_write(table, name, call, &c);
	if (status != CT_OK) {
		view_fill(table, NULL, view);
		return status;
	}
	change_set(change, c->snap.state, c->snap.state, CB_REASON_NONE);
	hold_expire(table, c, call->now, change);
	if (!circuit_held(c)) {
		cb_state from = c->snap.state;
		cb_reason reason = breaker_on_allow(&c->snap, policy, call->now);

		change_merge(change, c->snap.state, reason);
		transition_done(c, from);
	}
	out->state = c->snap.state;
	budget = budget_count_first(c, call);
	/* 1. The breaker. */
	switch (c->snap.state) {
	case CB_STATE_CLOSED:
		break;
	case CB_STATE_OPEN:
		c->totals.rejected++;
		out->reason = circuit_held(c) ? CT_REFUSED_HELD : CT_REFUSED_OPEN;
		view_at(table, c, call->now, view);
		out->retry_after_ms = circuit_table_retry_after(view, policy, call->now);
		goto done;
	case CB_STATE_HALF_OPEN:
		slots_prune_expired(table, c, call->now);
		kind = SLOT_TRIAL;
		if (c->ext != NULL && c->ext->trial_count >= (uint64_t)policy->half_open_max) {
			c->totals.rejected++;
			out->reason = CT_REFUSED_HALF_OPEN_FULL;
			/* Refused: the earliest a held slot frees up. */
			if (c->ext->slots_head != NULL)
				out->retry_after_ms = c->ext->slots_head->expires_at - call->now;
			goto done;
		}
		break;
	}
	status = allow_admit(table, c, call, budget, kind, NULL, out);
done:
	ext_trim(c);
	circuit_relist(table, c);
	if (view != &scratch)
		view_at(table, c, call->now, view);
	else if (c->ext != NULL && c->ext->window != NULL)
		window_counts(c->ext->window, call->now); /* as view_at reads it */
	return status;
}

void
circuit_table_count_waited(circuit_table *table, const char *name)
{
	circuit *c = circuit_find(table, name);

	if (c != NULL)
		EXT_COUNT(c, rejected_concurrency);
}

bool
circuit_table_next_expiry(circuit_table *table, const char *name, int64_t *at)
{
	circuit *c = circuit_find(table, name);

	if (c == NULL || c->ext == NULL || c->ext->slots_head == NULL)
		return false;
	*at = c->ext->slots_head->expires_at;
	return true;
}

bool
circuit_table_delete(circuit_table *table, const char *name)
{
	circuit *c = circuit_find(table, name);

	if (c == NULL)
		return false;
	circuit_destroy(table, c);
	return true;
}

ct_status
circuit_table_restore(circuit_table *table, const char *name, const ct_view *view, int64_t clock)
{
	circuit *c = circuit_find(table, name);
	uint32_t *transitions = NULL, pins = 0, rev = 0;
	ct_layer *declared = NULL;
	ct_status status;
	/* This host's own: its slots and tickets, retry budget and counts. */
	ct_slot *slots_head = NULL, *slots_tail = NULL;
	uint64_t slot_count = 0, trial_count = 0, ticket_count = 0;
	ct_budget *budget = NULL;
	ct_totals own = { 0 };

	/* What the circuit this one replaces counted and pinned stays, and
	 * its policy_rev when it was created with the same policy (a fleet
	 * copy refreshed from Redis is the same circuit). */
	if (c != NULL) {
		rev = c->policy_rev;
		declared = c->declared;
		if (declared != NULL)
			declared->refs++; /* compared below, after c is gone */
	}
	if (c != NULL && c->ext != NULL) {
		own.rejected_concurrency = c->ext->rejected_concurrency;
		own.retries = c->ext->retries;
		own.rejected_retry = c->ext->rejected_retry;
	}
	if (c != NULL && c->ext != NULL) {
		circuit_ext *x = c->ext;

		transitions = x->transitions;
		pins = x->pins;
		x->transitions = NULL;
		slots_head = x->slots_head;
		slots_tail = x->slots_tail;
		slot_count = x->slot_count;
		trial_count = x->trial_count;
		ticket_count = x->ticket_count;
		budget = x->budget;
		x->slots_head = x->slots_tail = NULL;
		x->slot_count = x->trial_count = x->ticket_count = 0;
		x->budget = NULL;
	}
	circuit_table_delete(table, name);
	c = NULL;
	status = circuit_create(table, name, view->declared, clock, &c);
	if (status == CT_OK && rev != 0 && c->declared == declared)
		c->policy_rev = rev; /* interned: the same layer is the same policy */
	layer_put(table, declared);
	if (status == CT_OK &&
	    (transitions != NULL || pins > 0 || slots_head != NULL || budget != NULL) &&
	    ext_need(c) == NULL)
		status = CT_NOMEM;
	if (status != CT_OK) {
		free(transitions);
		free(budget);
		/* The slots go (their circuit is gone). */
		while (slots_head != NULL) {
			ct_slot *next = slots_head->next;

			slots_head->circuit = NULL;
			slot_free(table, slots_head);
			slots_head = next;
		}
		if (c != NULL && status == CT_NOMEM)
			circuit_destroy(table, c);
		return status;
	}
	if (c->ext != NULL) {
		c->ext->transitions = transitions;
		c->ext->pins = pins;
		c->ext->slots_head = slots_head;
		c->ext->slots_tail = slots_tail;
		c->ext->slot_count = slot_count;
		c->ext->trial_count = trial_count;
		c->ext->ticket_count = ticket_count;
		c->ext->budget = budget;
		for (ct_slot *s = slots_head; s != NULL; s = s->next)
			s->circuit = c;
	}
	c->snap = view->snap;
	c->totals = (circuit_totals){ .successes = view->totals.successes,
		.failures = view->totals.failures,
		.ignored = view->totals.ignored,
		.slow = view->totals.slow,
		.rejected = view->totals.rejected };
	own.rejected_concurrency += view->totals.rejected_concurrency;
	own.retries += view->totals.retries;
	own.rejected_retry += view->totals.rejected_retry;
	if ((own.rejected_concurrency > 0 || own.retries > 0 || own.rejected_retry > 0) &&
	    ext_need(c) != NULL) {
		c->ext->rejected_concurrency = own.rejected_concurrency;
		c->ext->retries = own.retries;
		c->ext->rejected_retry = own.rejected_retry;
	}
	if (view->hold.held) {
		/* The hold keeps the state it was placed on. */
		c->snap.state = view->hold.state;
		if (!hold_set(table, c, view->hold.since, view->hold.until, view->hold.by_uid,
			view->hold.by_user, view->hold.reason)) {
			circuit_destroy(table, c);
			return CT_NOMEM;
		}
	}
	circuit_relist(table, c);
	return CT_OK;
}

void
circuit_table_count_transition(circuit_table *table, const char *name, cb_state from, cb_state to)
{
	circuit *c = circuit_find(table, name);
	circuit_ext *x;

	if (c == NULL || from == to || (x = ext_need(c)) == NULL)
		return;
	if (x->transitions == NULL)
		x->transitions = calloc(CB_STATE_COUNT * CB_STATE_COUNT, sizeof *x->transitions);
	if (x->transitions != NULL)
		x->transitions[from * CB_STATE_COUNT + to]++;
}

uint32_t
circuit_table_policy_rev(circuit_table *table, const char *name)
{
	circuit *c = circuit_find(table, name);

	return c != NULL ? c->policy_rev : table->unstored_rev;
}

void
circuit_table_renew_policies(circuit_table *table, int64_t now, ct_policy_changed_fn changed,
    ct_visit_fn renewed, void *arg)
{
	circuit *c, *tmp;
	ct_view view;

	table->unstored_rev = rev_next(table);
	HASH_ITER (hh, table->circuits, c, tmp) {
		view_fill(table, c, &view);
		if (!changed(c->name, &view, arg))
			continue;
		c->policy_rev = rev_next(table);
		if (renewed != NULL) {
			view_at(table, c, now, &view);
			renewed(c->name, &view, arg);
		}
	}
}

bool
circuit_table_pin(circuit_table *table, const char *name, bool pin)
{
	circuit *c = circuit_find(table, name);
	circuit_ext *x;

	if (c == NULL || (x = pin ? ext_need(c) : c->ext) == NULL)
		return false;
	if (pin)
		x->pins++;
	else if (x->pins > 0)
		x->pins--;
	else
		return false;
	ext_trim(c);
	circuit_relist(table, c);
	return true;
}

void
circuit_table_expire_holds(circuit_table *table, int64_t now, ct_change_fn fn, void *arg)
{
	circuit *c = table->held_head;

	while (c != NULL) {
		circuit *next = c->ext->held_next;
		ct_change change;

		change_set(&change, c->snap.state, c->snap.state, CB_REASON_NONE);
		if (hold_expire(table, c, now, &change) && fn != NULL)
			fn(c->name, &change, arg);
		c = next;
	}
}

uint64_t
circuit_table_reclaim_idle(circuit_table *table, int64_t clock, uint64_t max)
{
	uint64_t n = 0;

	while (n < max && reclaim_one(table, clock, true))
		n++;
	return n;
}

void
circuit_table_foreach(circuit_table *table, int64_t now, ct_visit_fn visit, void *arg)
{
	circuit *c, *tmp;
	ct_view view;

	HASH_ITER (hh, table->circuits, c, tmp) {
		view_at(table, c, now, &view);
		visit(c->name, &view, arg);
	}
}

void
circuit_table_cursor_open(circuit_table *table, ct_cursor *cursor)
{
	cursor->prev = NULL;
	cursor->next = table->cursors;
	if (table->cursors != NULL)
		table->cursors->prev = cursor;
	table->cursors = cursor;
	cursor->at = table->circuits; /* uthash's order: creation order */
}

uint64_t
circuit_table_cursor_next(circuit_table *table, ct_cursor *cursor, int64_t now, uint64_t max,
    ct_visit_fn visit, void *arg)
{
	uint64_t n = 0;
	ct_view view;

	(void)table;
	while (cursor->at != NULL && n < max) {
		circuit *c = cursor->at;

		cursor->at = c->hh.next;
		view_at(table, c, now, &view);
		visit(c->name, &view, arg);
		n++;
	}
	return n;
}

void
circuit_table_cursor_seek(circuit_table *table, ct_cursor *cursor, const char *name)
{
	circuit *c = circuit_find(table, name);

	if (c != NULL)
		cursor->at = c;
}

void
circuit_table_cursor_close(circuit_table *table, ct_cursor *cursor)
{
	if (cursor->prev != NULL)
		cursor->prev->next = cursor->next;
	else if (table->cursors == cursor)
		table->cursors = cursor->next;
	if (cursor->next != NULL)
		cursor->next->prev = cursor->prev;
	cursor->prev = cursor->next = NULL;
	cursor->at = NULL;
}

uint64_t
circuit_table_foreach_recent(circuit_table *table, int64_t now, uint64_t max, ct_visit_fn visit,
    void *arg)
{
	uint64_t n = 0;
	ct_view view;

	for (circuit *c = table->pinned_head; c != NULL && n < max; c = c->next, n++) {
		view_at(table, c, now, &view);
		visit(c->name, &view, arg);
	}
	for (circuit *c = table->idle_tail; c != NULL && n < max; c = c->prev, n++) {
		view_at(table, c, now, &view);
		visit(c->name, &view, arg);
	}
	return n;
}

bool
circuit_table_peek(circuit_table *table, const char *name, ct_view *out)
{
	circuit *c = circuit_find(table, name);

	if (c == NULL)
		return false;
	view_fill(table, c, out);
	return true;
}

bool
circuit_table_peek_at(circuit_table *table, const char *name, int64_t now, ct_view *out)
{
	circuit *c = circuit_find(table, name);

	if (c == NULL)
		return false;
	view_at(table, c, now, out);
	return true;
}

void
circuit_table_foreach_pinned(circuit_table *table, ct_visit_fn visit, void *arg)
{
	ct_view view;

	for (circuit *c = table->pinned_head; c != NULL; c = c->next) {
		view_fill(table, c, &view);
		visit(c->name, &view, arg);
	}
}
