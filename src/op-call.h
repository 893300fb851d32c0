/* SPDX-License-Identifier: Apache-2.0 */
/*
 * op-call.h — the op kernel: one request being answered (op_call, filled by
 * the dispatcher's generic validation), the row type of the op table, the
 * ops' per-connection slot, and what every handler uses to answer: the
 * reply and its snapshots, table statuses as errors, the audit line.
 */
#ifndef CBD_OP_CALL_H
#define CBD_OP_CALL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "breaker.h"
#include "circuit-table.h"
#include "encode.h"
#include "proto.h"
#include "server-client.h"

/* Op flags. */
#define OP_ADMIN 0x1u /* only for admin peers */
#define OP_WRITE 0x2u /* may store state, so may answer capacity */
#define OP_NAME 0x4u /* needs a valid "name" */
#define OP_CTX 0x8u /* reads ctx: policy and now resolved before the handler */
#define OP_REPLIES 0x10u /* always answered: "noreply" is ignored */
/* Reads its request only through call->req (never call->request) and is
 * answered at once: takes the decoder's flat view as it is. Other ops get
 * the request as jansson values (call->request). */
#define OP_FLAT 0x40u
/* Its snapshots carry the policy unless the request says "policy": false
 * (get); other ops' carry it only with "policy": true (protocol 3, §1). */
#define OP_POLICY 0x80u
/* Its handler writes the reply's members as text, in the reply's order
 * (op_reply_bool, op_reply_allow, op_reply_snapshot): in memory mode the
 * reply is encoded straight into the connection's output (op_call.direct)
 * unless noreply or the request's ctx conflicts with the policy. */
#define OP_DIRECT 0x100u

typedef struct op_entry op_entry;

/* What the ops keep for one connection: its slot (server_client.slot),
 * made on first use. */
typedef struct op_conn {
	/* Fleet mode: the request waiting on Redis for its reply (no other
	 * line is read until it is answered), every request of this
	 * connection Redis has not answered (noreply ones do not block), and
	 * the slots held in Redis. */
	struct op_pending *fleet_wait;
	struct op_pending *fleet_pending;
	unsigned fleet_inflight;
	/* Its requests waiting for room in Redis (FLEET_INFLIGHT_MAX): while
	 * one does, no other line is read. */
	unsigned fleet_queued;
	struct op_fleet_slot *fleet_slots;
	/* A list being answered in steps (no other line is read meanwhile). */
	struct op_list_job *list_job;
	struct op_watch_job *watch_job; /* a watch answered in steps */
	/* Where this connection's paged listing stands (its last list). */
	struct op_list_cursor *list_cursor;
	/* An allow waiting for a ticket (op-wait.c): no other line is read
	 * meanwhile. */
	struct op_waiter *wait;
} op_conn;

/* c's op state, made on first use; NULL when out of memory. */
op_conn *op_conn_of(server_client *c);
/* c's op state if it has one yet (NULL: none). */
static inline op_conn *
op_conn_peek(const server_client *c)
{
	return c->slot;
}

/* One request being answered; filled by generic validation. */
typedef struct op_call {
	server_client *client;
	proto_req req; /* the request, flat or as jansson values */
	const json_t *request; /* the request as jansson values; NULL for OP_FLAT ops
				  given a flat view */
	const char *name; /* OP_NAME */
	bool stored; /* OP_NAME + OP_CTX: the circuit existed before this request */
	/* OP_NAME + OP_CTX: the circuit as op_resolve_policy found it (NULL:
	 * none, or fleet mode), for the handler's table call (ct_call's
	 * found, set just before it); never read once the loop has turned (a
	 * waiter's copy). */
	struct circuit *found;
	proto_ctx ctx; /* OP_CTX: the request's ctx */
	cb_policy policy; /* OP_CTX: the circuit's effective policy */
	proto_policy_sources sources; /* OP_CTX: where each policy key came from */
	const char *preset; /* OP_CTX: the effective preset (NULL: none) */
	const proto_ctx
	    *declared; /* OP_CTX: the policy the circuit was (or would be) created with */
	uint32_t conflicts; /* OP_CTX: ctx members that differ from policy */
	int64_t now; /* OP_CTX: ctx.now or the clock */
	int64_t clock; /* the daemon's clock (idleness, audit) */
	ct_call table; /* OP_CTX: what the circuit table takes */
	json_t *reply; /* the ok reply's members (op_reply): NULL until one is added */
	/* Members already encoded as text, written after reply's; when
	 * direct, the whole reply so far, in the connection's output. */
	enc_buf tail;
	enc_buf tail_more; /* a large member's text moved in whole, after tail */
	const op_entry *op;
	unsigned op_index; /* op's row in the table (its stats) */
	const json_t *id; /* the request's id (NULL: none) */
	bool noreply;
	bool with_policy; /* the reply's snapshots carry the policy */
	bool pending; /* answered later, when Redis has (fleet mode) */
	bool written; /* the reply is in the output already (a list in pieces) */
	/* The reply is being encoded straight into the connection's output
	 * (server_client_reply_begin), in order: tail holds it from its
	 * head on; no member goes to `reply`. */
	bool direct;
	/* Set when a handler returns false. Last: a new call's is not
	 * cleared past its code (op_dispatch; proto_fail writes it). */
	proto_error err;
} op_call;

