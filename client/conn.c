/* SPDX-License-Identifier: Apache-2.0 */
/*
 * conn.c — one connection to cbd: lazy connect with a timeout, one
 * request/reply round trip under a per-connection mutex and an I/O
 * deadline, line framing, reconnect after any failure.
 *
 * A connection that failed or timed out mid-request is closed at once, so
 * a late reply can never be read as the answer to a later request; the
 * next request reconnects. Before reusing an idle connection we poll it:
 * if the daemon closed it (restart, shutdown) we reconnect instead of
 * sending into a dead socket.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "internal.h"

/* Largest reply line we accept (a list of many circuits is big). */
#define CONN_REPLY_MAX (64u * 1024u * 1024u)
/* First size of the read buffer; it doubles as needed. */
#define CONN_BUF_INITIAL 4096u
/* Bounds of a timeout (ms). */
#define CONN_TIMEOUT_MIN 1
#define CONN_TIMEOUT_MAX 3600000
/* Room for the hello client name. */
#define CONN_CLIENT_NAME_MAX 128
/* Room for the last policy_conflict's key names (cut beyond). */
#define CONN_CONFLICT_SIZE 512

struct cbc_conn {
	pthread_mutex_t lock;
	int fd; /* -1 when closed */
	int connect_timeout_ms;
	int io_timeout_ms;
	int64_t next_id;
	char *buf; /* bytes read, not yet a full line */
	size_t buf_len, buf_cap;
	char *last_reply; /* the last reply line, NUL-terminated */
	char *client_name;
	char conflict[CONN_CONFLICT_SIZE]; /* the last reply's policy_conflict */
	size_t conflict_keys; /* how many keys it named */
	uint64_t conflicts; /* replies that carried one */
	struct sockaddr_un addr;
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
};

cbc_conn *
cbc_conn_new(const char *socket_path, cbc_error *err)
{
	const char *path = socket_path;
	cbc_conn *conn;

	if (path == NULL || path[0] == '\0')
		path = getenv("CBD_SOCKET");
	if (path == NULL || path[0] == '\0')
		path = CBC_DEFAULT_SOCKET;
	if (strlen(path) >= sizeof conn->path) {
		cbci_fail(err, CBC_EINVAL, "socket path must be shorter than %zu bytes: %s",
		    sizeof conn->path, path);
		return NULL;
	}
	conn = calloc(1, sizeof *conn);
	if (conn == NULL) {
		cbci_fail(err, CBC_ENOMEM, "out of memory creating a connection");
		return NULL;
	}
	if (pthread_mutex_init(&conn->lock, NULL) != 0) {
		free(conn);
		cbci_fail(err, CBC_ENOMEM, "cannot create the connection's mutex");
		return NULL;
	}
	conn->fd = -1;
	conn->connect_timeout_ms = CBC_DEFAULT_CONNECT_TIMEOUT_MS;
	conn->io_timeout_ms = CBC_DEFAULT_IO_TIMEOUT_MS;
	conn->next_id = 1;
	snprintf(conn->path, sizeof conn->path, "%s", path);
	conn->addr.sun_family = AF_UNIX;
	memcpy(conn->addr.sun_path, conn->path, strlen(conn->path) + 1);
	cbci_error_clear(err);
	return conn;
}

cbc_conn *
cbci_conn_clone(cbc_conn *conn, cbc_error *err)
{
	cbc_conn *c = cbc_conn_new(conn->path, err);
	int connect_ms, io_ms;

	if (c == NULL)
		return NULL;
	pthread_mutex_lock(&conn->lock);
	connect_ms = conn->connect_timeout_ms;
	io_ms = conn->io_timeout_ms;
	pthread_mutex_unlock(&conn->lock);
	c->connect_timeout_ms = connect_ms;
	c->io_timeout_ms = io_ms;
	return c;
}

