/* SPDX-License-Identifier: Apache-2.0 */
/*
 * server-client.h — one client connection: framing of request lines into
 * the connection's own input buffer, the output buffer written straight to
 * the socket, limits, and the slots the connection holds.
 */
#ifndef CBD_SERVER_CLIENT_H
#define CBD_SERVER_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <event2/event.h>
#include <jansson.h>

#include "circuit-table.h"
#include "proto.h"

/* Bytes asked of read() at once (Redis reads 16 KiB too). */
#define SERVER_CLIENT_READ_SIZE 16384
/* Lines answered for one connection, and milliseconds spent answering
 * them, before the others get their turn; the rest wait (and the
 * connection is not read) until its next turn. */
#define SERVER_CLIENT_LINES_PER_TURN 32
#define SERVER_CLIENT_TURN_MS 2
/* Reads of pending input when shutting down, at most. */
#define SERVER_CLIENT_DRAIN_READS 16
/* Longest id (as JSON) echoed by an out-of-memory reply; longer ones are
 * left out of it. */
#define SERVER_CLIENT_OOM_ID_MAX 256
/* Output buffer kept after a flush; a larger one is freed. */
#define SERVER_CLIENT_OUT_KEEP 65536
/* Bytes handed to one write(), at most: the kernel queues each write as
 * its own buffer, and how much of them the peer has read (SIOCOUTQ) shows
 * in steps of one. */
#define SERVER_CLIENT_WRITE_MAX 16384
/* Bytes one flush writes at most before the loop serves others: a peer
 * that reads as fast as cbd writes would otherwise keep cbd in one write
 * loop for a whole multi-megabyte list. */
#define SERVER_CLIENT_FLUSH_MAX 16384
/* A closing connection whose peer reads nothing for this long loses its
 * unsent whole lines; if it then reads nothing of the line already partly
 * written for this long again, it is closed anyway (cutting that line:
 * the peer stopped reading). */
#define SERVER_CLIENT_LINGER_MS 2000

/* A connection's life, changed only by server_client_set_state(). */
typedef enum server_client_state {
	SERVER_CLIENT_OPEN = 0, /* reading requests, writing replies */
	SERVER_CLIENT_CLOSING, /* no more reading or replies; closed once output is flushed */
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
	bool read_armed;
	bool write_armed;
	struct event *timer_ev; /* open: client_idle_ms; closing: linger */
	struct event *turn_ev; /* answers the lines left from the last turn */
	int64_t last_request_ms; /* monotonic: accepted, or last complete line */
	uint64_t written; /* bytes written in all */
	uint64_t linger_mark; /* `written` when the linger timer was set */
	int linger_outq; /* the socket's unread bytes then (SIOCOUTQ) */
	bool cut; /* output cut to the rest of a partly written line */
	bool mid_line; /* the last byte written is not a line's LF */
	bool fd_broken; /* a write failed: output is discarded from then on */

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
	/* Fleet mode: the request waiting on Redis for its reply (no other
	 * line is read until it is answered), every request of this
	 * connection Redis has not answered (noreply ones do not block), and
	 * the slots held in Redis. */
	struct op_pending *fleet_wait;
	struct op_pending *fleet_pending;
	unsigned fleet_inflight;
	struct op_fleet_slot *fleet_slots;
	/* A list being answered in steps (no other line is read meanwhile). */
	struct op_list_job *list_job;
	/* Where this connection's paged listing stands (its last list). */
	struct op_list_cursor *list_cursor;
	/* Shutdown came while a request waited on Redis: drain once it is
	 * answered. */
	bool drain_waiting;
};

/* A connection on an accepted, non-blocking fd; NULL when out of memory
 * (the caller still owns fd). */
server_client *server_client_new(int fd);

/* (Re)start the idle timer from the config (after accept and reload). */
void server_client_idle_schedule(server_client *c);

/* Change the state, logging old -> new at debug. */
void server_client_set_state(server_client *c, server_client_state state);

/* Append a reply line (compact JSON + LF) to c's output. Steals reply.
 * Ignored unless c is open. A NULL reply, or one that cannot be serialized
 * (out of memory), is answered as by server_client_reply_oom. A reply that
 * would take the unsent output past max_output_bytes, or that cannot be
 * stored for lack of memory, drops the connection instead. */
void server_client_reply(server_client *c, json_t *reply);

/* Append an `internal` error line built without allocating: what a
 * request gets when its reply cannot be built. Echoes id (may be NULL)
 * when its JSON fits SERVER_CLIENT_OOM_ID_MAX bytes. */
void server_client_reply_oom(server_client *c, const json_t *id);

/* Append a line already serialized (compact JSON, no LF) to c's output,
 * with the same bound as server_client_reply: one encoding shared by
 * many connections (watch events). */
void server_client_reply_line(server_client *c, const char *line, size_t len);
/* The same for a line given in n parts (copied once). */
struct iovec;
void server_client_reply_parts(server_client *c, const struct iovec *parts, int n);

/* A line written piece by piece (a long list, as its steps are done):
 * append part of it, keeping room for `keep` more bytes (its end). False
 * (nothing appended) when there is no room: the caller ends the line in
 * the room kept by the last piece. Nothing else may be written to c
 * until the line ends (its input waits; watch events are held back). */
bool server_client_write_piece(server_client *c, const char *piece, size_t len, size_t keep);
/* The line's last part, and its LF. */
void server_client_write_end(server_client *c, const char *end, size_t len);

/* The request c waited on is answered: take its next lines (in a turn
 * of its own, never inside the caller). */
void server_client_resume(server_client *c);
/* Write pending output now; arms EV_WRITE when the socket is full. */
void server_client_flush(server_client *c);

/* Close: release the connection's slots, close the fd and queue the
 * struct for freeing outside any of its callbacks. why is logged. */
void server_client_close(server_client *c, const char *why);

/* Admin by SO_PEERCRED and the config. */
bool server_client_is_admin(const server_client *c);

/* Free a dead connection (called by the server's reaper). */
void server_client_free(server_client *c);

/* Shutdown: answer complete lines already sent with shutting_down, stop
 * reading, and close once the output is flushed. */
void server_client_drain(server_client *c);

/* Stop answering c: no more reading, unsent whole lines discarded, closed
 * (by its own write event, never inside the call) once the line already
 * partly written is. */
void server_client_drop(server_client *c, const char *why);

#endif
