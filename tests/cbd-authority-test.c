/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cbd-authority-test.c — protocol 2's "cbd is the host's authority" rules
 * against a real cbd: the circuit owns its policy (first declaration wins,
 * the config beats clients, SIGHUP re-resolves live circuits), holds (a
 * held open circuit outlasts its break and ends at its ttl, audit lines),
 * cas restricted for non-admins, and durable state (kill -9 after a trip
 * and after a hold, holds that end while cbd is down, a corrupt file moved
 * aside).
 */
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <check.h>
#include <jansson.h>

#include "cbd-harness.h"
#include "check-run.h"
#include "daemon-util.h"

static cbd_harness h;
static char log_path[UTIL_LOG_PATH_SIZE];
static char state_dir[64];
static char state_path[128];

static void
setup(void)
{
	util_log_create(log_path);
	snprintf(state_dir, sizeof state_dir, "/tmp/cbd-state-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(state_dir));
	snprintf(state_path, sizeof state_path, "%s/state.json", state_dir);
}

static void
teardown(void)
{
	DIR *d;
	struct dirent *e;
	char path[400];

	harness_stop(&h);
	unlink(log_path);
	d = opendir(state_dir);
	while (d != NULL && (e = readdir(d)) != NULL) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof path, "%s/%s", state_dir, e->d_name);
		unlink(path);
	}
	if (d != NULL)
		closedir(d);
	rmdir(state_dir);
}

/* The config text of the state tests: state_file plus extra lines. */
static const char *
state_config(const char *extra)
{
	static char text[1024];

	snprintf(text, sizeof text, "[cbd]\nstate_file = %s\n%s", state_path, extra);
	return text;
}

/* A request as uid/gid 65534 (nobody); the reply parsed. */
static json_t *
as_nobody(const char *req)
{
	char reply[65536];
	json_t *r;

	chmod(h.dir, 0755);
	ck_assert(util_request_as(&h, 65534, 65534, req, reply, sizeof reply));
	r = json_loads(reply, 0, NULL);
	ck_assert_msg(r != NULL, "bad reply %s", reply);
	return r;
}

/* Wait (bounded) until cbd has written its state file at least once and
 * no write followed for 300 ms. */
static void
writes_settle(int fd)
{
	int64_t deadline = harness_mono_ms() + harness_timeout_ms(), last = -1;

	for (;;) {
		json_t *r = util_call_ok(fd, "{\"op\":\"stats\"}");
		int64_t writes = util_int(r, "state_writes");

		json_decref(r);
		if (writes >= 1 && writes == last)
			return;
		last = writes;
		ck_assert_msg(harness_mono_ms() < deadline, "the state file was never written");
		harness_sleep_ms(300);
	}
}

START_TEST(test_first_declaration_wins)
{
	int a, b, c;
	json_t *r;

	util_start_logged(&h, NULL, NULL, log_path);
	a = harness_connect(&h);
	b = harness_connect(&h);
	c = harness_connect(&h);
	r = util_call_ok(a,
	    "{\"op\":\"record_failure\",\"name\":\"shared\",\"ctx\":{\"failure_threshold\":2}}");
	ck_assert_ptr_null(util_get(r, "policy_conflict"));
	json_decref(r);
	/* b declares another threshold: the circuit keeps a's, b is told. */
	r = util_call_ok(b,
	    "{\"op\":\"record_failure\",\"name\":\"shared\",\"policy\":true,"
	    "\"ctx\":{\"failure_threshold\":10}}");
	ck_assert_str_eq(util_str(r, "snapshot.state"), "open");
	ck_assert_int_eq(util_int(r, "snapshot.policy.failure_threshold"), 2);
	ck_assert_str_eq(util_str(r, "snapshot.policy.source.failure_threshold"), "client");
	ck_assert_str_eq(util_str(r, "policy_conflict.0"), "failure_threshold");
	ck_assert_ptr_null(util_get(r, "policy_conflict.1"));
	json_decref(r);
	/* One warning per circuit and connection. */
	json_decref(util_call_ok(b,
	    "{\"op\":\"get\",\"name\":\"shared\",\"ctx\":{\"failure_threshold\":10}}"));
	ck_assert(util_wait_file(log_path, "declares a policy that differs"));
	json_decref(util_call_ok(c,
	    "{\"op\":\"allow\",\"name\":\"shared\",\"ctx\":{\"failure_threshold\":7}}"));
	r = util_call_ok(a, "{\"op\":\"stats\"}");
	ck_assert_int_eq(util_int(r, "policy_conflicts"), 3);
	json_decref(r);
	ck_assert_int_eq(util_log_count(log_path, "declares a policy that differs"), 2);
	/* v1's surprise, gone: a record declaring a short break, then a plain
	 * allow, answers with the circuit's own break. */
	json_decref(util_call_ok(a,
	    "{\"op\":\"record\",\"name\":\"quick\",\"outcome\":\"failure\","
	    "\"ctx\":{\"failure_threshold\":1,\"break_ms\":100}}"));
	r = util_call_ok(b, "{\"op\":\"allow\",\"name\":\"quick\"}");
	ck_assert(!util_bool(r, "allowed"));
	ck_assert_int_le(util_int(r, "retry_after_ms"), 100);
	json_decref(r);
	close(a);
	close(b);
	close(c);
}
END_TEST

