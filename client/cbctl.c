/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cbctl.c — the operator's command line for cbd: the command table, the
 * argument parser (global and command options anywhere), and the commands
 * that show circuits (list, get, policy), hold or force them, and print
 * the daemon's metrics. stats, watch and reload live in cbctl-*.c. Built
 * on libcbclient.
 *
 * Exit codes: 0 success, 1 the daemon refused (message on stderr),
 * 2 usage error, 3 the daemon is unreachable (the message names the socket).
 */
#include <errno.h>
#include <grp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "config.h"

#include "cbclient.h"
#include "cbctl.h"

/* cbctl waits longer than a service would: an operator would rather wait
 * for a large `list` than see a timeout (--timeout; the connect timeout is
 * CBCTL_CONNECT_TIMEOUT_MS in cbctl.h). */
#define CBCTL_IO_TIMEOUT_MS 10000
#define CBCTL_TIMEOUT_MAX_MS 3600000
/* Retry times below this show as seconds ("retry in 59.9s"), longer ones
 * as minutes or hours ("retry in 9m58s"). */
#define CBCTL_RETRY_SECONDS_MAX_MS 120000
/* Longest --for: the protocol's ttl_ms bound, 2^53 ms. */
#define CBCTL_DURATION_MAX_MS (INT64_C(1) << 53)

typedef int (*command_fn)(cbctl *ctl);

/* A command: one row each. The parser checks its options (a space-separated
 * list; "=" marks one taking a value) and its count of positional
 * arguments before the handler runs. */
typedef struct command {
	const char *name;
	const char *alias; /* another spelling, or NULL */
	const char *args; /* for usage lines */
	int min_args, max_args; /* positional arguments */
	const char *options;
	command_fn run;
	const char *summary;
} command;

static int cmd_ping(cbctl *ctl);
static int cmd_list(cbctl *ctl);
static int cmd_get(cbctl *ctl);
static int cmd_policy(cbctl *ctl);
static int cmd_open(cbctl *ctl);
static int cmd_close(cbctl *ctl);
static int cmd_half_open(cbctl *ctl);
static int cmd_release(cbctl *ctl);
static int cmd_delete(cbctl *ctl);
static int cmd_metrics(cbctl *ctl);

#define HOLD_ARGS "NAME [--for DURATION] [--reason TEXT] [--no-hold]"
#define HOLD_OPTIONS "--for= --reason= --no-hold"

static const command commands[] = {
	{ "ping", NULL, "", 0, 0, "", cmd_ping, "check that cbd answers; print its version" },
	{ "list", NULL, "[--state STATE] [--sort name|state] [--names]", 0, 0,
	    "--state= --sort= --names", cmd_list,
	    "list circuits and holds, by name (--sort state: open first)" },
	{ "get", NULL, "NAME", 1, 1, "", cmd_get,
	    "show one circuit: state, hold, totals, policy and sources" },
	{ "policy", NULL, "NAME", 1, 1, "", cmd_policy,
	    "the effective policy: each key, its value and its source" },
	{ "watch", NULL, "[NAME...]", 0, CBCTL_ARGS_MAX, "", cbctl_cmd_watch,
	    "print state changes as they happen (no NAME: all circuits)" },
	{ "top", NULL, "[--interval DURATION] [--filter TEXT] [--once]", 0, 0,
	    "--interval= --filter= --once", cbctl_cmd_top,
	    "live table of circuits, open and held first (q quits, / filters)" },
	{ "stats", NULL, "[--all]", 0, 0, "--all", cbctl_cmd_stats,
	    "the daemon's counters, grouped (--all: zeros too)" },
	{ "metrics", NULL, "", 0, 0, "", cmd_metrics,
	    "print the Prometheus metrics text (for a textfile collector)" },
	{ "open", NULL, HOLD_ARGS, 1, 1, HOLD_OPTIONS, cmd_open,
	    "hold a circuit open until released or for DURATION (admin)" },
	{ "close", NULL, HOLD_ARGS, 1, 1, HOLD_OPTIONS, cmd_close,
	    "hold a circuit closed until released or for DURATION (admin)" },
	{ "release", NULL, "NAME", 1, 1, "", cmd_release,
	    "end a hold: open goes half_open, closed stays closed (admin)" },
	{ "half-open", "half_open", "NAME", 1, 1, "", cmd_half_open,
	    "force a circuit half-open, no hold (admin)" },
	{ "delete", NULL, "NAME", 1, 1, "", cmd_delete, "drop a circuit and its slots (admin)" },
	{ "reload", NULL, "", 0, 0, "", cbctl_cmd_reload,
	    "make cbd re-read its config file (SIGHUP; root or cbd's user)" },
};

#define COMMAND_COUNT (sizeof commands / sizeof commands[0])

