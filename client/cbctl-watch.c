/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cbctl-watch.c — `cbctl watch [NAME...]`: the watch op on cbctl's own
 * connection; prints the current snapshots, then one timestamped line per
 * event (state and hold changes, policy changes, deletes) as cbd pushes
 * them; --json
 * prints the reply and the event lines as they come. Runs until SIGINT or
 * SIGTERM (exit 0) or until cbd closes the connection (exit 3).
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "cbctl.h"

/* Longest line read from cbd: a watch reply of every circuit is cut by
 * cbd at half its max_output_bytes (8 MiB by default); room for more. */
#define WATCH_LINE_MAX (64 * 1024 * 1024)
#define WATCH_READ_SIZE 65536

static volatile sig_atomic_t watch_stop;

static void
watch_on_signal(int sig)
{
	(void)sig;
	watch_stop = 1;
}

/* Control characters in text from the wire shown as '?'. */
static void
watch_sanitize(char *text)
{
	for (unsigned char *p = (unsigned char *)text; *p != '\0'; p++)
		if (*p < 0x20 || *p == 0x7f)
			*p = '?';
}

/* Local time now, "2026-11-30 10:01:02". */
static void
watch_now(char *buf, size_t size)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	cbctl_format_time((int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000, buf, size);
}

/* "; held open by alice until 2026-11-30 10:10:00: deploy" for a held
 * snapshot, "" otherwise. */
static void
watch_hold(const json_t *snap, char *buf, size_t size)
{
	const json_t *hold = json_object_get(snap, "hold");
	const char *state = json_string_value(json_object_get(hold, "state"));
	const char *user = json_string_value(json_object_get(hold, "by_user"));
	const char *reason = json_string_value(json_object_get(hold, "reason"));
	const json_t *until = json_object_get(hold, "until");
	char when[64] = "until released", t[32];

	buf[0] = '\0';
	if (!json_is_object(hold) || state == NULL)
		return;
	if (json_is_integer(until)) {
		cbctl_format_time(json_integer_value(until), t, sizeof t);
		snprintf(when, sizeof when, "until %s", t);
	}
	if (user != NULL && user[0] != '\0')
		snprintf(buf, size, "; held %s by %s %s%s%s", state, user, when,
		    reason != NULL ? ": " : "", reason != NULL ? reason : "");
	else
		snprintf(buf, size, "; held %s by uid %" JSON_INTEGER_FORMAT " %s%s%s", state,
		    json_integer_value(json_object_get(hold, "by_uid")), when,
		    reason != NULL ? ": " : "", reason != NULL ? reason : "");
}

/* One line for a snapshot or an event, timestamped now. */
static void
watch_print(const json_t *snap, const char *name, const char *text)
{
	char when[32], hold[1024], line[2048];

	watch_now(when, sizeof when);
	if (snap != NULL)
		watch_hold(snap, hold, sizeof hold);
	else
		hold[0] = '\0';
	snprintf(line, sizeof line, "%s %s%s", name != NULL ? name : "?", text, hold);
	watch_sanitize(line);
	printf("%s %s\n", when, line);
}

/* The watch reply: the snapshots (or, with --json, the line). False after
 * printing why when cbd refused. */
static bool
watch_reply(const cbctl *ctl, const char *line)
{
	json_t *reply = json_loads(line, 0, NULL);
	const json_t *ok = json_object_get(reply, "ok"), *snaps, *snap;
	size_t i;

	if (!json_is_true(ok)) {
		const json_t *error = json_object_get(reply, "error");

		if (ctl->json)
			puts(line);
		cbctl_errorf("%s: %s",
		    json_string_value(json_object_get(error, "code")) != NULL
			? json_string_value(json_object_get(error, "code"))
			: "refused",
		    json_string_value(json_object_get(error, "message")) != NULL
			? json_string_value(json_object_get(error, "message"))
			: line);
		json_decref(reply);
		return false;
	}
	if (ctl->json) {
		puts(line);
	} else {
		snaps = json_object_get(reply, "snapshots");
		json_array_foreach (snaps, i, snap) {
			char text[64];

			snprintf(text, sizeof text, "%s (now)",
			    json_string_value(json_object_get(snap, "state")) != NULL
				? json_string_value(json_object_get(snap, "state"))
				: "?");
			watch_print(snap, json_string_value(json_object_get(snap, "name")), text);
		}
	}
	if (json_is_true(json_object_get(reply, "truncated")))
		cbctl_errorf("watch: cbd cut the list of current snapshots (too many "
			     "circuits); events still come for every circuit");
	json_decref(reply);
	return true;
}

/* The trip rule and break of a policy object, "trip consecutive,
 * failure_threshold 3, break_ms 30000" (the keys that say when the
 * circuit opens and for how long; `cbctl policy NAME` shows all), into
 * buf; "" when it has none of them. */