START_TEST(test_config_beats_client_and_reload_changes_live_policy)
{
	int a;
	json_t *r;

	util_start_logged(&h, "[circuit \"payments\"]\nfailure_threshold = 2\nbreak_ms = 100000\n",
	    NULL, log_path);
	a = harness_connect(&h);
	/* The README's client snippet declares 5: the operator's 2 rules. */
	r = util_call_ok(a,
	    "{\"op\":\"record_failure\",\"name\":\"payments\",\"policy\":true,"
	    "\"ctx\":{\"failure_threshold\":5}}");
	ck_assert_int_eq(util_int(r, "snapshot.policy.failure_threshold"), 2);
	ck_assert_str_eq(util_str(r, "snapshot.policy.source.failure_threshold"), "config");
	ck_assert_str_eq(util_str(r, "policy_conflict.0"), "failure_threshold");
	json_decref(r);
	r = util_call_ok(a, "{\"op\":\"record_failure\",\"name\":\"payments\"}");
	ck_assert_str_eq(util_str(r, "snapshot.state"), "open");
	ck_assert_int_gt(util_int(r, "snapshot.retry_after_ms"), 90000);
	json_decref(r);
	/* SIGHUP: the live circuit takes the new break at once. */
	FILE *f = fopen(h.config_path, "w");
	ck_assert_ptr_nonnull(f);
	fputs("[circuit \"payments\"]\nfailure_threshold = 2\nbreak_ms = 50\n", f);
	fclose(f);
	ck_assert_int_eq(kill(h.pid, SIGHUP), 0);
	ck_assert(util_stats_reach(a, "reloads", 1));
	r = util_call_ok(a, "{\"op\":\"get\",\"name\":\"payments\"}");
	ck_assert_int_eq(util_int(r, "snapshot.policy.break_ms"), 50);
	ck_assert_int_le(util_int(r, "snapshot.retry_after_ms"), 50);
	json_decref(r);
	/* A key removed from the file falls back to the client's declaration. */
	f = fopen(h.config_path, "w");
	ck_assert_ptr_nonnull(f);
	fputs("[defaults]\nbreak_ms = 60000\n", f);
	fclose(f);
	ck_assert_int_eq(kill(h.pid, SIGHUP), 0);
	ck_assert(util_stats_reach(a, "reloads", 2));
	r = util_call_ok(a, "{\"op\":\"get\",\"name\":\"payments\"}");
	ck_assert_int_eq(util_int(r, "snapshot.policy.failure_threshold"), 5);
	ck_assert_str_eq(util_str(r, "snapshot.policy.source.failure_threshold"), "client");
	ck_assert_int_eq(util_int(r, "snapshot.policy.break_ms"), 60000);
	ck_assert_str_eq(util_str(r, "snapshot.policy.source.break_ms"), "defaults");
	json_decref(r);
	close(a);
}
END_TEST

/* In virtual time (in the real future, so cbd's own clock leaves the hold
 * alone): a held open circuit refuses past break_ms and ends at its ttl. */
