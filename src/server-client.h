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
#include "encode.h"
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

/* Why a connection reads no line now (server_client.blocked). */
/* A request waits for its answer from elsewhere (Redis): resumed by
 * server_client_resume(); a drain waits for it. */
#define SERVER_CLIENT_BLOCK_REPLY 0x1u
/* Too many requests in flight: resumed when one is answered. */
#define SERVER_CLIENT_BLOCK_FULL 0x2u
/* A reply written in steps, one a turn (hooks->step): nothing else is
 * written to the connection until it ends. */
#define SERVER_CLIENT_BLOCK_STEPS 0x4u

/* What the layers above plug into a connection, so that it calls none of
 * them by name (libevent's callbacks, Redis's command table). */
typedef struct server_client_hooks {
	/* Answer one complete request line (no LF, no CR). */
	void (*line)(server_client *c, const char *line, size_t len);
	/* The next step of a reply written in steps (BLOCK_STEPS); true when
	 * it is done. paced: this turn's share of the work; unpaced (the
	 * drain): all of it. */
	bool (*step)(server_client *c, bool paced);
	/* c closed: drop what the layers above keep for it (its slot). */
	void (*closed)(server_client *c);
	/* c is dead: its owner frees it later, outside its callbacks. */
	void (*dead)(server_client *c);
} server_client_hooks;

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
	struct event *hup_ev; /* the peer's hangup while a request waits (made on use) */
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
	size_t out_counted; /* out_cap as server_client_output_bytes() counts it */
	/* A reply line being encoded in place, in the room after out_len
	 * (server_client_reply_begin); NULL: none. */
	enc_buf *reply_open;
	/* Every connection, for the host-wide output bound's choice. */
	struct server_client *all_next, *all_prev;

	pid_t pid; /* SO_PEERCRED */
	uid_t uid;
	gid_t gid;
	ct_owner owner; /* slots and permits this connection holds */
	/* What the layers above plug in (see server_client_hooks). */
	const struct server_client_hooks *hooks;
	/* The op layer's state for this connection; opaque here, made by that
	 * layer on first use and dropped by its `closed` hook. */
	void *slot;
	/* Why no line is read now: SERVER_CLIENT_BLOCK_* bits, set and
	 * cleared by the layer above (server_client_block). */
	unsigned blocked;
	/* Shutdown came while a request waited for its reply
	 * (SERVER_CLIENT_BLOCK_REPLY): drain once it is answered. */
	bool drain_waiting;
};

/* Memory no connection uses is given back (malloc_trim) once freed
 * output buffers of at least this many bytes in all are waiting for it. */
#define SERVER_CLIENT_TRIM_MIN (1024 * 1024)
/* ... and at most once in this many milliseconds: malloc_trim walks the
 * whole heap, a pause of milliseconds (6-46 ms measured near the output
 * bound, where it ran every housekeeping tick, 50 ms). */
#define SERVER_CLIENT_TRIM_INTERVAL_MS 1000

/* Bytes of output buffers all connections hold now (what
 * max_total_output_bytes bounds), and the most they held at once. */
uint64_t server_client_output_bytes(void);
/* An output buffer outside the socket's connections (the dashboard's
 * event streams) goes from old_cap to new_cap bytes: counted with the
 * connections' against max_total_output_bytes. False (counted in stats,
 * nothing changed) when growing it would pass the bound: its owner drops
 * that stream rather than a socket client. */
bool server_client_output_external(size_t old_cap, size_t new_cap);
uint64_t server_client_output_bytes_peak(void);

/* Give freed output memory back to the system when much was freed since
 * the last time (the housekeeping tick calls it). */
void server_client_trim(void);

/* A connection on an accepted, non-blocking fd, served through hooks;
 * NULL when out of memory (the caller still owns fd). */
server_client *server_client_new(int fd, const server_client_hooks *hooks);

/* Set (on) or clear blocking bits (SERVER_CLIENT_BLOCK_*). */
static inline void
server_client_block(server_client *c, unsigned bits, bool on)
{
	if (on)
		c->blocked |= bits;
	else
		c->blocked &= ~bits;
}

/* Must c's next lines wait for a reply from elsewhere? */
static inline bool
server_client_waiting(const server_client *c)
{
	return (c->blocked & (SERVER_CLIENT_BLOCK_REPLY | SERVER_CLIENT_BLOCK_FULL)) != 0;
}

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

/* Append an error line without id (a line too long): counted in stats. */
void server_client_reply_error(server_client *c, proto_code code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

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

/* A reply line encoded straight into c's output, after what is queued
 * (no copy of it): *b borrows the room left in c's output buffer (encode.h)
 * — or, when there is little or c is not open, is an ordinary buffer.
 * What is written to b is the line, without its LF. Whatever else writes
 * to c, or changes its buffer, meanwhile first moves b's text to memory
 * of its own (b stays valid). Ended by server_client_reply_commit or
 * server_client_reply_cancel, before b goes out of scope. */
void server_client_reply_begin(server_client *c, enc_buf *b);
/* Append b's text to c's output as a line, exactly as
 * server_client_reply_line would (max_output_bytes and
 * max_total_output_bytes alike), and empty b (b must not be nomem). */
void server_client_reply_commit(server_client *c, enc_buf *b);
/* Forget the line begun: nothing is written; b is emptied. */
void server_client_reply_cancel(server_client *c, enc_buf *b);

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
/* While a request of c waits long (for a ticket, server_client_block'ed),
 * its input is not read: watch (on) for the peer's hangup all the same,
 * which closes c; off when the request is answered. */
void server_client_watch_hangup(server_client *c, bool on);
/* Have the loop write c's output at its next turn (not inside the
 * caller, where a failed write would close c). */
void server_client_write_soon(server_client *c);
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
