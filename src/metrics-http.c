/* SPDX-License-Identifier: Apache-2.0 */
/*
 * metrics-http.c — the metrics port (see metrics-http.h). One request per
 * connection: the request line and headers are read (bounded), the reply
 * is written as the socket takes it, then the connection is closed
 * ("Connection: close"). libevent's evhttp was used before: it neither
 * bounds its connections nor stops its listener on EMFILE (it spun,
 * logging every failed accept).
 *
 * Besides /metrics, the dashboard (README, "Dashboard"): the page, its
 * script and style (compiled in), /api/circuits and /api/history
 * (dashboard.c) and /events,
 * whose connection is handed to dashboard-sse.c once its request is read.
 * Read-only: nothing here changes a circuit.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/event.h>

#include "clock.h"
#include "conf.h"
#include "daemon.h"
#include "dashboard-sse.h"
#include "dashboard.h"
#include "log.h"
#include "metrics-http.h"
#include "metrics.h"
#include "scrape.h"
#include "server-client.h"
#include "stats.h"

/* Out-of-descriptor warnings: at most one this often. */
#define METRICS_HTTP_LOG_MS 1000

/* One scraper's connection. */
typedef struct http_conn {
	struct http_conn *next, *prev;
	int fd;
	struct event *ev;
	short armed; /* what ev waits for (-1: nothing yet) */
	int64_t deadline; /* monotonic ms */
	bool replied; /* out holds the reply; reading is over */
	bool draining; /* the reply is out: read to EOF, then close */
	bool to_sse; /* GET /events: the connection goes to dashboard-sse.c */
	bool http11; /* an HTTP/1.1 request: a reply may be chunked */
	/* A reply made in steps (scrape.h), sent as they are made: chunked
	 * (HTTP/1.1), or ended by the close (HTTP/1.0). */
	bool stepping;
	bool chunked;
	scrape sc;
	struct event *step_ev; /* the next step, at the loop's next turn */
	char *out; /* counted with the connections' output (max_total_output_bytes) */
	size_t out_len, out_done, out_cap;
	size_t in_len;
	char in[METRICS_HTTP_HEADER_MAX + 1];
} http_conn;

static struct {
	int fd;
	struct event *listen_ev, *pause_ev;
	http_conn *conns;
	uint64_t count;
	unsigned stepping; /* connections with a reply in steps */
	int64_t emfile_logged_ms;
	uint64_t emfile_unlogged;
} mh = { .fd = -1 };

static void conn_cb(evutil_socket_t fd, short what, void *arg);

/* Free c's output buffer. */
static void
out_release(http_conn *c)
{
	server_client_output_external(c->out_cap, 0);
	free(c->out);
	c->out = NULL;
	c->out_len = c->out_done = c->out_cap = 0;
}

/* Room for len more bytes of output, counted with the socket's
 * connections against max_total_output_bytes; false (counted) when there
 * is none. */
static bool
out_room(http_conn *c, size_t len)
{
	size_t cap;
	char *grown;

	if (c->out_cap - c->out_len >= len)
		return true;
	if (c->out_done > 0) {
		memmove(c->out, c->out + c->out_done, c->out_len - c->out_done);
		c->out_len -= c->out_done;
		c->out_done = 0;
		if (c->out_cap - c->out_len >= len)
			return true;
	}
	cap = c->out_cap > 0 ? c->out_cap : 4096;
	while (cap - c->out_len < len)
		cap *= 2;
	if (!server_client_output_external(c->out_cap, cap))
		return false;
	grown = realloc(c->out, cap);
	if (grown == NULL) {
		server_client_output_external(cap, c->out_cap);
		stats_limit_hit(STATS_LIMIT_NOMEM);
		return false;
	}
	c->out = grown;
	c->out_cap = cap;
	return true;
}

/* Append len bytes to c's output; false when there is no room. */
static bool
out_put(http_conn *c, const void *data, size_t len)
{
	if (!out_room(c, len))
		return false;
	memcpy(c->out + c->out_len, data, len);
	c->out_len += len;
	return true;
}

/* c's reply in steps is over (made, or dropped). */
static void
conn_steps_end(http_conn *c)
{
	if (!c->stepping)
		return;
	scrape_free(&c->sc);
	c->stepping = false;
	mh.stepping--;
}

static void
conn_free(http_conn *c)
{
	if (c->prev != NULL)
		c->prev->next = c->next;
	else
		mh.conns = c->next;
	if (c->next != NULL)
		c->next->prev = c->prev;
	conn_steps_end(c);
	if (c->step_ev != NULL)
		event_free(c->step_ev);
	event_free(c->ev);
	if (c->fd >= 0)
		close(c->fd);
	out_release(c);
	free(c);
	mh.count--;
}