START_TEST(test_hold_outlasts_break_and_ends_at_ttl)
{
	int64_t t = INT64_C(4102444800000);
	int a;
	json_t *r;

	util_start_logged(&h, "[defaults]\nbreak_ms = 50\n", NULL, log_path);
	a = harness_connect(&h);
	r = util_call_ok(a,
	    "{\"op\":\"set_state\",\"name\":\"db\",\"state\":\"open\",\"hold\":true,"
	    "\"ttl_ms\":600,\"reason\":\"deploy 42\",\"ctx\":{\"now\":4102444800000}}");
	ck_assert_str_eq(util_str(r, "snapshot.hold.state"), "open");
	ck_assert_str_eq(util_str(r, "snapshot.hold.reason"), "deploy 42");
	ck_assert_int_eq(util_int(r, "snapshot.hold.until"), t + 600);
	json_decref(r);
	/* Well past break_ms: still refused, still open. */
	r = util_call(a, "{\"op\":\"allow\",\"name\":\"db\",\"ctx\":{\"now\":%lld}}",
	    (long long)(t + 200));
	ck_assert(!util_bool(r, "allowed"));
	ck_assert_str_eq(util_str(r, "state"), "open");
	ck_assert_int_eq(util_int(r, "retry_after_ms"), 400);
	json_decref(r);
	r = util_call(a, "{\"op\":\"get\",\"name\":\"db\",\"ctx\":{\"now\":%lld}}",
	    (long long)(t + 599));
	ck_assert_str_eq(util_str(r, "snapshot.state"), "open");
	json_decref(r);
	/* At its ttl: half_open, trials decide. */
	r = util_call(a, "{\"op\":\"get\",\"name\":\"db\",\"ctx\":{\"now\":%lld}}",
	    (long long)(t + 600));
	ck_assert_str_eq(util_str(r, "snapshot.state"), "half_open");
	ck_assert(json_is_null(util_get(r, "snapshot.hold")));
	json_decref(r);
	ck_assert(util_wait_file(log_path, "open -> half_open (hold expired)"));
	ck_assert(util_wait_file(log_path,
	    "audit: uid 0 (root) held open for 600 ms circuit \"db\", "
	    "reason \"deploy 42\""));
	close(a);
}
END_TEST

/* cbd also ends a hold on its own clock, with no request naming it. */
START_TEST(test_hold_ends_on_cbds_clock)
{
	int64_t t0 = harness_mono_ms();
	int a;
	json_t *r;

	util_start_logged(&h, NULL, NULL, log_path);
	a = harness_connect(&h);
	json_decref(util_call_ok(a,
	    "{\"op\":\"set_state\",\"name\":\"db\",\"state\":\"open\","
	    "\"hold\":true,\"ttl_ms\":300}"));
	ck_assert(util_wait_file(log_path, "open -> half_open (hold expired)"));
	/* Never before its ttl. */
	ck_assert_int_ge(harness_mono_ms() - t0, 300);
	r = util_call_ok(a, "{\"op\":\"stats\"}");
	ck_assert_int_eq(util_int(r, "held"), 0);
	json_decref(r);
	close(a);
}
END_TEST

START_TEST(test_cas_for_non_admins)
{
	int a;
	json_t *r;

	util_start_logged(&h, "[cbd]\nsocket_mode = 0666\n", NULL, log_path);
	a = harness_connect(&h);
	/* Only open -> half_open, and only after the break. */
	r = as_nobody("{\"op\":\"cas\",\"name\":\"c\",\"from\":\"closed\",\"to\":\"open\"}");
	ck_assert_str_eq(util_code(r), "forbidden");
	json_decref(r);
	json_decref(util_call_ok(a,
	    "{\"op\":\"record_failure\",\"name\":\"c\",\"ctx\":{\"now\":1000,"
	    "\"failure_threshold\":1,\"break_ms\":500}}"));
	r = as_nobody("{\"op\":\"cas\",\"name\":\"c\",\"from\":\"open\",\"to\":\"half_open\","
		      "\"ctx\":{\"now\":1400}}");
	ck_assert_str_eq(util_code(r), "forbidden");
	ck_assert_ptr_nonnull(strstr(util_str(r, "error.message"), "break"));
	json_decref(r);
	r = as_nobody("{\"op\":\"cas\",\"name\":\"c\",\"from\":\"half_open\",\"to\":\"closed\"}");
	ck_assert_str_eq(util_code(r), "forbidden");
	json_decref(r);
	r = as_nobody("{\"op\":\"cas\",\"name\":\"c\",\"from\":\"open\",\"to\":\"half_open\","
		      "\"ctx\":{\"now\":1500}}");
	ck_assert(util_bool(r, "applied"));
	ck_assert_str_eq(util_str(r, "snapshot.state"), "half_open");
	json_decref(r);
	/* The state check comes first: a mismatch is applied: false. */
	r = as_nobody("{\"op\":\"cas\",\"name\":\"c\",\"from\":\"open\",\"to\":\"half_open\","
		      "\"ctx\":{\"now\":1600}}");
	ck_assert(!util_bool(r, "applied"));
	json_decref(r);
	/* A held circuit refuses every cas, the admin's too. */
	json_decref(util_call_ok(a,
	    "{\"op\":\"set_state\",\"name\":\"held\",\"state\":\"open\","
	    "\"hold\":true}"));
	r = as_nobody("{\"op\":\"cas\",\"name\":\"held\",\"from\":\"open\",\"to\":\"half_open\","
		      "\"ctx\":{\"now\":4102444800000}}");
	ck_assert(!util_bool(r, "applied"));
	json_decref(r);
	r = util_call_ok(a,
	    "{\"op\":\"cas\",\"name\":\"held\",\"from\":\"open\",\"to\":\"closed\"}");
	ck_assert(!util_bool(r, "applied"));
	json_decref(r);
	/* release is an admin op. */
	r = as_nobody("{\"op\":\"release\",\"name\":\"held\"}");
	ck_assert_str_eq(util_code(r), "forbidden");
	json_decref(r);
	close(a);
}
END_TEST