/* Close the socket and drop buffered bytes (lock held). */
static void
conn_close_locked(cbc_conn *conn)
{
	if (conn->fd >= 0)
		close(conn->fd);
	conn->fd = -1;
	conn->buf_len = 0;
}

void
cbc_conn_free(cbc_conn *conn)
{
	if (conn == NULL)
		return;
	conn_close_locked(conn);
	pthread_mutex_destroy(&conn->lock);
	free(conn->buf);
	free(conn->last_reply);
	free(conn->client_name);
	free(conn);
}

const char *
cbc_conn_socket_path(const cbc_conn *conn)
{
	return conn->path;
}

cbc_status
cbc_conn_set_timeouts(cbc_conn *conn, int connect_ms, int io_ms, cbc_error *err)
{
	if (connect_ms < CONN_TIMEOUT_MIN || connect_ms > CONN_TIMEOUT_MAX)
		return cbci_fail(err, CBC_EINVAL, "connect_ms must be from %d to %d",
		    CONN_TIMEOUT_MIN, CONN_TIMEOUT_MAX);
	if (io_ms < CONN_TIMEOUT_MIN || io_ms > CONN_TIMEOUT_MAX)
		return cbci_fail(err, CBC_EINVAL, "io_ms must be from %d to %d", CONN_TIMEOUT_MIN,
		    CONN_TIMEOUT_MAX);
	pthread_mutex_lock(&conn->lock);
	conn->connect_timeout_ms = connect_ms;
	conn->io_timeout_ms = io_ms;
	pthread_mutex_unlock(&conn->lock);
	cbci_error_clear(err);
	return CBC_OK;
}

cbc_status
cbc_conn_set_client_name(cbc_conn *conn, const char *client, cbc_error *err)
{
	char *copy = NULL;

	if (client != NULL) {
		if (strlen(client) > CONN_CLIENT_NAME_MAX)
			return cbci_fail(err, CBC_EINVAL, "client must be at most %d bytes",
			    CONN_CLIENT_NAME_MAX);
		copy = strdup(client);
		if (copy == NULL)
			return cbci_fail(err, CBC_ENOMEM, "out of memory copying client");
	}
	pthread_mutex_lock(&conn->lock);
	free(conn->client_name);
	conn->client_name = copy;
	pthread_mutex_unlock(&conn->lock);
	cbci_error_clear(err);
	return CBC_OK;
}

bool
cbci_conn_client_name(cbc_conn *conn, char *buf, size_t size)
{
	bool have;

	pthread_mutex_lock(&conn->lock);
	have = conn->client_name != NULL;
	if (have)
		snprintf(buf, size, "%s", conn->client_name);
	pthread_mutex_unlock(&conn->lock);
	return have;
}

/* Is the idle connection still usable? An idle connection has nothing to
 * read: readable means the daemon closed it (or sent garbage). */
static bool
conn_idle_alive(cbc_conn *conn)
{
	struct pollfd pfd = { .fd = conn->fd, .events = POLLIN };

	if (poll(&pfd, 1, 0) == 0)
		return true;
	return false;
}

/* EACCES: name the group that may connect (the socket's own), which a
 * caller can join, or say a directory on the way is closed. */
static cbc_status
conn_fail_access(const cbc_conn *conn, cbc_error *err)
{
	struct group gr, *found = NULL;
	char buf[1024], gid[32];
	struct stat st;

	if (stat(conn->path, &st) != 0)
		return cbci_fail(err, CBC_ECONNECT,
		    "cannot connect to %s: %s (a directory on the way is closed to this process)",
		    conn->path, strerror(EACCES));
	snprintf(gid, sizeof gid, "%ld", (long)st.st_gid);
	if (getgrgid_r(st.st_gid, &gr, buf, sizeof buf, &found) != 0)
		found = NULL;
	return cbci_fail(err, CBC_ECONNECT,
	    "cannot connect to %s: %s (the socket is for its owner and group %s, mode %04o)",
	    conn->path, strerror(EACCES), found != NULL ? found->gr_name : gid,
	    (unsigned)(st.st_mode & 07777));
}

