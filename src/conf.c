/* SPDX-License-Identifier: Apache-2.0 */
/*
 * conf.c — the configuration key table and the INI loader (libinih):
 * every key is a row with type, bounds, default and SIGHUP reloadability;
 * errors name the file, the line and the key.
 */

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <ini.h>
/* Out of memory in uthash fails the load instead of exiting cbd. */
#define HASH_NONFATAL_OOM 1
static int conf_hash_oom;
#define uthash_nonfatal_oom(obj) (conf_hash_oom = 1)
#include <uthash.h>

#include "circuit-table.h"
#include "conf.h"
#include "log.h"

/* A [circuit "NAME"] or [preset "NAME"] section. */
struct conf_circuit {
	UT_hash_handle hh;
	proto_ctx ctx;
	int line; /* of its first key, for errors found after loading */
	int key_line[PROTO_CTX_KEY_COUNT]; /* where each key was set */
	char name[];
};

/* Bounds of the [cbd] keys. */
#define CONF_LINE_MIN 256
#define CONF_LINE_MAX (INT64_C(64) << 20)
#define CONF_CIRCUITS_MAX INT64_C(1000000000)
#define CONF_CONNECTIONS_MAX INT64_C(1000000)
#define CONF_OUTPUT_MIN (INT64_C(64) << 10)
#define CONF_OUTPUT_MAX (INT64_C(1) << 30)
/* max_total_output_bytes' largest value (1 TiB). */
#define CONF_TOTAL_OUTPUT_MAX (INT64_C(1) << 40)
#define CONF_WARNING_INTERVAL_MAX INT64_C(86400)
#define CONF_SLOTS_MAX INT64_C(1000000000)
/* metrics_max_connections' largest value. */
#define CONF_METRICS_CONNECTIONS_MAX INT64_C(1024)
/* max_watch_names' largest value. */
#define CONF_WATCH_NAMES_MAX INT64_C(100000000)
#define CONF_IDLE_MAX INT64_C(86400000)
#define CONF_REDIS_TIMEOUT_MAX INT64_C(60000)
/* Longest window fleet mode folds one circuit's outcomes in (ms). */
#define CONF_FLEET_COALESCE_MAX INT64_C(1000)
#define CONF_REDIS_PREFIX_MAX 64
/* What libinih cannot read. */
#define CONF_SYNTAX_ERROR "syntax error (expected [section] or key = value)"

#define CBD_KEY(n, t, lo, hi, def, reload, help)                                                   \
	{                                                                                          \
		CONF_SCOPE_CBD, #n, t, lo, hi, def, reload, offsetof(cbd_conf, n), -1, help        \
	}
#define POLICY_KEY(n, k, lo, hi, def, help)                                                        \
	{                                                                                          \
		CONF_SCOPE_POLICY, n, CONF_INT, lo, hi, def, true, 0, k, help                      \
	}

/* The key table: conf/cbd.conf and proto/PROTOCOL.md document every row
 * (tests/cbd-config-test.c checks). */