/* kill -9 200 ms after a trip and after a hold: both are back after a
 * restart, the hold with its reason; a hold whose ttl passes while cbd is
 * down ends at start (held open -> half_open). */
START_TEST(test_state_survives_kill9)
{
	const char *config = state_config("");
	int64_t short_set;
	int a;
	json_t *r;

	util_start_logged(&h, config, NULL, log_path);
	a = harness_connect(&h);
	json_decref(util_call_ok(a,
	    "{\"op\":\"record_failure\",\"name\":\"tripped\",\"ctx\":{"
	    "\"failure_threshold\":1,\"break_ms\":3600000}}"));
	json_decref(util_call_ok(a,
	    "{\"op\":\"set_state\",\"name\":\"held\",\"state\":\"open\","
	    "\"hold\":true,\"reason\":\"db migration\"}"));
	short_set = harness_mono_ms();
	json_decref(util_call_ok(a,
	    "{\"op\":\"set_state\",\"name\":\"short\",\"state\":\"open\","
	    "\"hold\":true,\"ttl_ms\":1500}"));
	json_decref(util_call_ok(a, "{\"op\":\"record_success\",\"name\":\"healthy\"}"));
	harness_sleep_ms(200);
	/* The changes are written within 100 ms on a quiet machine; a loaded
	 * one may take longer, so wait for the writes to settle. */
	writes_settle(a);
	close(a);
	ck_assert_int_eq(kill(h.pid, SIGKILL), 0);
	harness_wait(&h);
	harness_stop(&h);
	/* "short"'s ttl passes while cbd is down (unless the machine is so
	 * slow that it passed before the kill: then cbd ended it itself). */
	while (harness_mono_ms() - short_set < 1600)
		harness_sleep_ms(50);

	util_start_logged(&h, config, NULL, log_path);
	a = harness_connect(&h);
	r = util_call_ok(a, "{\"op\":\"get\",\"name\":\"tripped\"}");
	ck_assert_str_eq(util_str(r, "snapshot.state"), "open");
	ck_assert_int_gt(util_int(r, "snapshot.retry_after_ms"), 3000000);
	ck_assert_int_eq(util_int(r, "snapshot.policy.break_ms"), 3600000);
	ck_assert_int_eq(util_int(r, "snapshot.totals.failures"), 1);
	json_decref(r);
	r = util_call_ok(a, "{\"op\":\"allow\",\"name\":\"held\"}");
	ck_assert(!util_bool(r, "allowed"));
	json_decref(r);
	r = util_call_ok(a, "{\"op\":\"get\",\"name\":\"held\"}");
	ck_assert_str_eq(util_str(r, "snapshot.hold.reason"), "db migration");
	ck_assert_str_eq(util_str(r, "snapshot.hold.state"), "open");
	ck_assert(json_is_null(util_get(r, "snapshot.hold.until")));
	json_decref(r);
	r = util_call_ok(a, "{\"op\":\"get\",\"name\":\"short\"}");
	ck_assert_str_eq(util_str(r, "snapshot.state"), "half_open");
	ck_assert(json_is_null(util_get(r, "snapshot.hold")));
	json_decref(r);
	/* Closed circuits are not kept. */
	r = util_call_ok(a, "{\"op\":\"stats\"}");
	ck_assert_int_eq(util_int(r, "circuits"), 3);
	json_decref(r);
	ck_assert(util_wait_file(log_path, "3 circuits restored"));
	close(a);
}
END_TEST

START_TEST(test_shutdown_writes_state)
{
	const char *config = state_config("");
	int a;
	json_t *r;

	util_start_logged(&h, config, NULL, log_path);
	a = harness_connect(&h);
	json_decref(
	    util_call_ok(a, "{\"op\":\"set_state\",\"name\":\"x\",\"state\":\"half_open\"}"));
	close(a);
	harness_stop(&h);
	util_start_logged(&h, config, NULL, log_path);
	a = harness_connect(&h);
	r = util_call_ok(a, "{\"op\":\"get\",\"name\":\"x\"}");
	ck_assert_str_eq(util_str(r, "snapshot.state"), "half_open");
	json_decref(r);
	/* A deleted circuit is gone from the file too. */
	json_decref(util_call_ok(a, "{\"op\":\"delete\",\"name\":\"x\"}"));
	close(a);
	harness_stop(&h);
	util_start_logged(&h, config, NULL, log_path);
	a = harness_connect(&h);
	r = util_call_ok(a, "{\"op\":\"stats\"}");
	ck_assert_int_eq(util_int(r, "circuits"), 0);
	json_decref(r);
	close(a);
}
END_TEST

