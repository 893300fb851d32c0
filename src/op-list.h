/* SPDX-License-Identifier: Apache-2.0 */
/*
 * op-list.h — the ops answered with many snapshots: list (a page at a
 * time, cursor) and watch/unwatch; long replies answered in steps across
 * turns of the loop.
 */
#ifndef CBD_OP_LIST_H
#define CBD_OP_LIST_H

#include <stdbool.h>

#include "op-call.h"

/* Circuits a list step walks at a time: a list of more is answered in
 * steps across turns of the loop, other connections served in between.
 * The first step (in the request's own turn) walks this many; each later
 * turn walks chunks of this many (of OP_LIST_STEP_CIRCUITS / (lists in
 * progress), at least one, when several lists step) until its share of
 * OP_STEP_TURN_US is spent or it made OP_STEP_TURN_BYTES of reply, at
 * least one chunk. */
#define OP_LIST_STEP_CIRCUITS 8
/* Microseconds of step work a turn of the loop does for the lists (and
 * as much for the watches of names) answered in steps, all of them
 * together, by cbd's monotonic clock: what another connection's request
 * waits for them at most (plus one chunk). A fixed count of circuits a
 * turn made a long reply take thousands of turns (a watch of 20,000
 * circuits, 4 MiB: 1,660 turns, each an epoll_wait and a write of 2.5 KB
 * waking the reader; 250 now). */
#define OP_STEP_TURN_US 1000
/* A step also ends once it made this many bytes of reply: what a turn
 * writes to a connection (SERVER_CLIENT_FLUSH_MAX). A step that made
 * more would only leave it in the output buffer for later turns; one
 * that made less took more turns, each a write waking the reader. */
#define OP_STEP_TURN_BYTES 16384
/* Most circuits one list reply may be asked for (its limit member). */
#define OP_LIST_LIMIT_MAX 100000
/* The next step of c's list; true when it was answered (or there is none),
 * false when a later turn takes the next. paced: its share of the turn
 * (OP_STEP_TURN_US, OP_STEP_TURN_BYTES); unpaced (the drain, which
 * finishes lists): one chunk a call. */
bool op_list_continue(server_client *c, bool paced);
/* c closed: drop its list in progress. */
void op_list_client_closed(server_client *c);

/* The handler. */
bool op_list(op_call *call);

/* Names the first watch step takes: a longer watch line is answered
 * across turns (op_watch_continue), other connections served between;
 * each later turn takes chunks of this many (shared as lists' are) for
 * its share of OP_STEP_TURN_US, or until it made OP_STEP_TURN_BYTES. */
#define OP_WATCH_STEP_NAMES 64
/* watch and unwatch (their replies are snapshots in steps too). */
bool op_watch(op_call *call);
bool op_unwatch(op_call *call);
/* The next step of c's watch; true when it was answered (or there is
 * none), false when a later turn takes the next. paced: its share of
 * the turn (OP_STEP_TURN_US, OP_STEP_TURN_BYTES); unpaced (the drain):
 * the rest. */
bool op_watch_continue(server_client *c, bool paced);
/* c closed: drop its watch in progress. */
void op_watch_client_closed(server_client *c);

#endif
