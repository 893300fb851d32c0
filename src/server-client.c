/* SPDX-License-Identifier: Apache-2.0 */
/*
 * server-client.c — one client connection: reads into the connection's own
 * buffer, answers every complete line already read, appends the replies to
 * an output buffer and writes it straight to the socket, arming EV_WRITE
 * only when a write would block. Enforces max_line_bytes, max_output_bytes
 * (per reply) and client_idle_ms, closes only between whole reply lines,
 * and gives the connection's slots back when it closes.
 */
#include <errno.h>
#include <malloc.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/uio.h>
#include <unistd.h>

#include <linux/sockios.h>

#include "clock.h"
#include "daemon.h"
#include "encode.h"
#include "log.h"
#include "server-client.h"
#include "stats.h"

static const char *const state_names[] = {
	[SERVER_CLIENT_OPEN] = "open",
	[SERVER_CLIENT_CLOSING] = "closing",
	[SERVER_CLIENT_DEAD] = "dead",
};

static void server_client_read_cb(evutil_socket_t fd, short what, void *arg);
static void server_client_write_cb(evutil_socket_t fd, short what, void *arg);
static void server_client_timer_cb(evutil_socket_t fd, short what, void *arg);
static void server_client_turn_cb(evutil_socket_t fd, short what, void *arg);
static void read_arm(server_client *c, bool on);

/* Every connection (newest first), the bytes of their output buffers,
 * the most at once, and freed bytes not yet given back. */
static server_client *all_clients;
static uint64_t out_total, out_total_peak, out_untrimmed;

/* c's output buffer is now cap bytes (0: freed); counted. */
static void
out_account(server_client *c, size_t cap)
{
	/* Never below zero (a connection made outside server_client_new,
	 * as the fuzz targets', is counted from its first growth). */
	out_total = (out_total > c->out_counted ? out_total - c->out_counted : 0) + cap;
	if (out_total > out_total_peak)
		out_total_peak = out_total;
	if (cap < c->out_counted)
		out_untrimmed += c->out_counted - cap;
	c->out_counted = cap;
	c->out_cap = cap;
}

/* The reply being encoded in place in c's output (if any) moves to
 * memory of its own: c's buffer is about to change or be written. */
static inline void
out_unborrow(server_client *c)
{
	if (c->reply_open != NULL) {
		enc_unborrow(c->reply_open);
		c->reply_open = NULL;
	}
}

/* Free c's output buffer (nothing left in it to write). */
static void
out_release(server_client *c)
{
	out_unborrow(c);
	free(c->out);
	c->out = NULL;
	out_account(c, 0);
}

uint64_t
server_client_output_bytes(void)
{
	return out_total;
}

bool
server_client_output_external(size_t old_cap, size_t new_cap)
{
	uint64_t rest = out_total > old_cap ? out_total - old_cap : 0;

	if (new_cap > old_cap && rest + new_cap > (uint64_t)cbd.conf.max_total_output_bytes) {
		stats_limit_hit(STATS_LIMIT_TOTAL_OUTPUT);
		return false;
	}
	out_total = rest + new_cap;
	if (out_total > out_total_peak)
		out_total_peak = out_total;
	if (new_cap < old_cap)
		out_untrimmed += old_cap - new_cap;
	return true;
}

uint64_t
server_client_output_bytes_peak(void)
{
	return out_total_peak;
}

void
server_client_trim(void)
{
	static int64_t last_ms;
	int64_t now = clock_monotonic_coarse_ms(), began;
	uint64_t freed = out_untrimmed;

	if (freed < SERVER_CLIENT_TRIM_MIN ||
	    (last_ms != 0 && now - last_ms < SERVER_CLIENT_TRIM_INTERVAL_MS))
		return;
	last_ms = now;
	out_untrimmed = 0;
	began = clock_monotonic_us();
	malloc_trim(0);
	log_debug("malloc_trim after %llu bytes of output buffers freed: %lld us",
	    (unsigned long long)freed, (long long)(clock_monotonic_us() - began));
}

server_client *
server_client_new(int fd, const server_client_hooks *hooks)
{
	server_client *c = calloc(1, sizeof *c);

	if (c == NULL)
		return NULL;
	c->fd = fd;
	c->hooks = hooks;
	c->state = SERVER_CLIENT_OPEN;
	c->last_request_ms = clock_monotonic_coarse_ms();
	c->read_ev = event_new(cbd.base, fd, EV_READ | EV_PERSIST, server_client_read_cb, c);
	c->write_ev = event_new(cbd.base, fd, EV_WRITE | EV_PERSIST, server_client_write_cb, c);
	c->timer_ev = evtimer_new(cbd.base, server_client_timer_cb, c);
	c->turn_ev = evtimer_new(cbd.base, server_client_turn_cb, c);
	if (c->read_ev == NULL || c->write_ev == NULL || c->timer_ev == NULL ||
	    c->turn_ev == NULL || event_add(c->read_ev, NULL) != 0) {
		server_client_free(c);
		return NULL;
	}
	c->read_armed = true;
	c->all_next = all_clients;
	if (all_clients != NULL)
		all_clients->all_prev = c;
	all_clients = c;
	return c;
}

