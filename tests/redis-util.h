/* SPDX-License-Identifier: Apache-2.0 */
/*
 * redis-util.h — a real redis-server for fleet-mode tests: started on a
 * Unix socket in a fresh temp dir (no TCP port, no persistence), killed
 * and restarted on the same socket, stopped and cleaned up; or on a
 * loopback TCP port too (a replica of another), or as a Redis Sentinel
 * (redis-server --sentinel) watching a master; and the text of a
 * script to load into it (fleet mode's src/fleet.lua).
 */
#ifndef CBD_REDIS_UTIL_H
#define CBD_REDIS_UTIL_H

#include <stdbool.h>
#include <sys/types.h>

typedef struct redis_server {
	pid_t pid; /* -1 when not running */
	char dir[64];
	char socket_path[108]; /* fits sockaddr_un.sun_path */
	int port; /* loopback TCP port; 0: none */
	int replica_of; /* the master's port; 0: none */
	bool sentinel; /* a Sentinel (port only) */
	char master[64]; /* the master a Sentinel watches */
} redis_server;

/* A whole file's text, NUL-terminated (malloc'd); NULL when it cannot be
 * read. */
char *redis_read_file(const char *path);

/* src/fleet.lua's text, from $CBD_SRCDIR (default .; malloc'd); NULL when
 * it cannot be read. */
char *redis_fleet_script(void);

/* Is redis-server on PATH? (Tests skip with 77 without it.) */
bool redis_available(void);

/* Start redis-server in a fresh temp dir; wait (bounded) until it answers
 * PING. False (nothing left behind) when it did not start. */
bool redis_start(redis_server *r);

/* A free loopback TCP port (0: none found). */
int redis_free_port(void);

/* Start redis-server on a Unix socket and loopback port (a free one),
 * a replica of the server on port replica_of (0: a master). */
bool redis_start_tcp(redis_server *r, int replica_of);

/* Start a Sentinel on a free loopback port watching the master on
 * master_port as `master` (quorum 1, down after 1 s). */
bool redis_start_sentinel(redis_server *r, const char *master, int master_port);

/* SIGKILL the server (the socket file stays, as after a crash). */
void redis_kill(redis_server *r);

/* Start it again on the same socket (after redis_kill): empty data. */
bool redis_restart(redis_server *r);

/* Stop the server (SIGTERM, bounded wait, then SIGKILL) and remove the
 * temp dir. Safe to call twice. */
void redis_stop(redis_server *r);

#endif