/* Wait for what (EV_READ, EV_WRITE, or 0: nothing but the deadline) until
 * the connection's deadline. */
static bool
conn_wait(http_conn *c, short what)
{
	int64_t left = c->deadline - clock_monotonic_ms();
	struct timeval tv;

	if (c->armed == what)
		return true; /* its deadline stands */
	if (left < 1)
		left = 1;
	tv.tv_sec = left / 1000;
	tv.tv_usec = (left % 1000) * 1000;
	event_del(c->ev);
	event_assign(c->ev, cbd.base, what != 0 ? c->fd : -1, what | EV_PERSIST, conn_cb, c);
	c->armed = what;
	return event_add(c->ev, &tv) == 0;
}

/* The status line and headers; body_len NULL: a reply made in steps (its
 * length unknown: chunked, or ended by the close for HTTP/1.0). False
 * when there is no room. */
static bool
conn_top(http_conn *c, int status, const char *reason, const char *type, const size_t *body_len)
{
	char top[512], length[64];
	int n;

	if (body_len != NULL)
		snprintf(length, sizeof length, "Content-Length: %zu\r\n", *body_len);
	else
		snprintf(length, sizeof length, "%s",
		    c->chunked ? "Transfer-Encoding: chunked\r\n" : "");
	n = snprintf(top, sizeof top,
	    "HTTP/1.1 %d %s\r\nContent-Type: %s\r\n%s"
	    "%sConnection: close\r\n\r\n",
	    status, reason, type, length,
	    /* The dashboard's: its own files only, never cached, never framed. */
	    strncmp(type, "text/plain", 10) == 0
		? ""
		: "Cache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\n"
		  "Content-Security-Policy: default-src 'self'; frame-ancestors 'none'\r\n");
	c->replied = true;
	return out_put(c, top, (size_t)n);
}

/* The reply: status line, headers and (but for HEAD) body. No room: none
 * (the connection is closed). */
static void
conn_reply(http_conn *c, int status, const char *reason, const char *type, const char *body,
    size_t body_len, bool head)
{
	if (!out_room(c, 512 + (head ? 0 : body_len)) ||
	    !conn_top(c, status, reason, type, &body_len) ||
	    (!head && !out_put(c, body, body_len))) {
		c->replied = true;
		c->out_len = c->out_done = 0;
	}
}

static void conn_step_cb(evutil_socket_t fd, short what, void *arg);

/* Answer with the scrape begun in c->sc: made at once when it is small
 * (as before, with its length), else in steps, one a turn, sent as they
 * are made. */
static void
conn_scrape(http_conn *c, const char *type, bool head)
{
	scrape *s = &c->sc;

	if (scrape_small(s)) {
		scrape_run(s);
		if (s->nomem || s->out.nomem)
			conn_reply(c, 500, "Internal Server Error", "text/plain", "out of memory\n",
			    14, false);
		else
			conn_reply(c, 200, "OK", type, s->out.buf, s->out.len, head);
		scrape_free(s);
		return;
	}
	if (c->step_ev == NULL)
		c->step_ev = evtimer_new(cbd.base, conn_step_cb, c);
	if (c->step_ev == NULL) {
		stats_limit_hit(STATS_LIMIT_NOMEM);
		c->replied = true; /* nothing to send: closed */
		scrape_free(s);
		return;
	}
	c->chunked = c->http11;
	if (!conn_top(c, 200, "OK", type, NULL) || head) {
		scrape_free(s); /* HEAD: the headers only; no room: closed */
		return;
	}
	c->stepping = true;
	mh.stepping++;
}

/* Is the request's Host header (when it has one) a loopback name:
 * localhost, [::1] or an address of 127.0.0.0/8, with or without a port?
 * A page elsewhere can point a name of its own at 127.0.0.1 (DNS
 * rebinding): its requests do not get the circuits. */
static bool
host_is_loopback(const char *in)
{
	const char *h = in;

	while ((h = strchr(h, '\n')) != NULL) {
		char host[64];
		struct in_addr a;
		size_t n;

		h++;
		if (strncasecmp(h, "Host:", 5) != 0)
			continue;
		h += 5;
		h += strspn(h, " \t");
		if (strncmp(h, "[::1]", 5) == 0)
			return strchr(":\r\n", h[5]) != NULL;
		n = strcspn(h, ":\r\n \t");
		if (n >= sizeof host)
			return false;
		memcpy(host, h, n);
		host[n] = '\0';
		return strcasecmp(host, "localhost") == 0 ||
		    (inet_pton(AF_INET, host, &a) == 1 && (ntohl(a.s_addr) >> 24) == 127);
	}
	return true;
}

