/*
 * cbctl.c — the operator's command line for cbd: look at circuits (state,
 * hold, totals, effective policy), hold them open or closed, release or
 * force them, read the daemon's counters. Built on libcbclient.
 *
 * Exit codes: 0 success, 1 the daemon refused (message on stderr),
 * 2 usage error, 3 the daemon is unreachable (the message names the socket).
 */
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "config.h"

#include "cbclient.h"

enum {
	EXIT_OK = 0,
	EXIT_REFUSED = 1,
	EXIT_USAGE = 2,
	EXIT_UNREACHABLE = 3,
};

/* cbctl waits longer than a service would: an operator would rather wait
 * for a large `list` than see a timeout. Both are flags. */
#define CBCTL_CONNECT_TIMEOUT_MS 1000
#define CBCTL_IO_TIMEOUT_MS 10000
#define CBCTL_TIMEOUT_MAX_MS 3600000
/* Retry times below this show as seconds ("retry in 59.9s"), longer ones
 * as minutes or hours ("retry in 9m58s"). */
#define CBCTL_RETRY_SECONDS_MAX_MS 120000
/* Longest --for: the protocol's ttl_ms bound, 2^53 ms. */
#define CBCTL_DURATION_MAX_MS (INT64_C(1) << 53)

typedef struct cbctl {
	cbc_conn *conn;
	bool json;
	bool color;
	int argc;
	char **argv;
} cbctl;

typedef int (*command_fn)(cbctl *ctl);

/* A command: one row each; generic argument checks run before its handler. */
typedef struct command {
	const char *name;
	const char *args; /* for usage lines */
	int nargs; /* positional arguments required */
	bool own_options; /* the handler parses its arguments (and checks nargs) */
	command_fn run;
	const char *summary;
} command;

static int cmd_ping(cbctl *ctl);
static int cmd_stats(cbctl *ctl);
static int cmd_list(cbctl *ctl);
static int cmd_get(cbctl *ctl);
static int cmd_open(cbctl *ctl);
static int cmd_close(cbctl *ctl);
static int cmd_half_open(cbctl *ctl);
static int cmd_release(cbctl *ctl);
static int cmd_delete(cbctl *ctl);

#define HOLD_ARGS "NAME [--for DURATION] [--reason TEXT] [--no-hold]"

static const command commands[] = {
	{ "ping", "", 0, false, cmd_ping, "check that cbd answers; print its version" },
	{ "stats", "", 0, false, cmd_stats, "print the daemon's counters" },
	{ "list", "[--state open|half_open|closed]", 0, true, cmd_list,
	    "list circuits (and their holds), optionally only those in one state" },
	{ "get", "NAME", 1, false, cmd_get,
	    "show one circuit: state, hold, totals, policy and each key's source" },
	{ "open", HOLD_ARGS, 1, true, cmd_open,
	    "hold a circuit open until released or for DURATION (admin)" },
	{ "close", HOLD_ARGS, 1, true, cmd_close,
	    "hold a circuit closed until released or for DURATION (admin)" },
	{ "release", "NAME", 1, false, cmd_release,
	    "end a hold: open goes half_open, closed stays closed (admin)" },
	{ "half-open", "NAME", 1, false, cmd_half_open,
	    "force a circuit half-open, no hold (admin)" },
	{ "delete", "NAME", 1, false, cmd_delete, "drop a circuit and its slots (admin)" },
};

#define COMMAND_COUNT (sizeof commands / sizeof commands[0])

