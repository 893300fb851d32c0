/* SPDX-License-Identifier: Apache-2.0 */
/*
 * op-service.h — the service ops, about cbd rather than one circuit: hello,
 * stats, metrics, and watch / unwatch (the subscription; its fan-out is
 * watch.c).
 */
#ifndef CBD_OP_SERVICE_H
#define CBD_OP_SERVICE_H

#include <stdbool.h>

#include "op-call.h"

bool op_hello(op_call *call);
bool op_stats(op_call *call);
bool op_metrics(op_call *call);
/* Names one watch step takes at most: a longer watch line is answered
 * across turns (op_watch_continue), other connections served between. */
#define OP_WATCH_STEP_NAMES 64
bool op_watch(op_call *call);
/* The next step of c's watch; true when it was answered (or there is
 * none), false when a later turn takes the next. paced: its share of
 * OP_WATCH_STEP_NAMES; unpaced (the drain): the rest. */
bool op_watch_continue(server_client *c, bool paced);
/* c closed: drop its watch in progress. */
void op_watch_client_closed(server_client *c);
bool op_unwatch(op_call *call);

#endif