/* The dashboard's files: path, type, text. */
static const struct {
	const char *path, *type;
	const char *text;
} dashboard_files[] = {
	{ "/", "text/html; charset=utf-8", dashboard_index_html },
	{ "/index.html", "text/html; charset=utf-8", dashboard_index_html },
	{ "/app.js", "text/javascript; charset=utf-8", dashboard_app_js },
	{ "/style.css", "text/css; charset=utf-8", dashboard_style_css },
	{ "/icon.svg", "image/svg+xml", dashboard_icon_svg },
	{ "/favicon.ico", "image/svg+xml", dashboard_icon_svg },
};

/* A dashboard route (target without its query); false when none is. */
static bool
conn_dashboard(http_conn *c, const char *path, bool head)
{
	for (size_t i = 0; i < sizeof dashboard_files / sizeof dashboard_files[0]; i++) {
		if (strcmp(path, dashboard_files[i].path) == 0) {
			conn_reply(c, 200, "OK", dashboard_files[i].type, dashboard_files[i].text,
			    strlen(dashboard_files[i].text), head);
			return true;
		}
	}
	if (strcmp(path, "/api/circuits") == 0) {
		if (!dashboard_circuits_scrape(&c->sc))
			conn_reply(c, 500, "Internal Server Error", "text/plain", "out of memory\n",
			    14, false);
		else
			conn_scrape(c, "application/json", head);
		return true;
	}
	if (strcmp(path, "/api/history") == 0) {
		size_t len = 0;
		char *text = dashboard_history_text(&len);

		if (text == NULL) {
			conn_reply(c, 500, "Internal Server Error", "text/plain", "out of memory\n",
			    14, false);
			return true;
		}
		conn_reply(c, 200, "OK", "application/json", text, len, head);
		free(text);
		return true;
	}
	if (strcmp(path, "/events") == 0) {
		static const char full[] = "too many dashboard event streams "
					   "(dashboard_max_clients)\n";

		if (head)
			conn_reply(c, 405, "Method Not Allowed", "text/plain", "only GET\n", 9,
			    true);
		else if (!dashboard_sse_room())
			conn_reply(c, 503, "Service Unavailable", "text/plain", full,
			    sizeof full - 1, false);
		else
			c->to_sse = true;
		return true;
	}
	return false;
}

/* A whole request head is in: answer it. */
static void
conn_answer(http_conn *c)
{
	char method[16], target[256], path[256];
	bool head;

	if (sscanf(c->in, "%15s %255s", method, target) != 2) {
		conn_reply(c, 400, "Bad Request", "text/plain", "bad request\n", 12, false);
		return;
	}
	head = strcmp(method, "HEAD") == 0;
	{
		size_t eol = strcspn(c->in, "\r\n");

		/* HTTP/1.0 (or older) knows no chunks: a reply made in steps
		 * is then ended by the close. */
		c->http11 = eol >= 8 && strncmp(c->in + eol - 8, "HTTP/1.1", 8) == 0;
	}
	if (strcmp(method, "GET") != 0 && !head) {
		conn_reply(c, 405, "Method Not Allowed", "text/plain", "only GET\n", 9, false);
		return;
	}
	snprintf(path, sizeof path, "%.*s", (int)strcspn(target, "?#"), target);
	if (strcmp(path, "/metrics") != 0) {
		static const char nope[] = "metrics are at /metrics, the dashboard at /\n";
		static const char foreign[] = "the dashboard answers loopback names only\n";

		if (!host_is_loopback(c->in))
			conn_reply(c, 403, "Forbidden", "text/plain", foreign, sizeof foreign - 1,
			    head);
		else if (!conn_dashboard(c, path, head))
			conn_reply(c, 404, "Not Found", "text/plain", nope, sizeof nope - 1, head);
		return;
	}
	if (!metrics_scrape(&c->sc, true)) {
		conn_reply(c, 500, "Internal Server Error", "text/plain", "out of memory\n", 14,
		    false);
		return;
	}
	conn_scrape(c, "text/plain; version=0.0.4; charset=utf-8", head);
	stats.metrics_scrapes++;
}