static void
usage(FILE *out)
{
	fprintf(out,
	    "usage: cbctl [-s SOCKET] [--json] [--timeout MS] COMMAND [ARGS]\n"
	    "\n"
	    "Talk to cbd, the circuit-breaker sidecar daemon.\n"
	    "\n"
	    "commands:\n");
	for (size_t i = 0; i < COMMAND_COUNT; i++)
		fprintf(out, "  %s%s%s\n      %s\n", commands[i].name,
		    commands[i].args[0] != '\0' ? " " : "", commands[i].args, commands[i].summary);
	fprintf(out,
	    "\n"
	    "open and close hold the state: no failure or success moves it until\n"
	    "the hold ends (--for DURATION: ms, or a number with ms, s, m or h,\n"
	    "such as 90s, 10m, 2h) or `cbctl release NAME`. --reason TEXT (up to\n"
	    "256 bytes) is logged and shown with the hold. --no-hold forces the\n"
	    "state once (protocol 1's force: the circuit's rules go on).\n"
	    "\n"
	    "options:\n"
	    "  -s, --socket PATH  cbd's socket (default: $CBD_SOCKET, else %s)\n"
	    "  -j, --json         print the daemon's reply as JSON, for scripts\n"
	    "  -t, --timeout MS   how long to wait for a reply (default %d)\n"
	    "  -h, --help         this help; COMMAND --help for one command\n"
	    "  -V, --version      print cbctl's version\n"
	    "\n"
	    "exit status: 0 success, 1 the daemon refused, 2 usage error,\n"
	    "3 the daemon could not be reached.\n",
	    CBC_DEFAULT_SOCKET, CBCTL_IO_TIMEOUT_MS);
}

static void
command_usage(const command *cmd, FILE *out)
{
	fprintf(out, "usage: cbctl [-s SOCKET] [--json] %s %s\n  %s\n", cmd->name, cmd->args,
	    cmd->summary);
}

