/* SPDX-License-Identifier: Apache-2.0 */
/*
 * client-test.h — helpers shared by libcbclient's test programs: the store
 * contract adapter (any cbc_store behind contract_impl), ctx building and
 * stand-in daemons.
 */
#ifndef CBD_CLIENT_TEST_H
#define CBD_CLIENT_TEST_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "breaker.h"
#include "cbclient.h"
#include "store-contract.h"

/* What the contract's create() returns: a cbc_store and whatever the test
 * needs to tear it down. `store` must stay the first member. */
typedef struct client_box {
	cbc_store *store;
	cbc_store *inner; /* a wrapped store, freed after store (may be NULL) */
	cbc_conn *conn; /* freed after both (may be NULL) */
	void *extra; /* the test's own (e.g. a running cbd) */
} client_box;

/* Fill impl's store operations with the adapter; the caller sets name,
 * create and teardown. */
void client_contract_ops(contract_impl *impl);

/* Free box's store, inner store and connection (not box->extra). */
void client_box_free_stores(client_box *box);

/* What client_call_fail returns. */
#define CLIENT_CALL_ERROR 7

/* Protected calls for breakers: count themselves in *(int *)arg (when not
 * NULL) and succeed (0) or fail (CLIENT_CALL_ERROR). */
int client_call_ok(void *arg);
int client_call_fail(void *arg);
/* A protected call that takes at least *(int *)arg ms and succeeds. */
int client_call_sleep(void *arg);

/* A full ctx from a core policy and a virtual `now`. */
cbc_ctx client_ctx(const cb_policy *policy, int64_t now);

/* A stand-in daemon's connection: the lines a peer sends on fd, each
 * answered by answer into reply (a line with its LF; left empty: no
 * answer), until the peer closes or answer returns false; once a reply
 * cannot be sent, the rest is still read and answered, unsent (as cbd
 * does). The caller closes fd. */
#define CLIENT_SERVE_LINE_MAX 8192
typedef bool (*client_line_fn)(const char *line, char *reply, size_t size, void *arg);
void client_serve_lines(int fd, client_line_fn answer, void *arg);

/* A stand-in daemon: a Unix socket at a fresh path in /tmp whose
 * connections a thread accepts one at a time and serves with
 * client_serve_lines(answer, arg); with answer NULL there is no thread
 * (it listens, never accepts or answers). */
typedef struct client_stand_in {
	char path[108];
	int listen_fd;
	pthread_t thread;
	client_line_fn answer;
	void *arg;
	int accepted; /* connections accepted so far */
} client_stand_in;

/* Listen and start serving (check assertions when it cannot). */
void client_stand_in_start(client_stand_in *d, client_line_fn answer, void *arg);
/* Stop serving, close the socket and remove its path. */
void client_stand_in_stop(client_stand_in *d);

#endif
