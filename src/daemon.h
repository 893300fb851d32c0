/* SPDX-License-Identifier: Apache-2.0 */
/*
 * daemon.h — the daemon's context: its life state, the event loop, the
 * configuration in force and the circuit table. Every layer above the
 * configuration reads these here, not in the listener (server.h).
 */
#ifndef CBD_DAEMON_H
#define CBD_DAEMON_H

#include <stdbool.h>

#include <event2/event.h>

#include "circuit-table.h"
#include "conf.h"

/* The daemon's life, changed only by server_set_state(). */
typedef enum daemon_state {
	DAEMON_STARTING = 0,
	DAEMON_RUNNING,
	DAEMON_RELOADING,
	DAEMON_STOPPING,
} daemon_state;

typedef struct daemon_ctx {
	daemon_state state;
	struct event_base *base;
	cbd_conf conf;
	const char *conf_path; /* NULL: built-in defaults */
	const char *socket_override; /* -s */
	bool verbose; /* -v: log_level debug whatever the file says */
	circuit_table *table;
} daemon_ctx;

/* The one daemon of this process (cbd is single-threaded). Not named
 * `daemon`: that is daemon(3). */
extern daemon_ctx cbd;

/* The name of a state, for logs. */
const char *daemon_state_name(daemon_state state);

#endif