/* Connect (lock held). The connect blocks at most connect_timeout_ms:
 * SO_SNDTIMEO bounds a Unix-socket connect to a daemon whose backlog is
 * full (a stopped daemon); a missing socket fails at once. */
static cbc_status
conn_open_locked(cbc_conn *conn, cbc_error *err)
{
	struct timeval tv;
	int fd, flags;

	if (conn->fd >= 0) {
		if (conn_idle_alive(conn))
			return CBC_OK;
		conn_close_locked(conn);
	}
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return cbci_fail(err, CBC_ECONNECT, "cannot create a socket for %s: %s", conn->path,
		    strerror(errno));
	tv.tv_sec = conn->connect_timeout_ms / 1000;
	tv.tv_usec = (conn->connect_timeout_ms % 1000) * 1000;
	if (setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) != 0) {
		int e = errno;

		close(fd);
		return cbci_fail(err, CBC_ECONNECT, "cannot set the connect timeout for %s: %s",
		    conn->path, strerror(e));
	}
	while (connect(fd, (struct sockaddr *)&conn->addr, sizeof conn->addr) != 0) {
		int e = errno;

		if (e == EINTR)
			continue;
		close(fd);
		if (e == EAGAIN || e == EINPROGRESS || e == ETIMEDOUT)
			return cbci_fail(err, CBC_ETIMEOUT,
			    "connecting to %s timed out after %d ms", conn->path,
			    conn->connect_timeout_ms);
		if (e == EACCES)
			return conn_fail_access(conn, err);
		return cbci_fail(err, CBC_ECONNECT, "cannot connect to %s: %s", conn->path,
		    strerror(e));
	}
	flags = fcntl(fd, F_GETFL);
	if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) {
		int e = errno;

		close(fd);
		return cbci_fail(err, CBC_ECONNECT,
		    "cannot make the socket for %s non-blocking: %s", conn->path, strerror(e));
	}
	conn->fd = fd;
	conn->buf_len = 0;
	return CBC_OK;
}

cbc_status
cbc_conn_connect(cbc_conn *conn, cbc_error *err)
{
	cbc_status st;

	pthread_mutex_lock(&conn->lock);
	st = conn_open_locked(conn, err);
	pthread_mutex_unlock(&conn->lock);
	if (st == CBC_OK)
		cbci_error_clear(err);
	return st;
}

void
cbc_conn_close(cbc_conn *conn)
{
	pthread_mutex_lock(&conn->lock);
	conn_close_locked(conn);
	pthread_mutex_unlock(&conn->lock);
}

_Thread_local int64_t cbci_conn_extra_ms;

/* Wait for events on the socket until the deadline (monotonic ms). */
static cbc_status
conn_wait(cbc_conn *conn, short events, int64_t deadline, cbc_error *err)
{
	for (;;) {
		struct pollfd pfd = { .fd = conn->fd, .events = events };
		int64_t left = deadline - clock_monotonic_ms();
		int n;

		if (left <= 0)
			return cbci_fail(err, CBC_ETIMEOUT, "no reply from %s within %d ms",
			    conn->path, conn->io_timeout_ms);
		n = poll(&pfd, 1, (int)left);
		if (n > 0)
			return CBC_OK;
		if (n < 0 && errno != EINTR)
			return cbci_fail(err, CBC_EIO, "poll on %s failed: %s", conn->path,
			    strerror(errno));
	}
}

