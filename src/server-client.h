/*
 * server-client.h — one client connection: framing of request lines into
 * the connection's own input buffer, the output buffer written straight to
 * the socket, limits, and the slots the connection holds.
 */
#ifndef CBD_SERVER_CLIENT_H
#define CBD_SERVER_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include <event2/event.h>
#include <jansson.h>

#include "circuit-table.h"
#include "proto.h"

/* Bytes asked of read() at once (Redis reads 16 KiB too). */
#define SERVER_CLIENT_READ_SIZE 16384
/* Reads of pending input when shutting down, at most. */
#define SERVER_CLIENT_DRAIN_READS 16
/* Longest id (as JSON) echoed by an out-of-memory reply; longer ones are
 * left out of it. */
#define SERVER_CLIENT_OOM_ID_MAX 256
/* Output buffer kept after a flush; a larger one is freed. */
#define SERVER_CLIENT_OUT_KEEP 65536

/* A connection's life, changed only by server_client_set_state(). */
typedef enum server_client_state {
	SERVER_CLIENT_OPEN = 0, /* reading requests, writing replies */
	SERVER_CLIENT_CLOSING, /* no more reading; closed once output is flushed */
	SERVER_CLIENT_DEAD, /* closed; freed later, outside its callbacks */
} server_client_state;

typedef struct server_client server_client;

struct server_client {
	server_client *prev, *next; /* the server's list (live or dead) */
	uint64_t id; /* for logs */
	int fd;
	server_client_state state;
	struct event *read_ev;
	struct event *write_ev;
	bool write_armed;

	char *in; /* unanswered input: at most one partial line */
	size_t in_len;
	size_t in_cap;
	size_t in_scan; /* bytes of `in` already known to hold no LF */
	bool discarding; /* dropping the rest of an overlong line */

	char *out; /* replies not yet written */
	size_t out_off; /* bytes of `out` already written */
	size_t out_len;
	size_t out_cap;

	pid_t pid; /* SO_PEERCRED */
	uid_t uid;
	gid_t gid;
	ct_owner owner; /* slots and permits this connection holds */
};

/* A connection on an accepted, non-blocking fd. */
server_client *server_client_new(int fd);

/* Change the state, logging old -> new at debug. */
void server_client_set_state(server_client *c, server_client_state state);

/* Append a reply line (compact JSON + LF) to c's output. Steals reply;
 * a NULL reply, or one that cannot be serialized (out of memory), is
 * answered as by server_client_reply_oom. */
void server_client_reply(server_client *c, json_t *reply);

/* Append an `internal` error line built without allocating: what a
 * request gets when its reply cannot be built. Echoes id (may be NULL)
 * when its JSON fits SERVER_CLIENT_OOM_ID_MAX bytes. */
void server_client_reply_oom(server_client *c, const json_t *id);

/* Write pending output now; arms EV_WRITE when the socket is full. */
void server_client_flush(server_client *c);

/* Close: release the connection's slots, close the fd and queue the
 * struct for freeing outside any of its callbacks. why is logged. */
void server_client_close(server_client *c, const char *why);

/* Free a dead connection (called by the server's reaper). */
void server_client_free(server_client *c);

/* Shutdown: answer complete lines already sent with shutting_down, stop
 * reading, and close once the output is flushed. */
void server_client_drain(server_client *c);

#endif