static const conf_key keys[] = {
	CBD_KEY(socket, CONF_STRING, 0, 0, CONF_DEFAULT_SOCKET, false,
	    "path of the Unix socket cbd listens on"),
	CBD_KEY(socket_mode, CONF_OCTAL, 0, 0777, "0660", false,
	    "permissions of the socket file (octal)"),
	CBD_KEY(socket_group, CONF_STRING, 0, 0, "", false,
	    "group owning the socket file (empty: cbd's group)"),
	CBD_KEY(max_line_bytes, CONF_INT, CONF_LINE_MIN, CONF_LINE_MAX, "65536", true,
	    "longest request line; longer ones get line_too_long"),
	CBD_KEY(max_circuits, CONF_INT, 1, CONF_CIRCUITS_MAX, "1000000", true,
	    "most circuits stored; past it new circuits get capacity"),
	CBD_KEY(max_connections, CONF_INT, 1, CONF_CONNECTIONS_MAX, "1024", true,
	    "most simultaneous client connections; extra ones are refused"),
	CBD_KEY(max_output_bytes, CONF_INT, CONF_OUTPUT_MIN, CONF_OUTPUT_MAX, "8388608", true,
	    "replies queued for a client that does not read before it is dropped"),
	CBD_KEY(max_total_output_bytes, CONF_INT, CONF_OUTPUT_MIN, CONF_TOTAL_OUTPUT_MAX,
	    "268435456", true,
	    "bytes of output buffers all connections hold together; past it the connection "
	    "holding the most is dropped"),
	CBD_KEY(client_idle_ms, CONF_INT, 0, CONF_IDLE_MAX, "0", true,
	    "milliseconds a connection may stay without a request before it is closed (0: "
	    "never)"),
	CBD_KEY(admin_users, CONF_USERS, 0, 0, "", true,
	    "users (names or uids) allowed the admin ops set_state and delete"),
	CBD_KEY(admin_groups, CONF_GROUPS, 0, 0, "", true,
	    "groups (names or gids) whose members are admins"),
	CBD_KEY(log_level, CONF_LEVEL, 0, 0, "info", true, "error, warning, info or debug"),
	CBD_KEY(open_warning_interval, CONF_INT, 0, CONF_WARNING_INTERVAL_MAX, "60", true,
	    "seconds between warnings listing open circuits (0: off)"),
	CBD_KEY(log_timestamps, CONF_INT, 0, 1, "1", true,
	    "1: start each text log line with the local time, unless stderr is the journal "
	    "(which stamps lines itself); 0: never"),
	CBD_KEY(log_format, CONF_STRING, 0, 0, "text", true,
	    "text (LEVEL: message) or json (one object a line: time, level, msg and the "
	    "event's fields, for log shippers)"),
	CBD_KEY(idle_reclaim_ms, CONF_INT, 0, CB_DURATION_MAX, "3600000", true,
	    "a closed, unheld circuit unused this long is dropped (0: only at max_circuits)"),
	CBD_KEY(max_slots, CONF_INT, 1, CONF_SLOTS_MAX, "65536", true,
	    "half-open slots held at once across all circuits; past it: capacity"),
	CBD_KEY(max_watch_names, CONF_INT, 1, CONF_WATCH_NAMES_MAX, "65536", true,
	    "circuit names one connection may watch by name; a watch past it: capacity"),
	CBD_KEY(state_file, CONF_STRING, 0, 0, "", false,
	    "file keeping open, half_open and held circuits across restarts (empty: off)"),
	CBD_KEY(metrics_listen, CONF_STRING, 0, 0, "", false,
	    "loopback HOST:PORT serving Prometheus metrics at /metrics (empty: off)"),
	CBD_KEY(metrics_max_connections, CONF_INT, 1, CONF_METRICS_CONNECTIONS_MAX, "16", true,
	    "connections to metrics_listen at once; more are closed when accepted"),
	CBD_KEY(dashboard_max_clients, CONF_INT, 0, CONF_METRICS_CONNECTIONS_MAX, "8", true,
	    "dashboard event streams (GET /events on metrics_listen) at once; more are "
	    "refused (503)"),
	CBD_KEY(metrics_max_circuits, CONF_INT, 0, CONF_CIRCUITS_MAX, "1000", true,
	    "circuits with their own metric series, at most"),
	CBD_KEY(backend, CONF_STRING, 0, 0, "memory", false,
	    "memory (this host's circuits) or redis (circuits shared by every cbd on the same "
	    "Redis: fleet mode)"),
	CBD_KEY(redis, CONF_STRING, 0, 0, "", false,
	    "fleet mode: the Redis server, unix:/path/redis.sock or tcp://host:port, or "
	    "sentinel://host:port[,host:port...]/master (ask Redis Sentinel for the master)"),
	CBD_KEY(redis_prefix, CONF_STRING, 0, 0, "cbd:", false,
	    "fleet mode: prefix of every Redis key and of the event channel"),
	CBD_KEY(redis_timeout_ms, CONF_INT, 1, CONF_REDIS_TIMEOUT_MAX, "50", true,
	    "fleet mode: a request Redis has not answered in this long is answered from this "
	    "host's copy"),
	CBD_KEY(fleet_coalesce_ms, CONF_INT, 0, CONF_FLEET_COALESCE_MAX, "2", true,
	    "fleet mode: a circuit's successes wait up to this long to go to Redis folded into "
	    "one script call (0: folded only while a call for the circuit is in flight)"),
	CBD_KEY(redis_password_file, CONF_STRING, 0, 0, "", false,
	    "fleet mode: file holding the Redis password (AUTH), or user and password on one "
	    "line (empty: no AUTH)"),
	POLICY_KEY("failure_threshold", PROTO_CTX_FAILURE_THRESHOLD, CB_COUNT_MIN, CB_COUNT_MAX,
	    "5", "failures in a chain that open a closed circuit"),
	POLICY_KEY("success_threshold", PROTO_CTX_SUCCESS_THRESHOLD, CB_COUNT_MIN, CB_COUNT_MAX,
	    "2", "trial successes that close a half_open circuit"),
	POLICY_KEY("break_ms", PROTO_CTX_BREAK_MS, CB_DURATION_MIN, CB_DURATION_MAX, "30000",
	    "how long a circuit stays open before trial calls"),
	POLICY_KEY("half_open_max", PROTO_CTX_HALF_OPEN_MAX, CB_COUNT_MIN, CB_HALF_OPEN_MAX, "1",
	    "trial calls (slots) at once"),
	POLICY_KEY("slot_ttl_ms", PROTO_CTX_SLOT_TTL_MS, CB_DURATION_MIN, CB_DURATION_MAX,
	    "break_ms", "lifetime of a slot or permit"),
	POLICY_KEY("max_gap_ms", PROTO_CTX_MAX_GAP_MS, CB_DURATION_MIN, CB_DURATION_MAX, "unset",
	    "a failure later than this after the previous one starts a new chain"),
	POLICY_KEY("trip", PROTO_CTX_TRIP, 0, 0, "consecutive",
	    "consecutive (failure_threshold in a chain) or rate (over a window)"),
	POLICY_KEY("window", PROTO_CTX_WINDOW, 0, 0, "count",
	    "rate rule: count (the last window_size calls) or time (the last window_size ms)"),
	POLICY_KEY("window_size", PROTO_CTX_WINDOW_SIZE, CB_WINDOW_COUNT_MIN, CB_WINDOW_TIME_MAX,
	    "100", "rate rule: calls (count, 1..10000) or ms (time, 1000..3600000; default 60000)"),
	POLICY_KEY("minimum_calls", PROTO_CTX_MINIMUM_CALLS, CB_COUNT_MIN, CB_COUNT_MAX, "10",
	    "rate rule: no rate is judged before the window holds this many calls"),
	POLICY_KEY("failure_rate", PROTO_CTX_FAILURE_RATE, 1, CB_PERCENT_MAX, "50",
	    "rate rule: percent of failed calls in the window that opens"),
	POLICY_KEY("slow_call_ms", PROTO_CTX_SLOW_CALL_MS, CB_DURATION_MIN, CB_DURATION_MAX,
	    "unset", "rate rule: a call this slow or slower is slow"),
	POLICY_KEY("slow_call_rate", PROTO_CTX_SLOW_CALL_RATE, 1, CB_PERCENT_MAX, "100",
	    "rate rule: percent of slow calls in the window that opens"),
	POLICY_KEY("min_reporters", PROTO_CTX_MIN_REPORTERS, 1, CB_REPORTERS_MAX, "1",
	    "distinct processes whose failures it takes to open"),
	POLICY_KEY("reporter_window_ms", PROTO_CTX_REPORTER_WINDOW_MS, CB_DURATION_MIN,
	    CB_DURATION_MAX, "60000", "how long a process's failure counts as a report"),
	POLICY_KEY("break_backoff", PROTO_CTX_BREAK_BACKOFF, 1, CB_BREAK_BACKOFF_MAX, "1",
	    "the break is multiplied by this after each failed trial"),
	POLICY_KEY("break_max_ms", PROTO_CTX_BREAK_MAX_MS, CB_DURATION_MIN, CB_DURATION_MAX,
	    "unset", "the longest break break_backoff may reach"),
	POLICY_KEY("max_concurrent", PROTO_CTX_MAX_CONCURRENT, 1, CB_CONCURRENT_MAX, "unset",
	    "bulkhead: calls in flight at once across the host (tickets taken by allow)"),
	POLICY_KEY("retry_budget_percent", PROTO_CTX_RETRY_BUDGET_PERCENT, 0,
	    CB_RETRY_BUDGET_PERCENT_MAX, "unset",
	    "retry budget: retries allowed as a percent of first attempts over 10 s"),
	POLICY_KEY("retry_min_per_s", PROTO_CTX_RETRY_MIN_PER_S, 0, CB_RETRY_MIN_PER_S_MAX, "10",
	    "retry budget: retries a second always allowed (over 10 s)"),
	POLICY_KEY("preset", PROTO_CTX_PRESET, 0, 0, "none",
	    "a named bundle of policy keys: http-external, service, database or a [preset]"),
};

