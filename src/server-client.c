/*
 * server-client.c — one client connection: reads into the connection's own
 * buffer, answers every complete line already read, appends the replies to
 * an output buffer and writes it straight to the socket, arming EV_WRITE
 * only when a write would block. Enforces max_line_bytes and
 * max_output_bytes, and gives the connection's slots back when it closes.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "op.h"
#include "server-client.h"
#include "server.h"
#include "stats.h"
#include "watch.h"

static const char *const state_names[] = {
	[SERVER_CLIENT_OPEN] = "open",
	[SERVER_CLIENT_CLOSING] = "closing",
	[SERVER_CLIENT_DEAD] = "dead",
};

static void server_client_read_cb(evutil_socket_t fd, short what, void *arg);
static void server_client_write_cb(evutil_socket_t fd, short what, void *arg);

server_client *
server_client_new(int fd)
{
	server_client *c = calloc(1, sizeof *c);

	if (c == NULL)
		fatal("out of memory for a connection");
	c->fd = fd;
	c->state = SERVER_CLIENT_OPEN;
	c->read_ev = event_new(srv.base, fd, EV_READ | EV_PERSIST, server_client_read_cb, c);
	c->write_ev = event_new(srv.base, fd, EV_WRITE | EV_PERSIST, server_client_write_cb, c);
	if (c->read_ev == NULL || c->write_ev == NULL)
		fatal("out of memory for connection events");
	event_add(c->read_ev, NULL);
	return c;
}

void
server_client_set_state(server_client *c, server_client_state state)
{
	if (c->state == state)
		return;
	log_debug("connection %llu: %s -> %s", (unsigned long long)c->id, state_names[c->state],
	    state_names[state]);
	c->state = state;
}

/* Make room for `need` more bytes of output. */
static void
out_reserve(server_client *c, size_t need)
{
	size_t cap;
	char *grown;

	if (c->out_off > 0 && c->out_off == c->out_len) {
		c->out_off = 0;
		c->out_len = 0;
	}
	if (c->out_cap - c->out_len >= need)
		return;
	if (c->out_off > 0) {
		/* Slide unsent bytes to the front before growing. */
		memmove(c->out, c->out + c->out_off, c->out_len - c->out_off);
		c->out_len -= c->out_off;
		c->out_off = 0;
		if (c->out_cap - c->out_len >= need)
			return;
	}
	cap = c->out_cap > 0 ? c->out_cap : SERVER_CLIENT_READ_SIZE;
	while (cap - c->out_len < need)
		cap *= 2;
	grown = realloc(c->out, cap);
	if (grown == NULL)
		fatal("out of memory for %zu bytes of output", cap);
	c->out = grown;
	c->out_cap = cap;
}