/* Run c's timer ms from now. */
static void
timer_arm(server_client *c, int64_t ms)
{
	struct timeval tv = { (time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000 };

	evtimer_add(c->timer_ev, &tv);
}

void
server_client_idle_schedule(server_client *c)
{
	if (c->state != SERVER_CLIENT_OPEN)
		return;
	if (cbd.conf.client_idle_ms > 0)
		timer_arm(c, cbd.conf.client_idle_ms);
	else
		evtimer_del(c->timer_ev);
}

/* Did the peer read anything since the last call? (cbd wrote more, or
 * the socket holds fewer unread bytes: a slow reader frees too little room
 * for cbd to write, yet it reads.) */
static bool
peer_reads(server_client *c)
{
	int outq = -1;
	bool moved;

	if (ioctl(c->fd, SIOCOUTQ, &outq) != 0)
		outq = -1;
	moved = c->written != c->linger_mark || outq != c->linger_outq;
	c->linger_mark = c->written;
	c->linger_outq = outq;
	return moved;
}

void
server_client_set_state(server_client *c, server_client_state state)
{
	if (c->state == state)
		return;
	log_debug("connection %llu: %s -> %s", (unsigned long long)c->id, state_names[c->state],
	    state_names[state]);
	c->state = state;
	if (state == SERVER_CLIENT_CLOSING) {
		/* From now on the timer watches that the peer keeps reading. */
		peer_reads(c);
		timer_arm(c, SERVER_CLIENT_LINGER_MS);
	}
}

/* Make room for `need` more bytes of output; false when out of memory. */
static bool
out_reserve(server_client *c, size_t need)
{
	size_t max = (size_t)cbd.conf.max_output_bytes, cap;
	char *grown;

	out_unborrow(c);
	if (c->out_off > 0 && c->out_off == c->out_len) {
		c->out_off = 0;
		c->out_len = 0;
	}
	if (c->out_cap - c->out_len >= need)
		return true;
	if (c->out_off > 0 &&
	    (c->out_len - c->out_off <= SERVER_CLIENT_OUT_KEEP || c->out_off >= max)) {
		/* Slide unsent bytes to the front before growing. A large unsent
		 * part (a long list being written) grows at the end instead of
		 * being copied again, until the space already sent reaches
		 * max_output_bytes. */
		memmove(c->out, c->out + c->out_off, c->out_len - c->out_off);
		c->out_len -= c->out_off;
		c->out_off = 0;
		if (c->out_cap - c->out_len >= need)
			return true;
	}
	cap = c->out_cap > 0 ? c->out_cap : SERVER_CLIENT_READ_SIZE;
	while (cap - c->out_len < need)
		cap *= 2;
	/* Doubling past the bound would only waste memory. */
	if (cap > max)
		cap = c->out_len + need > max ? c->out_len + need : max;
	grown = realloc(c->out, cap);
	if (grown == NULL)
		return false;
	c->out = grown;
	out_account(c, cap);
	return true;
}

/* The bytes out_reserve(c, need) would add to c's buffer (it makes the
 * same choices). */
static size_t
out_growth(const server_client *c, size_t need)
{
	size_t max = (size_t)cbd.conf.max_output_bytes, len = c->out_len, cap;

	if (c->out_off > 0 && c->out_off == c->out_len)
		len = 0;
	if (c->out_cap - len >= need)
		return 0;
	if (c->out_off > 0 && c->out_off < c->out_len &&
	    (c->out_len - c->out_off <= SERVER_CLIENT_OUT_KEEP || c->out_off >= max))
		len = c->out_len - c->out_off;
	if (c->out_cap - len >= need)
		return 0;
	cap = c->out_cap > 0 ? c->out_cap : SERVER_CLIENT_READ_SIZE;
	while (cap - len < need)
		cap *= 2;
	if (cap > max)
		cap = len + need > max ? len + need : max;
	return cap > c->out_cap ? cap - c->out_cap : 0;
}

/* A dropped connection keeps only the rest of a line partly written:
 * its buffer shrinks to that (or is freed) at once. */
static void
out_shrink(server_client *c)
{
	size_t rest = c->out_len - c->out_off;
	char *small;

	out_unborrow(c);
	if (rest == 0) {
		out_release(c);
		c->out_off = c->out_len = 0;
		return;
	}
	memmove(c->out, c->out + c->out_off, rest);
	c->out_off = 0;
	c->out_len = rest;
	small = realloc(c->out, rest);
	if (small != NULL) {
		c->out = small;
		out_account(c, rest);
	}
}

/* The host-wide bound: c's buffer must grow by grow bytes but all
 * connections' buffers would pass max_total_output_bytes (c is to queue
 * len more bytes). Drop the open connection furthest behind, until it
 * fits or c itself is dropped (true). A dropped connection's buffer
 * shrinks at once (server_client_drop). */
static bool
out_make_room(server_client *c, size_t len, size_t grow)
{
	uint64_t max = (uint64_t)cbd.conf.max_total_output_bytes;

	while (out_total + grow > max) {
		server_client *victim = c, *o;
		size_t most = c->out_len - c->out_off + len;

		/* The one furthest behind (the most unread output); c only
		 * when no other is as far. */
		for (o = all_clients; o != NULL; o = o->all_next) {
			if (o != c && o->state == SERVER_CLIENT_OPEN &&
			    o->out_len - o->out_off >= most) {
				victim = o;
				most = o->out_len - o->out_off;
			}
		}
		stats_limit_hit(STATS_LIMIT_TOTAL_OUTPUT);
		log_warning("connection %llu: dropped: its %zu bytes of unread output are the most "
			    "while all connections' output would pass max_total_output_bytes "
			    "(%lld)",
		    (unsigned long long)victim->id, victim->out_len - victim->out_off,
		    (long long)cbd.conf.max_total_output_bytes);
		server_client_drop(victim, "max_total_output_bytes reached");
		if (victim == c)
			return true;
	}
	return false;
}

/* Write what the socket takes now, at most `most` bytes. Returns 0, or
 * the errno of a failed write (closing the connection is left to the
 * caller). Never moves the buffer. */
static int
out_send_most(server_client *c, size_t most)
{
	size_t stop =
	    c->out_off + (most < c->out_len - c->out_off ? most : c->out_len - c->out_off);

	if (c->fd < 0)
		return 0; /* no socket (the fuzz targets' connections) */
	if (c->fd_broken) {
		c->out_off = c->out_len; /* the peer is gone: nowhere to go */
		return 0;
	}
	while (c->out_off < stop) {
		size_t len = stop - c->out_off;
		ssize_t n = write(c->fd, c->out + c->out_off,
		    len < SERVER_CLIENT_WRITE_MAX ? len : SERVER_CLIENT_WRITE_MAX);

		if (n > 0) {
			c->out_off += (size_t)n;
			c->written += (uint64_t)n;
			c->mid_line = c->out[c->out_off - 1] != '\n';
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			break;
		return n < 0 ? errno : EPIPE;
	}
	return 0;
}

/* Write all the socket takes now. */
static int
out_send(server_client *c)
{
	return out_send_most(c, SIZE_MAX);
}

/* Discard the unsent whole lines of c's output; the rest of a line already
 * partly written stays, so the peer never sees a cut line. */
static void
out_cut(server_client *c)
{
	char *nl;

	out_unborrow(c);
	c->cut = true;
	if (!c->mid_line) {
		c->out_len = c->out_off;
		return;
	}
	nl = memchr(c->out + c->out_off, '\n', c->out_len - c->out_off);
	if (nl != NULL)
		c->out_len = (size_t)(nl - c->out) + 1;
}

/* Out of memory for c: drop it, counted, instead of stopping cbd. */
static void
server_client_nomem(server_client *c, const char *what)
{
	stats_limit_hit(STATS_LIMIT_NOMEM);
	log_warning("connection %llu: dropped: out of memory %s", (unsigned long long)c->id, what);
	server_client_drop(c, "out of memory");
}

void
server_client_drop(server_client *c, const char *why)
{
	if (c->state == SERVER_CLIENT_DEAD)
		return;
	read_arm(c, false);
	evtimer_del(c->turn_ev);
	out_cut(c);
	out_shrink(c);
	log_debug("connection %llu: dropped (%s)%s", (unsigned long long)c->id, why,
	    c->out_off < c->out_len ? " after the rest of a line" : "");
	server_client_set_state(c, SERVER_CLIENT_CLOSING);
	/* Closed by its own write event, never here: the caller may be
	 * walking connections (a reply to a watcher, the drain). */
	event_active(c->write_ev, EV_WRITE, 1);
}

/* Would c's buffer, grown for len more bytes, take all connections'
 * output past max_total_output_bytes (once what the socket takes now is
 * sent)? Then the connection holding the most is dropped, counted; true
 * when that is c. */
static bool
out_over_total(server_client *c, size_t len)
{
	size_t grow = out_growth(c, len);
	int err;

	if (grow == 0 || out_total + grow <= (uint64_t)cbd.conf.max_total_output_bytes)
		return false;
	/* Before dropping anyone, count again from the connections. */
	out_total = 0;
	for (server_client *o = all_clients; o != NULL; o = o->all_next)
		out_total += o->out_counted;
	if (out_total + grow <= (uint64_t)cbd.conf.max_total_output_bytes)
		return false;
	err = out_send(c);
	if (err != 0) {
		server_client_drop(c, strerror(err));
		return true;
	}
	grow = out_growth(c, len);
	if (grow == 0 || out_total + grow <= (uint64_t)cbd.conf.max_total_output_bytes)
		return false;
	return out_make_room(c, len, grow);
}

/* Would `len` more bytes take c's unsent output past max_output_bytes,
 * once what the socket takes now is sent? Then c is dropped (counted). */
static bool
out_over_bound(server_client *c, size_t len)
{
	size_t max = (size_t)cbd.conf.max_output_bytes;
	int err;

	if (c->out_len - c->out_off + len <= max)
		return out_over_total(c, len);
	/* Only bytes the socket does not take count: send first. */
	err = out_send(c);
	if (err != 0) {
		server_client_drop(c, strerror(err));
		return true;
	}
	if (c->out_len - c->out_off + len <= max)
		return out_over_total(c, len);
	stats_limit_hit(STATS_LIMIT_OUTPUT);
	log_warning("connection %llu: dropped: a reply of %zu bytes on top of %zu unread would "
		    "pass max_output_bytes (%lld)",
	    (unsigned long long)c->id, len, c->out_len - c->out_off,
	    (long long)cbd.conf.max_output_bytes);
	server_client_drop(c, "max_output_bytes reached");
	return true;
}

void
server_client_reply_error(server_client *c, proto_code code, const char *fmt, ...)
{
	proto_error err = { .code = code };
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err.message, sizeof err.message, fmt, ap);
	va_end(ap);
	stats.errors[code]++;
	server_client_reply(c, proto_reply_error(NULL, &err));
}

void
server_client_reply_oom(server_client *c, const json_t *id)
{
	static const char body[] =
	    "\"ok\":false,\"error\":{\"code\":\"internal\",\"message\":\"out of memory\"}}\n";
	char id_text[SERVER_CLIENT_OOM_ID_MAX];
	size_t id_len = 0, len;

	if (c->state != SERVER_CLIENT_OPEN)
		return;
	/* Dumping an integer or a string allocates nothing. */
	if (id != NULL)
		id_len = json_dumpb(id, id_text, sizeof id_text, JSON_ENCODE_ANY | JSON_COMPACT);
	if (id_len > sizeof id_text)
		id_len = 0;
	len = 1 + (id_len > 0 ? 5 + id_len + 1 : 0) + sizeof body - 1;
	if (out_over_bound(c, len))
		return;
	if (!out_reserve(c, len)) {
		server_client_nomem(c, "for an out-of-memory reply");
		return;
	}
	c->out[c->out_len++] = '{';
	if (id_len > 0) {
		memcpy(c->out + c->out_len, "\"id\":", 5);
		memcpy(c->out + c->out_len + 5, id_text, id_len);
		c->out_len += 5 + id_len;
		c->out[c->out_len++] = ',';
	}
	memcpy(c->out + c->out_len, body, sizeof body - 1);
	c->out_len += sizeof body - 1;
}

void
server_client_reply_line(server_client *c, const char *line, size_t len)
{
	struct iovec part = { (void *)line, len };

	server_client_reply_parts(c, &part, 1);
}

void
server_client_reply_parts(server_client *c, const struct iovec *parts, int n)
{
	size_t len = 0;

	for (int i = 0; i < n; i++)
		len += parts[i].iov_len;
	if (c->state != SERVER_CLIENT_OPEN || out_over_bound(c, len + 1))
		return;
	if (!out_reserve(c, len + 1)) {
		server_client_nomem(c, "for output");
		return;
	}
	for (int i = 0; i < n; i++) {
		if (parts[i].iov_len > 0)
			memcpy(c->out + c->out_len, parts[i].iov_base, parts[i].iov_len);
		c->out_len += parts[i].iov_len;
	}
	c->out[c->out_len++] = '\n';
}

/* Room a reply needs in c's output to be begun there; with less it is
 * encoded apart and copied (as when c's buffer is not made yet). */
#define REPLY_IN_PLACE_MIN 1024

void
server_client_reply_begin(server_client *c, enc_buf *b)
{
	out_unborrow(c);
	/* Nothing unsent: write from the start (as out_reserve would). */
	if (c->out_off > 0 && c->out_off == c->out_len)
		c->out_off = c->out_len = 0;
	if (c->state != SERVER_CLIENT_OPEN || c->out_cap - c->out_len < REPLY_IN_PLACE_MIN) {
		*b = enc_take();
		return;
	}
	*b = enc_borrow(c->out + c->out_len, c->out_cap - c->out_len);
	c->reply_open = b;
}

void
server_client_reply_commit(server_client *c, enc_buf *b)
{
	size_t len = b->len;

	if (!b->borrowed) {
		/* Encoded apart (or moved there): copied, as any line. */
		if (c->reply_open == b)
			c->reply_open = NULL;
		if (!b->nomem)
			server_client_reply_line(c, b->buf, b->len);
		enc_recycle(b);
		return;
	}
	/* In place: b's text is at out + out_len (anything that changed the
	 * buffer since would have moved it), with room for the LF (b's NUL).
	 * The bounds as server_client_reply_parts checks them: what they may
	 * send or drop leaves it there (a drop closes c: nothing written). */
	c->reply_open = NULL;
	*b = (enc_buf){ 0 };
	/* (Within max_output_bytes, out_over_bound's answer is known: the
	 * buffer does not grow, so max_total_output_bytes is not asked.) */
	if (c->state != SERVER_CLIENT_OPEN ||
	    (c->out_len - c->out_off + len + 1 > (size_t)cbd.conf.max_output_bytes &&
		out_over_bound(c, len + 1)))
		return;
	c->out_len += len;
	c->out[c->out_len++] = '\n';
}

void
server_client_reply_cancel(server_client *c, enc_buf *b)
{
	if (c->reply_open == b)
		c->reply_open = NULL;
	enc_recycle(b);
}

bool
server_client_write_piece(server_client *c, const char *piece, size_t len, size_t keep)
{
	if (c->state != SERVER_CLIENT_OPEN || !out_reserve(c, len + keep))
		return false;
	if (len > 0)
		memcpy(c->out + c->out_len, piece, len);
	c->out_len += len;
	return true;
}

void
server_client_write_end(server_client *c, const char *end, size_t len)
{
	if (c->state != SERVER_CLIENT_OPEN)
		return;
	/* The room server_client_write_piece kept; reserve only in case. */
	if (!out_reserve(c, len + 1)) {
		server_client_nomem(c, "for the end of a line");
		return;
	}
	memcpy(c->out + c->out_len, end, len);
	c->out_len += len;
	c->out[c->out_len++] = '\n';
}

void
server_client_reply(server_client *c, json_t *reply)
{
	if (c->state != SERVER_CLIENT_OPEN) {
		json_decref(reply);
		return;
	}
	if (reply == NULL) {
		server_client_reply_oom(c, NULL);
		return;
	}
	/* The text, then copied into the output (a buffer kept between
	 * replies: encode.c's spares). */
	enc_buf text = enc_take();

	enc_compact(&text, reply);
	if (text.nomem)
		server_client_reply_oom(c, json_object_get(reply, "id"));
	else
		server_client_reply_line(c, text.buf, text.len);
	json_decref(reply);
	enc_recycle(&text);
}

/* Add or delete ev, whose state *armed remembers: an event_add per
 * request on an event added already was a libevent lock and queue check
 * for nothing. */
static void
event_arm(struct event *ev, bool *armed, bool on)
{
	if (on == *armed)
		return;
	if (on)
		event_add(ev, NULL);
	else
		event_del(ev);
	*armed = on;
}

static void
read_arm(server_client *c, bool on)
{
	event_arm(c->read_ev, &c->read_armed, on);
}

static void
write_arm(server_client *c, bool on)
{
	event_arm(c->write_ev, &c->write_armed, on);
}

static bool input_process(server_client *c, size_t budget, int64_t ms);
static ssize_t input_read(server_client *c);

/* The peer is gone (a write failed): carry out the whole lines it sent
 * before it went, their replies having nowhere to go. A client that
 * streams noreply outcomes and closes at once (a cached client's close)
 * counts on them; answering 32 lines a turn, the first reply's failed
 * write came before the rest were read. A list ends with the connection;
 * lines behind requests waiting on Redis wait for them
 * (server_client_flush keeps the connection). */
static void
input_finish(server_client *c)
{
	for (int reads = 0; c->state == SERVER_CLIENT_OPEN && c->blocked == 0 &&
	     reads <= SERVER_CLIENT_DRAIN_READS;
	     reads++) {
		input_process(c, SIZE_MAX, 0);
		if (c->state != SERVER_CLIENT_OPEN || input_read(c) <= 0)
			break;
	}
	if (c->state == SERVER_CLIENT_OPEN)
		input_process(c, SIZE_MAX, 0);
}

void
server_client_write_soon(server_client *c)
{
	if (c->state == SERVER_CLIENT_OPEN)
		event_active(c->write_ev, EV_WRITE, 1);
}

void
server_client_flush(server_client *c)
{
	int err;

	if (c->state == SERVER_CLIENT_DEAD)
		return;
	out_unborrow(c);
	/* The rest, if the socket takes more, at the next turn of the loop
	 * (EV_WRITE). */
	err = out_send_most(c, SERVER_CLIENT_FLUSH_MAX);
	if (err != 0) {
		/* Nothing more can be written: discard it, finish the input. */
		c->out_off = c->out_len = 0;
		c->fd_broken = true;
		input_finish(c);
		/* The peer is gone: lines behind requests in flight to Redis
		 * (fleet mode) are carried out as those are answered; the
		 * connection stays, its output thrown away, until its input
		 * is done. */
		if ((err == EPIPE || err == ECONNRESET) && c->state == SERVER_CLIENT_OPEN &&
		    !(c->blocked & SERVER_CLIENT_BLOCK_STEPS) && server_client_waiting(c))
			return;
		server_client_close(c, strerror(err));
		return;
	}
	if (c->out_off < c->out_len) {
		write_arm(c, true);
		return;
	}
	c->out_off = c->out_len = 0;
	/* (A list written piece by piece keeps its room.) */
	if (c->out_cap > SERVER_CLIENT_OUT_KEEP && !(c->blocked & SERVER_CLIENT_BLOCK_STEPS))
		out_release(c);
	write_arm(c, false);
	if (c->state == SERVER_CLIENT_CLOSING)
		server_client_close(c, "done");
}

/* Answer one complete line of len bytes (LF stripped). */
static void
line_answer(server_client *c, const char *line, size_t len)
{
	if (len > 0 && line[len - 1] == '\r')
		len--;
	if (len == 0)
		return; /* empty lines are ignored */
	if (len > (size_t)cbd.conf.max_line_bytes) {
		stats_limit_hit(STATS_LIMIT_LINE);
		server_client_reply_error(c, PROTO_LINE_TOO_LONG,
		    "request line is longer than max_line_bytes (%lld)",
		    (long long)cbd.conf.max_line_bytes);
		return;
	}
	c->hooks->line(c, line, len);
}

/* Answer the complete lines in the input buffer, at most `budget` of them
 * and, past the first, for at most `ms` milliseconds (0: no time limit);
 * keep a partial line, or reject it as soon as it is known to be too long.
 * True when complete lines are left for another turn. */
static bool
input_process(server_client *c, size_t budget, int64_t ms)
{
	size_t start = 0, answered = 0;
	size_t max = (size_t)cbd.conf.max_line_bytes;
	int64_t began = 0;
	bool more = false;

	if (c->in == NULL)
		return false; /* nothing read yet */
	/* A connection dropped by one of the lines answers none of the rest. */
	while (c->state == SERVER_CLIENT_OPEN) {
		/* (Mostly the turn's one line was answered and nothing is left.) */
		char *nl = c->in_scan < c->in_len
		    ? memchr(c->in + c->in_scan, '\n', c->in_len - c->in_scan)
		    : NULL;
		size_t end;

		if (nl == NULL)
			break;
		if (c->blocked != 0) {
			/* A request waits on Redis, or a list is answered in steps:
			 * the rest waits for its reply. */
			more = true;
			break;
		}
		/* The time limit counts from the end of the first line: most
		 * turns answer one, and read no clock for it. */
		if (answered == 1 && ms > 0)
			began = clock_monotonic_ms();
		if (answered == budget ||
		    (ms > 0 && answered > 1 && clock_monotonic_ms() - began >= ms)) {
			more = true;
			break;
		}
		answered++;
		end = (size_t)(nl - c->in);
		if (c->discarding)
			c->discarding = false; /* the end of an overlong line */
		else
			line_answer(c, c->in + start, end - start);
		start = end + 1;
		c->in_scan = start;
	}
	if (c->state != SERVER_CLIENT_OPEN)
		return false;
	/* Idleness is seconds: the coarse clock (no timestamp counter read
	 * per request). */
	if (start > 0)
		c->last_request_ms = clock_monotonic_coarse_ms();
	if (more) {
		/* The rest is scanned again next turn. */
		memmove(c->in, c->in + start, c->in_len - start);
		c->in_len -= start;
		c->in_scan = 0;
		return true;
	}
	if (c->discarding) {
		c->in_len = c->in_scan = 0;
		return false;
	}
	/* The partial line may end with the CR of a CRLF: allow one byte more. */
	if (c->in_len - start > max + 1) {
		stats_limit_hit(STATS_LIMIT_LINE);
		server_client_reply_error(c, PROTO_LINE_TOO_LONG,
		    "request line is longer than max_line_bytes (%lld)", (long long)max);
		c->discarding = true;
		c->in_len = c->in_scan = 0;
		return false;
	}
	if (start > 0) {
		/* (Mostly nothing is left: every line was whole.) */
		if (c->in_len > start)
			memmove(c->in, c->in + start, c->in_len - start);
		c->in_len -= start;
	}
	c->in_scan = c->in_len;
	if (c->in_len == 0 && c->in_cap > 2 * SERVER_CLIENT_READ_SIZE) {
		free(c->in);
		c->in = NULL;
		c->in_cap = 0;
	}
	return false;
}

/* Answer one turn of lines; when some are left, stop reading and take
 * another turn after the other connections had theirs. */
static void
input_turn(server_client *c)
{
	static const struct timeval now = { 0, 0 };

	bool more = input_process(c, SERVER_CLIENT_LINES_PER_TURN, SERVER_CLIENT_TURN_MS);

	if (c->state != SERVER_CLIENT_OPEN)
		return;
	if (more || (c->blocked & SERVER_CLIENT_BLOCK_STEPS)) {
		/* Lines left, or the next step of a list: another turn (a
		 * request waiting on Redis resumes c when it is answered). */
		read_arm(c, false);
		if (!server_client_waiting(c))
			evtimer_add(c->turn_ev, &now);
	} else if (server_client_waiting(c)) {
		/* Read nothing more until the waiting request is answered. */
		read_arm(c, false);
	} else if (c->state == SERVER_CLIENT_OPEN) {
		read_arm(c, true);
	}
}

void
server_client_resume(server_client *c)
{
	static const struct timeval now = { 0, 0 };

	if (c->drain_waiting && !(c->blocked & SERVER_CLIENT_BLOCK_REPLY)) {
		c->drain_waiting = false;
		server_client_drain(c);
	} else if (c->state == SERVER_CLIENT_OPEN) {
		evtimer_add(c->turn_ev, &now);
	} else if (c->state == SERVER_CLIENT_CLOSING) {
		server_client_flush(c);
	}
}

/* Read once into the input buffer. Returns bytes read, 0 at EOF, -1 when
 * nothing is ready, -2 after an error (connection closed or dropped). */
static ssize_t
input_read(server_client *c)
{
	ssize_t n;

	if (c->in_cap - c->in_len < SERVER_CLIENT_READ_SIZE) {
		size_t cap = c->in_len + SERVER_CLIENT_READ_SIZE;
		char *grown = realloc(c->in, cap);

		if (grown == NULL) {
			server_client_nomem(c, "for input");
			return -2;
		}
		c->in = grown;
		c->in_cap = cap;
	}
	do
		n = read(c->fd, c->in + c->in_len, c->in_cap - c->in_len);
	while (n < 0 && errno == EINTR);
	if (n > 0) {
		c->in_len += (size_t)n;
		return n;
	}
	if (n == 0)
		return 0;
	if (errno == EAGAIN || errno == EWOULDBLOCK)
		return -1;
	server_client_close(c, strerror(errno));
	return -2;
}

/* The peer sent EOF: answer what is complete, then close after flushing. */
static void
input_eof(server_client *c)
{
	read_arm(c, false);
	server_client_set_state(c, SERVER_CLIENT_CLOSING);
}

static void
server_client_read_cb(evutil_socket_t fd, short what, void *arg)
{
	server_client *c = arg;
	ssize_t n;

	if (c->state != SERVER_CLIENT_OPEN)
		return;
	n = input_read(c);
	if (n == -2 || n == -1)
		return;
	if (n == 0)
		input_eof(c);
	else
		input_turn(c);
	if (c->state != SERVER_CLIENT_DEAD)
		server_client_flush(c);
}

/* The next step of a reply written in steps, if one is; true when there
 * is none (left). */
static bool
steps_continue(server_client *c, bool paced)
{
	return !(c->blocked & SERVER_CLIENT_BLOCK_STEPS) || c->hooks->step(c, paced);
}

/* The next turn of lines left from the last one. */
static void
server_client_turn_cb(evutil_socket_t fd, short what, void *arg)
{
	server_client *c = arg;

	if (c->state != SERVER_CLIENT_OPEN)
		return;
	if (!steps_continue(c, true)) {
		static const struct timeval now = { 0, 0 };

		evtimer_add(c->turn_ev, &now);
		server_client_flush(c);
		return;
	}
	input_turn(c);
	if (c->state != SERVER_CLIENT_DEAD)
		server_client_flush(c);
}

static void
server_client_write_cb(evutil_socket_t fd, short what, void *arg)
{
	server_client *c = arg;

	if (c->state != SERVER_CLIENT_DEAD)
		server_client_flush(c);
}

/* Open: close the connection once idle for client_idle_ms with nothing in
 * flight. Closing: close it when the peer read nothing since last time. */
static void
server_client_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	server_client *c = arg;
	int64_t idle = cbd.conf.client_idle_ms, now;

	if (c->state == SERVER_CLIENT_CLOSING) {
		if (peer_reads(c)) {
			timer_arm(c, SERVER_CLIENT_LINGER_MS); /* wait on */
			return;
		}
		stats_limit_hit(STATS_LIMIT_LINGER);
		if (!c->cut) {
			out_cut(c);
			if (c->out_off < c->out_len) {
				timer_arm(c, SERVER_CLIENT_LINGER_MS);
				return;
			}
		}
		server_client_close(c, "the peer stopped reading");
		return;
	}
	if (c->state != SERVER_CLIENT_OPEN || idle <= 0)
		return;
	now = clock_monotonic_coarse_ms();
	if (now - c->last_request_ms < idle) {
		timer_arm(c, c->last_request_ms + idle - now);
		return;
	}
	/* Replies in flight, or a request waiting for its reply: not idle. */
	if (c->out_off < c->out_len || (c->blocked & SERVER_CLIENT_BLOCK_REPLY)) {
		timer_arm(c, idle);
		return;
	}
	stats_limit_hit(STATS_LIMIT_IDLE);
	server_client_close(c, "idle for client_idle_ms");
}