#define KEY_COUNT (sizeof keys / sizeof keys[0])

size_t
conf_key_count(void)
{
	return KEY_COUNT;
}

const conf_key *
conf_key_at(size_t i)
{
	return i < KEY_COUNT ? &keys[i] : NULL;
}

const conf_key *
conf_key_find(conf_scope scope, const char *name)
{
	for (size_t i = 0; i < KEY_COUNT; i++) {
		if (keys[i].scope == scope && strcmp(keys[i].name, name) == 0)
			return &keys[i];
	}
	return NULL;
}

/* One error of a load: its line (for sorting) and its text. */
typedef struct conf_error {
	int line;
	char text[CONF_ERROR_LINE];
} conf_error;

/* The state of one load, handed to inih's callbacks. */
typedef struct conf_loader {
	cbd_conf *cfg;
	const char *path;
	FILE *file;
	int line; /* number of the line being handled */
	char *buf; /* getline's buffer */
	size_t buf_size;
	int error_line; /* first error found, 0: none */
	conf_error errors[CONF_ERRORS_MAX]; /* every error, up to the bound */
	size_t error_count; /* errors found, those past the bound included */
	int users_line, groups_line; /* where admin_users / admin_groups were set */
	int defaults_line; /* [defaults]' first key */
	int defaults_key_line[PROTO_CTX_KEY_COUNT]; /* where each [defaults] key was set */
	char bad_section[CONF_ERROR_LINE / 2]; /* the last section reported as bad */
	struct seen_key *seen; /* "section\nkey" -> line: duplicates are errors */
} conf_loader;

/* A key already set in a section. */
typedef struct seen_key {
	UT_hash_handle hh;
	int line;
	char id[]; /* section, '\n', key */
} seen_key;

/* Parse a whole decimal (or octal) integer. */
static bool
parse_int(const char *text, int base, int64_t *out)
{
	char *end;
	long long v;

	while (isspace((unsigned char)*text))
		text++;
	if (*text == '\0')
		return false;
	errno = 0;
	v = strtoll(text, &end, base);
	if (errno != 0 || end == text)
		return false;
	while (isspace((unsigned char)*end))
		end++;
	if (*end != '\0')
		return false;
	*out = v;
	return true;
}

/* Set a [cbd] key from text; on error fill why. */
static bool
set_cbd_key(cbd_conf *cfg, const conf_key *key, const char *value, char *why, size_t why_size)
{
	char *base = (char *)cfg + key->offset;
	int64_t v;
	log_level level;

	switch (key->type) {
	case CONF_INT:
	case CONF_OCTAL:
		if (!parse_int(value, key->type == CONF_OCTAL ? 8 : 10, &v) || v < key->min ||
		    v > key->max) {
			if (key->type == CONF_OCTAL)
				snprintf(why, why_size,
				    "must be an octal mode from 0 to 0%llo (got \"%s\")",
				    (unsigned long long)key->max, value);
			else
				snprintf(why, why_size,
				    "must be an integer from %lld to %lld (got \"%s\")",
				    (long long)key->min, (long long)key->max, value);
			return false;
		}
		*(int64_t *)(void *)base = v;
		return true;
	case CONF_LEVEL:
		if (!log_level_parse(value, &level)) {
			snprintf(why, why_size,
			    "must be error, warning, info or debug (got \"%s\")", value);
			return false;
		}
		*(int64_t *)(void *)base = level;
		return true;
	case CONF_STRING:
	case CONF_USERS:
	case CONF_GROUPS: {
		char *copy = strdup(value);

		if (copy == NULL) {
			snprintf(why, why_size, "out of memory");
			return false;
		}
		free(*(char **)(void *)base);
		*(char **)(void *)base = copy;
		return true;
	}
	}
	snprintf(why, why_size, "unknown type");
	return false;
}

/* Set a policy key of layer ctx from text (the codec's parser: integers,
 * enum names, preset names). */
static bool
set_policy_key(proto_ctx *ctx, const conf_key *key, const char *value, char *why, size_t why_size)
{
	proto_error err;
	char *v = strdup(value), *end;
	bool ok;

	if (v == NULL) {
		snprintf(why, why_size, "out of memory");
		return false;
	}
	/* inih keeps inner spaces; trailing ones are not part of a value. */
	for (end = v + strlen(v); end > v && isspace((unsigned char)end[-1]); end--)
		end[-1] = '\0';
	ok = proto_ctx_parse_text(ctx, (proto_ctx_key)key->ctx_key, v, "value", &err);
	if (!ok)
		snprintf(why, why_size, "%s (got \"%s\")", err.message + strlen("value "), value);
	free(v);
	return ok;
}

/* The section `name` of the hash at *sections, created on first use. */
static conf_circuit *
named_section(conf_circuit **sections, const char *name, int line)
{
	conf_circuit *c;
	size_t len = strlen(name);

	HASH_FIND(hh, *sections, name, len, c);
	if (c != NULL)
		return c;
	c = calloc(1, sizeof *c + len + 1);
	if (c == NULL)
		return NULL;
	memcpy(c->name, name, len + 1);
	c->line = line;
	conf_hash_oom = 0;
	HASH_ADD_KEYPTR(hh, *sections, c->name, len, c);
	if (conf_hash_oom) {
		free(c);
		return NULL;
	}
	return c;
}

/* Record an error of line `line` (every one is reported, up to
 * CONF_ERRORS_MAX); the text is "FILE:LINE: " then fmt's. */
static void __attribute__((format(printf, 3, 4)))
loader_error(conf_loader *ld, int line, const char *fmt, ...)
{
	conf_error *e;
	va_list ap;
	int n;

	if (ld->error_line == 0 || line < ld->error_line)
		ld->error_line = line;
	if (ld->error_count++ >= CONF_ERRORS_MAX)
		return;
	e = &ld->errors[ld->error_count - 1];
	e->line = line;
	n = snprintf(e->text, sizeof e->text, "%s:%d: ", ld->path, line);
	if (n < 0 || (size_t)n >= sizeof e->text)
		return; /* cut; still names the file */
	va_start(ap, fmt);
	vsnprintf(e->text + n, sizeof e->text - (size_t)n, fmt, ap);
	va_end(ap);
}