/* Send all of data before the deadline (lock held). */
static cbc_status
conn_send_locked(cbc_conn *conn, const char *data, size_t len, int64_t deadline, cbc_error *err)
{
	size_t off = 0;

	while (off < len) {
		ssize_t n = send(conn->fd, data + off, len - off, MSG_NOSIGNAL);

		if (n > 0) {
			off += (size_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			cbc_status st = conn_wait(conn, POLLOUT, deadline, err);

			if (st != CBC_OK)
				return st;
			continue;
		}
		return cbci_fail(err, CBC_EIO, "sending to %s failed: %s", conn->path,
		    n < 0 ? strerror(errno) : "nothing written");
	}
	return CBC_OK;
}

/* Read one reply line before the deadline (lock held). On CBC_OK
 * conn->buf[0..*line_len) is the line and buf[*line_len] is NUL. */
static cbc_status
conn_recv_line_locked(cbc_conn *conn, size_t *line_len, int64_t deadline, cbc_error *err)
{
	size_t scanned = 0;

	for (;;) {
		char *nl = conn->buf_len > scanned
		    ? memchr(conn->buf + scanned, '\n', conn->buf_len - scanned)
		    : NULL;
		ssize_t n;

		if (nl != NULL) {
			size_t len = (size_t)(nl - conn->buf);

			if (nl + 1 != conn->buf + conn->buf_len)
				return cbci_fail(err, CBC_EPROTO,
				    "%s sent more than one reply to one request", conn->path);
			if (len > 0 && conn->buf[len - 1] == '\r')
				len--;
			conn->buf[len] = '\0';
			*line_len = len;
			return CBC_OK;
		}
		scanned = conn->buf_len;
		if (conn->buf_len + 1 >= conn->buf_cap) {
			size_t cap = conn->buf_cap == 0 ? CONN_BUF_INITIAL : conn->buf_cap * 2;
			char *grown;

			if (cap > CONN_REPLY_MAX + 1)
				return cbci_fail(err, CBC_EPROTO,
				    "reply from %s longer than %u bytes", conn->path,
				    CONN_REPLY_MAX);
			grown = realloc(conn->buf, cap);
			if (grown == NULL)
				return cbci_fail(err, CBC_ENOMEM, "out of memory reading a reply");
			conn->buf = grown;
			conn->buf_cap = cap;
		}
		n = recv(conn->fd, conn->buf + conn->buf_len, conn->buf_cap - 1 - conn->buf_len, 0);
		if (n > 0) {
			conn->buf_len += (size_t)n;
			continue;
		}
		if (n == 0)
			return cbci_fail(err, CBC_EIO, "%s closed the connection", conn->path);
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN || errno == EWOULDBLOCK) {
			cbc_status st = conn_wait(conn, POLLIN, deadline, err);

			if (st != CBC_OK)
				return st;
			continue;
		}
		return cbci_fail(err, CBC_EIO, "reading from %s failed: %s", conn->path,
		    strerror(errno));
	}
}

/* One round trip of a request line (no newline) under the lock: connect
 * if needed, send, read the reply line and keep it as last_reply. On
 * failure the connection is closed. *reply is a copy of the line. */
static cbc_status
conn_exchange_locked(cbc_conn *conn, const char *line, size_t len, char **reply, cbc_error *err)
{
	int64_t deadline;
	size_t reply_len = 0;
	cbc_status st;
	char *copy;

	*reply = NULL;
	st = conn_open_locked(conn, err);
	if (st != CBC_OK)
		return st;
	/* A request that may wait in cbd (allow's wait_ms) gets that long
	 * more. */
	deadline = clock_monotonic_ms() + conn->io_timeout_ms + cbci_conn_extra_ms;
	st = conn_send_locked(conn, line, len, deadline, err);
	if (st == CBC_OK)
		st = conn_send_locked(conn, "\n", 1, deadline, err);
	if (st == CBC_OK)
		st = conn_recv_line_locked(conn, &reply_len, deadline, err);
	if (st != CBC_OK) {
		conn_close_locked(conn);
		return st;
	}
	copy = malloc(reply_len + 1);
	if (copy == NULL) {
		conn_close_locked(conn);
		return cbci_fail(err, CBC_ENOMEM, "out of memory copying a reply");
	}
	memcpy(copy, conn->buf, reply_len + 1);
	conn->buf_len = 0;
	free(conn->last_reply);
	conn->last_reply = strdup(copy);
	*reply = copy;
	return CBC_OK;
}

