/* SPDX-License-Identifier: Apache-2.0 */
/*
 * client-test.c — the store contract adapter for libcbclient's stores
 * (see client-test.h): each contract operation is the cbc_store_* call of
 * the same name with the policy as a full ctx and `now` as ctx.now.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <check.h>

#include "client-test.h"

cbc_ctx
client_ctx(const cb_policy *policy, int64_t now)
{
	cbc_ctx ctx;

	memset(&ctx, 0, sizeof ctx);
	ctx.failure_threshold = policy->failure_threshold;
	ctx.success_threshold = policy->success_threshold;
	ctx.break_ms = policy->break_ms;
	ctx.half_open_max = policy->half_open_max;
	ctx.slot_ttl_ms = policy->slot_ttl_ms;
	ctx.max_gap_ms = policy->max_gap_ms; /* 0: unset, as in cb_policy */
	ctx.has_now = true;
	ctx.now = now;
	return ctx;
}

void
client_box_free_stores(client_box *box)
{
	cbc_store_free(box->store);
	cbc_store_free(box->inner);
	cbc_conn_free(box->conn);
	box->store = box->inner = NULL;
	box->conn = NULL;
}

static contract_status
map(cbc_status st)
{
	switch (st) {
	case CBC_OK:
		return CONTRACT_OK;
	case CBC_ECAPACITY:
		return CONTRACT_CAPACITY;
	default:
		return CONTRACT_ERROR;
	}
}

static void
to_core(const cbc_snapshot *in, cb_snapshot *out)
{
	out->state = (cb_state)in->state;
	out->failure_count = in->failure_count;
	out->success_count = in->success_count;
	out->last_failure_at = in->last_failure_at;
	out->opened_at = in->opened_at;
}

static cbc_store *
store_of(void *box)
{
	return ((client_box *)box)->store;
}

static contract_status
a_get(void *box, const char *name, const cb_policy *p, int64_t now, cb_snapshot *out)
{
	cbc_ctx ctx = client_ctx(p, now);
	cbc_snapshot s;
	cbc_status st = cbc_store_get(store_of(box), name, &ctx, &s, NULL);

	if (st == CBC_OK)
		to_core(&s, out);
	return map(st);
}

static contract_status
a_record(void *box, const char *name, const cb_policy *p, int64_t now, cb_snapshot *out,
    bool success)
{
	cbc_ctx ctx = client_ctx(p, now);
	cbc_snapshot s;
	cbc_status st = success ? cbc_store_record_success(store_of(box), name, &ctx, &s, NULL)
				: cbc_store_record_failure(store_of(box), name, &ctx, &s, NULL);

	if (st == CBC_OK)
		to_core(&s, out);
	return map(st);
}

static contract_status
a_record_success(void *box, const char *name, const cb_policy *p, int64_t now, cb_snapshot *out)
{
	return a_record(box, name, p, now, out, true);
}

static contract_status
a_record_failure(void *box, const char *name, const cb_policy *p, int64_t now, cb_snapshot *out)
{
	return a_record(box, name, p, now, out, false);
}

static contract_status
a_cas(void *box, const char *name, cb_state from, cb_state to, const cb_policy *p, int64_t now,
    bool *applied, cb_snapshot *out)
{
	cbc_ctx ctx = client_ctx(p, now);
	cbc_snapshot s;
	cbc_status st = cbc_store_cas(store_of(box), name, (cbc_state)from, (cbc_state)to, &ctx,
	    applied, &s, NULL);

	if (st == CBC_OK)
		to_core(&s, out);
	return map(st);
}

static contract_status
a_set_state(void *box, const char *name, cb_state state, const cb_policy *p, int64_t now,
    cb_snapshot *out)
{
	cbc_ctx ctx = client_ctx(p, now);
	cbc_snapshot s;
	cbc_status st = cbc_store_set_state(store_of(box), name, (cbc_state)state, &ctx, &s, NULL);

	if (st == CBC_OK)
		to_core(&s, out);
	return map(st);
}

static contract_status
a_acquire_slot(void *box, const char *name, const cb_policy *p, int64_t now, bool *acquired,
    char token[CONTRACT_TOKEN_SIZE], int64_t *expires_at)
{
	cbc_ctx ctx = client_ctx(p, now);
	cbc_slot slot;
	cbc_status st = cbc_store_acquire_slot(store_of(box), name, &ctx, &slot, NULL);

	if (st == CBC_OK) {
		*acquired = slot.acquired;
		if (slot.acquired) {
			_Static_assert(CBC_TOKEN_SIZE <= CONTRACT_TOKEN_SIZE, "token room");
			memcpy(token, slot.token, CBC_TOKEN_SIZE);
			*expires_at = slot.expires_at;
		}
	}
	return map(st);
}