/* Read what came; answer once the head is whole. False: close. */
static bool
conn_read(http_conn *c)
{
	char sink[4096];
	ssize_t n;

	if (c->draining) {
		while ((n = read(c->fd, sink, sizeof sink)) > 0)
			;
		return n < 0 && (errno == EAGAIN || errno == EINTR);
	}
	n = read(c->fd, c->in + c->in_len, METRICS_HTTP_HEADER_MAX - c->in_len);
	if (n < 0)
		return errno == EAGAIN || errno == EINTR;
	if (n == 0)
		return false;
	c->in_len += (size_t)n;
	c->in[c->in_len] = '\0';
	if (strstr(c->in, "\r\n\r\n") != NULL || strstr(c->in, "\n\n") != NULL) {
		conn_answer(c);
		if (c->to_sse) {
			/* The stream takes the descriptor; this connection goes. */
			int fd = c->fd;

			c->fd = -1;
			dashboard_sse_attach(fd);
			return false;
		}
	} else if (c->in_len == METRICS_HTTP_HEADER_MAX)
		conn_reply(c, 431, "Request Header Fields Too Large", "text/plain",
		    "header too large\n", 17, false);
	else
		return true;
	return c->out_len > 0 && conn_wait(c, EV_WRITE);
}

/* Write what the socket takes; then wait for it to take more, for the
 * next step, or (all out) for the client's close. False: close. */
static bool
conn_write(http_conn *c)
{
	static const struct timeval now = { 0, 0 };

	while (c->out_done < c->out_len) {
		ssize_t n = write(c->fd, c->out + c->out_done, c->out_len - c->out_done);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno != EAGAIN)
			return false;
		if (n < 0)
			break;
		c->out_done += (size_t)n;
	}
	if (c->stepping) {
		/* The next step once the unsent output is below the bound:
		 * a scraper that reads slowly makes the scrape slow. */
		if (c->out_len - c->out_done < METRICS_HTTP_OUT_MAX &&
		    !evtimer_pending(c->step_ev, NULL))
			evtimer_add(c->step_ev, &now);
		return conn_wait(c, c->out_done < c->out_len ? EV_WRITE : 0);
	}
	if (c->out_done < c->out_len)
		return conn_wait(c, EV_WRITE);
	/* All out: half-close, and read what the client still sends until it
	 * closes (closing at once could reset the reply away). */
	out_release(c);
	c->draining = true;
	shutdown(c->fd, SHUT_WR);
	return conn_wait(c, EV_READ);
}

/* The next step of c's reply, sent as a chunk; the last ends the body.
 * Each stepping connection steps once a turn, over its share of
 * SCRAPE_STEP_CIRCUITS. */
static void
conn_step_cb(evutil_socket_t fd, short what, void *arg)
{
	static const char last[] = "0\r\n\r\n";
	http_conn *c = arg;
	scrape *s = &c->sc;
	unsigned share = SCRAPE_STEP_CIRCUITS / (mh.stepping > 0 ? mh.stepping : 1);
	bool done = scrape_step(s, share > 0 ? share : 1), ok = !s->nomem && !s->out.nomem;

	if (ok && s->out.len > 0) {
		char size[24];
		int n = snprintf(size, sizeof size, "%zx\r\n", s->out.len);

		ok = (!c->chunked || out_put(c, size, (size_t)n)) &&
		    out_put(c, s->out.buf, s->out.len) && (!c->chunked || out_put(c, "\r\n", 2));
	}
	s->out.len = 0;
	if (ok && done) {
		conn_steps_end(c);
		ok = !c->chunked || out_put(c, last, sizeof last - 1);
	}
	/* Out of memory or room: the body is cut short (the scraper sees an
	 * unfinished chunked body, or for HTTP/1.0 a close before the end). */
	if (!ok || !conn_write(c))
		conn_free(c);
}

static void
conn_cb(evutil_socket_t fd, short what, void *arg)
{
	http_conn *c = arg;
	bool keep;

	if (what & EV_TIMEOUT)
		keep = false;
	else if (c->replied && !c->draining)
		keep = conn_write(c);
	else
		keep = conn_read(c);
	if (!keep)
		conn_free(c);
}

/* Accept again (after a pause for lack of descriptors). */
static void
resume_cb(evutil_socket_t fd, short what, void *arg)
{
	if (mh.listen_ev != NULL && cbd.state != DAEMON_STOPPING)
		event_add(mh.listen_ev, NULL);
}

/* accept failed for lack of descriptors: stop accepting for a while
 * (logged at most once per METRICS_HTTP_LOG_MS). */
static void
accept_pause(int err)
{
	struct timeval tv = { 0, METRICS_HTTP_PAUSE_MS * 1000 };
	int64_t now = clock_monotonic_ms();

	stats_limit_hit(STATS_LIMIT_DESCRIPTORS);
	if (mh.emfile_logged_ms == 0 || now - mh.emfile_logged_ms >= METRICS_HTTP_LOG_MS) {
		log_warning("metrics_listen: accept: %s: pausing the metrics port (%llu times more "
			    "since the last warning)",
		    strerror(err), (unsigned long long)mh.emfile_unlogged);
		mh.emfile_logged_ms = now;
		mh.emfile_unlogged = 0;
	} else {
		mh.emfile_unlogged++;
	}
	event_del(mh.listen_ev);
	evtimer_add(mh.pause_ev, &tv);
}

