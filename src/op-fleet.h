/* SPDX-License-Identifier: Apache-2.0 */
/*
 * op-fleet.h — fleet mode's path of the circuit ops: routed to the circuit
 * script in Redis, answered when Redis has; this host's copy answers while
 * Redis is away, and operators' actions are written back.
 */
#ifndef CBD_OP_FLEET_H
#define CBD_OP_FLEET_H

#include <stdbool.h>
#include <stdint.h>

#include "op-call.h"

/* A circuit op's path through the circuit script: its script op, the
 * members it adds to the call, its reply from the script's answer, and
 * whether it is an operator's action written back after an outage. The
 * op table's fleet column points at these rows. */
typedef struct op_fleet_path op_fleet_path;
extern const op_fleet_path op_fleet_get, op_fleet_record_success, op_fleet_record_failure,
    op_fleet_record, op_fleet_allow, op_fleet_acquire_slot, op_fleet_release_slot, op_fleet_cas,
    op_fleet_set_state, op_fleet_delete, op_fleet_release;

/* Fleet mode (op-fleet.c): send call's op to the circuit script; sets
 * call->pending, or *answered when the reply is made already, or neither
 * to have this host's copy answer (Redis cannot take it now). False with
 * call->err on bad input. */
bool op_fleet_send(op_call *call, bool *answered);
/* Fleet mode, Redis away: this host's copy answers call, and an
 * operator's release, delete or unheld set_state is remembered to be
 * written back when Redis is back. */
bool op_fleet_local(op_call *call);
/* Requests of one connection Redis may be running at once (noreply ones
 * are not waited for); past it the connection is read no more until one
 * is answered. */
#define OP_FLEET_INFLIGHT_MAX 256
/* c closed: forget its waiting requests, give back its fleet slots. */
void op_fleet_client_closed(server_client *c);

#endif