static void
errorf(const char *fmt, ...)
{
	va_list ap;

	fputs("cbctl: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

/* Print the last reply as it came (--json). */
static int
print_reply(cbctl *ctl)
{
	char *reply = cbc_conn_last_reply(ctl->conn);

	if (reply == NULL) {
		errorf("out of memory");
		return EXIT_REFUSED;
	}
	puts(reply);
	cbc_free(reply);
	return EXIT_OK;
}

/* Report a failed call and map it to an exit code. */
static int
fail_status(cbctl *ctl, cbc_status status, const cbc_error *err)
{
	switch (status) {
	case CBC_OK:
		return EXIT_OK;
	case CBC_EINVAL:
		errorf("%s", err->message);
		return EXIT_USAGE;
	case CBC_ECONNECT:
	case CBC_ETIMEOUT:
	case CBC_EIO:
		errorf("cannot reach cbd at %s: %s", cbc_conn_socket_path(ctl->conn), err->message);
		return EXIT_UNREACHABLE;
	case CBC_EREFUSED:
	case CBC_ECAPACITY:
		/* Scripts get the daemon's reply on stdout as well. */
		if (ctl->json)
			print_reply(ctl);
		errorf("%s: %s", err->code[0] != '\0' ? err->code : "refused", err->message);
		return EXIT_REFUSED;
	default:
		errorf("%s", err->message[0] != '\0' ? err->message : cbc_strerror(status));
		return EXIT_REFUSED;
	}
}

static const char *
state_color(const cbctl *ctl, cbc_state state)
{
	if (!ctl->color)
		return "";
	switch (state) {
	case CBC_STATE_OPEN:
		return "\033[31m";
	case CBC_STATE_HALF_OPEN:
		return "\033[33m";
	case CBC_STATE_CLOSED:
		return "\033[32m";
	}
	return "";
}

/* A time in ms since the epoch as local time, "-" for null. */
static void
format_time(int64_t ms, char *buf, size_t size)
{
	time_t secs;
	struct tm tm;

	if (ms == CBC_TIME_NONE) {
		snprintf(buf, size, "-");
		return;
	}
	secs = (time_t)(ms / 1000);
	if (localtime_r(&secs, &tm) == NULL || strftime(buf, size, "%Y-%m-%d %H:%M:%S", &tm) == 0)
		snprintf(buf, size, "%lld", (long long)ms);
}

/* A duration as "2h05m", "9m58s" or "42s" (rounded down to seconds). */
static void
format_span(int64_t ms, char *buf, size_t size)
{
	int64_t secs = ms > 0 ? ms / 1000 : 0;

	if (secs >= 3600)
		snprintf(buf, size, "%lldh%02lldm", (long long)(secs / 3600),
		    (long long)(secs % 3600 / 60));
	else if (secs >= 60)
		snprintf(buf, size, "%lldm%02llds", (long long)(secs / 60), (long long)(secs % 60));
	else
		snprintf(buf, size, "%llds", (long long)secs);
}

/* The realtime clock in ms (for "in 9m58s"). */
static int64_t
now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Replace control characters in text (a reason someone typed) so that
 * printing it cannot move the terminal's cursor or change its colours. */
static void
sanitize(char *text)
{
	for (unsigned char *p = (unsigned char *)text; *p != '\0'; p++)
		if (*p < 0x20 || *p == 0x7f)
			*p = '?';
}

/* "held open by alice (uid 1000) until 2026-11-30 10:00:00 (in 9m58s):
 * deploy"; "until released" for a hold without ttl. */
static void
format_hold(const cbc_hold_info *h, char *buf, size_t size)
{
	char who[CBC_USER_SIZE + 32], until[96], when[32], left[32];

	if (h->by_user[0] != '\0')
		snprintf(who, sizeof who, "%s (uid %lld)", h->by_user, (long long)h->by_uid);
	else
		snprintf(who, sizeof who, "uid %lld", (long long)h->by_uid);
	if (h->until == CBC_TIME_NONE) {
		snprintf(until, sizeof until, "until released");
	} else {
		format_time(h->until, when, sizeof when);
		format_span(h->until - now_ms(), left, sizeof left);
		snprintf(until, sizeof until, "until %s (in %s)", when, left);
	}
	snprintf(buf, size, "held %s by %s %s%s%s", cbc_state_name(h->state), who, until,
	    h->has_reason ? ": " : "", h->has_reason ? h->reason : "");
	sanitize(buf);
}

/* "retry in 12.4s" while open ("held" while held open until released),
 * else "-". */
static void
format_retry(const cbc_snapshot *s, char *buf, size_t size)
{
	if (s->state != CBC_STATE_OPEN)
		snprintf(buf, size, "-");
	else if (s->hold.held && s->hold.until == CBC_TIME_NONE)
		snprintf(buf, size, "held");
	else if (s->retry_after_ms <= 0)
		snprintf(buf, size, "retry now");
	else if (s->retry_after_ms < CBCTL_RETRY_SECONDS_MAX_MS)
		snprintf(buf, size, "retry in %.1fs", (double)s->retry_after_ms / 1000.0);
	else {
		char span[32];

		format_span(s->retry_after_ms, span, sizeof span);
		snprintf(buf, size, "retry in %s", span);
	}
}

/* The circuits as an aligned table; the name column fits the longest. A
 * held circuit's row is followed by an indented line saying who holds it,
 * until when and why. */
static void
print_table(const cbctl *ctl, const cbc_snapshot *snaps, size_t count)
{
	int width = 4;
	char opened[32], retry[48], hold[CBC_REASON_MAX + 256];

	for (size_t i = 0; i < count; i++) {
		int len = (int)strlen(snaps[i].name);

		if (len > width)
			width = len;
	}
	printf("%-*s  %-9s  %8s  %9s  %-19s  %s\n", width, "NAME", "STATE", "FAILURES", "SUCCESSES",
	    "OPENED AT", "RETRY");
	for (size_t i = 0; i < count; i++) {
		const cbc_snapshot *s = &snaps[i];

		format_time(s->opened_at, opened, sizeof opened);
		format_retry(s, retry, sizeof retry);
		printf("%-*s  %s%-9s%s  %8lld  %9lld  %-19s  %s\n", width, s->name,
		    state_color(ctl, s->state), cbc_state_name(s->state),
		    ctl->color ? "\033[0m" : "", (long long)s->failure_count,
		    (long long)s->success_count, opened, retry);
		if (s->hold.held) {
			format_hold(&s->hold, hold, sizeof hold);
			printf("  %s\n", hold);
		}
	}
}

/* get's detail under the table: totals, then the effective policy with
 * each key's source, read from the reply's JSON so that keys a later cbd
 * adds show too. Nothing for a protocol 1 cbd. */
static void
print_detail(cbctl *ctl, const cbc_snapshot *s)
{
	char *reply = cbc_conn_last_reply(ctl->conn);
	json_t *obj = reply != NULL ? json_loads(reply, 0, NULL) : NULL;
	const json_t *policy = json_object_get(json_object_get(obj, "snapshot"), "policy");
	const json_t *sources = json_object_get(policy, "source");
	const char *key;
	json_t *value;

	cbc_free(reply);
	if (s->totals.successes >= 0)
		printf("totals: %lld successes, %lld failures, %lld ignored, %lld slow, "
		       "%lld rejected\n",
		    (long long)s->totals.successes, (long long)s->totals.failures,
		    (long long)s->totals.ignored, (long long)s->totals.slow,
		    (long long)s->totals.rejected);
	if (json_is_object(policy)) {
		printf("policy:\n");
		json_object_foreach ((json_t *)policy, key, value) {
			const char *source = json_string_value(json_object_get(sources, key));
			char *text;

			if (strcmp(key, "source") == 0)
				continue;
			text = json_is_null(value)
			    ? NULL
			    : json_dumps(value, JSON_ENCODE_ANY | JSON_COMPACT);
			printf("  %-20s %-12s %s\n", key, text != NULL ? text : "-",
			    source != NULL ? source : "-");
			free(text);
		}
	}
	json_decref(obj);
}

static int
cmd_ping(cbctl *ctl)
{
	cbc_hello_info hello;
	cbc_error err;
	struct timespec t0, t1;
	cbc_status status;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	status = cbc_hello(ctl->conn, &hello, &err);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	if (status != CBC_OK)
		return fail_status(ctl, status, &err);
	if (ctl->json)
		return print_reply(ctl);
	printf("%s %s (protocol %lld) at %s: %.2f ms\n", hello.server, hello.version,
	    (long long)hello.protocol, cbc_conn_socket_path(ctl->conn),
	    (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6);
	return EXIT_OK;
}

/* Print one member of the stats reply, nested objects as dotted keys. */
static void
print_stats_member(const char *prefix, json_t *value)
{
	const char *key;
	json_t *member;
	char path[256];

	if (json_is_object(value)) {
		json_object_foreach (value, key, member) {
			snprintf(path, sizeof path, "%s%s%s", prefix, prefix[0] ? "." : "", key);
			print_stats_member(path, member);
		}
		return;
	}
	char *text = json_dumps(value, JSON_ENCODE_ANY | JSON_COMPACT);

	printf("%-40s %s\n", prefix, text != NULL ? text : "?");
	free(text);
}

static int
cmd_stats(cbctl *ctl)
{
	cbc_stats stats;
	cbc_error err;
	cbc_status status = cbc_stats_get(ctl->conn, &stats, &err);
	char *reply;
	json_t *obj;

	if (status != CBC_OK)
		return fail_status(ctl, status, &err);
	if (ctl->json)
		return print_reply(ctl);
	reply = cbc_conn_last_reply(ctl->conn);
	obj = reply != NULL ? json_loads(reply, 0, NULL) : NULL;
	cbc_free(reply);
	if (obj == NULL) {
		errorf("could not read the stats reply");
		return EXIT_REFUSED;
	}
	json_object_del(obj, "ok");
	json_object_del(obj, "id");
	print_stats_member("", obj);
	json_decref(obj);
	return EXIT_OK;
}

/* list's own option: --state S. */
static int
cmd_list(cbctl *ctl)
{
	cbc_state filter;
	bool filtered = false;
	cbc_snapshot *snaps = NULL;
	size_t count = 0;
	cbc_error err;
	cbc_status status;

	for (int i = 0; i < ctl->argc; i++) {
		const char *arg = ctl->argv[i];
		const char *value = NULL;

		if (strncmp(arg, "--state=", 8) == 0)
			value = arg + 8;
		else if (strcmp(arg, "--state") == 0 && i + 1 < ctl->argc)
			value = ctl->argv[++i];
		if (value == NULL || !cbc_state_parse(value, &filter)) {
			errorf("list: --state takes open, half_open or closed (got \"%s\")",
			    value != NULL ? value : arg);
			return EXIT_USAGE;
		}
		filtered = true;
	}
	status = cbc_list(ctl->conn, filtered ? &filter : NULL, &snaps, &count, &err);
	if (status != CBC_OK)
		return fail_status(ctl, status, &err);
	if (ctl->json) {
		cbc_free(snaps);
		return print_reply(ctl);
	}
	if (count == 0)
		printf("no circuits%s%s\n", filtered ? " in state " : "",
		    filtered ? cbc_state_name(filter) : "");
	else
		print_table(ctl, snaps, count);
	cbc_free(snaps);
	return EXIT_OK;
}

static int
cmd_get(cbctl *ctl)
{
	cbc_snapshot snap;
	cbc_error err;
	cbc_status status = cbc_get(ctl->conn, ctl->argv[0], NULL, &snap, &err);

	if (status != CBC_OK)
		return fail_status(ctl, status, &err);
	if (ctl->json)
		return print_reply(ctl);
	print_table(ctl, &snap, 1);
	print_detail(ctl, &snap);
	return EXIT_OK;
}

/* Parse a duration: ms as a plain integer, or an integer with a unit (ms,
 * s, m, h). False when it is not one, or not in 1..CBCTL_DURATION_MAX_MS. */
static bool
parse_duration(const char *text, int64_t *out)
{
	static const struct {
		const char *unit;
		int64_t ms;
	} units[] = { { "", 1 }, { "ms", 1 }, { "s", 1000 }, { "m", 60000 }, { "h", 3600000 } };
	char *end;
	long long n;

	if (text[0] < '0' || text[0] > '9')
		return false;
	errno = 0;
	n = strtoll(text, &end, 10);
	if (errno != 0)
		return false;
	for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
		if (strcmp(end, units[i].unit) != 0)
			continue;
		if (n < 1 || n > CBCTL_DURATION_MAX_MS / units[i].ms)
			return false;
		*out = n * units[i].ms;
		return true;
	}
	return false;
}

/* The arguments of open and close. */
typedef struct hold_args {
	const char *name;
	bool no_hold;
	int64_t for_ms; /* 0: until released */
	const char *reason; /* NULL: none */
} hold_args;

/* An option's value: "--opt=V" or "--opt V" (advancing *i); NULL when
 * arg is not that option. *missing is set when the value is missing. */
static const char *
option_value(cbctl *ctl, int *i, const char *opt, bool *missing)
{
	const char *arg = ctl->argv[*i];
	size_t len = strlen(opt);

	if (strncmp(arg, opt, len) != 0)
		return NULL;
	if (arg[len] == '=')
		return arg + len + 1;
	if (arg[len] != '\0')
		return NULL;
	if (*i + 1 >= ctl->argc) {
		*missing = true;
		return NULL;
	}
	return ctl->argv[++*i];
}

/* Parse `NAME [--for DURATION] [--reason TEXT] [--no-hold]`; false after
 * printing a usage error naming the option at fault. */
static bool
parse_hold_args(cbctl *ctl, const char *cmd, hold_args *out)
{
	bool has_for = false, missing = false, options = true;

	memset(out, 0, sizeof *out);
	for (int i = 0; i < ctl->argc; i++) {
		const char *arg = ctl->argv[i];
		const char *v;

		if (!options || arg[0] != '-') {
			if (out->name != NULL) {
				errorf("%s: one circuit name only (got \"%s\" and \"%s\")", cmd,
				    out->name, arg);
				return false;
			}
			out->name = arg;
		} else if (strcmp(arg, "--") == 0) {
			options = false; /* a name may start with '-' */
		} else if ((v = option_value(ctl, &i, "--for", &missing)) != NULL) {
			if (!parse_duration(v, &out->for_ms)) {
				errorf("%s: --for takes a duration: milliseconds, or a number with "
				       "ms, s, m or h such as 90s, 10m, 2h (got \"%s\")",
				    cmd, v);
				return false;
			}
			has_for = true;
		} else if ((v = option_value(ctl, &i, "--reason", &missing)) != NULL) {
			if (strlen(v) > CBC_REASON_MAX) {
				errorf("%s: --reason takes at most %d bytes (got %zu)", cmd,
				    CBC_REASON_MAX, strlen(v));
				return false;
			}
			out->reason = v;
		} else if (missing) {
			errorf("%s: %s needs a value", cmd, arg);
			return false;
		} else if (strcmp(arg, "--no-hold") == 0) {
			out->no_hold = true;
		} else {
			errorf("%s: unknown option \"%s\" (cbctl %s --help)", cmd, arg, cmd);
			return false;
		}
	}
	if (out->name == NULL) {
		errorf("%s: the circuit's NAME is required", cmd);
		return false;
	}
	if (out->no_hold && (has_for || out->reason != NULL)) {
		errorf("%s: --no-hold forces without a hold: --for and --reason need one", cmd);
		return false;
	}
	return true;
}

/* Show the snapshot a forcing command returned (or cbd's reply). */
static int
show_snapshot(cbctl *ctl, const cbc_snapshot *snap)
{
	if (ctl->json)
		return print_reply(ctl);
	print_table(ctl, snap, 1);
	return EXIT_OK;
}

/* open / close: hold (or with --no-hold force) the state. */
static int
hold_state(cbctl *ctl, const char *cmd, cbc_state state)
{
	cbc_snapshot snap;
	hold_args args;
	cbc_error err;
	cbc_status status;

	if (!parse_hold_args(ctl, cmd, &args))
		return EXIT_USAGE;
	if (args.no_hold)
		status = cbc_set_state(ctl->conn, args.name, state, NULL, &snap, &err);
	else
		status =
		    cbc_hold(ctl->conn, args.name, state, args.for_ms, args.reason, &snap, &err);
	if (status != CBC_OK)
		return fail_status(ctl, status, &err);
	return show_snapshot(ctl, &snap);
}

static int
cmd_open(cbctl *ctl)
{
	return hold_state(ctl, "open", CBC_STATE_OPEN);
}

static int
cmd_close(cbctl *ctl)
{
	return hold_state(ctl, "close", CBC_STATE_CLOSED);
}

/* half-open cannot be held: a plain force. */
static int
cmd_half_open(cbctl *ctl)
{
	cbc_snapshot snap;
	cbc_error err;
	cbc_status status =
	    cbc_set_state(ctl->conn, ctl->argv[0], CBC_STATE_HALF_OPEN, NULL, &snap, &err);

	if (status != CBC_OK)
		return fail_status(ctl, status, &err);
	return show_snapshot(ctl, &snap);
}

static int
cmd_release(cbctl *ctl)
{
	cbc_snapshot snap;
	bool released = false;
	cbc_error err;
	cbc_status status = cbc_release(ctl->conn, ctl->argv[0], &released, &snap, &err);

	if (status != CBC_OK)
		return fail_status(ctl, status, &err);
	if (ctl->json)
		return print_reply(ctl);
	if (released)
		printf("released %s: now %s\n", ctl->argv[0], cbc_state_name(snap.state));
	else
		printf("%s was not held\n", ctl->argv[0]);
	print_table(ctl, &snap, 1);
	return EXIT_OK;
}

static int
cmd_delete(cbctl *ctl)
{
	bool existed = false;
	cbc_error err;
	cbc_status status = cbc_delete(ctl->conn, ctl->argv[0], &existed, &err);

	if (status != CBC_OK)
		return fail_status(ctl, status, &err);
	if (ctl->json)
		return print_reply(ctl);
	printf(existed ? "deleted %s\n" : "%s did not exist\n", ctl->argv[0]);
	return EXIT_OK;
}

static const command *
command_find(const char *name)
{
	for (size_t i = 0; i < COMMAND_COUNT; i++)
		if (strcmp(commands[i].name, name) == 0)
			return &commands[i];
	return NULL;
}

/* Colour only for a terminal, never with NO_COLOR (no-color.org). */
static bool
want_color(void)
{
	const char *no_color = getenv("NO_COLOR");
	const char *term = getenv("TERM");

	if (no_color != NULL && no_color[0] != '\0')
		return false;
	if (term != NULL && strcmp(term, "dumb") == 0)
		return false;
	return isatty(STDOUT_FILENO);
}

int
main(int argc, char **argv)
{
	static const struct option options[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "json", no_argument, NULL, 'j' },
		{ "timeout", required_argument, NULL, 't' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	const char *socket_path = NULL;
	long io_ms = CBCTL_IO_TIMEOUT_MS;
	cbctl ctl = { 0 };
	const command *cmd;
	cbc_error err;
	char *end;
	int opt, rc;

	/* '+': options stop at the command, so its own flags reach it. */
	while ((opt = getopt_long(argc, argv, "+s:jt:hV", options, NULL)) != -1) {
		switch (opt) {
		case 's':
			socket_path = optarg;
			break;
		case 'j':
			ctl.json = true;
			break;
		case 't':
			errno = 0;
			io_ms = strtol(optarg, &end, 10);
			if (errno != 0 || *end != '\0' || io_ms < 1 ||
			    io_ms > CBCTL_TIMEOUT_MAX_MS) {
				errorf("--timeout takes milliseconds from 1 to %d (got \"%s\")",
				    CBCTL_TIMEOUT_MAX_MS, optarg);
				return EXIT_USAGE;
			}
			break;
		case 'h':
			usage(stdout);
			return EXIT_OK;
		case 'V':
			printf("cbctl %s\n", PACKAGE_VERSION);
			return EXIT_OK;
		default:
			usage(stderr);
			return EXIT_USAGE;
		}
	}
	if (optind >= argc) {
		usage(stderr);
		return EXIT_USAGE;
	}
	cmd = command_find(argv[optind]);
	if (cmd == NULL) {
		errorf("unknown command \"%s\" (cbctl --help lists them)", argv[optind]);
		return EXIT_USAGE;
	}
	ctl.argc = argc - optind - 1;
	ctl.argv = argv + optind + 1;
	for (int i = 0; i < ctl.argc; i++) {
		if (strcmp(ctl.argv[i], "--help") == 0 || strcmp(ctl.argv[i], "-h") == 0) {
			command_usage(cmd, stdout);
			return EXIT_OK;
		}
	}
	/* Generic argument check: commands take exactly their positional
	 * arguments, unless they parse their own options. */
	if (!cmd->own_options && ctl.argc != cmd->nargs) {
		command_usage(cmd, stderr);
		return EXIT_USAGE;
	}
	ctl.color = !ctl.json && want_color();
	ctl.conn = cbc_conn_new(socket_path, &err);
	if (ctl.conn == NULL) {
		errorf("%s", err.message);
		return EXIT_USAGE;
	}
	if (cbc_conn_set_timeouts(ctl.conn, CBCTL_CONNECT_TIMEOUT_MS, (int)io_ms, &err) != CBC_OK ||
	    cbc_conn_set_client_name(ctl.conn, "cbctl", &err) != CBC_OK) {
		errorf("%s", err.message);
		cbc_conn_free(ctl.conn);
		return EXIT_USAGE;
	}
	rc = cmd->run(&ctl);
	cbc_conn_free(ctl.conn);
	return rc;
}
