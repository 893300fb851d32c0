/* SPDX-License-Identifier: Apache-2.0 */
/*
 * op-permit.h — the permit ops: allow ("may I call?") and record ("how did it
 * go?", giving back allow's permit).
 */
#ifndef CBD_OP_PERMIT_H
#define CBD_OP_PERMIT_H

#include <stdbool.h>

#include "op-call.h"

bool op_allow(op_call *call);
bool op_record(op_call *call);

#endif