static void
accept_cb(evutil_socket_t lfd, short what, void *arg)
{
	for (int i = 0; i < METRICS_HTTP_ACCEPT_BATCH; i++) {
		int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		http_conn *c;

		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			if (errno != EAGAIN && errno != EWOULDBLOCK)
				accept_pause(errno);
			return;
		}
		/* Scrapers are few: past the bound, closed at once (no
		 * descriptor held for them, none taken from the socket's
		 * clients). */
		if (mh.count >= (uint64_t)cbd.conf.metrics_max_connections) {
			stats_limit_hit(STATS_LIMIT_METRICS_CONNECTIONS);
			close(fd);
			continue;
		}
		c = calloc(1, sizeof *c);
		if (c != NULL)
			c->ev = event_new(cbd.base, fd, EV_READ | EV_PERSIST, conn_cb, c);
		if (c == NULL || c->ev == NULL) {
			stats_limit_hit(STATS_LIMIT_NOMEM);
			free(c);
			close(fd);
			continue;
		}
		c->fd = fd;
		c->armed = -1;
		c->deadline = clock_monotonic_ms() + METRICS_HTTP_TIMEOUT_MS;
		c->next = mh.conns;
		if (mh.conns != NULL)
			mh.conns->prev = c;
		mh.conns = c;
		mh.count++;
		if (!conn_wait(c, EV_READ))
			conn_free(c);
	}
}

/* A listening socket on host (an IPv4 or IPv6 literal) and port; -1 when
 * it cannot be made. */
static int
listen_on(const char *host, int port)
{
	struct sockaddr_in6 a6 = { .sin6_family = AF_INET6, .sin6_port = htons((uint16_t)port) };
	struct sockaddr_in a4 = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	bool v6 = inet_pton(AF_INET6, host, &a6.sin6_addr) == 1;
	int one = 1, fd;

	if (!v6 && inet_pton(AF_INET, host, &a4.sin_addr) != 1)
		return -1;
	fd = socket(v6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if ((v6 ? bind(fd, (struct sockaddr *)&a6, sizeof a6)
		: bind(fd, (struct sockaddr *)&a4, sizeof a4)) != 0 ||
	    listen(fd, METRICS_HTTP_BACKLOG) != 0) {
		close(fd);
		return -1;
	}
	return fd;
}

bool
metrics_http_start(void)
{
	const char *listen = cbd.conf.metrics_listen, *colon, *why;
	char host[64];

	if (listen[0] == '\0')
		return true;
	if (!conf_metrics_listen_valid(listen, &why)) {
		log_error("metrics_listen \"%s\": %s", listen, why);
		return false;
	}
	colon = strrchr(listen, ':');
	snprintf(host, sizeof host, "%.*s", (int)(colon - listen), listen);
	if (strcmp(host, "[::1]") == 0)
		snprintf(host, sizeof host, "::1");
	else if (strcmp(host, "localhost") == 0)
		snprintf(host, sizeof host, "127.0.0.1");
	mh.fd = listen_on(host, atoi(colon + 1));
	if (mh.fd < 0) {
		log_error("metrics_listen %s: cannot listen there (in use, or no such address)",
		    listen);
		return false;
	}
	mh.listen_ev = event_new(cbd.base, mh.fd, EV_READ | EV_PERSIST, accept_cb, NULL);
	mh.pause_ev = evtimer_new(cbd.base, resume_cb, NULL);
	if (mh.listen_ev == NULL || mh.pause_ev == NULL || event_add(mh.listen_ev, NULL) != 0 ||
	    !dashboard_sse_start()) {
		log_error("metrics_listen: out of memory");
		metrics_http_stop();
		return false;
	}
	log_info("metrics at http://%s/metrics", listen);
	return true;
}

void
metrics_http_stop(void)
{
	dashboard_sse_stop();
	while (mh.conns != NULL)
		conn_free(mh.conns);
	if (mh.listen_ev != NULL)
		event_free(mh.listen_ev);
	if (mh.pause_ev != NULL)
		event_free(mh.pause_ev);
	mh.listen_ev = mh.pause_ev = NULL;
	if (mh.fd >= 0)
		close(mh.fd);
	mh.fd = -1;
}

uint64_t
metrics_http_connections(void)
{
	return mh.count;
}
