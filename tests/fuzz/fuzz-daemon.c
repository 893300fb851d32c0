/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz-daemon.c — cbd's request path in-process without a socket (see
 * fuzz-daemon.h): the daemon context set up by hand, descriptor-less connections, and
 * the one-valid-JSON-line-per-request check.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf.h"
#include "fuzz-daemon.h"
#include "log.h"
#include "op.h"
#include "server.h"
#include "stats.h"

/* Events of the in-process daemon are never dispatched. */
static void
fuzz_event_noop(evutil_socket_t fd, short what, void *arg)
{
}

/* $CBD_FUZZ_LOG_LEVEL, else error: quiet, as fuzzing runs millions of
 * requests (debug exercises the logging of client-supplied text). */
static log_level
fuzz_log_level(void)
{
	const char *text = getenv("CBD_FUZZ_LOG_LEVEL");
	log_level level;

	return text != NULL && log_level_parse(text, &level) ? level : LOG_LEVEL_ERROR;
}

bool
fuzz_daemon_start(void)
{
	srv = (server){ .listen_fd = -1 };
	cbd = (daemon_ctx){ 0 };
	stats_init();
	stats_name_ops(op_names(), op_count());
	if (!conf_init_defaults(&cbd.conf))
		return false;
	log_set_level(fuzz_log_level());
	cbd.base = event_base_new();
	if (cbd.base != NULL)
		srv.reap_ev = event_new(cbd.base, -1, 0, fuzz_event_noop, NULL);
	cbd.table = circuit_table_new((uint64_t)cbd.conf.max_circuits, FUZZ_INSTANCE_ID);
	if (cbd.base == NULL || srv.reap_ev == NULL || cbd.table == NULL) {
		fuzz_daemon_stop();
		return false;
	}
	cbd.state = DAEMON_RUNNING;
	return true;
}

void
fuzz_daemon_stop(void)
{
	server_free();
}

server_client *
fuzz_client_new(uid_t uid)
{
	server_client *c = calloc(1, sizeof *c);

	if (c == NULL)
		return NULL;
	c->fd = -1;
	c->hooks = &server_hooks;
	c->state = SERVER_CLIENT_OPEN;
	c->uid = uid;
	c->gid = (gid_t)-1;
	c->pid = 1;
	c->read_ev = event_new(cbd.base, -1, EV_READ | EV_PERSIST, fuzz_event_noop, c);
	c->write_ev = event_new(cbd.base, -1, EV_WRITE | EV_PERSIST, fuzz_event_noop, c);
	c->timer_ev = evtimer_new(cbd.base, fuzz_event_noop, c);
	c->turn_ev = evtimer_new(cbd.base, fuzz_event_noop, c);
	if (c->read_ev == NULL || c->write_ev == NULL || c->timer_ev == NULL ||
	    c->turn_ev == NULL) {
		server_client_free(c);
		return NULL;
	}
	server_add_client(c);
	return c;
}

/* One line as server-client.c's line_answer() takes it. */
static size_t
fuzz_line(server_client *c, const char *line, size_t len)
{
	uint64_t noreply = stats.noreply;

	if (len > 0 && line[len - 1] == '\r')
		len--;
	if (len == 0)
		return 0;
	if (len > (size_t)cbd.conf.max_line_bytes) {
		server_client_reply_error(c, PROTO_LINE_TOO_LONG,
		    "request line is longer than max_line_bytes (%lld)",
		    (long long)cbd.conf.max_line_bytes);
		return 1;
	}
	op_dispatch(c, line, len);
	/* A long list is answered in steps across turns of the loop, its
	 * connection reading nothing meanwhile: here, all at once. */
	while (!op_conn_step(c, false))
		;
	/* A request carried out with noreply (counted) owes no line. */
	return stats.noreply > noreply ? 0 : 1;
}

size_t
fuzz_client_feed(server_client *c, const char *data, size_t len)
{
	size_t expected = 0;

	while (len > 0 && c->state == SERVER_CLIENT_OPEN) {
		const char *nl = memchr(data, '\n', len);
		size_t n = nl != NULL ? (size_t)(nl - data) : len;

		/* The input's last line needs no LF. */
		expected += fuzz_line(c, data, n);
		if (nl == NULL)
			break;
		data += n + 1;
		len -= n + 1;
	}
	return expected;
}

const char *
fuzz_client_output(server_client *c, size_t *len)
{
	*len = c->out_len - c->out_off;
	return c->out != NULL ? c->out + c->out_off : "";
}

void
fuzz_client_output_reset(server_client *c)
{
	c->out_off = c->out_len = 0;
}

/* printf into why; returns false. */
static bool __attribute__((format(printf, 3, 4)))
fuzz_fail(char *why, size_t size, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, size, fmt, ap);
	va_end(ap);
	return false;
}

/* Is one reply's shape right? */
static bool
reply_check(const json_t *reply, char *why, size_t size)
{
	const json_t *ok = json_object_get(reply, "ok");
	const json_t *id = json_object_get(reply, "id");
	const json_t *error, *code, *message;
	proto_code parsed;

	if (!json_is_boolean(ok))
		return fuzz_fail(why, size, "\"ok\" is not a boolean");
	if (id != NULL && !json_is_integer(id) && !json_is_string(id))
		return fuzz_fail(why, size, "\"id\" is neither an integer nor a string");
	error = json_object_get(reply, "error");
	if (json_is_true(ok))
		return error == NULL || fuzz_fail(why, size, "an ok reply has \"error\"");
	code = json_object_get(error, "code");
	message = json_object_get(error, "message");
	if (!json_is_object(error) || !json_is_string(code) || !json_is_string(message))
		return fuzz_fail(why, size, "\"error\" is not {code, message}");
	if (!proto_code_parse(json_string_value(code), &parsed) || parsed == PROTO_OK)
		return fuzz_fail(why, size, "unknown error code \"%s\"", json_string_value(code));
	return true;
}

bool
fuzz_replies_check(const char *out, size_t len, size_t expected,
    void (*visit)(const json_t *reply, size_t i, void *arg), void *arg, char *why, size_t why_size)
{
	size_t i = 0;

	while (len > 0) {
		const char *nl = memchr(out, '\n', len);
		size_t n;
		json_error_t jerr;
		json_t *reply;
		bool good;

		if (nl == NULL)
			return fuzz_fail(why, why_size, "reply %zu has no LF", i);
		n = (size_t)(nl - out);
		/* JSON_REJECT_DUPLICATES: a member twice is a broken reply too. */
		reply = json_loadb(out, n, JSON_REJECT_DUPLICATES, &jerr);
		if (!json_is_object(reply)) {
			json_decref(reply);
			return fuzz_fail(why, why_size, "reply %zu is not a JSON object: %s: %.*s",
			    i, jerr.text, (int)(n > 200 ? 200 : n), out);
		}
		good = reply_check(reply, why, why_size);
		if (good && visit != NULL)
			visit(reply, i, arg);
		json_decref(reply);
		if (!good)
			return false;
		out += n + 1;
		len -= n + 1;
		i++;
	}
	if (expected != FUZZ_ANY_COUNT && i != expected)
		return fuzz_fail(why, why_size, "%zu replies for %zu requests", i, expected);
	return true;
}
