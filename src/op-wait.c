/* SPDX-License-Identifier: Apache-2.0 */
/*
 * op-wait.c — requests waiting for a circuit's ticket (see op-wait.h).
 *
 * A waiter keeps its request as fleet mode's pending requests do (the op
 * call copied out of the dispatcher, call->pending set, its connection
 * blocked by SERVER_CLIENT_BLOCK_REPLY until it is answered, then
 * resumed); what is new here is the queue of each circuit and its timer.
 * The request's clock goes on from where it was: an attempt's now is its
 * ctx.now (or cbd's clock) plus the time waited.
 */
#include <stdlib.h>
#include <string.h>

#include <uthash.h>

#include "clock.h"
#include "daemon.h"
#include "op-wait.h"
#include "stats.h"
#include "watch.h"

typedef struct op_wait_queue op_wait_queue;

typedef struct op_waiter {
	struct op_waiter *prev, *next; /* its queue, oldest first */
	op_wait_queue *queue;
	op_call call;
	op_wait_fn fn;
	int64_t deadline; /* cbd's clock */
	int64_t offset; /* the request's now less cbd's clock */
	char name[];
} op_waiter;

struct op_wait_queue {
	UT_hash_handle hh; /* name -> queue */
	op_waiter *head, *tail;
	struct event *timer;
	char name[];
};

static op_wait_queue *queues;
static uint64_t waiters;

uint64_t
op_wait_count(void)
{
	return waiters;
}

static op_wait_queue *
queue_find(const char *name)
{
	op_wait_queue *q = NULL;

	if (queues != NULL)
		HASH_FIND_STR(queues, name, q);
	return q;
}

bool
op_wait_queued(const char *name)
{
	return waiters > 0 && queue_find(name) != NULL;
}

static void queue_timer(evutil_socket_t fd, short what, void *arg);

static op_wait_queue *
queue_need(const char *name)
{
	op_wait_queue *q = queue_find(name);
	size_t len = strlen(name);

	if (q != NULL)
		return q;
	q = calloc(1, sizeof *q + len + 1);
	if (q == NULL)
		return NULL;
	memcpy(q->name, name, len + 1);
	q->timer = evtimer_new(cbd.base, queue_timer, q);
	if (q->timer == NULL) {
		free(q);
		return NULL;
	}
	HASH_ADD_KEYPTR(hh, queues, q->name, len, q);
	return q;
}

static void
queue_free_if_empty(op_wait_queue *q)
{
	if (q->head != NULL)
		return;
	HASH_DEL(queues, q);
	event_free(q->timer);
	free(q);
}

static void
waiter_unlink(op_waiter *w)
{
	op_wait_queue *q = w->queue;

	if (w->prev != NULL)
		w->prev->next = w->next;
	else
		q->head = w->next;
	if (w->next != NULL)
		w->next->prev = w->prev;
	else
		q->tail = w->prev;
	w->prev = w->next = NULL;
	waiters--;
	stats.waiters = waiters;
}

static void
waiter_free(op_waiter *w)
{
	json_decref(w->call.reply);
	json_decref((json_t *)w->call.id);
	enc_free(&w->call.tail);
	enc_free(&w->call.tail_more);
	free(w);
}

/* Point w's call at its own members (it was copied). */
static void
waiter_fix(op_waiter *w)
{
	op_call *call = &w->call;

	call->name = w->name;
	call->declared = &call->ctx;
	call->table.policy = &call->policy;
	call->table.declared = &call->ctx;
	call->table.owner = &call->client->owner;
}

static void waiter_answer(op_waiter *w, bool ok);

/* One attempt of w at cbd's clock `clock`; true when it was answered (w is
 * gone then). */
static bool
waiter_try(op_waiter *w, int64_t clock)
{
	op_call *call = &w->call;
	server_client *c = call->client;
	/* A ticket freed by another connection's request: its events still
	 * wait for its own reply once this one is answered. */
	server_client *outer = watch_request_current();
	bool done = false, ok;

	call->clock = clock;
	call->now = clock + w->offset;
	call->table.now = call->now;
	call->table.clock = clock;
	/* Events this attempt causes reach the connection after its reply. */
	op_begin(c);
	ok = w->fn(call, clock >= w->deadline, &done);
	if (!done)
		op_suspend(c);
	else
		waiter_answer(w, ok);
	if (outer != NULL && outer != c)
		watch_request_begin(outer);
	return done;
}

/* Write w's reply (ok, else call->err), resume its connection, free w. */
static void
waiter_answer(op_waiter *w, bool ok)
{
	op_call *call = &w->call;
	server_client *c = call->client;
	op_conn *oc = op_conn_peek(c);

	ok = ok && op_reply_conflicts(call);
	op_finish(call, ok);
	call->reply = NULL;
	if (oc != NULL && oc->wait == w)
		oc->wait = NULL;
	waiter_unlink(w);
	server_client_block(c, SERVER_CLIENT_BLOCK_REPLY, false);
	server_client_watch_hangup(c, false);
	server_client_resume(c);
	waiter_free(w);
}

