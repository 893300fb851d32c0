/* SPDX-License-Identifier: Apache-2.0 */
/*
 * internal.h — libcbclient's private helpers shared by its files: error
 * filling, ctx conversion to the core's types (ctx.c), the clock, and the store
 * handle's layout. Not installed.
 */
#ifndef CBC_INTERNAL_H
#define CBC_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "breaker.h"
#include "circuit-json.h"
#include "cbclient.h"
#include "clock.h"
#include "proto.h"

/* Fill err (may be NULL) with status and a printf-style message; returns
 * status so callers can `return cbci_fail(...)`. */
cbc_status cbci_fail(cbc_error *err, cbc_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* How breaker's classifier judges a call's result (0: success; nonzero:
 * classify, else error_filter, else failure) — circuit-breaker.c. */
cbc_outcome cbci_breaker_classify(cbc_breaker *b, int result);

/* Clear err (may be NULL) to CBC_OK. */
void cbci_error_clear(cbc_error *err);

/* Copy src into err (may be NULL); returns src->status. */
cbc_status cbci_error_copy(cbc_error *err, const cbc_error *src);

/* ctx as the core's partial policy (the members given). */
void cbci_ctx_to_proto(const cbc_ctx *ctx, proto_ctx *out);
/* A reported policy as the ctx that declares all of it (members null or
 * not reported are not given; no preset: its keys are all there). */
void cbci_ctx_from_policy(const cbc_policy *policy, cbc_ctx *out);
/* Every policy member given in over replaces out's (clock, duration kept). */
void cbci_ctx_overlay(cbc_ctx *out, const cbc_ctx *over);
/* ctx resolved against the built-in defaults (and a built-in preset). */
void cbci_ctx_policy(const cbc_ctx *ctx, cb_policy *out);
/* ctx's clock: ctx->now when given, else the realtime clock. */
int64_t cbci_ctx_now(const cbc_ctx *ctx);
/* Check every member of ctx is in range (and the combination: window_size
 * for its window, break_max_ms >= break_ms); CBC_EINVAL naming
 * `prefix.member` (ctx.c, with the core's ctx table). */
cbc_status cbci_ctx_check(const cbc_ctx *ctx, const char *prefix, cbc_error *err);
/* A local store knows only the built-in presets: CBC_EINVAL naming
 * `prefix.preset` for any other. */
cbc_status cbci_ctx_check_local(const cbc_ctx *ctx, const char *prefix, cbc_error *err);

/* Validate a circuit name; CBC_EINVAL naming `field`. */
cbc_status cbci_name_check(const char *name, const char *field, cbc_error *err);

/* A core snapshot as the public one (name copied, retry_after_ms given;
 * snapshot.c, as the rest of the snapshot functions). */
void cbci_snapshot_fill(cbc_snapshot *out, const char *name, const cb_snapshot *snap,
    int64_t retry_after_ms);
/* The public snapshot as a core one. */
void cbci_snapshot_to_core(const cbc_snapshot *in, cb_snapshot *out);

/* Protocol 2's and 3's members of a snapshot as "not reported": not held,
 * totals -1, policy not known, policy_rev 0 (snapshot.c). */
void cbci_snapshot_v2_clear(cbc_snapshot *out);
/* Read a snapshot object's protocol 2 and 3 members (hold, totals,
 * policy, policy_rev, ...) into
 * out (may be NULL: only checked); absent members read as not reported,
 * mistyped ones are CBC_EPROTO naming them. obj in either form. */
cbc_status cbci_snapshot_v2(proto_node *obj, cbc_snapshot *out, cbc_error *err);
/* The last policy reported for one circuit with its policy_rev (protocol
 * 3: most snapshots carry only the rev); policy.known false: none kept,
 * or it went stale. */
typedef struct cbci_policy_kept {
	cbc_policy policy;
	int64_t rev;
} cbci_policy_kept;
/* Keep s's policy when it carries one; when it carries none, put the kept
 * one into s if it is of s's policy_rev, else (another rev) the kept one
 * goes stale. A snapshot with neither (rev 0: a protocol 1 cbd, a local
 * store) changes nothing (snapshot.c). */
void cbci_policy_keep(cbci_policy_kept *kept, cbc_snapshot *s);
/* Forget the kept policy (the circuit was deleted: its next creation
 * gets another policy_rev). */
void cbci_policy_forget(cbci_policy_kept *kept);

/* The names of a policy_conflict array joined by commas into buf (cut to
 * fit; size may be 0); returns how many names it held. */
size_t cbci_conflict_join(const json_t *conflict, char *buf, size_t size);

/* Send `request` (an object; an "id" member is added) on conn and read
 * its reply. CBC_OK: *reply is the ok:true reply object, to json_decref.
 * CBC_EREFUSED / CBC_ECAPACITY: the daemon answered ok:false; err holds
 * its code and message. Anything else: a transport or framing error. */
cbc_status cbci_conn_call(cbc_conn *conn, json_t *request, json_t **reply, cbc_error *err);

/* A reply as the ops read it: its top object (top) over its flat view
 * (a plain line: no jansson values) or over jansson values it owns. */
typedef struct cbci_reply {
	proto_node top;
	json_t *json; /* when not flat */
	proto_flat flat;
} cbci_reply;

/* cbci_conn_call, the reply read into *reply (CBC_OK: to cbci_reply_free).
 * ~11 KiB: as much stack as the view proto_scan_request took before. */
cbc_status cbci_conn_call_node(cbc_conn *conn, json_t *request, cbci_reply *reply, cbc_error *err);
/* Added to the I/O timeout of this thread's requests while set (allow's
 * wait_ms: cbd answers a waiting allow that much later). */
extern _Thread_local int64_t cbci_conn_extra_ms;
/* Decode a line from cbd (len bytes, no LF) into *out: its flat view when
 * the line is plain (proto-scan.h: no jansson values at all), else
 * jansson values (out->top absent when the line is not JSON; jerr, when
 * not NULL, says why). Then to cbci_reply_free. */
void cbci_reply_decode(cbci_reply *out, const char *line, size_t len, json_error_t *jerr);
/* Drop a reply's jansson values (a flat one holds none). */
void cbci_reply_free(cbci_reply *reply);

/* hello's client name copied into buf; false when none was set. */
bool cbci_conn_client_name(cbc_conn *conn, char *buf, size_t size);

/* A store: its vtable and the implementation's state. */
struct cbc_store {
	const cbc_store_ops *ops;
	void *impl;
};

/* The local store's implementation, also used privately by the resilient
 * store as its fallback. */
typedef struct cbci_local cbci_local;
extern const cbc_store_ops cbci_local_ops;
cbci_local *cbci_local_new(uint64_t max_circuits, cbc_error *err);
void cbci_local_free(cbci_local *local);
/* Make name's circuit hold exactly snap (slots dropped). */
cbc_status cbci_local_seed(cbci_local *local, const char *name, const cb_snapshot *snap,
    cbc_error *err);
/* Drop name's circuit. */
void cbci_local_forget(cbci_local *local, const char *name);
/* allow on a local store (protocol 3's bulkhead and retry budget in one
 * process; no waiting): true when store is a local one (*status, *out),
 * false for any other store. */
bool cbci_local_allow(cbc_store *store, const char *name, const cbc_ctx *ctx, bool retry,
    cbc_allow_result *out, cbc_status *status, cbc_error *err);

/* Remember snap as the last snapshot of name that a resilient store saw
 * (what it degrades from); no-op for other stores. Cached breakers feed
 * it the events they apply and, once the cache decides again after the
 * store degraded, its latest reading: cbd is authoritative again, so a
 * degraded circuit's local copy is dropped (the next outage starts from
 * snap: an open circuit stays open, a held one held). */
void cbci_resilient_remember(cbc_store *store, const char *name, const cbc_snapshot *snap);

/* Ask cbd's allow through a resilient store over a remote one (cbd then
 * counts a refusal in totals.rejected). True when cbd answered: *status
 * is the op's (CBC_OK with *out, or an answer such as capacity in err).
 * False when the store is another one, in its timeout backoff, or cbd is
 * unavailable: the caller takes the store ops, whose policy applies.
 * via (may be NULL): another connection to the same cbd to ask on (a
 * waiting allow holds its connection; the breaker gives it one of its
 * own). cbci_resilient_record takes via too: the connection the permit
 * was taken on. */
bool cbci_resilient_allow(cbc_store *store, cbc_conn *via, const char *name, const cbc_ctx *ctx,
    const cbc_allow_options *opts, cbc_allow_result *out, cbc_status *status, cbc_error *err);
/* Record outcome with allow's permit (a trial slot or a bulkhead ticket,
 * handed back whatever the outcome) through a resilient store over a
 * remote one. True when cbd answered (*has_out: with a snapshot in *out,
 * which may be NULL; false when cbd refused the record); false
 * when the store is another one, in its timeout backoff, or cbd is
 * unavailable (the caller reports through the store ops and releases the
 * permit; a broken connection already freed it). */
/* cbc_breaker_acquire, asking as a retry when retry (circuit-breaker.c). */
cbc_status cbci_breaker_acquire(cbc_breaker *b, cbc_permit *p, bool retry, cbc_error *err);
bool cbci_resilient_record(cbc_store *store, cbc_conn *via, const char *name, cbc_outcome outcome,
    const char *permit, const cbc_ctx *ctx, cbc_snapshot *out, bool *has_out);
/* Tell cbd of an ignored outcome (record, outcome ignore) through a
 * resilient store over a remote one; no-op otherwise, errors swallowed. */
void cbci_resilient_record_ignore(cbc_store *store, const char *name, const cbc_ctx *ctx);

/* cbc_record_success (failure false) or cbc_record_failure with
 * "policy": true: protocol 3 answers with the circuit's policy in the
 * snapshot (ops.c). */
cbc_status cbci_record_policy(cbc_conn *conn, const char *name, bool failure, const cbc_ctx *ctx,
    cbc_snapshot *out, cbc_error *err);

/* The connection of a remote store; NULL for any other store. */
cbc_conn *cbci_store_remote_conn(const cbc_store *store);
/* A new connection to conn's socket with its timeouts (lazy connect). */
cbc_conn *cbci_conn_clone(cbc_conn *conn, cbc_error *err);

/* A reply's snapshot object as the public snapshot (fallback_name when
 * it has none; out may be NULL: only checked). ops.c. */
cbc_status cbci_reply_snapshot(const json_t *obj, const char *fallback_name, cbc_snapshot *out,
    cbc_error *err);
/* The same from a node (jansson values or a flat view): one reader, the
 * same answers and messages for both forms. */
cbc_status cbci_reply_snapshot_node(proto_node *obj, const char *fallback_name, cbc_snapshot *out,
    cbc_error *err);

/* The watch cache of cached breakers (cache.c). */
typedef struct cbci_cache cbci_cache;
typedef struct cbci_cache_entry cbci_cache_entry;

/* What the cache says about a call. */
typedef enum cbci_cache_verdict {
	CBCI_CACHE_ASK = 0, /* not known, half_open, or the break elapsed: ask cbd */
	CBCI_CACHE_PERMIT, /* closed: call, then send the outcome with noreply */
	CBCI_CACHE_REFUSE, /* open (or held open) and the break not elapsed */
} cbci_cache_verdict;

/* The process's cache for the socket at path (shared, counted; its
 * reader thread starts with the first user). NULL when out of resources. */
cbci_cache *cbci_cache_acquire(const char *path, cbc_error *err);
/* Drop one use; the last stops the reader and frees the cache. A handle
 * from before a fork (another generation) is left alone. */
void cbci_cache_release(cbci_cache *cache, unsigned generation);
/* Changes in a forked child: handles of an older generation are stale. */
unsigned cbci_cache_generation(void);
/* The entry of name, watched from now on (NULL past CBC_CACHE_NAMES_MAX
 * names or out of memory: that breaker asks cbd). */
cbci_cache_entry *cbci_cache_watch(cbci_cache *cache, const char *name);
/* Decide a call from the entry; *retry_after_ms the time left when
 * refused. When a change event arrived since *seen (the caller's counter,
 * read and written under the cache's lock), *fresh gets its snapshot,
 * *seen moves on, and true goes to *has_fresh. told (may be NULL): see
 * cbci_cache_told. */
/* What cbd last answered a breaker's uncached request with: its state,
 * at the entry's seq then. Until an event comes, the cache does not decide
 * from an entry that disagrees (it predates that answer). */
typedef struct cbci_cache_told {
	bool known;
	uint64_t seq;
	cbc_state state;
} cbci_cache_told;

/* Is the entry's circuit held open (the reason of a cached refusal)? */
bool cbci_cache_held_open(cbci_cache *cache, const cbci_cache_entry *entry);
cbci_cache_verdict cbci_cache_decide(cbci_cache *cache, const cbci_cache_entry *entry,
    uint64_t *seen, cbc_snapshot *fresh, bool *has_fresh, int64_t *retry_after_ms,
    const cbci_cache_told *told);
/* The change events applied to entry so far. */
uint64_t cbci_cache_seq(cbci_cache *cache, const cbci_cache_entry *entry);
/* Queue a noreply line (with its newline) on the watch connection, and
 * write it now when urgent (else on the reader's timer); when the output
 * is full, first wait (bounded) for cbd to read some. False when there is
 * no live connection, or cbd did not read within the bound (report
 * through the store instead). */
bool cbci_cache_send(cbci_cache *cache, const char *line, size_t len, bool urgent);
/* A cached permit's outcome (line: its noreply line): counted against
 * the entry's rule with the process's own outcomes since cbd's last
 * snapshot; when it could trip the circuit, *could_trip and nothing is
 * queued (send it with cbci_cache_sync); else as cbci_cache_send, except
 * that a success cbd may take counted (its hello said so, and it is not
 * slow by the entry's rule nor by slow_ms, the breaker's own
 * slow_call_ms: -1 none, 0 any call may be slow) is counted in the open
 * fold of prefix (prefix_len bytes: the line up to its duration, without
 * the closing brace), sent later as one line with "count". *hint: the
 * caller's own (0 at first), where the cache looks for its fold first. */
bool cbci_cache_report(cbci_cache *cache, cbci_cache_entry *entry, const char *line, size_t len,
    const char *prefix, size_t prefix_len, unsigned *hint, int64_t slow_ms, bool failure,
    int64_t duration_ms, bool *could_trip);
/* Send an outcome with its reply awaited on the watch connection (line:
 * the request without noreply, less its closing brace) and wait for the
 * reply (bounded), which updates the entry; *state gets the entry's state
 * then (unchanged when no reply came). False when not sent (no live
 * connection): report it through the store. */
bool cbci_cache_sync(cbci_cache *cache, const cbci_cache_entry *entry, const char *line, size_t len,
    cbc_state *state);
/* The entry's latest snapshot (a watch reply's, an event's or a synced
 * outcome's) into *out while the entry is valid; false otherwise. */
bool cbci_cache_latest(cbci_cache *cache, const cbci_cache_entry *entry, cbc_snapshot *out);
/* A copy of the cache's counters. */
void cbci_cache_stats(cbci_cache *cache, cbc_cache_stats *out);
/* Apply one line from cbd (no LF): the reader thread's handler. Tests and
 * the line benchmark call it on a cache that has no connection (nothing
 * else applies lines then). */
void cbci_cache_apply_line(cbci_cache *cache, const char *line, size_t len);

/* Did the store fail (unreachable, timed out, broken, out of memory, or
 * cbd answered shutting_down / internal)? A refusal that is an answer
 * (bad_request, forbidden, capacity) or the caller's mistake is not. */
bool cbci_store_failed(const cbc_error *err);

#endif