static void
usage(FILE *out)
{
	fprintf(out,
	    "usage: cbctl [OPTIONS] COMMAND [ARGS] [OPTIONS]\n"
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
	    "STATE is open, half_open (or half-open) or closed.\n"
	    "\n"
	    "options (before or after the command):\n"
	    "  -s, --socket PATH  cbd's socket (default: $CBD_SOCKET, else\n"
	    "                     %s)\n"
	    "  -j, --json         print the daemon's reply as JSON, for scripts\n"
	    "  -t, --timeout MS   how long to wait for a reply (default %d)\n"
	    "  -h, --help         this help; COMMAND --help for one command\n"
	    "  -V, --version      print cbctl's version\n"
	    "  --                 what follows is not an option (a NAME may\n"
	    "                     start with -)\n"
	    "\n"
	    "exit status: 0 success, 1 the daemon refused, 2 usage error,\n"
	    "3 the daemon could not be reached.\n",
	    CBC_DEFAULT_SOCKET, CBCTL_IO_TIMEOUT_MS);
}

static void
command_usage(const command *cmd, FILE *out)
{
	fprintf(out, "usage: cbctl [OPTIONS] %s%s%s\n  %s\n", cmd->name,
	    cmd->args[0] != '\0' ? " " : "", cmd->args, cmd->summary);
}