/* Arm q's timer for the first waiter's end or the first ticket's ttl
 * (judged on cbd's clock through the first waiter's offset). */
static void
queue_arm(op_wait_queue *q, int64_t clock)
{
	int64_t at = INT64_MAX, expiry;
	struct timeval tv;

	for (op_waiter *w = q->head; w != NULL; w = w->next) {
		if (w->deadline < at)
			at = w->deadline;
	}
	/* (A millisecond after it: a timer a little early would find it
	 * not yet ended, and spin.) */
	if (q->head != NULL && circuit_table_next_expiry(cbd.table, q->name, &expiry) &&
	    expiry - q->head->offset + 1 < at)
		at = expiry - q->head->offset + 1;
	at = at > clock ? at - clock : 0;
	tv.tv_sec = (time_t)(at / 1000);
	tv.tv_usec = (suseconds_t)(at % 1000) * 1000;
	evtimer_add(q->timer, &tv);
}

/* Try q's waiters in order until one must wait on, then answer those
 * whose wait is over. */
static void
queue_run(op_wait_queue *q)
{
	int64_t clock = clock_realtime_ms();
	op_waiter *w, *next;

	/* First come, first served: the first waiter takes a free ticket
	 * before a later one whose wait is over is answered. */
	while (q->head != NULL && waiter_try(q->head, clock))
		;
	for (w = q->head; w != NULL; w = next) {
		next = w->next;
		if (clock >= w->deadline)
			waiter_try(w, clock);
	}
	if (q->head == NULL) {
		queue_free_if_empty(q);
		return;
	}
	queue_arm(q, clock);
}

static void
queue_timer(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	queue_run(arg);
}

bool
op_wait_members(op_call *call, int64_t *wait_ms)
{
	*wait_ms = 0;
	return proto_req_int(&call->req, PROTO_MEMBER_WAIT_MS, 0, OP_WAIT_MAX_MS, false, wait_ms,
		   NULL, &call->err) &&
	    proto_req_bool(&call->req, PROTO_MEMBER_RETRY, false, &call->table.retry, &call->err);
}

bool
op_wait_defer(op_call *call, int64_t wait_ms, op_wait_fn fn)
{
	size_t len = strlen(call->name);
	op_wait_queue *q;
	op_waiter *w;
	op_conn *oc;

	if (waiters >= OP_WAITERS_MAX) {
		stats_limit_hit(STATS_LIMIT_WAITERS);
		return false;
	}
	oc = op_conn_of(call->client);
	q = oc != NULL ? queue_need(call->name) : NULL;
	w = q != NULL ? calloc(1, sizeof *w + len + 1) : NULL;
	if (w == NULL) {
		if (q != NULL)
			queue_free_if_empty(q);
		return false;
	}
	memcpy(w->name, call->name, len + 1);
	/* The call lives in w from here; the dispatcher's copy is neither
	 * answered nor freed while pending is set. */
	w->call = *call;
	w->call.request = NULL;
	w->call.req = (proto_req){ 0 };
	w->call.id = json_incref((json_t *)call->id);
	waiter_fix(w);
	w->fn = fn;
	w->queue = q;
	w->deadline = call->clock + wait_ms;
	w->offset = call->now - call->clock;
	w->prev = q->tail;
	if (q->tail != NULL)
		q->tail->next = w;
	else
		q->head = w;
	q->tail = w;
	waiters++;
	stats.waiters = waiters;
	oc->wait = w;
	call->pending = true;
	server_client_block(call->client, SERVER_CLIENT_BLOCK_REPLY, true);
	server_client_watch_hangup(call->client, true);
	queue_arm(q, call->clock);
	return true;
}

void
op_wait_kick(const char *name)
{
	op_wait_queue *q;

	if (waiters == 0 || (q = queue_find(name)) == NULL)
		return;
	queue_run(q);
}

void
op_wait_kick_all(void)
{
	op_wait_queue *q, *tmp;

	HASH_ITER (hh, queues, q, tmp)
		queue_run(q);
}

void
op_wait_client_closed(server_client *c)
{
	op_conn *oc = op_conn_peek(c);
	op_waiter *w = oc != NULL ? oc->wait : NULL;

	if (w != NULL) {
		op_wait_queue *q = w->queue;

		oc->wait = NULL;
		waiter_unlink(w);
		waiter_free(w);
		queue_free_if_empty(q);
	}
	/* Its tickets went back (circuit_table_release_owner). */
	if (waiters > 0)
		op_wait_kick_all();
}

void
op_wait_stop(void)
{
	op_wait_queue *q, *tmp;

	HASH_ITER (hh, queues, q, tmp) {
		while (q->head != NULL) {
			op_waiter *w = q->head;

			op_begin(w->call.client);
			proto_fail(&w->call.err, PROTO_SHUTTING_DOWN, "cbd is shutting down");
			waiter_answer(w, false);
		}
		queue_free_if_empty(q);
	}
}