/* Record an error about key on the line being handled; returns 0 for inih. */
static int __attribute__((format(printf, 3, 4)))
loader_fail(conf_loader *ld, const char *key, const char *fmt, ...)
{
	char why[CONF_ERROR_LINE];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, sizeof why, fmt, ap);
	va_end(ap);
	loader_error(ld, ld->line, "%s: %s", key, why);
	return 0;
}

/* Was an error recorded on line? */
static bool
loader_error_on(const conf_loader *ld, int line)
{
	for (size_t i = 0; i < ld->error_count && i < CONF_ERRORS_MAX; i++) {
		if (ld->errors[i].line == line)
			return true;
	}
	return false;
}

/* Every error of the load into err, one a line, in line order. */
static void
loader_errors_text(conf_loader *ld, char *err, size_t err_size)
{
	size_t n = ld->error_count < CONF_ERRORS_MAX ? ld->error_count : CONF_ERRORS_MAX;
	size_t len = 0;

	err[0] = '\0';
	/* Insertion sort, stable: errors of one line keep the order found. */
	for (size_t i = 1; i < n; i++) {
		conf_error e = ld->errors[i];
		size_t j = i;

		for (; j > 0 && ld->errors[j - 1].line > e.line; j--)
			ld->errors[j] = ld->errors[j - 1];
		ld->errors[j] = e;
	}
	for (size_t i = 0; i < n && len < err_size; i++) {
		int w = snprintf(err + len, err_size - len, "%s%s", i > 0 ? "\n" : "",
		    ld->errors[i].text);

		len += w > 0 ? (size_t)w : 0;
	}
	if (ld->error_count > n && len < err_size)
		snprintf(err + len, err_size - len, "\n%s: and %zu more errors", ld->path,
		    ld->error_count - n);
}

/* Parse `KIND "NAME"` (kind: circuit or preset) into name; false when the
 * section is not one, with *why set when it is one with a bad name. */
static bool
quoted_section_name(const char *section, const char *kind, char *name, size_t size,
    const char **why)
{
	size_t klen = strlen(kind);
	const char *open, *close;
	proto_ctx scratch;
	proto_error err;
	size_t len;

	*why = "section must be [cbd], [defaults], [circuit \"NAME\"] or [preset \"NAME\"]";
	if (strncmp(section, kind, klen) != 0)
		return false;
	open = strchr(section + klen, '"');
	close = strrchr(section, '"');
	if (open == NULL || close == NULL || close == open)
		return false;
	for (const char *p = section + klen; p < open; p++) {
		if (!isspace((unsigned char)*p))
			return false;
	}
	if (close[1] != '\0')
		return false;
	len = (size_t)(close - open - 1);
	if (len >= size) {
		*why = "section names must be 1 to 256 bytes";
		return false;
	}
	memcpy(name, open + 1, len);
	name[len] = '\0';
	if (strcmp(kind, "circuit") == 0 && !proto_name_valid(name, len, why)) {
		*why = "circuit section names must be 1 to 256 bytes of UTF-8 without "
		       "control characters";
		return false;
	}
	memset(&scratch, 0, sizeof scratch);
	if (strcmp(kind, "preset") == 0 &&
	    !proto_ctx_parse_text(&scratch, PROTO_CTX_PRESET, name, "preset section name", &err)) {
		*why = "preset section names must be 1 to 64 letters, digits, '-', '_' or '.'";
		return false;
	}
	return true;
}

/* Is text a group name, or a number (a gid need not have a name)? */
static bool
group_exists(const char *text)
{
	int64_t gid;

	return getgrnam(text) != NULL || (parse_int(text, 10, &gid) && gid >= 0);
}

/* False (error recorded) when key was already set in this section. */
static bool
key_first_time(conf_loader *ld, const char *section, const char *key)
{
	size_t len = strlen(section) + 1 + strlen(key);
	seen_key *k;
	char id[512];

	if (len >= sizeof id)
		return true; /* longer than any valid pair: its own error follows */
	memcpy(id, section, strlen(section));
	id[strlen(section)] = '\n';
	memcpy(id + strlen(section) + 1, key, strlen(key) + 1);
	HASH_FIND(hh, ld->seen, id, len, k);
	if (k != NULL) {
		loader_fail(ld, key, "set twice in [%s] (first on line %d)", section, k->line);
		return false;
	}
	k = malloc(sizeof *k + len + 1);
	if (k == NULL)
		return true; /* the check is lost, not the load */
	memcpy(k->id, id, len + 1);
	k->line = ld->line;
	conf_hash_oom = 0;
	HASH_ADD(hh, ld->seen, id[0], len, k);
	if (conf_hash_oom)
		free(k);
	return true;
}

static void
seen_free(conf_loader *ld)
{
	seen_key *k, *tmp;

	HASH_ITER (hh, ld->seen, k, tmp) {
		HASH_DEL(ld->seen, k);
		free(k);
	}
}

