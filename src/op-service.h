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

#endif
