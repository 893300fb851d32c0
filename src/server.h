/* SPDX-License-Identifier: Apache-2.0 */
/*
 * server.h — the server: listening socket (or an inherited one), accept,
 * peer credentials, the connection list, signals, reload and shutdown.
 */
#ifndef CBD_SERVER_H
#define CBD_SERVER_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <event2/event.h>

#include "daemon.h"
#include "server-client.h"

/* Wait for clients to read their last replies at shutdown, at most. */
#define SERVER_DRAIN_MS 5000
/* Connections accepted per wakeup of the listener. */
#define SERVER_ACCEPT_BATCH 64
/* Pause accepting this long when out of file descriptors (or until a
 * connection closes). */
#define SERVER_ACCEPT_PAUSE_MS 100
/* Log running out of descriptors at most once per this many ms. */
#define SERVER_EMFILE_LOG_MS 1000
/* After the drain time, this long more for the last partly written lines. */
#define SERVER_DRAIN_LINGER_MS 2000
/* Most circuit names listed in one open-circuits warning. */
#define SERVER_WARN_NAMES_MAX 20

/* The listener and the connections (the rest of the daemon's context is
 * in daemon.h). */
typedef struct server {
	int listen_fd;
	bool socket_created; /* we bound the path, so we unlink it (if still ours) */
	dev_t socket_dev; /* the socket file we bound, to know it at exit */
	ino_t socket_ino;
	bool socket_inherited; /* socket activation */
	char *socket_path;
	struct event *listen_ev;
	struct event *accept_pause_ev;
	bool accept_paused; /* listen_ev off for lack of descriptors */
	int spare_fd; /* /dev/null, given up to refuse a client at EMFILE */
	int64_t emfile_logged_ms; /* when running out of descriptors was logged */
	uint64_t emfile_unlogged; /* times since then */
	int64_t max_clients; /* max_connections, clamped to the descriptor limit */
	bool drain_timed_out; /* the drain time passed once */
	struct event *signal_ev[3];
	struct event *reap_ev;
	struct event *warn_ev;
	struct event *drain_ev;
	struct event *log_limit_ev; /* ends each transition-log window */
	server_client *clients; /* live connections */
	server_client *dead; /* closed, waiting to be freed */
	uint64_t next_client_id;
	int exit_code;
} server;

/* The one listener of this process. */
extern server srv;

/* How the listener's connections are served: lines to the op table,
 * closed ones to the ops and watchers, dead ones to the reaper. */
extern const server_client_hooks server_hooks;

/* Set up everything up to listening; false (logged) on failure. */
bool server_start(void);
/* Run the event loop until shutdown; returns the exit code. */
int server_loop(void);
/* Free everything. */
void server_free(void);

/* Change the daemon's state, logging old -> new at debug. */
void server_set_state(daemon_state state);

/* Link / unlink a connection; mark one dead (reaped later). */
void server_add_client(server_client *c);
void server_client_dead(server_client *c);

/* Tell systemd (when built with it and NOTIFY_SOCKET is set). */
void server_notify(const char *state);

#endif