/* Is there a file named state.json.bad-* in the state directory? */
static bool
moved_aside(void)
{
	DIR *d = opendir(state_dir);
	struct dirent *e;
	bool found = false;

	while (d != NULL && (e = readdir(d)) != NULL)
		found = found || strncmp(e->d_name, "state.json.bad-", 15) == 0;
	if (d != NULL)
		closedir(d);
	return found;
}

START_TEST(test_corrupt_state_file_moved_aside)
{
	static const char *const bad[] = {
		"{\"format\":\"cbd-state\",\"version\":1,\"circuits\":[{\"name\":",
		"{\"format\":\"cbd-state\",\"version\":99,\"circuits\":[]}",
		("{\"format\":\"cbd-state\",\"version\":1,\"circuits\":[{\"name\":\"x\","
		 "\"state\":\"ajar\"}]}"),
		"\x01\x02 not json",
	};

	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		FILE *f = fopen(state_path, "w");
		int a;
		json_t *r;

		ck_assert_ptr_nonnull(f);
		fputs(bad[i], f);
		fclose(f);
		util_start_logged(&h, state_config(""), NULL, log_path);
		a = harness_connect(&h);
		r = util_call_ok(a, "{\"op\":\"stats\"}");
		ck_assert_int_eq(util_int(r, "circuits"), 0);
		json_decref(r);
		/* cbd works and keeps state again. */
		json_decref(util_call_ok(a,
		    "{\"op\":\"set_state\",\"name\":\"after\",\"state\":\"open\"}"));
		close(a);
		ck_assert_msg(moved_aside(), "case %zu: not moved aside", i);
		ck_assert(util_wait_file(log_path, "moved aside"));
		harness_stop(&h);
		teardown();
		setup();
	}
}
END_TEST

/* Wait (bounded) until cbd has written its whole state file (a
 * compaction: a write that is not an append) at least `least` times. */
static void
compactions_reach(int fd, int64_t least)
{
	int64_t deadline = harness_mono_ms() + harness_timeout_ms();

	for (;;) {
		json_t *r = util_call_ok(fd, "{\"op\":\"stats\"}");
		int64_t whole = util_int(r, "state_writes") - util_int(r, "state_appends");

		json_decref(r);
		if (whole >= least)
			return;
		ck_assert_msg(harness_mono_ms() < deadline,
		    "the state file was never written whole");
		harness_sleep_ms(50);
	}
}

/* Kill cbd with SIGKILL once its changes are appended, and start it
 * again: the journal it replays makes the state file due whole. */
static int
kill9_restart(int a, const char *config)
{
	ck_assert(util_stats_reach_min(a, "state_appends", 1));
	close(a);
	ck_assert_int_eq(kill(h.pid, SIGKILL), 0);
	harness_wait(&h);
	harness_stop(&h);
	util_start_logged(&h, config, NULL, log_path);
	a = harness_connect(&h);
	ck_assert_int_ge(a, 0);
	return a;
}

/* Issue 28 item 5: a FIFO at state.json.tmp neither blocks the writer
 * (the state is written whole, at shutdown and by a compaction) nor
 * SIGTERM; a symlink there is not followed (its target is left as it
 * was). */
