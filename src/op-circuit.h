/* SPDX-License-Identifier: Apache-2.0 */
/*
 * op-circuit.h — the circuit ops of protocol 2 (the store API's): get, the
 * record ops, cas, set_state, slots, delete, release.
 */
#ifndef CBD_OP_CIRCUIT_H
#define CBD_OP_CIRCUIT_H

#include <stdbool.h>

#include "op-call.h"

bool op_get(op_call *call);
bool op_record_success(op_call *call);
bool op_record_failure(op_call *call);
bool op_cas(op_call *call);
bool op_set_state(op_call *call);
bool op_acquire_slot(op_call *call);
bool op_release_slot(op_call *call);
bool op_delete(op_call *call);
bool op_release(op_call *call);

#endif