void
server_client_drain(server_client *c)
{
	if (c->state == SERVER_CLIENT_OPEN) {
		/* A list in progress is finished, lines already sent are
		 * answered (shutting_down); then no more. */
		evtimer_del(c->turn_ev);
		while (!steps_continue(c, false))
			;
		if (c->blocked & SERVER_CLIENT_BLOCK_REPLY) {
			/* A request waits on Redis (at most redis_timeout_ms): its
			 * reply first, then the drain goes on (resume). */
			c->drain_waiting = true;
			read_arm(c, false);
			return;
		}
		input_process(c, SIZE_MAX, 0);
		for (int i = 0; i < SERVER_CLIENT_DRAIN_READS && c->state == SERVER_CLIENT_OPEN;
		     i++) {
			ssize_t n = input_read(c);

			if (n <= 0)
				break;
			input_process(c, SIZE_MAX, 0);
		}
		if (c->state == SERVER_CLIENT_DEAD)
			return;
		read_arm(c, false);
		server_client_set_state(c, SERVER_CLIENT_CLOSING);
	}
	if (c->state != SERVER_CLIENT_DEAD)
		server_client_flush(c);
}

/* The peer hung up while c's input was not read (server_client_watch_hangup). */
static void
server_client_hangup_cb(evutil_socket_t fd, short what, void *arg)
{
	server_client *c = arg;

	(void)fd;
	(void)what;
	server_client_close(c, "peer closed while its request waited");
}