START_TEST(test_state_tmp_fifo_and_symlink)
{
	const char *config = state_config("");
	char tmp[160], target[160], buf[64] = "";
	int a, status;
	struct stat st;
	FILE *f;
	json_t *r;

	snprintf(tmp, sizeof tmp, "%s.tmp", state_path);
	snprintf(target, sizeof target, "%s/precious", state_dir);
	/* A FIFO, then SIGTERM: cbd stops (bounded) and writes the file. */
	ck_assert_int_eq(mkfifo(tmp, 0600), 0);
	util_start_logged(&h, config, NULL, log_path);
	a = harness_connect(&h);
	json_decref(util_call_ok(a,
	    "{\"op\":\"set_state\",\"name\":\"fifo\",\"state\":\"open\",\"hold\":true}"));
	ck_assert(util_stats_reach_min(a, "state_appends", 1));
	close(a);
	ck_assert_int_eq(kill(h.pid, SIGTERM), 0);
	status = harness_wait(&h);
	ck_assert_msg(status >= 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0,
	    "cbd did not stop on SIGTERM (status %d)", status);
	harness_stop(&h);
	ck_assert_int_eq(lstat(state_path, &st), 0);
	ck_assert(S_ISREG(st.st_mode));
	/* A symlink at the temp path, to a file cbd must not overwrite; a
	 * compaction (after a kill -9 and a restart) writes the file. */
	f = fopen(target, "w");
	ck_assert_ptr_nonnull(f);
	fputs("precious", f);
	fclose(f);
	ck_assert_int_eq(symlink(target, tmp), 0);
	util_start_logged(&h, config, NULL, log_path);
	a = harness_connect(&h);
	json_decref(util_call_ok(a,
	    "{\"op\":\"set_state\",\"name\":\"link\",\"state\":\"open\",\"hold\":true}"));
	a = kill9_restart(a, config);
	compactions_reach(a, 1);
	f = fopen(target, "r");
	ck_assert_ptr_nonnull(f);
	ck_assert_ptr_nonnull(fgets(buf, sizeof buf, f));
	fclose(f);
	ck_assert_str_eq(buf, "precious");
	ck_assert_int_eq(lstat(state_path, &st), 0);
	ck_assert(S_ISREG(st.st_mode));
	/* A FIFO again: the compaction after a restart is not stuck on it. */
	unlink(tmp);
	ck_assert_int_eq(mkfifo(tmp, 0600), 0);
	json_decref(util_call_ok(a,
	    "{\"op\":\"set_state\",\"name\":\"last\",\"state\":\"open\",\"hold\":true}"));
	a = kill9_restart(a, config);
	compactions_reach(a, 1);
	r = util_call_ok(a, "{\"op\":\"stats\"}");
	ck_assert_int_eq(util_int(r, "circuits"), 3);
	json_decref(r);
	close(a);
}
END_TEST

/* Issue 28 item 5: a FIFO at state.json does not stop cbd from starting:
 * it is moved aside (logged) and cbd keeps its state there again. */
START_TEST(test_state_file_fifo_does_not_block_start)
{
	struct stat st;
	int a;
	json_t *r;

	ck_assert_int_eq(mkfifo(state_path, 0600), 0);
	util_start_logged(&h, state_config(""), NULL, log_path);
	ck_assert(util_wait_file(log_path, "not a regular file"));
	a = harness_connect(&h);
	json_decref(
	    util_call_ok(a, "{\"op\":\"set_state\",\"name\":\"after\",\"state\":\"open\"}"));
	ck_assert(util_stats_reach_min(a, "state_writes", 1));
	r = util_call_ok(a, "{\"op\":\"stats\"}");
	ck_assert_int_eq(util_int(r, "circuits"), 1);
	json_decref(r);
	close(a);
	harness_stop(&h); /* the file is written whole at shutdown */
	ck_assert_int_eq(lstat(state_path, &st), 0);
	ck_assert(S_ISREG(st.st_mode));
	ck_assert(moved_aside());
}
END_TEST

/* Bytes in the state file's journals now. */
static long long
journal_bytes(void)
{
	DIR *d = opendir(state_dir);
	struct dirent *e;
	long long sum = 0;

	while (d != NULL && (e = readdir(d)) != NULL) {
		char path[400];
		struct stat st;

		if (strncmp(e->d_name, "state.json.journal-", 19) != 0)
			continue;
		snprintf(path, sizeof path, "%s/%s", state_dir, e->d_name);
		if (stat(path, &st) == 0)
			sum += st.st_size;
	}
	if (d != NULL)
		closedir(d);
	return sum;
}

/* Issue 28 item 4: with 100,000 held circuits (a state file of ~27 MB),
 * a hold is durable one append after it is placed (the append writes the
 * changed circuits only): a kill -9 as soon as stats.state_appends says
 * so does not lose it. The time and the bytes are printed, not asserted
 * (they were ~1.8 s and 27 MB a write before). */