char *
cbc_conn_last_reply(cbc_conn *conn)
{
	char *copy = NULL;

	pthread_mutex_lock(&conn->lock);
	if (conn->last_reply != NULL)
		copy = strdup(conn->last_reply);
	pthread_mutex_unlock(&conn->lock);
	return copy;
}

/* Read an ok:false reply's error into err: CBC_EREFUSED, or CBC_ECAPACITY
 * for the capacity code. */
static cbc_status
conn_daemon_error(proto_node *reply, const char *path, cbc_error *err)
{
	proto_node e = proto_node_get(reply, "error");
	proto_node code_node = proto_node_get(&e, "code");
	proto_node message_node = proto_node_get(&e, "message");
	const char *code = proto_node_string(&code_node, NULL);
	const char *message = proto_node_string(&message_node, NULL);
	cbc_status st;

	if (code == NULL)
		return cbci_fail(err, CBC_EPROTO, "%s answered ok:false without error.code", path);
	st = strcmp(code, "capacity") == 0 ? CBC_ECAPACITY : CBC_EREFUSED;
	cbci_fail(err, st, "%s", message != NULL ? message : code);
	if (err != NULL)
		snprintf(err->code, sizeof err->code, "%s", code);
	return st;
}

size_t
cbc_conn_last_policy_conflict(cbc_conn *conn, char *buf, size_t size)
{
	size_t n;

	pthread_mutex_lock(&conn->lock);
	n = conn->conflict_keys;
	if (size > 0)
		snprintf(buf, size, "%s", conn->conflict);
	pthread_mutex_unlock(&conn->lock);
	return n;
}

uint64_t
cbc_conn_policy_conflicts(cbc_conn *conn)
{
	uint64_t n;

	pthread_mutex_lock(&conn->lock);
	n = conn->conflicts;
	pthread_mutex_unlock(&conn->lock);
	return n;
}

/* Keep a reply's policy_conflict (lock held; reply NULL: none). */
static void
conn_note_conflict_locked(cbc_conn *conn, const json_t *reply)
{
	conn->conflict_keys = cbci_conflict_join(json_object_get(reply, "policy_conflict"),
	    conn->conflict, sizeof conn->conflict);
	if (conn->conflict_keys > 0)
		conn->conflicts++;
}

void
cbci_reply_decode(cbci_reply *out, const char *line, size_t len, json_error_t *jerr)
{
	out->json = NULL;
	if (proto_scan_flat(line, len, &out->flat)) {
		out->top = proto_node_flat(&out->flat, 0);
	} else {
		out->json = json_loadb(line, len, JSON_REJECT_DUPLICATES, jerr);
		out->top = proto_node_json(out->json);
	}
}

void
cbci_reply_free(cbci_reply *reply)
{
	json_decref(reply->json);
	reply->json = NULL;
	reply->top = proto_node_json(NULL);
}

/* Parse a reply line (lock held) into *out: its flat view when the line is
 * plain (most replies: no jansson values at all), else jansson values.
 * CBC_OK for ok:true (*out to cbci_reply_free); otherwise nothing is
 * kept. */
static cbc_status
conn_parse_reply_locked(cbc_conn *conn, const char *line, cbci_reply *out, cbc_error *err)
{
	const char *path = conn->path;
	json_error_t jerr = { .text = "" };
	proto_node ok;

	cbci_reply_decode(out, line, strlen(line), &jerr);
	/* A flat view holds no arrays: no policy_conflict. */
	conn_note_conflict_locked(conn, json_is_object(out->json) ? out->json : NULL);
	if (proto_node_is_absent(&out->top))
		return cbci_fail(err, CBC_EPROTO, "reply from %s is not JSON: %s", path, jerr.text);
	if (!proto_node_is_object(&out->top)) {
		cbci_reply_free(out);
		return cbci_fail(err, CBC_EPROTO, "reply from %s is not an object", path);
	}
	ok = proto_node_get(&out->top, "ok");
	if (ok.type != PROTO_NODE_TRUE && ok.type != PROTO_NODE_FALSE) {
		cbci_reply_free(out);
		return cbci_fail(err, CBC_EPROTO, "reply from %s has no boolean ok", path);
	}
	if (ok.type != PROTO_NODE_TRUE) {
		cbc_status st = conn_daemon_error(&out->top, path, err);

		cbci_reply_free(out);
		return st;
	}
	return CBC_OK;
}

