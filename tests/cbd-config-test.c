/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cbd-config-test.c — cbd's configuration: the loader (good files, every
 * kind of error naming file, line and key), policy layering, `cbd -t`,
 * and a check that conf/cbd.conf, proto/PROTOCOL.md and cbd.conf(5)
 * document every key of the key table.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <check.h>

#include "check-run.h"
#include "conf.h"
#include "daemon-util.h"
#include "log.h"

static char dir[64];
static char path[128];

static void
setup(void)
{
	snprintf(dir, sizeof dir, "/tmp/cbd-conf-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(path, sizeof path, "%s/test.conf", dir);
	log_set_level(LOG_LEVEL_ERROR);
}

static void
teardown(void)
{
	unlink(path);
	rmdir(dir);
}

static void
write_conf(const char *text)
{
	FILE *f = fopen(path, "w");

	ck_assert_ptr_nonnull(f);
	fputs(text, f);
	fclose(f);
}

/* Load text; it must fail with an error holding "path:line: key:". */
static void
expect_error(const char *text, int line, const char *key, const char *also)
{
	char err[CONF_ERROR_SIZE], want[256];
	cbd_conf cfg;

	write_conf(text);
	ck_assert_msg(!conf_load(path, &cfg, err, sizeof err), "loaded: %s", text);
	snprintf(want, sizeof want, "%s:%d: %s", path, line, key);
	ck_assert_msg(strstr(err, want) != NULL, "error \"%s\" lacks \"%s\"", err, want);
	if (also != NULL)
		ck_assert_msg(strstr(err, also) != NULL, "error \"%s\" lacks \"%s\"", err, also);
}

START_TEST(test_defaults)
{
	cbd_conf cfg;
	cb_policy p;

	ck_assert(conf_init_defaults(&cfg));
	ck_assert_str_eq(cfg.socket, "/run/cbd/cbd.sock");
	ck_assert_int_eq(cfg.socket_mode, 0660);
	ck_assert_int_eq(cfg.max_line_bytes, 65536);
	ck_assert_int_eq(cfg.max_circuits, 1000000);
	ck_assert_int_eq(cfg.log_level, LOG_LEVEL_INFO);
	ck_assert_int_eq(cfg.open_warning_interval, 60);
	ck_assert_int_eq(cfg.idle_reclaim_ms, 3600000);
	ck_assert_int_eq(cfg.max_slots, 65536);
	ck_assert_str_eq(cfg.state_file, "");
	conf_policy(&cfg, "x", NULL, &p, NULL, NULL);
	ck_assert_int_eq(p.failure_threshold, 5);
	ck_assert_int_eq(p.success_threshold, 2);
	ck_assert_int_eq(p.break_ms, 30000);
	ck_assert_int_eq(p.half_open_max, 1);
	ck_assert_int_eq(p.slot_ttl_ms, 30000);
	ck_assert_int_eq(p.max_gap_ms, 0);
	conf_free(&cfg);
}
END_TEST

START_TEST(test_full_file_and_layers)
{
	char err[CONF_ERROR_SIZE];
	proto_ctx req = { 0 };
	proto_policy_sources src;
	cbd_conf cfg;
	cb_policy p;

	write_conf("# comment\n"
		   "[cbd]\n"
		   "socket = /tmp/x.sock\n"
		   "socket_mode = 0600\n"
		   "max_line_bytes = 1024 ; inline comment\n"
		   "max_slots = 99 # a '#' comment after a value works too\n"
		   "max_circuits = 10\n"
		   "max_connections = 5\n"
		   "max_output_bytes = 100000\n"
		   "admin_users = root, 65534\n"
		   "admin_groups = 0\n"
		   "log_level = debug\n"
		   "open_warning_interval = 0\n"
		   "[defaults]\n"
		   "failure_threshold = 7\n"
		   "break_ms = 1000\n"
		   "[circuit \"pay ments\"]\n"
		   "failure_threshold = 2\n"
		   "max_gap_ms = 50\n");
	ck_assert_msg(conf_load(path, &cfg, err, sizeof err), "%s", err);
	ck_assert_str_eq(cfg.socket, "/tmp/x.sock");
	ck_assert_int_eq(cfg.socket_mode, 0600);
	ck_assert_int_eq(cfg.max_line_bytes, 1024);
	ck_assert_int_eq(cfg.max_slots, 99);
	ck_assert_int_eq(cfg.max_circuits, 10);
	ck_assert_int_eq(cfg.max_connections, 5);
	ck_assert_int_eq(cfg.max_output_bytes, 100000);
	ck_assert_int_eq(cfg.log_level, LOG_LEVEL_DEBUG);
	ck_assert_int_eq(cfg.open_warning_interval, 0);
	ck_assert(conf_is_admin(&cfg, 65534, 65534));
	ck_assert(conf_is_admin(&cfg, 1234, 0));
	ck_assert(!conf_is_admin(&cfg, 1234, 1234) || geteuid() == 1234);
	conf_policy(&cfg, "other", NULL, &p, NULL, NULL);
	ck_assert_int_eq(p.failure_threshold, 7);
	ck_assert_int_eq(p.slot_ttl_ms, 1000);
	conf_policy(&cfg, "pay ments", NULL, &p, NULL, NULL);
	ck_assert_int_eq(p.failure_threshold, 2);
	ck_assert_int_eq(p.break_ms, 1000);
	ck_assert_int_eq(p.max_gap_ms, 50);
	/* Protocol 2: the operator's section beats what a client declared;
	 * a client's declaration beats [defaults]. */
	proto_ctx_set(&req, PROTO_CTX_FAILURE_THRESHOLD, 9);
	proto_ctx_set(&req, PROTO_CTX_BREAK_MS, 77);
	conf_policy(&cfg, "pay ments", &req, &p, &src, NULL);
	ck_assert_int_eq(p.failure_threshold, 2);
	ck_assert_int_eq(src.key[PROTO_CTX_FAILURE_THRESHOLD], PROTO_SOURCE_CONFIG);
	ck_assert_int_eq(p.break_ms, 77);
	ck_assert_int_eq(src.key[PROTO_CTX_BREAK_MS], PROTO_SOURCE_CLIENT);
	ck_assert_int_eq(src.key[PROTO_CTX_SUCCESS_THRESHOLD], PROTO_SOURCE_BUILTIN);
	conf_policy(&cfg, "other", NULL, &p, &src, NULL);
	ck_assert_int_eq(src.key[PROTO_CTX_FAILURE_THRESHOLD], PROTO_SOURCE_DEFAULTS);
	conf_free(&cfg);
}
END_TEST

START_TEST(test_errors_name_file_line_key)
{
	expect_error("[cbd]\nbogus = 1\n", 2, "bogus", "unknown key");
	expect_error("[cbd]\n\nmax_line_bytes = 12\n", 3, "max_line_bytes", "256");
	expect_error("[cbd]\nmax_circuits = 0\n", 2, "max_circuits", NULL);
	expect_error("[cbd]\nmax_circuits = ten\n", 2, "max_circuits", "ten");
	expect_error("[cbd]\nmax_circuits = 99999999999999999999999\n", 2, "max_circuits", NULL);
	expect_error("[cbd]\nsocket_mode = 0999\n", 2, "socket_mode", "octal");
	expect_error("[cbd]\nlog_level = loud\n", 2, "log_level", "loud");
	expect_error("[cbd]\nopen_warning_interval = -1\n", 2, "open_warning_interval", NULL);
	expect_error("[cbd]\nfleet_coalesce_ms = -1\n", 2, "fleet_coalesce_ms", NULL);
	expect_error("[cbd]\nfleet_coalesce_ms = 1001\n", 2, "fleet_coalesce_ms", NULL);
	expect_error("[cbd]\nfleet_coalesce_ms = 2ms\n", 2, "fleet_coalesce_ms", "2ms");
	expect_error("[defaults]\nfailure_threshold = 0\n", 2, "failure_threshold", NULL);
	expect_error("[defaults]\nbreak_ms = 1.5\n", 2, "break_ms", NULL);
	expect_error("[defaults]\nnow = 5\n", 2, "now", "unknown key");
	expect_error("[defaults]\nsocket = /x\n", 2, "socket", "unknown key");
	expect_error("[cbd]\nsocket = /x\n[circuit \"a\"]\nhalf_open_max = 0\n", 4, "half_open_max",
	    NULL);
	expect_error("[circuits \"a\"]\nbreak_ms = 5\n", 2, "break_ms", "section");
	expect_error("[circuit \"\"]\nbreak_ms = 5\n", 2, "break_ms", "circuit section names");
	/* Trip rules: unknown presets (even defined later), nested presets,
	 * enums, and sizes that do not fit their window. */
	expect_error("[circuit \"x\"]\nbreak_ms = 5\npreset = nope\n", 3, "preset",
	    "no preset named \"nope\"");
	expect_error("[defaults]\npreset = nope\n", 2, "preset", "no preset named");
	expect_error("[preset \"p\"]\npreset = database\n", 2, "preset", "cannot name another");
	expect_error("[defaults]\ntrip = ratio\n", 2, "trip", "\"consecutive\" or \"rate\"");
	/* A combination error names the key at fault and the line setting it. */
	expect_error("[circuit \"w\"]\ntrip = rate\nwindow = time\nwindow_size = 10\n", 4,
	    "window_size", "in [circuit \"w\"]: must be from 1000");
	expect_error("[defaults]\nbreak_ms = 5000\nbreak_max_ms = 10\n", 3, "break_max_ms",
	    "in [defaults]: must not be below break_ms");
	expect_error("[preset \"p\"]\nwindow_size = 50000\nfailure_rate = 20\n", 2, "window_size",
	    "in [preset \"p\"]");
	expect_error("[preset \"bad name!\"]\ntrip = rate\n", 2, "trip", "preset section names");
	expect_error("[cbd]\nsocket =\n", 2, "socket", "must not be empty");
	expect_error("[cbd]\nsocket_group = no-such-group-here\n", 2, "socket_group",
	    "no such group");
	expect_error("[defaults]\nbreak_ms = 5\nfailure_threshold = 2\nbreak_ms = 6\n", 4,
	    "break_ms", "set twice in [defaults] (first on line 2)");
	expect_error("[cbd]\nmetrics_listen = 0.0.0.0:9464\n", 2, "metrics_listen", "loopback");
	/* The Redis address: Sentinel's form names its sentinels and master. */
	expect_error("[cbd]\nredis = redis://h:1\n", 2, "redis", "sentinel://");
	expect_error("[cbd]\nredis = sentinel://h:1\n", 2, "redis", "/master");
	expect_error("[cbd]\nredis = sentinel://h:1,h/m\n", 2, "redis", "host:port");
	expect_error("[cbd]\nredis = sentinel://h:0/m\n", 2, "redis", "1 to 65535");
	expect_error("[cbd]\nredis = sentinel://h:1/m m\n", 2, "redis", "master name");
	expect_error("[cbd]\nredis = "
		     "sentinel://h:1,h:2,h:3,h:4,h:5,h:6,h:7,h:8,h:9/m\n",
	    2, "redis", "at most 8");
	expect_error("[circuit a]\nbreak_ms = 5\n", 2, "break_ms", "section");
	expect_error("[cbd]\nadmin_users = no-such-user-here\n", 2, "admin_users",
	    "no-such-user-here");
	{
		/* Lines past libinih's buffer: a comment is fine, a setting is not. */
		char text[1200];

		snprintf(text, sizeof text,
		    "# %0400d\n[cbd]\nadmin_users = %0500d\nmax_circuits = 0\n", 0, 0);
		expect_error(text, 3, "", "line is longer than");
		snprintf(text, sizeof text, "# %0400d\n[cbd]\nmax_circuits = 0\n", 0);
		expect_error(text, 3, "max_circuits", NULL);
	}
	expect_error("[cbd]\nlog_level = info\nadmin_groups = no-such-group-here\n", 3,
	    "admin_groups", NULL);
}
END_TEST

/* Every error of a file is reported, one a line, in line order, each
 * with its line and key; so is every bad admin and every syntax error. */
START_TEST(test_every_error_reported)
{
	char err[CONF_ERROR_SIZE], want[256];
	const char *p;
	cbd_conf cfg;
	int lines = 0;

	write_conf("[cbd]\n"
		   "max_circuits = 0\n"
		   "no equals here\n"
		   "admin_users = no-such-user-a, no-such-user-b\n"
		   "[circuit \"x\"]\n"
		   "trip = rate\n"
		   "window = time\n"
		   "window_size = 10\n"
		   "failure_threshold = 0\n"
		   "[circuits \"bad\"]\n"
		   "break_ms = 5\n"
		   "break_ms = 6\n");
	ck_assert(!conf_load(path, &cfg, err, sizeof err));
	for (p = err; p != NULL; p = strchr(p + 1, '\n'))
		lines++;
	ck_assert_msg(lines == 8, "%d errors: %s", lines, err);
	{
		static const char *const each[] = { ":2: max_circuits:", ":3: syntax error",
			":4: admin_users: no such user \"no-such-user-a\"",
			":4: admin_users: no such user \"no-such-user-b\"",
			":8: window_size: in [circuit \"x\"]",
			":9: failure_threshold:", ":11: break_ms: in [circuits \"bad\"]",
			":12: break_ms: set twice" };
		const char *at = err;

		for (size_t i = 0; i < sizeof each / sizeof each[0]; i++) {
			snprintf(want, sizeof want, "%s%s", path, each[i]);
			p = strstr(at, want);
			ck_assert_msg(p != NULL, "\"%s\" missing or out of order in:\n%s", want,
			    err);
			at = p;
		}
	}
	/* Past CONF_ERRORS_MAX the rest are counted. */
	{
		char text[4096];
		size_t len = (size_t)snprintf(text, sizeof text, "[cbd]\n");

		for (int i = 0; i < CONF_ERRORS_MAX + 3; i++)
			len += (size_t)snprintf(text + len, sizeof text - len, "bogus%d = 1\n", i);
		write_conf(text);
		ck_assert(!conf_load(path, &cfg, err, sizeof err));
		ck_assert_msg(strstr(err, "and 3 more errors") != NULL, "%s", err);
	}
}
END_TEST

START_TEST(test_syntax_error_and_missing_file)
{
	char err[CONF_ERROR_SIZE], want[200];
	cbd_conf cfg;

	write_conf("[cbd]\nmax_circuits = 5\nthis line has no equals sign\n");
	ck_assert(!conf_load(path, &cfg, err, sizeof err));
	snprintf(want, sizeof want, "%s:3: syntax error", path);
	ck_assert_msg(strstr(err, want) != NULL, "got %s", err);
	ck_assert(!conf_load("/nonexistent/cbd.conf", &cfg, err, sizeof err));
	ck_assert_msg(strstr(err, "/nonexistent/cbd.conf") != NULL, "got %s", err);
}
END_TEST

START_TEST(test_keep_fixed_on_reload)
{
	char err[CONF_ERROR_SIZE];
	cbd_conf old, fresh;

	write_conf("[cbd]\nsocket = /tmp/a.sock\nmax_circuits = 5\n");
	ck_assert(conf_load(path, &old, err, sizeof err));
	write_conf("[cbd]\nsocket = /tmp/b.sock\nsocket_mode = 0600\nmax_circuits = 6\n");
	ck_assert(conf_load(path, &fresh, err, sizeof err));
	conf_keep_fixed(&fresh, &old);
	ck_assert_str_eq(fresh.socket, "/tmp/a.sock");
	ck_assert_int_eq(fresh.socket_mode, 0660);
	ck_assert_int_eq(fresh.max_circuits, 6);
	conf_free(&old);
	conf_free(&fresh);
}
END_TEST

/* The whole text of srcdir/rel. */
static char *
read_source(const char *rel)
{
	const char *srcdir = getenv("CBD_SRCDIR");
	char p[1024];
	char *buf;
	long n;
	FILE *f;

	ck_assert_msg(srcdir != NULL, "CBD_SRCDIR is not set");
	snprintf(p, sizeof p, "%s/%s", srcdir, rel);
	f = fopen(p, "r");
	ck_assert_msg(f != NULL, "cannot open %s", p);
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	fseek(f, 0, SEEK_SET);
	buf = calloc(1, (size_t)n + 1);
	ck_assert_int_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
	fclose(f);
	return buf;
}

/* Does text hold a line "[#]key = value" (value NULL: any)? */
static bool
has_key_line(const char *text, const char *key, const char *value)
{
	const char *line = text;

	while (line != NULL && *line != '\0') {
		const char *p = line, *end = strchr(line, '\n');
		size_t klen = strlen(key);

		if (*p == '#' || *p == ';')
			p++;
		if (strncmp(p, key, klen) == 0) {
			p += klen;
			while (*p == ' ')
				p++;
			if (*p == '=') {
				size_t vlen = end != NULL ? (size_t)(end - p - 1) : strlen(p + 1);

				p++;
				while (*p == ' ' && vlen > 0) {
					p++;
					vlen--;
				}
				if (value == NULL ||
				    (strlen(value) == vlen && strncmp(p, value, vlen) == 0))
					return true;
			}
		}
		line = end != NULL ? end + 1 : NULL;
	}
	return false;
}

START_TEST(test_every_key_documented)
{
	char *conf = read_source("conf/cbd.conf");
	char *doc = read_source("proto/PROTOCOL.md");
	char *man = read_source("conf/cbd.conf.5");

	for (size_t i = 0; i < conf_key_count(); i++) {
		const conf_key *k = conf_key_at(i);
		const char *def = k->default_text;
		/* Defaults that are words ("break_ms", "unset", "none") are explained in
		 * prose; the others must be the value of the example line. */
		bool literal = strcmp(def, "break_ms") != 0 && strcmp(def, "unset") != 0 &&
		    strcmp(def, "none") != 0;
		char quoted[128];

		ck_assert_msg(has_key_line(conf, k->name, literal ? def : NULL),
		    "conf/cbd.conf does not document \"%s = %s\"", k->name, def);
		snprintf(quoted, sizeof quoted, "`%s`", k->name);
		ck_assert_msg(strstr(doc, quoted) != NULL, "proto/PROTOCOL.md does not document %s",
		    quoted);
		/* cbd.conf(5) lists each key as ".BR key ..." or ".B key". */
		snprintf(quoted, sizeof quoted, "\n.BR %s ", k->name);
		ck_assert_msg(strstr(man, quoted) != NULL ||
			(snprintf(quoted, sizeof quoted, "\n.B %s\n", k->name) > 0 &&
			    strstr(man, quoted) != NULL),
		    "conf/cbd.conf.5 does not document %s", k->name);
	}
	/* And the example itself is valid. */
	{
		char err[CONF_ERROR_SIZE], p[1024];
		cbd_conf cfg;

		snprintf(p, sizeof p, "%s/conf/cbd.conf", getenv("CBD_SRCDIR"));
		ck_assert_msg(conf_load(p, &cfg, err, sizeof err), "%s", err);
		conf_free(&cfg);
	}
	free(conf);
	free(doc);
	free(man);
}
END_TEST

START_TEST(test_check_option)
{
	const char *binary = getenv("CBD_BINARY");
	char out[4096], want[256];
	int rc;

	ck_assert_msg(binary != NULL, "CBD_BINARY is not set");
	write_conf("[cbd]\nmax_circuits = 10\n");
	{
		const char *argv[] = { binary, "-t", "-c", path, NULL };

		rc = util_run(argv, out, sizeof out);
		ck_assert_msg(rc == 0, "exit %d: %s", rc, out);
		ck_assert_msg(strstr(out, "valid") != NULL, "got %s", out);
	}
	write_conf("[cbd]\nmax_circuits = 10\nmax_connections = 0\n");
	{
		const char *argv[] = { binary, "-t", "-c", path, NULL };

		rc = util_run(argv, out, sizeof out);
		ck_assert_msg(rc == 1, "exit %d: %s", rc, out);
		snprintf(want, sizeof want, "%s:3: max_connections", path);
		ck_assert_msg(strstr(out, want) != NULL, "got %s", out);
	}
	/* -t prints every error, each on its own "cbd: " line. */
	write_conf("[cbd]\nmax_circuits = 0\n[circuit \"x\"]\ntrip = rate\nwindow = time\n"
		   "window_size = 10\n");
	{
		const char *argv[] = { binary, "-t", "-c", path, NULL };

		rc = util_run(argv, out, sizeof out);
		ck_assert_msg(rc == 1, "exit %d: %s", rc, out);
		snprintf(want, sizeof want, "cbd: %s:2: max_circuits", path);
		ck_assert_msg(strstr(out, want) != NULL, "got %s", out);
		snprintf(want, sizeof want, "\ncbd: %s:6: window_size: in [circuit \"x\"]", path);
		ck_assert_msg(strstr(out, want) != NULL, "got %s", out);
	}
	{
		const char *argv[] = { binary, "-t", "-c", "/nonexistent.conf", NULL };

		rc = util_run(argv, out, sizeof out);
		ck_assert_msg(rc == 1, "exit %d: %s", rc, out);
	}
	/* Everything start-up would refuse, -t refuses: a directory, an empty
	 * socket, a group that does not exist. */
	{
		const char *argv[] = { binary, "-t", "-c", "/tmp", NULL };

		rc = util_run(argv, out, sizeof out);
		ck_assert_msg(rc == 1 && strstr(out, "not a regular file") != NULL, "exit %d: %s",
		    rc, out);
	}
	{
		const char *argv[] = { binary, "--check", "--config", "/nonexistent.conf", NULL };

		rc = util_run(argv, out, sizeof out);
		ck_assert_msg(rc == 1, "exit %d: %s", rc, out);
	}
	{
		const char *argv[] = { binary, "--version", NULL };

		rc = util_run(argv, out, sizeof out);
		ck_assert_msg(rc == 0 && strstr(out, "protocol 3") != NULL, "got %s", out);
	}
	{
		const char *argv[] = { binary, "--help", NULL };

		rc = util_run(argv, out, sizeof out);
		ck_assert_msg(rc == 0 && strstr(out, "--config") != NULL, "got %s", out);
	}
	{
		const char *argv[] = { binary, "-x", NULL };

		rc = util_run(argv, out, sizeof out);
		ck_assert_msg(rc == 2, "exit %d: %s", rc, out);
		ck_assert_msg(strstr(out, "usage") != NULL, "got %s", out);
	}
	{
		const char *argv[] = { binary, "-V", NULL };

		rc = util_run(argv, out, sizeof out);
		ck_assert_msg(rc == 0 && strstr(out, "cbd ") != NULL, "exit %d: %s", rc, out);
	}
	{
		const char *argv[] = { binary, "-h", NULL };

		rc = util_run(argv, out, sizeof out);
		ck_assert_msg(rc == 0 && strstr(out, "-t") != NULL, "exit %d: %s", rc, out);
	}
}
END_TEST

static Suite *
config_suite(void)
{
	Suite *s = suite_create("cbd-config");
	TCase *tc = tcase_create("config");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_defaults);
	tcase_add_test(tc, test_full_file_and_layers);
	tcase_add_test(tc, test_errors_name_file_line_key);
	tcase_add_test(tc, test_every_error_reported);
	tcase_add_test(tc, test_syntax_error_and_missing_file);
	tcase_add_test(tc, test_keep_fixed_on_reload);
	tcase_add_test(tc, test_every_key_documented);
	tcase_add_test(tc, test_check_option);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	return check_run(config_suite(), NULL);
}