static void
watch_policy_summary(const json_t *policy, char *buf, size_t size)
{
	static const char *const consecutive[] = { "trip", "failure_threshold", "break_ms",
		"preset", NULL };
	static const char *const rate[] = { "trip", "failure_rate", "minimum_calls", "window",
		"window_size", "slow_call_ms", "slow_call_rate", "break_ms", "preset", NULL };
	const char *trip = json_string_value(json_object_get(policy, "trip"));
	const char *const *keys = trip != NULL && strcmp(trip, "rate") == 0 ? rate : consecutive;
	size_t used = 0;

	buf[0] = '\0';
	for (int i = 0; keys[i] != NULL && used < size; i++) {
		const json_t *v = json_object_get(policy, keys[i]);
		char value[64];
		int w;

		if (json_is_string(v))
			snprintf(value, sizeof value, "%s", json_string_value(v));
		else if (json_is_integer(v))
			snprintf(value, sizeof value, "%" JSON_INTEGER_FORMAT,
			    json_integer_value(v));
		else
			continue; /* null (unset) or absent */
		w = snprintf(buf + used, size - used, "%s%s %s", used > 0 ? ", " : "", keys[i],
		    value);
		if (w > 0)
			used += (size_t)w;
	}
}

/* One event line, human. */
static void
watch_event(const char *line)
{
	json_t *ev = json_loads(line, 0, NULL);
	const char *kind = json_string_value(json_object_get(ev, "event"));
	const char *reason = json_string_value(json_object_get(ev, "reason"));
	const json_t *snap = json_object_get(ev, "snapshot");
	char text[512];

	if (kind != NULL && strcmp(kind, "change") == 0) {
		const char *from = json_string_value(json_object_get(ev, "from"));
		const char *to = json_string_value(json_object_get(snap, "state"));

		if (from != NULL && to != NULL && strcmp(from, to) != 0)
			snprintf(text, sizeof text, "%s -> %s", from, to);
		else
			snprintf(text, sizeof text, "%s", to != NULL ? to : "?");
		if (reason != NULL)
			snprintf(text + strlen(text), sizeof text - strlen(text), " (%s)", reason);
		watch_print(snap, json_string_value(json_object_get(snap, "name")), text);
	} else if (kind != NULL && strcmp(kind, "policy") == 0) {
		/* Protocol 3: a reload changed the circuit's policy (no state
		 * change): "NAME policy changed (closed): trip consecutive,
		 * failure_threshold 3, break_ms 30000". */
		const char *state = json_string_value(json_object_get(snap, "state"));
		char summary[384];

		watch_policy_summary(json_object_get(snap, "policy"), summary, sizeof summary);
		snprintf(text, sizeof text, "policy changed (%s)%s%s", state != NULL ? state : "?",
		    summary[0] != '\0' ? ": " : "", summary);
		watch_print(snap, json_string_value(json_object_get(snap, "name")), text);
	} else if (kind != NULL && strcmp(kind, "delete") == 0) {
		if (reason == NULL || strcmp(reason, "deleted") == 0)
			snprintf(text, sizeof text, "deleted");
		else
			snprintf(text, sizeof text, "deleted (%s)", reason);
		watch_print(NULL, json_string_value(json_object_get(ev, "name")), text);
	} else {
		/* An event this cbctl does not know: shown as it came. */
		char when[32];
		char *copy = strdup(line);

		watch_now(when, sizeof when);
		if (copy != NULL) {
			watch_sanitize(copy);
			printf("%s %s\n", when, copy);
		}
		free(copy);
	}
	json_decref(ev);
}

/* Send the watch request: the names, or all. */
bool
cbctl_watch_send(const cbctl *ctl, int fd)
{
	json_t *req = json_pack("{s:s}", "op", "watch");
	json_t *names = json_array();
	char *text;
	size_t len, off = 0;
	bool ok = true;

	for (int i = 0; i < ctl->argc; i++)
		json_array_append_new(names, json_string(ctl->argv[i]));
	if (ctl->argc > 0)
		json_object_set_new(req, "names", names);
	else {
		json_decref(names);
		json_object_set_new(req, "all", json_true());
	}
	text = json_dumps(req, JSON_COMPACT);
	json_decref(req);
	if (text == NULL) {
		cbctl_errorf("watch: out of memory (or a name that is not UTF-8)");
		return false;
	}
	len = strlen(text);
	text[len++] = '\n'; /* over the NUL: jansson's buffer has it */
	while (ok && off < len) {
		ssize_t n = write(fd, text + off, len - off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			cbctl_errorf("cannot reach cbd at %s: %s", cbc_conn_socket_path(ctl->conn),
			    strerror(errno));
			ok = false;
		} else {
			off += (size_t)n;
		}
	}
	free(text);
	return ok;
}

