/* SPDX-License-Identifier: Apache-2.0 */
/*
 * watch.h — watch and unwatch (protocol 2, §5): which connections watch
 * which circuits, and the event lines they are sent after every state
 * change, hold change, policy change and delete. An event caused by a
 * request reaches that request's own connection after the request's reply.
 * A watcher that cannot keep up is dropped by the connection's output
 * bound (max_output_bytes), never buffered without bound.
 */
#ifndef CBD_WATCH_H
#define CBD_WATCH_H

#include <stdbool.h>
#include <stddef.h>

#include "circuit-table.h"
#include "conf.h"
#include "server-client.h"

/* The request being answered on c: events for c wait for its reply. */
void watch_request_begin(server_client *c);
/* The reply went out: send c's waiting events. */
void watch_request_end(server_client *c);
/* The connection whose request is being answered (NULL: none): a request
 * that answers another's on its way (a waiter given a ticket) puts it
 * back after. */
server_client *watch_request_current(void);

/* A change of name's state or hold (reason NONE: nothing to send). */
void watch_changed(const char *name, const ct_change *change);

/* name was dropped: reason "deleted" or "reclaimed". */
void watch_deleted(const char *name, const char *reason);

/* A reload (to fresh) renewed name's policy_rev (view has the new one,
 * read at now): a policy event when somebody watches name. Called from
 * the table's one walk (events.c): sends, never writes or closes. */
void watch_policy_renewed(const char *name, const ct_view *view, const cbd_conf *fresh,
    int64_t now);

/* After that walk: a policy event for each name watched by name but not
 * stored whose effective policy changed from old to fresh (when nobody
 * watches everything). Walks the names watched, not the table. */
void watch_policies_unstored(const cbd_conf *old, const cbd_conf *fresh, int64_t now);

/* A connection's watches (the watch and unwatch ops change them). */
typedef struct watcher watcher;

/* c's watches; made when need (NULL: none yet, or out of memory). */
watcher *watch_watcher(server_client *c, bool need);
/* w watches name; false when out of memory. */
bool watch_add(watcher *w, const char *name);
/* Names w watches by name (max_watch_names bounds them). */
size_t watch_names(const watcher *w);
/* Does w watch name by name? */
bool watch_has(const watcher *w, const char *name);
/* w watches every circuit. */
void watch_add_all(watcher *w);
/* Drop w's watch of one name, or of everything (name NULL). */
void watch_drop(watcher *w, const char *name);
/* Forget w entirely once it watches nothing. */
void watch_trim(watcher *w);

/* c closed: its watches end. */
void watch_forget(server_client *c);

/* Connections watching something now (stats). */
unsigned watch_watchers(void);

/* Free everything (exit). */
void watch_free(void);

#endif
