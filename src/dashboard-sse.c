/* SPDX-License-Identifier: Apache-2.0 */
/*
 * dashboard-sse.c — the dashboard's event streams (see dashboard-sse.h).
 * Each stream has one output buffer, written as its socket takes it; what
 * it reads is thrown away (EOF closes it). One frame's text is made once
 * and appended to every stream.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

#include "daemon.h"
#include "dashboard-sse.h"
#include "dashboard.h"
#include "log.h"
#include "server-client.h"
#include "stats.h"

/* One browser's stream. */
typedef struct sse_client {
	struct sse_client *next, *prev;
	int fd;
	struct event *read_ev, *write_ev;
	bool writing; /* write_ev is added */
	char *out;
	size_t out_len, out_done, out_cap;
} sse_client;

static struct {
	sse_client *clients;
	uint64_t count;
	struct event *tick_ev;
} sse;

/* The head of the reply: the stream never ends on its own. The browser
 * reconnects 2 s after losing it. */
static const char sse_head[] = "HTTP/1.1 200 OK\r\n"
			       "Content-Type: text/event-stream; charset=utf-8\r\n"
			       "Cache-Control: no-store\r\n"
			       "X-Content-Type-Options: nosniff\r\n"
			       "Connection: close\r\n\r\n"
			       "retry: 2000\n\n";

static void
client_free(sse_client *c)
{
	if (c->prev != NULL)
		c->prev->next = c->next;
	else
		sse.clients = c->next;
	if (c->next != NULL)
		c->next->prev = c->prev;
	if (c->read_ev != NULL)
		event_free(c->read_ev);
	if (c->write_ev != NULL)
		event_free(c->write_ev);
	close(c->fd);
	server_client_output_external(c->out_cap, 0);
	free(c->out);
	free(c);
	sse.count--;
	stats.dashboard_clients = sse.count;
}

/* Queue len bytes for c; false when that passes its output bound (or
 * memory ran out): the caller drops it. */
static bool
client_queue(sse_client *c, const char *text, size_t len)
{
	size_t pending = c->out_len - c->out_done;

	if (pending + len > (size_t)cbd.conf.max_output_bytes) {
		stats_limit_hit(STATS_LIMIT_OUTPUT);
		log_info("dashboard: a browser's event stream was dropped: %zu bytes unsent "
			 "(max_output_bytes)",
		    pending);
		return false;
	}
	if (c->out_done > 0) {
		memmove(c->out, c->out + c->out_done, pending);
		c->out_len = pending;
		c->out_done = 0;
	}
	if (c->out_len + len > c->out_cap) {
		size_t cap = c->out_cap > 0 ? c->out_cap : 4096;
		char *grown;

		while (cap < c->out_len + len)
			cap *= 2;
		/* Counted with the socket's connections: past
		 * max_total_output_bytes this stream goes, not a socket client. */
		if (!server_client_output_external(c->out_cap, cap)) {
			log_info("dashboard: a browser's event stream was dropped: all output "
				 "would pass max_total_output_bytes");
			return false;
		}
		grown = realloc(c->out, cap);
		if (grown == NULL) {
			server_client_output_external(cap, c->out_cap);
			stats_limit_hit(STATS_LIMIT_NOMEM);
			return false;
		}
		c->out = grown;
		c->out_cap = cap;
	}
	memcpy(c->out + c->out_len, text, len);
	c->out_len += len;
	if (!c->writing && event_add(c->write_ev, NULL) == 0)
		c->writing = true;
	return true;
}

/* Send one frame to every stream (takes text). */
static void
broadcast(char *text, size_t len)
{
	sse_client *c, *next;

	if (text == NULL) {
		stats_limit_hit(STATS_LIMIT_NOMEM);
		return;
	}
	for (c = sse.clients; c != NULL; c = next) {
		next = c->next;
		if (client_queue(c, text, len))
			stats.dashboard_events++;
		else
			client_free(c);
	}
	free(text);
}