typedef bool (*op_fn)(op_call *call);

/* A row of the op table. */
struct op_entry {
	const char *name;
	op_fn handler;
	unsigned flags;
	uint32_t required; /* members that must be present: bit 1 << proto_member */
	/* Fleet mode: the op's path through the circuit script in Redis (the
	 * fleet column, op-fleet.h); NULL: this host answers it. */
	const struct op_fleet_path *fleet;
};

/* The rule "a request's events reach its own connection after its reply"
 * lives here: op_begin holds back the events for c from now (a request
 * starts, or is answered later: a list's last step, Redis's answer);
 * op_finish writes the reply, then them; op_suspend lets them go without a
 * reply (the request waits on Redis: its answer begins again). */
void op_begin(server_client *c);
void op_suspend(server_client *c);

/* Write call's reply (ok: its members; else call->err) unless noreply,
 * then the events it caused. */
void op_finish(op_call *call, bool ok);

/* call->policy, sources, preset, declared and stored for call->name,
 * and the policy conflicts of its ctx (counted, warned once). */
void op_resolve_policy(op_call *call);

/* The ok reply, {"id", "ok": true}, made on first use: handlers add their
 * result members to it. A reply with none is written without it (most
 * replies: a snapshot, encoded as text). NULL when out of memory (adding a
 * member to NULL fails, which handlers answer as internal). */
json_t *op_reply(op_call *call);

/* Begin call's reply straight in its connection's output (OP_DIRECT):
 * its head, {"id": id, "ok": true as proto_reply_ok's, written. */
void op_reply_direct(op_call *call);
/* Stop writing call's reply in place (it is to be answered later):
 * nothing of it written, members go to `reply` and `tail` again. */
void op_reply_direct_cancel(op_call *call);
/* reply[member] = value: as text when direct, else in `reply`. */
bool op_reply_bool(op_call *call, const char *member, bool value);

/* The text of {"id": id, "ok": true} as proto_reply_ok makes it (no
 * member added: no object to build). */
void op_reply_head(enc_buf *b, const json_t *id);

/* allow's reply members from the answer (memory mode: the table's; fleet
 * mode: Redis's with this host's part): allowed, state, permit and
 * expires_at, or reason, in_flight (concurrency) and retry_after_ms. */
bool op_reply_allow(op_call *call, const ct_allow *allow);

/* reply.policy_conflict = the names of the conflicting ctx members. */
bool op_reply_conflicts(op_call *call);

/* Map a table status to an error; true when CT_OK. */
bool op_status(op_call *call, ct_status status);

/* reply[member] = the snapshot of view (protocol 2: with policy, hold and
 * totals) for call->name at call->now; false (internal) when out of memory. */
bool op_reply_snapshot(op_call *call, const char *member, const ct_view *view);

/* Snapshots collected for one reply (list, watch), cut so that the reply
 * and what is already queued for the connection stay within half of
 * max_output_bytes. */
typedef struct op_snapshots {
	enc_buf items; /* the array's elements, comma separated (encode.c) */
	size_t count; /* elements added, those already written out included */
	size_t budget; /* bytes the reply may still take */
	int64_t now;
	bool with_policy;
	bool truncated;
	bool nomem;
} op_snapshots;

/* An empty collection for call's reply; false (internal) when out of memory. */
bool op_snapshots_init(op_snapshots *s, op_call *call);
/* Add circuit `name` (its own policy) unless the budget is spent. */
void op_snapshots_add(op_snapshots *s, const char *name, const ct_view *view);
/* reply[member] = the array (and "truncated", always when always_truncated,
 * else only when cut); counts a cut in stats. False (internal) on nomem. */
bool op_snapshots_reply(op_snapshots *s, op_call *call, const char *member, bool always_truncated);
/* Drop a collection that will not be replied. */
void op_snapshots_free(op_snapshots *s);

/* The peer's user name ("" when unknown). */
void op_peer_user(op_call *call, char *buf, size_t size);

/* The audit log line of an admin op: what, on which circuit, by whom. */
void op_audit(op_call *call, const char *what, const char *reason);

/* Forget which connections were warned about policy conflicts. */
void op_warned_reset(void);

/* cas: may this peer move from -> to? False (forbidden) when not;
 * *answered when the reply is made already (applied: false). */
bool op_cas_allowed(op_call *call, cb_state from, cb_state to, bool *answered);
/* set_state's hold members (hold, ttl_ms, reason) into *hold and req. */
bool op_hold_members(op_call *call, cb_state state, bool *hold, ct_hold_request *req);
/* set_state's audit line. */
void op_audit_set_state(op_call *call, cb_state state, bool hold, const ct_hold_request *req);

#endif
