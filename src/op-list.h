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

/* Circuits a turn of the event loop lists, all listing connections
 * together: a list of more is answered in steps, one per turn, other
 * connections served in between. Each listing connection steps once a
 * turn, over OP_LIST_STEP_CIRCUITS / (lists in progress) circuits (at
 * least one), so the others' requests wait for about this many. */
#define OP_LIST_STEP_CIRCUITS 8
/* Most circuits one list reply may be asked for (its limit member). */
#define OP_LIST_LIMIT_MAX 100000
/* The next step of c's list; true when it was answered (or there is none),
 * false when a later turn takes the next. paced: its share of
 * OP_LIST_STEP_CIRCUITS; unpaced (the drain, which finishes lists): all of
 * it. */
bool op_list_continue(server_client *c, bool paced);
/* c closed: drop its list in progress. */
void op_list_client_closed(server_client *c);

/* The handler. */
bool op_list(op_call *call);

/* Names one watch step takes at most: a longer watch line is answered
 * across turns (op_watch_continue), other connections served between. */
#define OP_WATCH_STEP_NAMES 64
/* watch and unwatch (their replies are snapshots in steps too). */
bool op_watch(op_call *call);
bool op_unwatch(op_call *call);
/* The next step of c's watch; true when it was answered (or there is
 * none), false when a later turn takes the next. paced: its share of
 * OP_WATCH_STEP_NAMES; unpaced (the drain): the rest. */
bool op_watch_continue(server_client *c, bool paced);
/* c closed: drop its watch in progress. */
void op_watch_client_closed(server_client *c);

#endif