void
server_client_watch_hangup(server_client *c, bool on)
{
	if (!on) {
		if (c->hup_ev != NULL)
			event_del(c->hup_ev);
		return;
	}
	if (c->state == SERVER_CLIENT_DEAD)
		return;
	if (c->hup_ev == NULL)
		c->hup_ev =
		    event_new(cbd.base, c->fd, EV_CLOSED | EV_PERSIST, server_client_hangup_cb, c);
	/* A backend without EV_CLOSED: the request's own end answers it. */
	if (c->hup_ev != NULL)
		event_add(c->hup_ev, NULL);
}

void
server_client_close(server_client *c, const char *why)
{
	if (c->state == SERVER_CLIENT_DEAD)
		return;
	log_debug("connection %llu (uid %ld) closed: %s", (unsigned long long)c->id, (long)c->uid,
	    why);
	read_arm(c, false);
	if (c->hup_ev != NULL)
		event_del(c->hup_ev);
	event_del(c->write_ev);
	evtimer_del(c->timer_ev);
	evtimer_del(c->turn_ev);
	c->write_armed = false;
	close(c->fd);
	c->fd = -1;
	/* Slots and permits go back at once, not when the struct is freed. */
	circuit_table_release_owner(cbd.table, &c->owner);
	c->hooks->closed(c);
	server_client_set_state(c, SERVER_CLIENT_DEAD);
	c->hooks->dead(c);
}

bool
server_client_is_admin(const server_client *c)
{
	return conf_is_admin(&cbd.conf, c->uid, c->gid);
}

void
server_client_free(server_client *c)
{
	if (c->read_ev != NULL)
		event_free(c->read_ev);
	if (c->write_ev != NULL)
		event_free(c->write_ev);
	if (c->timer_ev != NULL)
		event_free(c->timer_ev);
	if (c->turn_ev != NULL)
		event_free(c->turn_ev);
	if (c->hup_ev != NULL)
		event_free(c->hup_ev);
	free(c->in);
	out_release(c);
	if (c->all_prev != NULL)
		c->all_prev->all_next = c->all_next;
	else if (all_clients == c)
		all_clients = c->all_next;
	if (c->all_next != NULL)
		c->all_next->all_prev = c->all_prev;
	free(c);
}
