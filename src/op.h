/* SPDX-License-Identifier: Apache-2.0 */
/*
 * op.h — the op table of protocol 2 and the dispatcher: one request line
 * in, one reply appended to the connection's output. The rows name the
 * handlers of the op-*.c rooms below it.
 */
#ifndef CBD_OP_H
#define CBD_OP_H

#include <stddef.h>

#include "op-call.h"
#include "server-client.h"

/* The table, for stats and docs. */
size_t op_count(void);
const op_entry *op_at(size_t i);
const char *const *op_names(void);

/* Answer one request line (no LF, no CR) from c. */
void op_dispatch(server_client *c, const char *line, size_t len);

/* The next step of c's reply written in steps (a long list); true when
 * it is done. */
bool op_conn_step(server_client *c, bool paced);
/* c closed: drop its op state (a fleet request's wait, its list). */
void op_conn_closed(server_client *c);

#endif