/* Read what is there into buf; 1 read, 0 EOF, -1 error (printed). */
int
cbctl_watch_read(const cbctl *ctl, int fd, cbctl_line_buf *buf)
{
	ssize_t n;

	if (buf->size - buf->len < WATCH_READ_SIZE) {
		size_t size =
		    buf->size * 2 > WATCH_READ_SIZE * 2 ? buf->size * 2 : WATCH_READ_SIZE * 2;
		char *data;

		if (size > WATCH_LINE_MAX + WATCH_READ_SIZE) {
			cbctl_errorf("watch: a line from cbd is longer than %d bytes",
			    WATCH_LINE_MAX);
			return -1;
		}
		data = realloc(buf->data, size);
		if (data == NULL) {
			cbctl_errorf("watch: out of memory");
			return -1;
		}
		buf->data = data;
		buf->size = size;
	}
	n = read(fd, buf->data + buf->len, buf->size - buf->len - 1);
	if (n < 0 && errno == EINTR)
		return 1;
	if (n < 0) {
		cbctl_errorf("cannot reach cbd at %s: %s", cbc_conn_socket_path(ctl->conn),
		    strerror(errno));
		return -1;
	}
	buf->len += (size_t)n;
	return n == 0 ? 0 : 1;
}

int
cbctl_cmd_watch(cbctl *ctl)
{
	struct sigaction sa = { .sa_handler = watch_on_signal };
	sigset_t block, unblocked;
	cbctl_line_buf buf = { 0 };
	size_t scanned = 0; /* bytes of buf known to hold no newline */
	bool replied = false;
	struct timespec start, now;
	int fd, rc = EXIT_OK;

	/* Signals are blocked but while waiting in ppoll: none is lost
	 * between checking watch_stop and waiting. */
	sigemptyset(&block);
	sigaddset(&block, SIGINT);
	sigaddset(&block, SIGTERM);
	sigprocmask(SIG_BLOCK, &block, &unblocked);
	sigdelset(&unblocked, SIGINT);
	sigdelset(&unblocked, SIGTERM);
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	setvbuf(stdout, NULL, _IOLBF, 0);

	fd = cbctl_connect(ctl);
	if (fd < 0)
		return EXIT_UNREACHABLE;
	if (!cbctl_watch_send(ctl, fd)) {
		close(fd);
		return EXIT_UNREACHABLE;
	}
	clock_gettime(CLOCK_MONOTONIC, &start);
	while (!watch_stop) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		struct timespec wait = { 0 }, *timeout = NULL;
		char *nl;
		int r;

		/* Lines already read first (a long line is searched for its end
		 * only in what came since the last search: the first reply of a
		 * watch of every circuit comes in thousands of reads). */
		while (buf.len > scanned &&
		    (nl = memchr(buf.data + scanned, '\n', buf.len - scanned)) != NULL) {
			size_t line_len = (size_t)(nl - buf.data);

			*nl = '\0';
			if (line_len > 0 && buf.data[line_len - 1] == '\r')
				buf.data[line_len - 1] = '\0';
			if (!replied) {
				replied = true;
				if (!watch_reply(ctl, buf.data)) {
					rc = EXIT_REFUSED;
					goto done;
				}
			} else if (ctl->json) {
				puts(buf.data);
			} else {
				watch_event(buf.data);
			}
			memmove(buf.data, nl + 1, buf.len - line_len - 1);
			buf.len -= line_len + 1;
			scanned = 0;
		}
		scanned = buf.len;
		if (ferror(stdout)) {
			cbctl_errorf("watch: cannot write: %s", strerror(errno));
			rc = EXIT_REFUSED;
			goto done;
		}
		/* The reply is awaited for --timeout; events for ever. */
		if (!replied) {
			int64_t left;

			clock_gettime(CLOCK_MONOTONIC, &now);
			left = ctl->io_ms -
			    ((int64_t)(now.tv_sec - start.tv_sec) * 1000 +
				(now.tv_nsec - start.tv_nsec) / 1000000);
			if (left <= 0) {
				cbctl_errorf("cannot reach cbd at %s: no reply to watch within %d "
					     "ms",
				    cbc_conn_socket_path(ctl->conn), ctl->io_ms);
				rc = EXIT_UNREACHABLE;
				goto done;
			}
			wait.tv_sec = left / 1000;
			wait.tv_nsec = left % 1000 * 1000000;
			timeout = &wait;
		}
		r = ppoll(&pfd, 1, timeout, &unblocked);
		if (r < 0 && errno != EINTR) {
			cbctl_errorf("watch: poll: %s", strerror(errno));
			rc = EXIT_REFUSED;
			goto done;
		}
		if (r <= 0)
			continue;
		r = cbctl_watch_read(ctl, fd, &buf);
		if (r < 0) {
			rc = EXIT_UNREACHABLE;
			goto done;
		}
		if (r == 0) {
			cbctl_errorf("cbd at %s closed the connection (stopped, restarted, or "
				     "this watcher read too slowly)",
			    cbc_conn_socket_path(ctl->conn));
			rc = EXIT_UNREACHABLE;
			goto done;
		}
	}
done:
	close(fd);
	free(buf.data);
	return rc;
}