/* inih's handler: one name = value pair. */
static int
loader_handler(void *user, const char *section, const char *name, const char *value)
{
	conf_loader *ld = user;
	cbd_conf *cfg = ld->cfg;
	char why[CONF_ERROR_SIZE];
	char circuit[CT_NAME_MAX + 1];
	const conf_key *key;
	proto_ctx *layer;
	const char *bad;
	conf_redis_address redis_addr;
	int *lines; /* where each key of the layer was set */

	if (!key_first_time(ld, section, name))
		return 0;
	if (strcmp(section, "cbd") == 0) {
		key = conf_key_find(CONF_SCOPE_CBD, name);
		if (key == NULL)
			return loader_fail(ld, name, "unknown key in [cbd]");
		if (!set_cbd_key(cfg, key, value, why, sizeof why))
			return loader_fail(ld, name, "%s", why);
		if (strcmp(name, "metrics_listen") == 0 && value[0] != '\0' &&
		    !conf_metrics_listen_valid(value, &bad))
			return loader_fail(ld, name, "%s (got \"%s\")", bad, value);
		if (strcmp(name, "log_format") == 0 && strcmp(value, "text") != 0 &&
		    strcmp(value, "json") != 0)
			return loader_fail(ld, name, "must be text or json (got \"%s\")", value);
		if (strcmp(name, "backend") == 0 && strcmp(value, "memory") != 0 &&
		    strcmp(value, "redis") != 0)
			return loader_fail(ld, name, "must be memory or redis (got \"%s\")", value);
		if (strcmp(name, "redis") == 0 && value[0] != '\0' &&
		    !conf_redis_address_parse(value, &redis_addr, &bad))
			return loader_fail(ld, name, "%s (got \"%s\")", bad, value);
		if (strcmp(name, "redis_prefix") == 0 && strlen(value) > CONF_REDIS_PREFIX_MAX)
			return loader_fail(ld, name, "must be at most %d bytes",
			    CONF_REDIS_PREFIX_MAX);
		if (strcmp(name, "socket") == 0 && value[0] == '\0')
			return loader_fail(ld, name, "must not be empty (a path, e.g. %s)",
			    CONF_DEFAULT_SOCKET);
		if (strcmp(name, "socket_group") == 0 && value[0] != '\0' && !group_exists(value))
			return loader_fail(ld, name, "no such group \"%s\"", value);
		if (strcmp(name, "admin_users") == 0)
			ld->users_line = ld->line;
		else if (strcmp(name, "admin_groups") == 0)
			ld->groups_line = ld->line;
		return 1;
	}
	if (strcmp(section, "defaults") == 0) {
		layer = &cfg->defaults;
		lines = ld->defaults_key_line;
		if (ld->defaults_line == 0)
			ld->defaults_line = ld->line;
	} else if (quoted_section_name(section,
		       strncmp(section, "preset", 6) == 0 ? "preset" : "circuit", circuit,
		       sizeof circuit, &bad)) {
		bool preset = strncmp(section, "preset", 6) == 0;
		conf_circuit *c =
		    named_section(preset ? &cfg->presets : &cfg->circuits, circuit, ld->line);

		if (c == NULL)
			return loader_fail(ld, name, "out of memory");
		if (preset && strcmp(name, "preset") == 0)
			return loader_fail(ld, name, "a preset cannot name another preset");
		layer = &c->ctx;
		lines = c->key_line;
	} else {
		/* One error per bad section, not one per key in it. */
		if (strcmp(ld->bad_section, section) == 0)
			return 0;
		snprintf(ld->bad_section, sizeof ld->bad_section, "%s", section);
		return loader_fail(ld, name, "in [%s]: %s", section, bad);
	}
	key = conf_key_find(CONF_SCOPE_POLICY, name);
	if (key == NULL)
		return loader_fail(ld, name, "unknown key in [%s]", section);
	if (!set_policy_key(layer, key, value, why, sizeof why))
		return loader_fail(ld, name, "%s", why);
	lines[key->ctx_key] = ld->line;
	return 1;
}

/* Is line (a whole one) one libinih cannot read: a section without its
 * ']', or a line at the left margin with no '=' or ':' before an inline
 * ';' comment? (An indented one may continue the previous value: libinih
 * judges it, and conf_load reports the first such line it refuses.) */
static bool
loader_syntax_error(const char *line)
{
	const char *p = line;

	while (isspace((unsigned char)*p))
		p++;
	if (*p == '\0' || *p == ';' || *p == '#')
		return false;
	if (*p == '[')
		return strchr(p, ']') == NULL;
	if (p != line)
		return false;
	for (; *p != '\0'; p++) {
		if (*p == '=' || *p == ':')
			return false;
		if (*p == ';' && p > line && isspace((unsigned char)p[-1]))
			return true;
	}
	return true;
}

/* inih's reader: one whole line per call, counted, so that inih's line
 * numbers and ours agree. inih's buffer holds num - 1 bytes: a longer
 * comment is skipped, a longer setting is an error (inih would split it). */
static char *
loader_reader(char *str, int num, void *stream)
{
	conf_loader *ld = stream;
	ssize_t len = getline(&ld->buf, &ld->buf_size, ld->file);
	const char *p;

	if (len < 0)
		return NULL;
	ld->line++;
	if (len < num) {
		char *hash;

		memcpy(str, ld->buf, (size_t)len + 1);
		/* A '#' after whitespace starts a comment on a setting line too
		 * (libinih knows only ';' there). */
		for (p = str; isspace((unsigned char)*p); p++)
			;
		if (*p != '[' && *p != '#' && *p != ';') {
			for (hash = str + 1; (hash = strchr(hash, '#')) != NULL; hash++) {
				if (isspace((unsigned char)hash[-1])) {
					hash[0] = '\n';
					hash[1] = '\0';
					break;
				}
			}
		}
		if (loader_syntax_error(str))
			loader_error(ld, ld->line, CONF_SYNTAX_ERROR);
		return str;
	}
	for (p = ld->buf; isspace((unsigned char)*p); p++)
		;
	if (*p != '#' && *p != ';')
		loader_error(ld, ld->line, "line is longer than %d bytes", num - 1);
	snprintf(str, (size_t)num, "\n");
	return str;
}

/* Append v to a growing array of ids. */
static bool
ids_append(void **array, size_t *count, size_t size, const void *v)
{
	char *grown = realloc(*array, (*count + 1) * size);

	if (grown == NULL)
		return false;
	memcpy(grown + *count * size, v, size);
	*array = grown;
	(*count)++;
	return true;
}

/* Split a list on commas and spaces, calling fn on each word. */
static bool
list_each(const char *list, bool (*fn)(conf_loader *, const char *), conf_loader *ld)
{
	char word[256];
	const char *p = list;

	while (*p != '\0') {
		size_t n = 0;

		while (*p == ',' || isspace((unsigned char)*p))
			p++;
		while (*p != '\0' && *p != ',' && !isspace((unsigned char)*p)) {
			if (n + 1 < sizeof word)
				word[n++] = *p;
			p++;
		}
		if (n == 0)
			continue;
		word[n] = '\0';
		if (!fn(ld, word))
			return false;
	}
	return true;
}

/* Resolve one admin user (a name or a uid). */
static bool
admin_user_add(conf_loader *ld, const char *word)
{
	cbd_conf *cfg = ld->cfg;
	struct passwd *pw = getpwnam(word);
	int64_t id;
	uid_t uid;

	if (pw != NULL)
		uid = pw->pw_uid;
	else if (parse_int(word, 10, &id) && id >= 0 && id < INT64_C(4294967295))
		uid = (uid_t)id;
	else {
		ld->line = ld->users_line;
		loader_fail(ld, "admin_users", "no such user \"%s\"", word);
		return true; /* reported; the others are checked too */
	}
	return ids_append((void **)&cfg->admin_uids, &cfg->admin_uid_count, sizeof uid, &uid);
}