static contract_status
a_release_slot(void *box, const char *name, const char *token, const cb_policy *p, int64_t now)
{
	cbc_ctx ctx = client_ctx(p, now);

	return map(cbc_store_release_slot(store_of(box), name, token, &ctx, NULL));
}

static contract_status
a_delete(void *box, const char *name, bool *existed)
{
	return map(cbc_store_delete(store_of(box), name, existed, NULL));
}

void
client_contract_ops(contract_impl *impl)
{
	impl->get = a_get;
	impl->record_success = a_record_success;
	impl->record_failure = a_record_failure;
	impl->cas = a_cas;
	impl->set_state = a_set_state;
	impl->acquire_slot = a_acquire_slot;
	impl->release_slot = a_release_slot;
	impl->delete_circuit = a_delete;
}

/* Count the call in *arg (when not NULL); return result. */
static int
client_call(void *arg, int result)
{
	if (arg != NULL)
		(*(int *)arg)++;
	return result;
}

int
client_call_ok(void *arg)
{
	return client_call(arg, 0);
}

int
client_call_fail(void *arg)
{
	return client_call(arg, CLIENT_CALL_ERROR);
}

int
client_call_sleep(void *arg)
{
	int ms = *(int *)arg;
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
	return 0;
}

void
client_serve_lines(int fd, client_line_fn answer, void *arg)
{
	char buf[CLIENT_SERVE_LINE_MAX], reply[CLIENT_SERVE_LINE_MAX];
	bool writable = true;
	size_t len = 0;

	for (;;) {
		ssize_t n = recv(fd, buf + len, sizeof buf - 1 - len, 0);
		char *nl;

		if (n <= 0)
			return;
		len += (size_t)n;
		buf[len] = '\0';
		while ((nl = strchr(buf, '\n')) != NULL) {
			*nl = '\0';
			reply[0] = '\0';
			if (!answer(buf, reply, sizeof reply, arg))
				return;
			/* A peer that closed is not written to, but what it sent
			 * before is still read and answered, as cbd does
			 * (server_client_flush: input_finish): a client that
			 * gave up on a connection counts its written lines as
			 * delivered. */
			if (reply[0] != '\0' && writable &&
			    send(fd, reply, strlen(reply), MSG_NOSIGNAL) < 0)
				writable = false;
			len -= (size_t)(nl + 1 - buf);
			memmove(buf, nl + 1, len + 1);
		}
	}
}

/* The stand-in's thread: one connection at a time until the socket is
 * shut down. */
static void *
stand_in_serve(void *arg)
{
	client_stand_in *d = arg;

	for (;;) {
		int c = accept(d->listen_fd, NULL, NULL);

		if (c < 0)
			return NULL;
		d->accepted++;
		client_serve_lines(c, d->answer, d->arg);
		close(c);
	}
}

void
client_stand_in_start(client_stand_in *d, client_line_fn answer, void *arg)
{
	static unsigned count;
	struct sockaddr_un addr = { .sun_family = AF_UNIX };

	memset(d, 0, sizeof *d);
	d->answer = answer;
	d->arg = arg;
	snprintf(d->path, sizeof d->path, "/tmp/cbc-stand-in-%ld-%u.sock", (long)getpid(), count++);
	d->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(d->listen_fd, 0);
	memcpy(addr.sun_path, d->path, strlen(d->path) + 1);
	unlink(d->path);
	ck_assert_int_eq(bind(d->listen_fd, (struct sockaddr *)&addr, sizeof addr), 0);
	ck_assert_int_eq(listen(d->listen_fd, 8), 0);
	if (answer != NULL)
		ck_assert_int_eq(pthread_create(&d->thread, NULL, stand_in_serve, d), 0);
}

void
client_stand_in_stop(client_stand_in *d)
{
	/* shutdown wakes the thread's accept. */
	shutdown(d->listen_fd, SHUT_RDWR);
	if (d->answer != NULL)
		pthread_join(d->thread, NULL);
	close(d->listen_fd);
	unlink(d->path);
}
