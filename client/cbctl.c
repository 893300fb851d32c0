/*
 * cbctl.c — the operator's command line for cbd: look at circuits, force
 * them open or closed, read the daemon's counters. Built on libcbclient.
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
static int cmd_delete(cbctl *ctl);

static const command commands[] = {
	{ "ping", "", 0, cmd_ping, "check that cbd answers; print its version" },
	{ "stats", "", 0, cmd_stats, "print the daemon's counters" },
	{ "list", "[--state open|half_open|closed]", 0, cmd_list,
	    "list stored circuits, optionally only those in one state" },
	{ "get", "NAME", 1, cmd_get, "show one circuit" },
	{ "open", "NAME", 1, cmd_open, "force a circuit open (admin)" },
	{ "close", "NAME", 1, cmd_close, "force a circuit closed (admin)" },
	{ "half-open", "NAME", 1, cmd_half_open, "force a circuit half-open (admin)" },
	{ "delete", "NAME", 1, cmd_delete, "drop a circuit and its slots (admin)" },
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
		fprintf(out, "  %-10s %-34s %s\n", commands[i].name, commands[i].args,
		    commands[i].summary);
	fprintf(out,
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

/* "retry in 12.4s" while open, else "-". */
static void
format_retry(const cbc_snapshot *s, char *buf, size_t size)
{
	if (s->state != CBC_STATE_OPEN)
		snprintf(buf, size, "-");
	else if (s->retry_after_ms <= 0)
		snprintf(buf, size, "retry now");
	else
		snprintf(buf, size, "retry in %.1fs", (double)s->retry_after_ms / 1000.0);
}

/* The circuits as an aligned table; the name column fits the longest. */
static void
print_table(const cbctl *ctl, const cbc_snapshot *snaps, size_t count)
{
	int width = 4;
	char opened[32], retry[48];

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
	}
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
	return EXIT_OK;
}

/* open / close / half-open: set_state, then show the new snapshot. */
static int
force_state(cbctl *ctl, cbc_state state)
{
	cbc_snapshot snap;
	cbc_error err;
	cbc_status status = cbc_set_state(ctl->conn, ctl->argv[0], state, NULL, &snap, &err);

	if (status != CBC_OK)
		return fail_status(ctl, status, &err);
	if (ctl->json)
		return print_reply(ctl);
	print_table(ctl, &snap, 1);
	return EXIT_OK;
}

static int
cmd_open(cbctl *ctl)
{
	return force_state(ctl, CBC_STATE_OPEN);
}

static int
cmd_close(cbctl *ctl)
{
	return force_state(ctl, CBC_STATE_CLOSED);
}

static int
cmd_half_open(cbctl *ctl)
{
	return force_state(ctl, CBC_STATE_HALF_OPEN);
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
	/* Generic argument check: commands with positional arguments take
	 * exactly that many; list parses its own flags. */
	if (cmd->nargs > 0 && ctl.argc != cmd->nargs) {
		command_usage(cmd, stderr);
		return EXIT_USAGE;
	}
	if (cmd->nargs == 0 && cmd->run != cmd_list && ctl.argc != 0) {
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