/* Resolve one admin group (a name or a gid) and its listed members. */
static bool
admin_group_add(conf_loader *ld, const char *word)
{
	cbd_conf *cfg = ld->cfg;
	struct group *gr = getgrnam(word);
	int64_t id;
	gid_t gid;

	if (gr == NULL && parse_int(word, 10, &id) && id >= 0 && id < INT64_C(4294967295))
		gr = getgrgid((gid_t)id);
	if (gr == NULL) {
		if (!parse_int(word, 10, &id) || id < 0 || id >= INT64_C(4294967295)) {
			ld->line = ld->groups_line;
			loader_fail(ld, "admin_groups", "no such group \"%s\"", word);
			return true; /* reported; the others are checked too */
		}
		gid = (gid_t)id;
		return ids_append((void **)&cfg->admin_gids, &cfg->admin_gid_count, sizeof gid,
		    &gid);
	}
	gid = gr->gr_gid;
	if (!ids_append((void **)&cfg->admin_gids, &cfg->admin_gid_count, sizeof gid, &gid))
		return false;
	for (char **m = gr->gr_mem; *m != NULL; m++) {
		struct passwd *pw = getpwnam(*m);

		if (pw != NULL &&
		    !ids_append((void **)&cfg->admin_uids, &cfg->admin_uid_count, sizeof pw->pw_uid,
			&pw->pw_uid))
			return false;
	}
	return true;
}

/* HOST:PORT (len bytes of text) into host (size bytes) and *port. */
static bool
host_port_parse(const char *text, size_t len, char *host, size_t size, int *port, const char **why)
{
	char buf[256], *end;
	const char *colon;
	long n;

	if (len >= sizeof buf) {
		*why = "a host:port is too long";
		return false;
	}
	memcpy(buf, text, len);
	buf[len] = '\0';
	colon = strrchr(buf, ':');
	if (colon == NULL || colon == buf || (size_t)(colon - buf) >= size) {
		*why = "must name host:port";
		return false;
	}
	errno = 0;
	n = strtol(colon + 1, &end, 10);
	if (errno != 0 || *end != '\0' || end == colon + 1 || n < 1 || n > 65535) {
		*why = "the port must be an integer from 1 to 65535";
		return false;
	}
	memcpy(host, buf, (size_t)(colon - buf));
	host[colon - buf] = '\0';
	*port = (int)n;
	return true;
}