void
cbctl_errorf(const char *fmt, ...)
{
	va_list ap;

	fputs("cbctl: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

#define errorf cbctl_errorf

const char *
cbctl_option_get(const cbctl *ctl, const char *name, bool *given)
{
	const char *value = NULL;
	bool found = false;

	for (int i = 0; i < ctl->optc; i++) {
		if (strcmp(ctl->opts[i].name, name) == 0) {
			found = true;
			value = ctl->opts[i].value;
		}
	}
	if (given != NULL)
		*given = found;
	return value;
}

json_t *
cbctl_last_reply(cbctl *ctl)
{
	char *reply = cbc_conn_last_reply(ctl->conn);
	json_t *obj = reply != NULL ? json_loads(reply, 0, NULL) : NULL;

	cbc_free(reply);
	return obj;
}

void
cbctl_permission_hint(const char *path)
{
	struct stat st;
	struct group *gr;
	char gid[32];

	/* The group that may connect is the socket's own (socket_group). */
	if (stat(path, &st) != 0) {
		errorf("hint: a directory on the way to %s is closed to you (%s): ask for access "
		       "to it, or use sudo",
		    path, strerror(errno));
		return;
	}
	gr = getgrgid(st.st_gid);
	snprintf(gid, sizeof gid, "%ld", (long)st.st_gid);
	errorf("hint: the socket is for its owner and the members of group %s (mode %04o): join "
	       "it (usermod -aG %s USER, then log in again) or use sudo",
	    gr != NULL ? gr->gr_name : gid, (unsigned)(st.st_mode & 07777),
	    gr != NULL ? gr->gr_name : gid);
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

int
cbctl_fail_status(cbctl *ctl, cbc_status status, const cbc_error *err)
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
		/* libcbclient's message ends with strerror(errno). */
		if (status == CBC_ECONNECT && strstr(err->message, strerror(EACCES)) != NULL)
			cbctl_permission_hint(cbc_conn_socket_path(ctl->conn));
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

#define fail_status cbctl_fail_status

/* A state as the user typed it: half-open and half_open both name it. */
static bool
parse_state(const char *text, cbc_state *out)
{
	if (strcmp(text, "half-open") == 0)
		text = "half_open";
	return cbc_state_parse(text, out);
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
void
cbctl_format_time(int64_t ms, char *buf, size_t size)
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

int64_t
cbctl_now_ms(void)
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
		cbctl_format_time(h->until, when, sizeof when);
		format_span(h->until - cbctl_now_ms(), left, sizeof left);
		snprintf(until, sizeof until, "until %s (in %s)", when, left);
	}
	snprintf(buf, size, "held %s by %s %s%s%s", cbc_state_name(h->state), who, until,
	    h->has_reason ? ": " : "", h->has_reason ? h->reason : "");
	sanitize(buf);
}

/* A snapshot's policy, one key a line: value ("unset" for null) and
 * where it came from. */
static void
policy_print(const json_t *policy, const char *indent)
{
	const json_t *sources = json_object_get(policy, "source"), *value;
	const char *key;

	json_object_foreach ((json_t *)policy, key, value) {
		const char *source = json_string_value(json_object_get(sources, key));
		char *text;

		if (strcmp(key, "source") == 0)
			continue;
		text =
		    json_is_null(value) ? NULL : json_dumps(value, JSON_ENCODE_ANY | JSON_COMPACT);
		printf("%s%-20s %-16s %s\n", indent, key, text != NULL ? text : "unset",
		    source != NULL ? source : "-");
		free(text);
	}
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

/* The IN FLIGHT column (protocol 3's bulkhead): the tickets out, with
 * the limit when the snapshot carries the policy; "-" for a circuit
 * without a limit. */
static void
format_in_flight(const cbc_snapshot *s, char *buf, size_t size)
{
	if (s->in_flight < 0)
		snprintf(buf, size, "-");
	else if (s->policy.known && s->policy.max_concurrent > 0)
		snprintf(buf, size, "%lld/%lld", (long long)s->in_flight,
		    (long long)s->policy.max_concurrent);
	else
		snprintf(buf, size, "%lld", (long long)s->in_flight);
}

/* A circuit's row after its name column (with the IN FLIGHT column when
 * in_flight_column), and for a held circuit an indented line saying who
 * holds it, until when and why; NULL when out of memory. */
static char *
format_row_rest(const cbctl *ctl, const cbc_snapshot *s, bool in_flight_column)
{
	char opened[32], retry[48], hold[CBC_REASON_MAX + 256], infl[48] = "";
	char *text = NULL;

	cbctl_format_time(s->opened_at, opened, sizeof opened);
	format_retry(s, retry, sizeof retry);
	if (in_flight_column) {
		char value[40];

		format_in_flight(s, value, sizeof value);
		snprintf(infl, sizeof infl, "%9s  ", value);
	}
	hold[0] = '\0';
	if (s->hold.held)
		format_hold(&s->hold, hold, sizeof hold);
	if (asprintf(&text, "%s%-9s%s  %8lld  %9lld  %s%-19s  %s\n%s%s%s",
		state_color(ctl, s->state), cbc_state_name(s->state), ctl->color ? "\033[0m" : "",
		(long long)s->failure_count, (long long)s->success_count, infl, opened, retry,
		s->hold.held ? "  " : "", hold, s->hold.held ? "\n" : "") < 0)
		return NULL;
	return text;
}

/* The circuits' rows, the name column `width` wide. */
static void
print_table_rows(const cbctl *ctl, const cbc_snapshot *snaps, size_t count, int width,
    bool in_flight_column)
{
	for (size_t i = 0; i < count; i++) {
		char *rest = format_row_rest(ctl, &snaps[i], in_flight_column);

		printf("%-*s  %s", width, snaps[i].name, rest != NULL ? rest : "(out of memory)\n");
		free(rest);
	}
}

/* The name column's width for these snapshots; its heading. */
static int
table_width(const cbc_snapshot *snaps, size_t count)
{
	int width = 4;

	for (size_t i = 0; i < count; i++) {
		int len = (int)strlen(snaps[i].name);

		if (len > width)
			width = len;
	}
	return width;
}

/* The heading; IN FLIGHT only when a circuit listed has a limit. */
static void
print_table_head(int width, bool in_flight_column)
{
	printf("%-*s  %-9s  %8s  %9s  %s%-19s  %s\n", width, "NAME", "STATE", "FAILURES",
	    "SUCCESSES", in_flight_column ? "IN FLIGHT  " : "", "OPENED AT", "RETRY");
}

/* The circuits as an aligned table; the name column fits the longest. */
static void
print_table(const cbctl *ctl, const cbc_snapshot *snaps, size_t count)
{
	int width = table_width(snaps, count);
	bool in_flight_column = false;

	for (size_t i = 0; i < count; i++)
		in_flight_column = in_flight_column || snaps[i].in_flight >= 0;
	print_table_head(width, in_flight_column);
	print_table_rows(ctl, snaps, count, width, in_flight_column);
}

/* A policy duration: "1.5s" under two minutes when not whole seconds, else
 * as format_span. */
static void
format_ms(int64_t ms, char *buf, size_t size)
{
	if (ms < CBCTL_RETRY_SECONDS_MAX_MS && ms % 1000 != 0)
		snprintf(buf, size, "%.1fs", (double)ms / 1000.0);
	else
		format_span(ms, buf, size);
}

/* A rate circuit's window (protocol 2): what it holds, the failure rate
 * and, with a slow rule, the slow-call rate, each beside the rate that
 * opens the circuit. */
static void
print_window(const cbc_snapshot *s)
{
	const cbc_policy *p = &s->policy;
	const cbc_window_counts *w = &s->window;
	char span[32];

	if (p->window == CBC_WINDOW_TIME) {
		format_ms(p->window_size, span, sizeof span);
		printf("window: %lld calls in the last %s", (long long)w->calls, span);
	} else if (p->window_size > 0) {
		printf("window: %lld of the last %lld calls", (long long)w->calls,
		    (long long)p->window_size);
	} else {
		printf("window: %lld calls", (long long)w->calls);
	}
	printf(" (%lld failures, %lld slow)\n", (long long)w->failures, (long long)w->slow);
	printf("failure rate: %.1f%%", w->failure_rate);
	if (p->failure_rate > 0)
		printf(" (opens at %lld%% once %lld calls)", (long long)p->failure_rate,
		    (long long)p->minimum_calls);
	printf("\n");
	if (p->slow_call_ms > 0) {
		format_ms(p->slow_call_ms, span, sizeof span);
		printf("slow rate: %.1f%% (calls of %s or more; opens at %lld%%)\n",
		    w->slow_call_rate, span, (long long)p->slow_call_rate);
	}
}

/* The break when break_backoff grew it, and the reporters when cbd counts
 * them (min_reporters > 1). */
static void
print_shared(const cbc_snapshot *s)
{
	const cbc_policy *p = &s->policy;
	char cur[32], base[32], max[32];

	if (s->current_break_ms > 0 && p->break_ms > 0 && s->current_break_ms > p->break_ms) {
		format_ms(s->current_break_ms, cur, sizeof cur);
		format_ms(p->break_ms, base, sizeof base);
		if (p->break_max_ms > 0)
			format_ms(p->break_max_ms, max, sizeof max);
		else
			snprintf(max, sizeof max, "-");
		printf("current break: %s (break_ms %s grown by break_backoff %lld, at most %s)\n",
		    cur, base, (long long)p->break_backoff, max);
	}
	if (s->reporters >= 0) {
		format_ms(p->reporter_window_ms, base, sizeof base);
		printf("reporters: %lld (%lld needed to open, within %s)\n",
		    (long long)s->reporters, (long long)p->min_reporters, base);
	}
}

/* Protocol 3's bulkhead and retry budget: the tickets out of the limit
 * and the calls it refused; the budget's keys and the retries granted
 * and refused (shown when there is a budget or a retry was counted). */
static void
print_limits(const cbc_snapshot *s)
{
	const cbc_policy *p = &s->policy;
	bool budget = p->known && p->source.retry_budget_percent != CBC_SOURCE_NONE &&
	    p->retry_budget_percent >= 0;

	if (s->in_flight >= 0 || (p->known && p->max_concurrent > 0)) {
		printf("bulkhead: %lld in flight",
		    (long long)(s->in_flight >= 0 ? s->in_flight : 0));
		if (p->known && p->max_concurrent > 0)
			printf(" of %lld (max_concurrent)", (long long)p->max_concurrent);
		if (s->totals.rejected_concurrency >= 0)
			printf(", %lld refused for want of a ticket",
			    (long long)s->totals.rejected_concurrency);
		printf("\n");
	}
	if (budget) {
		printf("retry budget: %lld%% of first attempts, at least %lld a second, over 10s",
		    (long long)p->retry_budget_percent,
		    (long long)(p->retry_min_per_s >= 0 ? p->retry_min_per_s : 0));
		if (s->totals.retries >= 0)
			printf(" (%lld retries granted, %lld refused)",
			    (long long)s->totals.retries,
			    (long long)(s->totals.rejected_retry >= 0 ? s->totals.rejected_retry
								      : 0));
		printf("\n");
	} else if (s->totals.retries > 0 || s->totals.rejected_retry > 0) {
		printf("retries: %lld granted, no retry budget\n", (long long)s->totals.retries);
	}
}

/* get's detail under the table: totals, a rate circuit's window, a grown
 * break and the reporters, then the effective policy with each key's
 * source, read from the reply's JSON so that keys a later cbd adds show
 * too. Nothing for a protocol 1 cbd. */
static void
print_detail(cbctl *ctl, const cbc_snapshot *s)
{
	char *reply = cbc_conn_last_reply(ctl->conn);
	json_t *obj = reply != NULL ? json_loads(reply, 0, NULL) : NULL;
	const json_t *policy = json_object_get(json_object_get(obj, "snapshot"), "policy");

	cbc_free(reply);
	if (s->totals.successes >= 0)
		printf("totals: %lld successes, %lld failures, %lld ignored, %lld slow, "
		       "%lld rejected\n",
		    (long long)s->totals.successes, (long long)s->totals.failures,
		    (long long)s->totals.ignored, (long long)s->totals.slow,
		    (long long)s->totals.rejected);
	print_limits(s);
	if (s->window.known)
		print_window(s);
	print_shared(s);
	if (json_is_object(policy)) {
		printf("policy:\n");
		policy_print(policy, "  ");
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

/* One row of list: the circuit's name and state (the sort keys) and the
 * rest of its row (NULL for --names). */
typedef struct list_row {
	char *name;
	cbc_state state;
	char *rest;
	char *rest_in_flight; /* rest with the IN FLIGHT column */
	bool limited; /* the circuit has max_concurrent (in_flight reported) */
} list_row;

/* Order of --sort state: open first, then half_open, then closed. */
static int
state_rank(cbc_state state)
{
	return state == CBC_STATE_OPEN ? 0 : state == CBC_STATE_HALF_OPEN ? 1 : 2;
}

static int
row_by_name(const void *a, const void *b)
{
	return strcmp(((const list_row *)a)->name, ((const list_row *)b)->name);
}

static int
row_by_state(const void *a, const void *b)
{
	int d = state_rank(((const list_row *)a)->state) - state_rank(((const list_row *)b)->state);

	return d != 0 ? d : row_by_name(a, b);
}

static void
rows_free(list_row *rows, size_t count)
{
	for (size_t i = 0; i < count; i++) {
		free(rows[i].name);
		free(rows[i].rest);
		free(rows[i].rest_in_flight);
	}
	free(rows);
}

/* Append a page's snapshots to *rows (rest rendered unless names only);
 * false when out of memory. */
static bool
rows_add(const cbctl *ctl, list_row **rows, size_t *count, const cbc_snapshot *snaps, size_t n,
    bool names)
{
	list_row *grown = n > 0 ? realloc(*rows, (*count + n) * sizeof **rows) : *rows;

	if (n > 0 && grown == NULL)
		return false;
	*rows = grown;
	for (size_t i = 0; i < n; i++) {
		list_row *r = &grown[*count];

		r->name = strdup(snaps[i].name);
		r->state = snaps[i].state;
		r->limited = snaps[i].in_flight >= 0;
		r->rest = names ? NULL : format_row_rest(ctl, &snaps[i], false);
		r->rest_in_flight = names ? NULL : format_row_rest(ctl, &snaps[i], true);
		if (r->name == NULL || (!names && (r->rest == NULL || r->rest_in_flight == NULL))) {
			free(r->name);
			free(r->rest);
			free(r->rest_in_flight);
			return false;
		}
		(*count)++;
	}
	return true;
}

/* list [--state S] [--sort name|state] [--names]: the table, or one name
 * a line (for shell completion and scripts), of every circuit however
 * many: pages are followed by their cursor, then the rows sorted (by name,
 * bytewise: the same order on every run; --sort state: open, half_open,
 * closed, each by name). --json prints each page's reply as cbd sent it,
 * one a line, unsorted. */
static int
cmd_list(cbctl *ctl)
{
	cbc_state filter;
	bool filtered = false, names = false, sorted = false;
	const char *value = cbctl_option_get(ctl, "--state", &filtered);
	const char *sort = cbctl_option_get(ctl, "--sort", &sorted);
	char cursor[CBC_CURSOR_SIZE] = "", next[CBC_CURSOR_SIZE];
	cbc_snapshot *snaps = NULL;
	list_row *rows = NULL;
	size_t count = 0, total = 0;
	int width = 4;
	bool in_flight_column = false;
	cbc_error err;
	cbc_status status;

	cbctl_option_get(ctl, "--names", &names);
	if (filtered && !parse_state(value, &filter)) {
		errorf("list: --state takes open, half_open (or half-open) or closed (got \"%s\")",
		    value);
		return EXIT_USAGE;
	}
	if (sorted && strcmp(sort, "name") != 0 && strcmp(sort, "state") != 0) {
		errorf("list: --sort takes name or state (got \"%s\")", sort);
		return EXIT_USAGE;
	}
	if (names && ctl->json) {
		errorf("list: --names and --json are two output modes: give one");
		return EXIT_USAGE;
	}
	do {
		status = cbc_list_page(ctl->conn, filtered ? &filter : NULL, 0, cursor, &snaps,
		    &count, next, sizeof next, &err);
		if (status != CBC_OK) {
			rows_free(rows, total);
			return fail_status(ctl, status, &err);
		}
		if (ctl->json) {
			int rc = print_reply(ctl);

			if (rc != EXIT_OK) {
				cbc_free(snaps);
				return rc;
			}
		} else if (!rows_add(ctl, &rows, &total, snaps, count, names)) {
			cbc_free(snaps);
			rows_free(rows, total);
			errorf("list: out of memory");
			return EXIT_REFUSED;
		}
		cbc_free(snaps);
		snaps = NULL;
		memcpy(cursor, next, sizeof cursor);
	} while (cursor[0] != '\0');
	if (ctl->json)
		return EXIT_OK;
	if (total > 1)
		qsort(rows, total, sizeof *rows,
		    sorted && strcmp(sort, "state") == 0 ? row_by_state : row_by_name);
	for (size_t i = 0; i < total; i++) {
		int len = (int)strlen(rows[i].name);

		width = len > width ? len : width;
		in_flight_column = in_flight_column || rows[i].limited;
	}
	if (!names && total > 0)
		print_table_head(width, in_flight_column);
	for (size_t i = 0; i < total; i++) {
		if (names)
			puts(rows[i].name);
		else
			printf("%-*s  %s", width, rows[i].name,
			    in_flight_column ? rows[i].rest_in_flight : rows[i].rest);
	}
	rows_free(rows, total);
	if (!names && total == 0)
		printf("no circuits%s%s\n", filtered ? " in state " : "",
		    filtered ? cbc_state_name(filter) : "");
	return EXIT_OK;
}

/* Whether get's reply says the circuit is stored (true when a cbd too old
 * to say does not). */
static bool
reply_stored(cbctl *ctl)
{
	json_t *obj = cbctl_last_reply(ctl);
	const json_t *stored = json_object_get(obj, "stored");
	bool is = !json_is_false(stored);

	json_decref(obj);
	return is;
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
	if (!reply_stored(ctl))
		printf("not stored: cbd holds no circuit %s; shown is how it would start\n",
		    snap.name);
	print_detail(ctl, &snap);
	return EXIT_OK;
}

/* policy NAME: each key of the effective policy with its value ("unset"
 * for null) and where it comes from (config, client, defaults, builtin);
 * --json prints the snapshot's policy object. */
static int
cmd_policy(cbctl *ctl)
{
	cbc_snapshot snap;
	cbc_error err;
	cbc_status status = cbc_get(ctl->conn, ctl->argv[0], NULL, &snap, &err);
	json_t *obj, *policy;

	if (status != CBC_OK)
		return fail_status(ctl, status, &err);
	obj = cbctl_last_reply(ctl);
	policy = json_object_get(json_object_get(obj, "snapshot"), "policy");
	if (!json_is_object(policy)) {
		json_decref(obj);
		errorf("policy: cbd's snapshot of %s has no policy (a protocol 1 cbd?)",
		    ctl->argv[0]);
		return EXIT_REFUSED;
	}
	if (json_is_false(json_object_get(obj, "stored")) && !ctl->json)
		errorf("%s is not stored: this is the policy it would be created with", snap.name);
	if (ctl->json) {
		char *text = json_dumps(policy, JSON_COMPACT);

		if (text != NULL)
			puts(text);
		free(text);
		json_decref(obj);
		return text != NULL ? EXIT_OK : EXIT_REFUSED;
	}
	printf("%-20s %-16s %s\n", "KEY", "VALUE", "SOURCE");
	policy_print(policy, "");
	json_decref(obj);
	return EXIT_OK;
}

/* metrics: the metrics op's text as it is (it ends in a newline). */
static int
cmd_metrics(cbctl *ctl)
{
	char *reply = NULL;
	cbc_error err;
	cbc_status status = cbc_request(ctl->conn, "{\"op\":\"metrics\"}", &reply, &err);
	json_t *obj = status == CBC_OK && reply != NULL ? json_loads(reply, 0, NULL) : NULL;
	const char *text;

	cbc_free(reply);
	if (status != CBC_OK)
		return fail_status(ctl, status, &err);
	if (ctl->json) {
		json_decref(obj);
		return print_reply(ctl);
	}
	text = json_string_value(json_object_get(obj, "text"));
	if (text == NULL) {
		json_decref(obj);
		errorf("metrics: cbd's reply has no text (a cbd without the metrics op?)");
		return EXIT_REFUSED;
	}
	fputs(text, stdout);
	json_decref(obj);
	if (fflush(stdout) != 0 || ferror(stdout)) {
		errorf("metrics: cannot write the text: %s", strerror(errno));
		return EXIT_REFUSED;
	}
	return EXIT_OK;
}

/* Parse a duration: ms as a plain integer, or an integer with a unit (ms,
 * s, m, h). False when it is not one, or not in 1..CBCTL_DURATION_MAX_MS. */
bool
cbctl_parse_duration(const char *text, int64_t *out)
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

/* Check open's and close's options; false after printing a usage error
 * naming the option at fault. */
static bool
parse_hold_args(cbctl *ctl, const char *cmd, hold_args *out)
{
	bool has_for = false, has_reason = false;
	const char *v;

	memset(out, 0, sizeof *out);
	out->name = ctl->argv[0];
	cbctl_option_get(ctl, "--no-hold", &out->no_hold);
	v = cbctl_option_get(ctl, "--for", &has_for);
	if (has_for && !cbctl_parse_duration(v, &out->for_ms)) {
		errorf("%s: --for takes a duration: milliseconds, or a number with "
		       "ms, s, m or h such as 90s, 10m, 2h (got \"%s\")",
		    cmd, v);
		return false;
	}
	v = cbctl_option_get(ctl, "--reason", &has_reason);
	if (has_reason && strlen(v) > CBC_REASON_MAX) {
		errorf("%s: --reason takes at most %d bytes (got %zu)", cmd, CBC_REASON_MAX,
		    strlen(v));
		return false;
	}
	out->reason = has_reason ? v : NULL;
	if (out->no_hold && (has_for || has_reason)) {
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
		if (strcmp(commands[i].name, name) == 0 ||
		    (commands[i].alias != NULL && strcmp(commands[i].alias, name) == 0))
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

/* The global options, accepted before and after the command. */
typedef enum global_opt {
	OPT_SOCKET,
	OPT_JSON,
	OPT_TIMEOUT,
	OPT_HELP,
	OPT_VERSION,
} global_opt;

static const struct {
	global_opt id;
	char short_name;
	const char *long_name;
	bool has_value;
} global_options[] = {
	{ OPT_SOCKET, 's', "--socket", true },
	{ OPT_JSON, 'j', "--json", false },
	{ OPT_TIMEOUT, 't', "--timeout", true },
	{ OPT_HELP, 'h', "--help", false },
	{ OPT_VERSION, 'V', "--version", false },
};

#define GLOBAL_OPTION_COUNT (sizeof global_options / sizeof global_options[0])

/* What the command line asked for. */
typedef struct invocation {
	const command *cmd;
	const char *socket_path;
	long io_ms;
	bool help, version;
} invocation;

/* Whether opt (name_len bytes of it) is one of cmd's options; *has_value
 * says whether it takes a value. */
static bool
command_option(const command *cmd, const char *opt, size_t name_len, bool *has_value)
{
	const char *p = cmd->options;

	while (*p != '\0') {
		size_t len = strcspn(p, " ");
		bool value = len > 0 && p[len - 1] == '=';
		size_t base = value ? len - 1 : len;

		if (base == name_len && strncmp(p, opt, name_len) == 0) {
			*has_value = value;
			return true;
		}
		p += len;
		p += strspn(p, " ");
	}
	return false;
}

/* Apply a global option. */
static bool
apply_global(cbctl *ctl, invocation *inv, global_opt id, const char *value)
{
	char *end;

	switch (id) {
	case OPT_SOCKET:
		inv->socket_path = value;
		break;
	case OPT_JSON:
		ctl->json = true;
		break;
	case OPT_TIMEOUT:
		errno = 0;
		inv->io_ms = strtol(value, &end, 10);
		if (errno != 0 || end == value || *end != '\0' || inv->io_ms < 1 ||
		    inv->io_ms > CBCTL_TIMEOUT_MAX_MS) {
			errorf("--timeout takes milliseconds from 1 to %d (got \"%s\")",
			    CBCTL_TIMEOUT_MAX_MS, value);
			return false;
		}
		break;
	case OPT_HELP:
		inv->help = true;
		break;
	case OPT_VERSION:
		inv->version = true;
		break;
	}
	return true;
}

/* Parse one option at argv[*i] (advancing *i past its value); false after
 * printing what was wrong. */
static bool
parse_option(int argc, char **argv, int *i, cbctl *ctl, invocation *inv)
{
	const char *arg = argv[*i];
	const char *eq = NULL, *value = NULL;
	const char *cname = inv->cmd != NULL ? inv->cmd->name : NULL;
	size_t name_len = 0;
	bool has_value = false;
	int global = -1;

	if (arg[1] != '-') {
		/* -s PATH, -sPATH, -j, -t MS, -h, -V */
		for (size_t g = 0; g < GLOBAL_OPTION_COUNT; g++)
			if (global_options[g].short_name == arg[1])
				global = (int)g;
		if (global < 0 || (arg[2] != '\0' && !global_options[global].has_value)) {
			if (cname != NULL)
				errorf("%s: unknown option \"%s\" (a NAME starting with - goes "
				       "after "
				       "--: cbctl %s -- %s)",
				    cname, arg, cname, arg);
			else
				errorf("unknown option \"%s\" (cbctl --help lists them)", arg);
			return false;
		}
		has_value = global_options[global].has_value;
		if (has_value && arg[2] != '\0')
			value = arg + 2;
	} else {
		eq = strchr(arg, '=');
		name_len = eq != NULL ? (size_t)(eq - arg) : strlen(arg);
		for (size_t g = 0; g < GLOBAL_OPTION_COUNT; g++)
			if (strlen(global_options[g].long_name) == name_len &&
			    strncmp(global_options[g].long_name, arg, name_len) == 0)
				global = (int)g;
		if (global >= 0) {
			has_value = global_options[global].has_value;
		} else if (inv->cmd == NULL ||
		    !command_option(inv->cmd, arg, name_len, &has_value)) {
			if (cname != NULL)
				errorf("%s: unknown option \"%.*s\" (cbctl %s --help)", cname,
				    (int)name_len, arg, cname);
			else
				errorf("unknown option \"%.*s\" (cbctl --help lists them)",
				    (int)name_len, arg);
			return false;
		}
		if (eq != NULL && !has_value) {
			errorf("%s%s%.*s takes no value (got \"%s\")", cname ? cname : "",
			    cname ? ": " : "", (int)name_len, arg, eq + 1);
			return false;
		}
		if (eq != NULL)
			value = eq + 1;
	}
	if (has_value && value == NULL) {
		if (*i + 1 >= argc) {
			errorf("%s%s%s needs a value", cname ? cname : "", cname ? ": " : "", arg);
			return false;
		}
		value = argv[++*i];
	}
	if (global >= 0)
		return apply_global(ctl, inv, global_options[global].id, value);
	if (ctl->optc >= CBCTL_OPTIONS_MAX) {
		errorf("%s: too many options (at most %d)", cname, CBCTL_OPTIONS_MAX);
		return false;
	}
	/* The name without "=value" (command_option matched it: it fits). */
	snprintf(ctl->opts[ctl->optc].name, sizeof ctl->opts[ctl->optc].name, "%.*s", (int)name_len,
	    arg);
	ctl->opts[ctl->optc++].value = value;
	return true;
}

/* Parse the whole command line: options anywhere (until "--"), the first
 * other word is the command, the rest its arguments. */
static bool
parse_command_line(int argc, char **argv, cbctl *ctl, invocation *inv)
{
	bool options = true;

	for (int i = 1; i < argc; i++) {
		const char *arg = argv[i];

		if (options && strcmp(arg, "--") == 0) {
			options = false;
		} else if (options && arg[0] == '-' && arg[1] != '\0') {
			if (!parse_option(argc, argv, &i, ctl, inv))
				return false;
		} else if (inv->cmd == NULL) {
			inv->cmd = command_find(arg);
			if (inv->cmd == NULL) {
				errorf("unknown command \"%s\" (cbctl --help lists them)", arg);
				return false;
			}
		} else if (ctl->argc >= CBCTL_ARGS_MAX) {
			errorf("%s: too many arguments (at most %d)", inv->cmd->name,
			    CBCTL_ARGS_MAX);
			return false;
		} else {
			ctl->argv[ctl->argc++] = arg;
		}
	}
	return true;
}

/* The generic check of a command's positional arguments. */
static bool
check_args(const cbctl *ctl, const command *cmd)
{
	if (ctl->argc < cmd->min_args) {
		errorf("%s: the circuit's NAME is required", cmd->name);
		return false;
	}
	if (ctl->argc > cmd->max_args) {
		if (cmd->max_args == 0)
			errorf("%s takes no arguments (got \"%s\")", cmd->name, ctl->argv[0]);
		else
			errorf("%s: one circuit name only (got \"%s\" and \"%s\")", cmd->name,
			    ctl->argv[0], ctl->argv[1]);
		return false;
	}
	return true;
}

int
main(int argc, char **argv)
{
	cbctl ctl = { 0 };
	invocation inv = { .io_ms = CBCTL_IO_TIMEOUT_MS };
	cbc_error err;
	int rc;

	if (!parse_command_line(argc, argv, &ctl, &inv))
		return EXIT_USAGE;
	if (inv.help) {
		if (inv.cmd != NULL)
			command_usage(inv.cmd, stdout);
		else
			usage(stdout);
		return EXIT_OK;
	}
	if (inv.version) {
		printf("cbctl %s\n", PACKAGE_VERSION);
		return EXIT_OK;
	}
	if (inv.cmd == NULL) {
		errorf("a COMMAND is required");
		usage(stderr);
		return EXIT_USAGE;
	}
	if (!check_args(&ctl, inv.cmd)) {
		command_usage(inv.cmd, stderr);
		return EXIT_USAGE;
	}
	ctl.io_ms = (int)inv.io_ms;
	ctl.color = !ctl.json && want_color();
	ctl.conn = cbc_conn_new(inv.socket_path, &err);
	if (ctl.conn == NULL) {
		errorf("%s", err.message);
		return EXIT_USAGE;
	}
	if (cbc_conn_set_timeouts(ctl.conn, CBCTL_CONNECT_TIMEOUT_MS, ctl.io_ms, &err) != CBC_OK ||
	    cbc_conn_set_client_name(ctl.conn, "cbctl", &err) != CBC_OK) {
		errorf("%s", err.message);
		cbc_conn_free(ctl.conn);
		return EXIT_USAGE;
	}
	rc = inv.cmd->run(&ctl);
	cbc_conn_free(ctl.conn);
	return rc;
}