START_TEST(test_hold_durable_at_scale)
{
	enum { HELD = 100000, BATCH = 2000 };
	const char *config = state_config("");
	static char buf[BATCH * 128];
	long long t0, bytes0;
	int64_t appends;
	int a;
	json_t *r;

	/* Loading 27 MB of state takes seconds (~17 s under ASan): this
	 * test's bounded waits allow three times the usual. */
	char timeout[32];
	const char *was = getenv("CBD_HARNESS_TIMEOUT_MS");
	char *saved = was != NULL ? strdup(was) : NULL;

	snprintf(timeout, sizeof timeout, "%d", 3 * harness_timeout_ms());
	setenv("CBD_HARNESS_TIMEOUT_MS", timeout, 1);
	util_start_logged(&h, config, NULL, log_path);
	a = harness_connect(&h);
	for (int i = 0; i < HELD; i += BATCH) {
		size_t len = 0;

		for (int k = i; k < i + BATCH; k++)
			len += (size_t)snprintf(buf + len, sizeof buf - len,
			    "{\"op\":\"set_state\",\"name\":\"s%06d\",\"state\":\"open\","
			    "\"hold\":true,\"noreply\":true}\n",
			    k);
		ck_assert(util_write_all(a, buf, len));
	}
	ck_assert(util_stats_reach(a, "held", HELD));
	/* The first writes (every circuit changed at once) settle. */
	writes_settle(a);
	r = util_call_ok(a, "{\"op\":\"stats\"}");
	appends = util_int(r, "state_appends");
	json_decref(r);
	bytes0 = journal_bytes();
	t0 = harness_mono_ms();
	json_decref(util_call_ok(a,
	    "{\"op\":\"set_state\",\"name\":\"late\",\"state\":"
	    "\"open\",\"hold\":true,\"reason\":\"placed last\"}"));
	/* Durable once nothing changed is waiting for the journal: batches
	 * take at most 256 circuits, so on a loaded machine the 100,000
	 * above may still be draining when it is placed (two appends after
	 * it were not always enough: it failed once so in CI). */
	json_decref(util_call_ok(a,
	    "{\"op\":\"set_state\",\"name\":\"marker\",\"state\":"
	    "\"open\",\"hold\":true}"));
	ck_assert(util_stats_reach_min(a, "state_appends", appends + 1));
	ck_assert(util_stats_reach(a, "state_pending", 0));
	r = util_call_ok(a, "{\"op\":\"stats\"}");
	fprintf(stderr,
	    "%d held circuits: a hold durable %lld ms after its reply (%lld appends); the "
	    "journal grew %lld bytes\n",
	    HELD, harness_mono_ms() - t0, (long long)(util_int(r, "state_appends") - appends),
	    journal_bytes() - bytes0);
	json_decref(r);
	close(a);
	ck_assert_int_eq(kill(h.pid, SIGKILL), 0);
	harness_wait(&h);
	harness_stop(&h);

	t0 = harness_mono_ms();
	util_start_logged(&h, config, NULL, log_path);
	a = harness_connect(&h);
	r = util_call_ok(a, "{\"op\":\"get\",\"name\":\"late\"}");
	fprintf(stderr, "restart with %d held circuits: %lld ms\n", HELD, harness_mono_ms() - t0);
	ck_assert_str_eq(util_str(r, "snapshot.hold.reason"), "placed last");
	ck_assert_str_eq(util_str(r, "snapshot.state"), "open");
	json_decref(r);
	r = util_call_ok(a, "{\"op\":\"stats\"}");
	ck_assert_int_eq(util_int(r, "held"), HELD + 2);
	json_decref(r);
	close(a);
	if (saved != NULL)
		setenv("CBD_HARNESS_TIMEOUT_MS", saved, 1);
	else
		unsetenv("CBD_HARNESS_TIMEOUT_MS");
	free(saved);
}
END_TEST

/* The state file's bytes (a check assertion when it cannot be read). */
static char *
state_bytes(size_t *len)
{
	FILE *f = fopen(state_path, "rb");
	char *buf = malloc(1 << 20);

	ck_assert_ptr_nonnull(f);
	ck_assert_ptr_nonnull(buf);
	*len = fread(buf, 1, 1 << 20, f);
	fclose(f);
	return buf;
}

/* Issue 28, a gap in the suite: a circuit held closed survives a kill -9
 * and a restart (only held open ones were checked). */
START_TEST(test_hold_closed_survives_restart)
{
	const char *config = state_config("");
	int a;
	json_t *r;

	util_start_logged(&h, config, NULL, log_path);
	a = harness_connect(&h);
	json_decref(util_call_ok(a,
	    "{\"op\":\"set_state\",\"name\":\"pinned\",\"state\":"
	    "\"closed\",\"hold\":true,\"reason\":\"keep serving\"}"));
	ck_assert(util_stats_reach_min(a, "state_writes", 1));
	close(a);
	ck_assert_int_eq(kill(h.pid, SIGKILL), 0);
	harness_wait(&h);
	harness_stop(&h);
	util_start_logged(&h, config, NULL, log_path);
	a = harness_connect(&h);
	r = util_call_ok(a, "{\"op\":\"get\",\"name\":\"pinned\"}");
	ck_assert_str_eq(util_str(r, "snapshot.state"), "closed");
	ck_assert_str_eq(util_str(r, "snapshot.hold.state"), "closed");
	ck_assert_str_eq(util_str(r, "snapshot.hold.reason"), "keep serving");
	json_decref(r);
	/* Still held: failures do not open it. */
	for (int i = 0; i < 10; i++)
		json_decref(util_call_ok(a, "{\"op\":\"record_failure\",\"name\":\"pinned\"}"));
	r = util_call_ok(a, "{\"op\":\"get\",\"name\":\"pinned\"}");
	ck_assert_str_eq(util_str(r, "snapshot.state"), "closed");
	json_decref(r);
	close(a);
}
END_TEST

