/* SPDX-License-Identifier: Apache-2.0 */
/*
 * op-wait.h — requests that wait in cbd for a circuit's ticket (protocol
 * 3, §2: allow with wait_ms): each circuit's queue, first come first
 * served; the waiting request's connection reads no further line (its
 * replies keep their order); a waiter is tried again when a ticket of its
 * circuit may have freed (a record or release_slot handing a permit back,
 * a connection closing, a ticket's ttl on cbd's clock) and answered at
 * the latest when its wait ends. The op decides what an attempt is
 * (op_wait_fn); this module owns the queues, the timers and the deferred
 * reply.
 */
#ifndef CBD_OP_WAIT_H
#define CBD_OP_WAIT_H

#include <stdbool.h>
#include <stdint.h>

#include "op-call.h"

/* Requests waiting at once, host-wide (cbd_limit_hits_total{limit=
 * "max_waiters"} counts the refusals past it: they are answered at once). */
#define OP_WAITERS_MAX 10000

/* Most ms an allow may wait for a ticket (protocol 3, §2). */
#define OP_WAIT_MAX_MS 60000

/* allow's members wait_ms (into *wait_ms, 0 when absent) and retry (into
 * call->table.retry); false (bad_request naming the member) when bad. */
bool op_wait_members(op_call *call, int64_t *wait_ms);

/* One attempt of a waiting request, at call->now (and call->table.now):
 * *done when it is answered (its reply made, or call->err set: the
 * return value is op_finish's ok). With expired, its wait is over: it
 * must be answered. */
typedef bool (*op_wait_fn)(op_call *call, bool expired, bool *done);

/* Defer call's reply by up to wait_ms on cbd's clock, queued behind the
 * waiters of call->name; sets call->pending. False (nothing done) when
 * OP_WAITERS_MAX wait already or out of memory: answer now. */
bool op_wait_defer(op_call *call, int64_t wait_ms, op_wait_fn fn);

/* A ticket of name may have freed: try its waiters, in order. */
void op_wait_kick(const char *name);
/* Try the waiters of every circuit (a connection closed). */
void op_wait_kick_all(void);
/* Are requests waiting for name's tickets? */
bool op_wait_queued(const char *name);
/* Requests waiting now. */
uint64_t op_wait_count(void);

/* c closed: its waiting request leaves its queue unanswered; the
 * tickets it held went back, so the others are tried. */
void op_wait_client_closed(server_client *c);

/* Shutdown: every waiter is answered now (shutting_down), so that its
 * connection drains at once. */
void op_wait_stop(void);

#endif