static void
write_cb(evutil_socket_t fd, short what, void *arg)
{
	sse_client *c = arg;

	while (c->out_done < c->out_len) {
		ssize_t n = write(c->fd, c->out + c->out_done, c->out_len - c->out_done);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return;
		if (n < 0) {
			client_free(c);
			return;
		}
		c->out_done += (size_t)n;
	}
	c->out_done = c->out_len = 0;
	event_del(c->write_ev);
	c->writing = false;
}

static void
read_cb(evutil_socket_t fd, short what, void *arg)
{
	sse_client *c = arg;
	char sink[1024];
	ssize_t n;

	while ((n = read(c->fd, sink, sizeof sink)) > 0)
		;
	if (n == 0 || (errno != EAGAIN && errno != EINTR))
		client_free(c);
}

static void
tick_cb(evutil_socket_t fd, short what, void *arg)
{
	size_t len = 0;
	char *text = dashboard_tick(sse.count > 0, &len);

	if (sse.count > 0)
		broadcast(text, len);
}

bool
dashboard_sse_room(void)
{
	if (sse.count < (uint64_t)cbd.conf.dashboard_max_clients)
		return true;
	stats_limit_hit(STATS_LIMIT_DASHBOARD_CLIENTS);
	return false;
}

bool
dashboard_sse_start(void)
{
	struct timeval tick = { DASHBOARD_TICK_MS / 1000, (DASHBOARD_TICK_MS % 1000) * 1000 };

	if (sse.tick_ev != NULL)
		return true;
	sse.tick_ev = event_new(cbd.base, -1, EV_PERSIST, tick_cb, NULL);
	if (sse.tick_ev == NULL || event_add(sse.tick_ev, &tick) != 0)
		return false;
	dashboard_rates_begin();
	return true;
}

bool
dashboard_sse_attach(int fd)
{
	sse_client *c = calloc(1, sizeof *c);

	if (c == NULL) {
		stats_limit_hit(STATS_LIMIT_NOMEM);
		free(c);
		close(fd);
		return false;
	}
	c->fd = fd;
	c->next = sse.clients;
	if (sse.clients != NULL)
		sse.clients->prev = c;
	sse.clients = c;
	sse.count++;
	stats.dashboard_clients = sse.count;
	c->read_ev = event_new(cbd.base, fd, EV_READ | EV_PERSIST, read_cb, c);
	c->write_ev = event_new(cbd.base, fd, EV_WRITE | EV_PERSIST, write_cb, c);
	if (c->read_ev == NULL || c->write_ev == NULL || event_add(c->read_ev, NULL) != 0 ||
	    !client_queue(c, sse_head, sizeof sse_head - 1)) {
		stats_limit_hit(STATS_LIMIT_NOMEM);
		client_free(c);
		return false;
	}
	return true;
}

void
dashboard_sse_changed(const char *name, const ct_change *change)
{
	size_t len = 0;
	char *text;

	if (sse.count == 0 || change->reason == CB_REASON_NONE)
		return;
	text = dashboard_change_text(name, change, &len);
	broadcast(text, len);
}

void
dashboard_sse_deleted(const char *name, const char *reason)
{
	size_t len = 0;
	char *text;

	dashboard_rates_drop(name);
	if (sse.count == 0)
		return;
	text = dashboard_delete_text(name, reason, &len);
	broadcast(text, len);
}

void
dashboard_sse_policy_renewed(const char *name, const ct_view *view, const cbd_conf *fresh)
{
	size_t len = 0;
	char *text;

	if (sse.count == 0)
		return;
	text = dashboard_policy_text(name, view, fresh, &len);
	broadcast(text, len);
}

uint64_t
dashboard_sse_clients(void)
{
	return sse.count;
}

void
dashboard_sse_stop(void)
{
	while (sse.clients != NULL)
		client_free(sse.clients);
	if (sse.tick_ev != NULL)
		event_free(sse.tick_ev);
	sse.tick_ev = NULL;
	dashboard_forget();
}