/* Issue 28, a gap in the suite: a write whose fsync fails (an LD_PRELOAD
 * shim makes every fsync and fdatasync fail) leaves the previous state
 * file in place, byte for byte, and no temp file behind; cbd counts the
 * failures and restarts from the previous file. Renaming before the
 * fsync would pass every other test. */
START_TEST(test_failed_fsync_keeps_previous_state)
{
	static const char *const preload[] = { "LD_PRELOAD=" FSYNC_FAIL_SO, NULL };
	harness_opts opts = { .log_path = log_path, .env = preload };
	const char *config = state_config("");
	char tmp[160], *before, *after;
	size_t before_len, after_len;
	const char *asan = getenv("ASAN_OPTIONS");
	char asan_env[512];
	int a;
	json_t *r;

	util_start_logged(&h, config, NULL, log_path);
	a = harness_connect(&h);
	json_decref(util_call_ok(a,
	    "{\"op\":\"set_state\",\"name\":\"old\",\"state\":\"open\",\"hold\":true}"));
	close(a);
	harness_stop(&h); /* written at shutdown */
	before = state_bytes(&before_len);
	ck_assert_ptr_nonnull(strstr(before, "\"old\""));

	/* gcc's ASan wants its runtime first among preloaded libraries. */
	snprintf(asan_env, sizeof asan_env, "%s%sverify_asan_link_order=0", asan ? asan : "",
	    asan && asan[0] ? ":" : "");
	setenv("ASAN_OPTIONS", asan_env, 1);
	ck_assert_msg(harness_start_opts(&h, config, &opts), "cbd did not start");
	if (asan != NULL)
		setenv("ASAN_OPTIONS", asan, 1);
	else
		unsetenv("ASAN_OPTIONS");
	a = harness_connect(&h);
	json_decref(util_call_ok(a,
	    "{\"op\":\"set_state\",\"name\":\"new\",\"state\":\"open\",\"hold\":true}"));
	ck_assert(util_stats_reach_min(a, "state_write_failures", 2));
	r = util_call_ok(a, "{\"op\":\"stats\"}");
	ck_assert_int_eq(util_int(r, "state_writes"), 0);
	json_decref(r);
	close(a);
	harness_stop(&h); /* the write at shutdown fails too */
	after = state_bytes(&after_len);
	ck_assert_int_eq(after_len, before_len);
	ck_assert_msg(memcmp(before, after, before_len) == 0, "the state file changed");
	snprintf(tmp, sizeof tmp, "%s.tmp", state_path);
	ck_assert(!util_path_exists(tmp));
	free(before);
	free(after);
	ck_assert(util_wait_file(log_path, "cannot write"));

	util_start_logged(&h, config, NULL, log_path);
	a = harness_connect(&h);
	r = util_call_ok(a, "{\"op\":\"get\",\"name\":\"old\"}");
	ck_assert_str_eq(util_str(r, "snapshot.hold.state"), "open");
	json_decref(r);
	close(a);
}
END_TEST

static Suite *
authority_suite(void)
{
	Suite *s = suite_create("authority");
	TCase *tc = tcase_create("authority");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_first_declaration_wins);
	tcase_add_test(tc, test_config_beats_client_and_reload_changes_live_policy);
	tcase_add_test(tc, test_hold_outlasts_break_and_ends_at_ttl);
	tcase_add_test(tc, test_hold_ends_on_cbds_clock);
	tcase_add_test(tc, test_cas_for_non_admins);
	/* The state file is memory mode's durability; in fleet runs each
	 * start gets a fresh key prefix (Redis keeps the fleet's state). */
	if (getenv("CBD_TEST_REDIS_SOCKET") == NULL) {
		tcase_add_test(tc, test_state_survives_kill9);
		tcase_add_test(tc, test_shutdown_writes_state);
	}
	tcase_add_test(tc, test_corrupt_state_file_moved_aside);
	/* Fleet runs: the state file is memory mode's (PROTOCOL.md §15). */
	if (getenv("CBD_TEST_REDIS_SOCKET") == NULL) {
		tcase_add_test(tc, test_state_file_fifo_does_not_block_start);
		tcase_add_test(tc, test_state_tmp_fifo_and_symlink);
		tcase_add_test(tc, test_hold_closed_survives_restart);
		tcase_add_test(tc, test_failed_fsync_keeps_previous_state);
		tcase_add_test(tc, test_hold_durable_at_scale);
	}
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	return check_run(authority_suite(), NULL);
}