void
server_client_reply_oom(server_client *c, const json_t *id)
{
	static const char body[] =
	    "\"ok\":false,\"error\":{\"code\":\"internal\",\"message\":\"out of memory\"}}\n";
	char id_text[SERVER_CLIENT_OOM_ID_MAX];
	size_t id_len = 0;

	if (c->state == SERVER_CLIENT_DEAD)
		return;
	/* Dumping an integer or a string allocates nothing. */
	if (id != NULL)
		id_len = json_dumpb(id, id_text, sizeof id_text, JSON_ENCODE_ANY | JSON_COMPACT);
	if (id_len > sizeof id_text)
		id_len = 0;
	out_reserve(c, sizeof "{\"id\":," + id_len + sizeof body);
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
server_client_reply(server_client *c, json_t *reply)
{
	size_t n;

	if (reply == NULL) {
		server_client_reply_oom(c, NULL);
		return;
	}
	if (c->state == SERVER_CLIENT_DEAD) {
		json_decref(reply);
		return;
	}
	out_reserve(c, 256);
	n = json_dumpb(reply, c->out + c->out_len, c->out_cap - c->out_len - 1, JSON_COMPACT);
	if (n > c->out_cap - c->out_len - 1) {
		out_reserve(c, n + 1);
		n = json_dumpb(reply, c->out + c->out_len, c->out_cap - c->out_len - 1,
		    JSON_COMPACT);
	}
	/* jansson allocates while dumping an object: 0 is out of memory. */
	if (n == 0 || n > c->out_cap - c->out_len - 1) {
		server_client_reply_oom(c, json_object_get(reply, "id"));
		json_decref(reply);
		return;
	}
	json_decref(reply);
	c->out_len += n;
	c->out[c->out_len++] = '\n';
}

/* Arm or disarm EV_WRITE. */
static void
write_arm(server_client *c, bool on)
{
	if (on == c->write_armed)
		return;
	if (on)
		event_add(c->write_ev, NULL);
	else
		event_del(c->write_ev);
	c->write_armed = on;
}

void
server_client_flush(server_client *c)
{
	while (c->state != SERVER_CLIENT_DEAD && c->out_off < c->out_len) {
		ssize_t n = write(c->fd, c->out + c->out_off, c->out_len - c->out_off);

		if (n > 0) {
			c->out_off += (size_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			break;
		server_client_close(c, n < 0 ? strerror(errno) : "write failed");
		return;
	}
	if (c->state == SERVER_CLIENT_DEAD)
		return;
	if (c->out_off < c->out_len) {
		if (c->out_len - c->out_off > (size_t)srv.conf.max_output_bytes) {
			stats_limit_hit(STATS_LIMIT_OUTPUT);
			log_warning("connection %llu: dropped: %zu bytes of replies unread "
				    "(max_output_bytes %lld)",
			    (unsigned long long)c->id, c->out_len - c->out_off,
			    (long long)srv.conf.max_output_bytes);
			server_client_close(c, "max_output_bytes reached");
			return;
		}
		write_arm(c, true);
		return;
	}
	c->out_off = c->out_len = 0;
	if (c->out_cap > SERVER_CLIENT_OUT_KEEP) {
		free(c->out);
		c->out = NULL;
		c->out_cap = 0;
	}
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
	if (len > (size_t)srv.conf.max_line_bytes) {
		stats_limit_hit(STATS_LIMIT_LINE);
		op_reply_error(c, PROTO_LINE_TOO_LONG,
		    "request line is longer than max_line_bytes (%lld)",
		    (long long)srv.conf.max_line_bytes);
		return;
	}
	op_dispatch(c, line, len);
}

/* Answer every complete line in the input buffer; keep a partial one,
 * or reject it as soon as it is known to be too long. */
static void
input_process(server_client *c)
{
	size_t start = 0;
	size_t max = (size_t)srv.conf.max_line_bytes;

	while (c->state != SERVER_CLIENT_DEAD) {
		char *nl = memchr(c->in + c->in_scan, '\n', c->in_len - c->in_scan);
		size_t end;

		if (nl == NULL)
			break;
		end = (size_t)(nl - c->in);
		if (c->discarding)
			c->discarding = false; /* the end of an overlong line */
		else
			line_answer(c, c->in + start, end - start);
		start = end + 1;
		c->in_scan = start;
	}
	if (c->state == SERVER_CLIENT_DEAD)
		return;
	if (c->discarding) {
		c->in_len = c->in_scan = 0;
		return;
	}
	/* The partial line may end with the CR of a CRLF: allow one byte more. */
	if (c->in_len - start > max + 1) {
		stats_limit_hit(STATS_LIMIT_LINE);
		op_reply_error(c, PROTO_LINE_TOO_LONG,
		    "request line is longer than max_line_bytes (%lld)", (long long)max);
		c->discarding = true;
		c->in_len = c->in_scan = 0;
		return;
	}
	if (start > 0) {
		memmove(c->in, c->in + start, c->in_len - start);
		c->in_len -= start;
	}
	c->in_scan = c->in_len;
	if (c->in_len == 0 && c->in_cap > 2 * SERVER_CLIENT_READ_SIZE) {
		free(c->in);
		c->in = NULL;
		c->in_cap = 0;
	}
}

/* Read once into the input buffer. Returns bytes read, 0 at EOF, -1 when
 * nothing is ready, -2 after a fatal error (connection closed). */
static ssize_t
input_read(server_client *c)
{
	ssize_t n;

	if (c->in_cap - c->in_len < SERVER_CLIENT_READ_SIZE) {
		size_t cap = c->in_len + SERVER_CLIENT_READ_SIZE;
		char *grown = realloc(c->in, cap);

		if (grown == NULL)
			fatal("out of memory for %zu bytes of input", cap);
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
	event_del(c->read_ev);
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
		input_process(c);
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

void
server_client_drain(server_client *c)
{
	if (c->state == SERVER_CLIENT_OPEN) {
		/* Lines already sent are answered (shutting_down); then no more. */
		for (int i = 0; i < SERVER_CLIENT_DRAIN_READS; i++) {
			ssize_t n = input_read(c);

			if (n <= 0)
				break;
			input_process(c);
		}
		if (c->state == SERVER_CLIENT_DEAD)
			return;
		event_del(c->read_ev);
		server_client_set_state(c, SERVER_CLIENT_CLOSING);
	}
	if (c->state != SERVER_CLIENT_DEAD)
		server_client_flush(c);
}

void
server_client_close(server_client *c, const char *why)
{
	if (c->state == SERVER_CLIENT_DEAD)
		return;
	log_debug("connection %llu (uid %ld) closed: %s", (unsigned long long)c->id, (long)c->uid,
	    why);
	event_del(c->read_ev);
	event_del(c->write_ev);
	c->write_armed = false;
	close(c->fd);
	c->fd = -1;
	/* Slots and permits go back at once, not when the struct is freed. */
	circuit_table_release_owner(srv.table, &c->owner);
	watch_forget(c);
	server_client_set_state(c, SERVER_CLIENT_DEAD);
	server_client_dead(c);
}

void
server_client_free(server_client *c)
{
	event_free(c->read_ev);
	event_free(c->write_ev);
	free(c->in);
	free(c->out);
	free(c);
}