/* sentinel://HOST:PORT[,HOST:PORT...]/MASTER (text after the scheme). */
static bool
sentinel_address_parse(const char *text, conf_redis_address *out, const char **why)
{
	const char *slash = strchr(text, '/');
	const char *master;

	if (slash == NULL || slash == text || slash[1] == '\0') {
		*why = "must be sentinel://host:port[,host:port...]/master";
		return false;
	}
	master = slash + 1;
	if (strlen(master) > CONF_REDIS_MASTER_MAX ||
	    strspn(master, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") !=
		strlen(master)) {
		*why = "the master name must be 1 to 64 letters, digits, '.', '_' or '-'";
		return false;
	}
	for (const char *p = text; p < slash;) {
		size_t len = strcspn(p, ",/");

		if (out->sentinels == CONF_REDIS_SENTINELS_MAX) {
			*why = "at most 8 sentinels";
			return false;
		}
		if (len == 0 ||
		    !host_port_parse(p, len, out->sentinel[out->sentinels].host,
			sizeof out->sentinel[0].host, &out->sentinel[out->sentinels].port, why)) {
			if (len == 0)
				*why = "must be sentinel://host:port[,host:port...]/master";
			return false;
		}
		out->sentinels++;
		p += len + (p[len] == ',');
	}
	strcpy(out->master, master);
	return true;
}

bool
conf_redis_address_parse(const char *text, conf_redis_address *out, const char **why)
{
	memset(out, 0, sizeof *out);
	if (strncmp(text, "unix:", 5) == 0) {
		if (text[5] != '/') {
			*why = "a Unix socket must be an absolute path: unix:/path/redis.sock";
			return false;
		}
		if (strlen(text + 5) >= sizeof out->path) {
			*why = "the socket path is too long";
			return false;
		}
		out->is_unix = true;
		strcpy(out->path, text + 5);
		return true;
	}
	if (strncmp(text, "sentinel://", 11) == 0)
		return sentinel_address_parse(text + 11, out, why);
	if (strncmp(text, "tcp://", 6) != 0) {
		*why = "must be unix:/path/redis.sock, tcp://host:port or "
		       "sentinel://host:port[,host:port...]/master";
		return false;
	}
	if (!host_port_parse(text + 6, strlen(text + 6), out->path, sizeof out->path, &out->port,
		why)) {
		if (strcmp(*why, "must name host:port") == 0)
			*why = "must be tcp://host:port";
		return false;
	}
	return true;
}

/* The last generation handed out. */
static uint64_t conf_generations;

bool
conf_init_defaults(cbd_conf *cfg)
{
	char why[CONF_ERROR_SIZE];

	memset(cfg, 0, sizeof *cfg);
	for (size_t i = 0; i < KEY_COUNT; i++) {
		if (keys[i].scope == CONF_SCOPE_CBD &&
		    !set_cbd_key(cfg, &keys[i], keys[i].default_text, why, sizeof why)) {
			conf_free(cfg);
			return false;
		}
	}
	cfg->generation = ++conf_generations;
	return true;
}

static void sections_check(conf_loader *ld);

bool
conf_load(const char *path, cbd_conf *cfg, char *err, size_t err_size)
{
	conf_loader ld = { .cfg = cfg, .path = path };
	int rc;

	if (!conf_init_defaults(cfg)) {
		snprintf(err, err_size, "%s: out of memory", path);
		return false;
	}
	cfg->path = strdup(path);
	ld.file = cfg->path != NULL ? fopen(path, "r") : NULL;
	if (ld.file == NULL) {
		snprintf(err, err_size, "%s: cannot open: %s", path,
		    cfg->path == NULL ? "out of memory" : strerror(errno));
		conf_free(cfg);
		return false;
	}
	{
		struct stat st;

		if (fstat(fileno(ld.file), &st) == 0 && !S_ISREG(st.st_mode)) {
			snprintf(err, err_size, "%s: not a regular file", path);
			fclose(ld.file);
			conf_free(cfg);
			return false;
		}
	}
	rc = ini_parse_stream(loader_reader, &ld, loader_handler, &ld);
	fclose(ld.file);
	free(ld.buf);
	seen_free(&ld);
	/* libinih returns the first line it refused: one of ours, or a syntax
	 * error loader_syntax_error() could not tell. */
	if (rc > 0 && !loader_error_on(&ld, rc))
		loader_error(&ld, rc, CONF_SYNTAX_ERROR);
	if (rc < 0) {
		snprintf(err, err_size, "%s: cannot read: %s", path,
		    rc == -2 ? "out of memory" : "I/O error");
		conf_free(cfg);
		return false;
	}
	sections_check(&ld);
	if (!list_each(cfg->admin_users, admin_user_add, &ld) ||
	    !list_each(cfg->admin_groups, admin_group_add, &ld))
		loader_fail(&ld, "admin", "out of memory");
	if (ld.error_line != 0) {
		loader_errors_text(&ld, err, err_size);
		conf_free(cfg);
		return false;
	}
	cfg->generation = ++conf_generations;
	return true;
}

void
conf_free(cbd_conf *cfg)
{
	conf_circuit *c, *tmp;

	free(cfg->path);
	free(cfg->socket);
	free(cfg->socket_group);
	free(cfg->admin_users);
	free(cfg->admin_groups);
	free(cfg->state_file);
	free(cfg->log_format);
	free(cfg->metrics_listen);
	free(cfg->backend);
	free(cfg->redis);
	free(cfg->redis_prefix);
	free(cfg->redis_password_file);
	free(cfg->admin_uids);
	free(cfg->admin_gids);
	HASH_ITER (hh, cfg->circuits, c, tmp) {
		HASH_DEL(cfg->circuits, c);
		free(c);
	}
	HASH_ITER (hh, cfg->presets, c, tmp) {
		HASH_DEL(cfg->presets, c);
		free(c);
	}
	memset(cfg, 0, sizeof *cfg);
}

const proto_ctx *
conf_preset_find(const cbd_conf *cfg, const char *name)
{
	conf_circuit *p = NULL;

	if (cfg->presets != NULL)
		HASH_FIND(hh, cfg->presets, name, strlen(name), p);
	return p != NULL ? &p->ctx : proto_preset_builtin(name);
}

/* The preset a layer names (NULL: none, or unknown). */
static const proto_ctx *
layer_preset(const cbd_conf *cfg, const proto_ctx *ctx)
{
	if (ctx == NULL || !proto_ctx_has(ctx, PROTO_CTX_PRESET))
		return NULL;
	return conf_preset_find(cfg, ctx->preset);
}

/* conf_policy's last answer and what it was asked: most requests in a row
 * name circuits of one policy, and resolving costs more than comparing.
 * A configuration is told by its address and generation, a circuit's
 * declared policy by its address and bytes (an address can be reused). */
static struct {
	uint64_t generation; /* 0: nothing remembered */
	const cbd_conf *cfg;
	const conf_circuit *section;
	const proto_ctx *declared;
	proto_ctx declared_bytes;
	cb_policy policy;
	proto_policy_sources sources;
	const char *preset;
} policy_memo;

static bool
policy_memo_is(const cbd_conf *cfg, const conf_circuit *section, const proto_ctx *declared)
{
	return cfg->generation != 0 && policy_memo.generation == cfg->generation &&
	    policy_memo.cfg == cfg && policy_memo.section == section &&
	    policy_memo.declared == declared &&
	    (declared == NULL ||
		memcmp(&policy_memo.declared_bytes, declared, sizeof *declared) == 0);
}

void
conf_policy(const cbd_conf *cfg, const char *name, const proto_ctx *declared, cb_policy *out,
    proto_policy_sources *sources, const char **preset)
{
	proto_layer layers[3];
	conf_circuit *c = NULL;
	const proto_ctx *section;

	if (cfg->circuits != NULL)
		HASH_FIND(hh, cfg->circuits, name, strlen(name), c);
	if (!policy_memo_is(cfg, c, declared)) {
		section = c != NULL ? &c->ctx : NULL;
		layers[0] =
		    (proto_layer){ section, layer_preset(cfg, section), PROTO_SOURCE_CONFIG };
		layers[1] =
		    (proto_layer){ declared, layer_preset(cfg, declared), PROTO_SOURCE_CLIENT };
		layers[2] = (proto_layer){ &cfg->defaults, layer_preset(cfg, &cfg->defaults),
			PROTO_SOURCE_DEFAULTS };
		proto_policy_resolve(layers, 3, &policy_memo.policy, &policy_memo.sources);
		policy_memo.preset = proto_policy_preset(layers, 3);
		policy_memo.generation = cfg->generation;
		policy_memo.cfg = cfg;
		policy_memo.section = c;
		policy_memo.declared = declared;
		if (declared != NULL)
			memcpy(&policy_memo.declared_bytes, declared, sizeof *declared);
	}
	*out = policy_memo.policy;
	if (sources != NULL)
		*sources = policy_memo.sources;
	if (preset != NULL)
		*preset = policy_memo.preset;
}

bool
conf_policy_changed(const cbd_conf *old, const cbd_conf *fresh, const char *name,
    const proto_ctx *declared)
{
	proto_policy_sources s_old, s_new;
	const char *p_old, *p_new;
	cb_policy a, b;

	/* Compared with memcmp: the padding must be equal too. */
	memset(&a, 0, sizeof a);
	memset(&b, 0, sizeof b);
	conf_policy(old, name, declared, &a, &s_old, &p_old);
	conf_policy(fresh, name, declared, &b, &s_new, &p_new);
	return memcmp(&a, &b, sizeof a) != 0 || memcmp(&s_old, &s_new, sizeof s_old) != 0 ||
	    !(p_old == p_new || (p_old != NULL && p_new != NULL && strcmp(p_old, p_new) == 0));
}

/* A [preset] section with a built-in's name starts from the built-in's
 * keys: fill in those the section does not set. */
static void
presets_inherit_builtins(cbd_conf *cfg)
{
	conf_circuit *p, *tmp;

	HASH_ITER (hh, cfg->presets, p, tmp) {
		const proto_ctx *builtin = proto_preset_builtin(p->name);

		for (int k = 0; builtin != NULL && k < PROTO_CTX_KEY_COUNT; k++) {
			if (proto_ctx_has(builtin, (proto_ctx_key)k) &&
			    !proto_ctx_has(&p->ctx, (proto_ctx_key)k))
				proto_ctx_set(&p->ctx, (proto_ctx_key)k, builtin->value[k]);
		}
	}
}

/* Do the keys of one section fit together? An error names the key at
 * fault (the first word of the codec's message, which names it) and the
 * line that set it; section is "[defaults]" (name "") or `[KIND "` with
 * the section's name. */
static void
combination_check(conf_loader *ld, const proto_ctx *ctx, const int *key_line, int section_line,
    const char *section, const char *name)
{
	const conf_key *key;
	proto_error err;
	char word[64];
	size_t len;

	if (proto_ctx_check_combination(ctx, "", &err))
		return;
	len = strcspn(err.message, " ");
	snprintf(word, sizeof word, "%.*s", (int)len, err.message);
	key = conf_key_find(CONF_SCOPE_POLICY, word);
	ld->line =
	    key != NULL && key_line[key->ctx_key] != 0 ? key_line[key->ctx_key] : section_line;
	loader_fail(ld, key != NULL ? key->name : "section", "in %s%s%s: %s", section, name,
	    name[0] != '\0' ? "\"]" : "", key != NULL ? err.message + len + 1 : err.message);
}

/* Checks that need the whole file: every preset named exists, and each
 * section's keys fit together. */
static void
sections_check(conf_loader *ld)
{
	cbd_conf *cfg = ld->cfg;
	conf_circuit *c, *tmp;

	presets_inherit_builtins(cfg);
	if (proto_ctx_has(&cfg->defaults, PROTO_CTX_PRESET) &&
	    conf_preset_find(cfg, cfg->defaults.preset) == NULL) {
		ld->line = ld->defaults_key_line[PROTO_CTX_PRESET];
		loader_fail(ld, "preset", "in [defaults]: no preset named \"%s\"",
		    cfg->defaults.preset);
	}
	combination_check(ld, &cfg->defaults, ld->defaults_key_line, ld->defaults_line,
	    "[defaults]", "");
	HASH_ITER (hh, cfg->circuits, c, tmp) {
		if (proto_ctx_has(&c->ctx, PROTO_CTX_PRESET) &&
		    conf_preset_find(cfg, c->ctx.preset) == NULL) {
			ld->line = c->key_line[PROTO_CTX_PRESET];
			loader_fail(ld, "preset", "in [circuit \"%s\"]: no preset named \"%s\"",
			    c->name, c->ctx.preset);
		}
		combination_check(ld, &c->ctx, c->key_line, c->line, "[circuit \"", c->name);
	}
	HASH_ITER (hh, cfg->presets, c, tmp)
		combination_check(ld, &c->ctx, c->key_line, c->line, "[preset \"", c->name);
}

bool
conf_is_admin(const cbd_conf *cfg, uid_t uid, gid_t gid)
{
	if (uid == 0 || uid == geteuid())
		return true;
	for (size_t i = 0; i < cfg->admin_uid_count; i++) {
		if (cfg->admin_uids[i] == uid)
			return true;
	}
	for (size_t i = 0; i < cfg->admin_gid_count; i++) {
		if (cfg->admin_gids[i] == gid)
			return true;
	}
	return false;
}

size_t
conf_fixed_changed(const cbd_conf *fresh, const cbd_conf *old, const char **names, size_t max)
{
	size_t n = 0;

	for (size_t i = 0; i < KEY_COUNT; i++) {
		const conf_key *key = &keys[i];
		const char *a = (const char *)fresh + key->offset;
		const char *b = (const char *)old + key->offset;
		bool differs;

		if (key->scope != CONF_SCOPE_CBD || key->reloadable)
			continue;
		if (key->type == CONF_INT || key->type == CONF_OCTAL || key->type == CONF_LEVEL)
			differs =
			    *(const int64_t *)(const void *)a != *(const int64_t *)(const void *)b;
		else
			differs = strcmp(*(char *const *)(const void *)a,
				      *(char *const *)(const void *)b) != 0;
		if (differs && n < max)
			names[n] = key->name;
		n += differs;
	}
	return n;
}

bool
conf_keep_fixed(cbd_conf *fresh, const cbd_conf *old)
{
	for (size_t i = 0; i < KEY_COUNT; i++) {
		const conf_key *key = &keys[i];
		char *to = (char *)fresh + key->offset;
		const char *from = (const char *)old + key->offset;

		if (key->scope != CONF_SCOPE_CBD || key->reloadable)
			continue;
		switch (key->type) {
		case CONF_INT:
		case CONF_OCTAL:
		case CONF_LEVEL:
			if (*(int64_t *)(void *)to != *(const int64_t *)(const void *)from) {
				if (key->type == CONF_OCTAL)
					log_warning("reload: %s cannot change without a restart; "
						    "keeping 0%llo",
					    key->name,
					    (unsigned long long)*(
						const int64_t *)(const void *)from);
				else
					log_warning("reload: %s cannot change without a restart; "
						    "keeping %lld",
					    key->name,
					    (long long)*(const int64_t *)(const void *)from);
				*(int64_t *)(void *)to = *(const int64_t *)(const void *)from;
			}
			break;
		case CONF_STRING:
		case CONF_USERS:
		case CONF_GROUPS: {
			char **t = (char **)(void *)to;
			char *const *f = (char *const *)(const void *)from;
			char *copy;

			if (strcmp(*t, *f) == 0)
				break;
			log_warning("reload: %s cannot change without a restart; keeping \"%s\"",
			    key->name, *f);
			copy = strdup(*f);
			if (copy == NULL)
				return false;
			free(*t);
			*t = copy;
			break;
		}
		}
	}
	return true;
}

bool
conf_metrics_listen_valid(const char *addr_text, const char **why)
{
	char host[64];
	const char *colon = strrchr(addr_text, ':');
	unsigned char addr[16];
	long port;
	char *end;

	*why = "must be HOST:PORT with a loopback HOST (127.0.0.1, [::1] or localhost)";
	if (colon == NULL || (size_t)(colon - addr_text) >= sizeof host || colon == addr_text)
		return false;
	memcpy(host, addr_text, (size_t)(colon - addr_text));
	host[colon - addr_text] = '\0';
	port = strtol(colon + 1, &end, 10);
	if (*end != '\0' || end == colon + 1 || port < 1 || port > 65535) {
		*why = "port must be 1 to 65535";
		return false;
	}
	if (strcmp(host, "localhost") == 0 || strcmp(host, "[::1]") == 0)
		return true;
	if (inet_pton(AF_INET, host, addr) == 1 && addr[0] == 127)
		return true;
	*why = "only loopback addresses may serve metrics (127.0.0.0/8, [::1], localhost)";
	return false;
}