cbc_status
cbc_request(cbc_conn *conn, const char *request_json, char **reply, cbc_error *err)
{
	char *line = NULL;
	cbci_reply parsed; /* only checked */
	cbc_status st;

	if (reply != NULL)
		*reply = NULL;
	if (request_json == NULL)
		return cbci_fail(err, CBC_EINVAL, "request_json is required");
	if (strchr(request_json, '\n') != NULL)
		return cbci_fail(err, CBC_EINVAL, "request_json must be one line");
	pthread_mutex_lock(&conn->lock);
	st = conn_exchange_locked(conn, request_json, strlen(request_json), &line, err);
	if (st == CBC_OK)
		st = conn_parse_reply_locked(conn, line, &parsed, err);
	else
		conn_note_conflict_locked(conn, NULL);
	pthread_mutex_unlock(&conn->lock);
	if (st == CBC_OK)
		cbci_reply_free(&parsed);
	if (line == NULL)
		return st;
	if (reply != NULL)
		*reply = line;
	else
		free(line);
	if (st == CBC_OK)
		cbci_error_clear(err);
	return st;
}

cbc_status
cbci_conn_call_node(cbc_conn *conn, json_t *request, cbci_reply *reply, cbc_error *err)
{
	char *text, *line = NULL;
	proto_node id;
	json_int_t sent_id;
	cbc_status st;

	reply->json = NULL;
	reply->top = proto_node_json(NULL);
	pthread_mutex_lock(&conn->lock);
	sent_id = (json_int_t)conn->next_id++;
	if (json_object_set_new(request, "id", json_integer(sent_id)) != 0 ||
	    (text = json_dumps(request, JSON_COMPACT)) == NULL) {
		pthread_mutex_unlock(&conn->lock);
		return cbci_fail(err, CBC_ENOMEM, "out of memory encoding a request");
	}
	st = conn_exchange_locked(conn, text, strlen(text), &line, err);
	free(text);
	if (st != CBC_OK) {
		conn_note_conflict_locked(conn, NULL);
		pthread_mutex_unlock(&conn->lock);
		return st;
	}
	st = conn_parse_reply_locked(conn, line, reply, err);
	if (st == CBC_EPROTO)
		conn_close_locked(conn);
	pthread_mutex_unlock(&conn->lock);
	if (st == CBC_OK) {
		/* The daemon echoes the id: anything else means we lost step. */
		id = proto_node_get(&reply->top, "id");
		if (id.type != PROTO_NODE_INT || proto_node_int(&id) != sent_id) {
			cbci_reply_free(reply);
			cbc_conn_close(conn);
			st = cbci_fail(err, CBC_EPROTO,
			    "reply from %s does not echo the request id %lld", conn->path,
			    (long long)sent_id);
		}
	}
	free(line);
	if (st == CBC_OK)
		cbci_error_clear(err);
	return st;
}

cbc_status
cbci_conn_call(cbc_conn *conn, json_t *request, json_t **reply, cbc_error *err)
{
	cbci_reply r;
	cbc_status st = cbci_conn_call_node(conn, request, &r, err);

	*reply = NULL;
	if (st != CBC_OK)
		return st;
	*reply = r.json != NULL ? r.json : proto_flat_to_json(&r.flat, 0);
	if (*reply == NULL)
		return cbci_fail(err, CBC_ENOMEM, "out of memory reading a reply");
	return CBC_OK;
}
