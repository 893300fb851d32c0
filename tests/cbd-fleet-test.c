/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cbd-fleet-test.c — fleet mode (backend = redis, issue 14) with two real
 * cbds ("hosts": two sockets) on one real redis-server started here on a
 * Unix socket in a temp dir: a trip on one host is refused on the other,
 * half_open_max counts trials across hosts, holds and watch events cross
 * hosts, a slot goes back when its connection closes and by its ttl when
 * its host dies, Redis lost or frozen -> each host breaks on its own copy
 * and writes back what opened meanwhile, a host whose clock is off still
 * agrees on when a break ends, the script is loaded again after NOSCRIPT,
 * an operator's release, delete or forced state made on a host cut off
 * from Redis is written back unless the fleet's circuit changed meanwhile.
 * Skips (77) without redis-server.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <check.h>
#include <jansson.h>

#include "cbd-harness.h"
#include "check-run.h"
#include "daemon-util.h"
#include "redis-util.h"

/* Virtual time of the cases that use ctx.now (the fleet's clock when
 * given). */
#define T0 INT64_C(1700000000000)

static redis_server redis;
static cbd_harness host_a, host_b;
/* Host a's redis_password_file, when it logs in as its own user. */
static char host_a_pw[256];
static int a = -1, b = -1;

/* The config both hosts share (the same Redis, the same prefix). */
static void
config_text(char *buf, size_t size, const char *extra)
{
	snprintf(buf, size,
	    "[cbd]\nbackend = redis\nredis = unix:%s\nredis_timeout_ms = 300\n"
	    "idle_reclaim_ms = 0\n%s",
	    redis.socket_path, extra != NULL ? extra : "");
}

static void
start_host(cbd_harness *h, int *fd, const char *const *env)
{
	char config[1024];
	harness_opts opts = { .env = env };

	config_text(config, sizeof config, NULL);
	ck_assert_msg(harness_start_opts(h, config, &opts), "cbd did not start");
	*fd = harness_connect(h);
	ck_assert(*fd >= 0);
	ck_assert_msg(util_stats_reach_str(*fd, "backend.health", "up"), "redis never reached");
}

static void
setup(void)
{
	ck_assert_msg(redis_start(&redis), "redis-server did not start");
	start_host(&host_a, &a, NULL);
	start_host(&host_b, &b, NULL);
}

static void
teardown(void)
{
	util_stop_conn(&host_a, &a);
	util_stop_conn(&host_b, &b);
	if (host_a_pw[0] != '\0')
		unlink(host_a_pw);
	host_a_pw[0] = '\0';
	redis_stop(&redis);
}

/* A raw command to Redis ("SCRIPT FLUSH"); its first reply byte. */
static char
redis_command(const char *inline_command)
{
	char reply[256] = "";
	int fd = harness_connect_path(redis.socket_path);
	ssize_t n;

	ck_assert(fd >= 0);
	ck_assert(harness_send_all(fd, inline_command, strlen(inline_command)));
	ck_assert(harness_send_all(fd, "\r\n", 2));
	n = read(fd, reply, sizeof reply - 1);
	close(fd);
	return n > 0 ? reply[0] : '\0';
}

/* --- an outage of host a alone ---
 * Host a logs in to Redis as its own ACL user; disabling that user and
 * killing its connections takes Redis away from a while b keeps it (a
 * retries every second and is refused until the user is enabled again). */

#define HOST_A_USER "cbd-host-a"

/* Restart host a as HOST_A_USER (created here). */
static void
host_a_as_own_user(void)
{
	char config[1024], extra[512];
	harness_opts opts = { .env = NULL };
	FILE *f;

	ck_assert_int_eq(redis_command("ACL SETUSER " HOST_A_USER " on >host-a-pw ~* &* +@all"),
	    '+');
	snprintf(host_a_pw, sizeof host_a_pw, "%s/host-a.pw", redis.dir);
	f = fopen(host_a_pw, "w");
	ck_assert_ptr_nonnull(f);
	fputs(HOST_A_USER " host-a-pw\n", f);
	fclose(f);
	close(a);
	harness_stop(&host_a);
	snprintf(extra, sizeof extra, "redis_password_file = %s\n", host_a_pw);
	config_text(config, sizeof config, extra);
	ck_assert_msg(harness_start_opts(&host_a, config, &opts), "cbd did not start");
	a = harness_connect(&host_a);
	ck_assert(a >= 0);
	ck_assert_msg(util_stats_reach_str(a, "backend.health", "up"), "redis never reached");
}

/* Take Redis away from host a alone. */
static void
host_a_cut_off(void)
{
	ck_assert_int_eq(redis_command("ACL SETUSER " HOST_A_USER " off"), '+');
	ck_assert_int_eq(redis_command("CLIENT KILL USER " HOST_A_USER), ':');
	ck_assert(util_stats_reach_str(a, "backend.health", "degraded"));
}

/* Give it back; wait until a's write-back of operator actions was
 * answered (counts reached: written back, skipped). */
static void
host_a_let_in(int64_t written_back, int64_t skipped)
{
	ck_assert_int_eq(redis_command("ACL SETUSER " HOST_A_USER " on"), '+');
	ck_assert(util_stats_reach_str(a, "backend.health", "up"));
	ck_assert_msg(util_stats_reach(a, "backend.written_back", written_back),
	    "backend.written_back never was %lld", (long long)written_back);
	ck_assert_msg(util_stats_reach(a, "backend.writeback_skipped", skipped),
	    "backend.writeback_skipped never was %lld", (long long)skipped);
}

START_TEST(test_release_during_outage_is_written_back)
{
	json_t *r;

	host_a_as_own_user();
	json_decref(util_call_ok(a,
	    "{\"op\":\"set_state\",\"name\":\"rel\",\"state\":\"open\",\"hold\":true,"
	    "\"reason\":\"deploy 7\"}"));
	host_a_cut_off();
	r = util_call_ok(a, "{\"op\":\"release\",\"name\":\"rel\"}");
	ck_assert(util_bool(r, "released"));
	json_decref(r);
	/* The fleet still holds it meanwhile. */
	r = util_call_ok(b, "{\"op\":\"get\",\"name\":\"rel\"}");
	ck_assert_str_eq(util_str(r, "snapshot.hold.reason"), "deploy 7");
	json_decref(r);
	host_a_let_in(1, 0);
	r = util_call_ok(b, "{\"op\":\"get\",\"name\":\"rel\"}");
	ck_assert_msg(json_is_null(util_get(r, "snapshot.hold")),
	    "the hold released during the outage came back");
	ck_assert_str_eq(util_str(r, "snapshot.state"), "half_open");
	json_decref(r);
	r = util_call_ok(b, "{\"op\":\"allow\",\"name\":\"rel\"}");
	ck_assert(util_bool(r, "allowed"));
	json_decref(r);
}
END_TEST

START_TEST(test_release_during_outage_spares_a_newer_hold)
{
	json_t *r;

	host_a_as_own_user();
	json_decref(util_call_ok(a,
	    "{\"op\":\"set_state\",\"name\":\"rel2\",\"state\":\"open\",\"hold\":true,"
	    "\"reason\":\"old\"}"));
	host_a_cut_off();
	json_decref(util_call_ok(a, "{\"op\":\"release\",\"name\":\"rel2\"}"));
	/* Meanwhile an operator on b places a new hold. */
	json_decref(util_call_ok(b,
	    "{\"op\":\"set_state\",\"name\":\"rel2\",\"state\":\"closed\",\"hold\":true,"
	    "\"reason\":\"new on b\"}"));
	host_a_let_in(0, 1);
	r = util_call_ok(b, "{\"op\":\"get\",\"name\":\"rel2\"}");
	ck_assert_msg(json_is_object(util_get(r, "snapshot.hold")),
	    "the hold placed on b meanwhile was released");
	ck_assert_str_eq(util_str(r, "snapshot.hold.reason"), "new on b");
	ck_assert_str_eq(util_str(r, "snapshot.state"), "closed");
	json_decref(r);
	/* Host a's copy (what list reads) is the fleet's again. */
	r = util_call_ok(a, "{\"op\":\"list\"}");
	ck_assert_int_eq(json_array_size(json_object_get(r, "circuits")), 1);
	ck_assert_str_eq(util_str(r, "circuits.0.hold.reason"), "new on b");
	json_decref(r);
}
END_TEST

/* A hold replaced on a during the outage: the fleet's old hold is
 * released first, then the new one placed (merge). */
START_TEST(test_hold_replaced_during_outage_is_written_back)
{
	json_t *r;

	host_a_as_own_user();
	json_decref(util_call_ok(a,
	    "{\"op\":\"set_state\",\"name\":\"rep\",\"state\":\"open\",\"hold\":true,"
	    "\"reason\":\"first\"}"));
	json_decref(util_call_ok(a,
	    "{\"op\":\"set_state\",\"name\":\"rep2\",\"state\":\"open\",\"hold\":true,"
	    "\"reason\":\"first\"}"));
	host_a_cut_off();
	/* rep: released, then held anew; rep2: held anew over the old hold. */
	json_decref(util_call_ok(a, "{\"op\":\"release\",\"name\":\"rep\"}"));
	json_decref(util_call_ok(a,
	    "{\"op\":\"set_state\",\"name\":\"rep\",\"state\":\"closed\",\"hold\":true,"
	    "\"reason\":\"second\"}"));
	json_decref(util_call_ok(a,
	    "{\"op\":\"set_state\",\"name\":\"rep2\",\"state\":\"closed\",\"hold\":true,"
	    "\"reason\":\"second\"}"));
	host_a_let_in(2, 0);
	ck_assert(util_stats_reach(a, "backend.merged", 2));
	/* The merges were sent after the write-backs, on a's one script
	 * connection: answered once a request a sends after them is. */
	json_decref(util_call_ok(a, "{\"op\":\"get\",\"name\":\"rep\"}"));
	for (int i = 0; i < 2; i++) {
		r = util_call_ok(b, "{\"op\":\"get\",\"name\":\"%s\"}", i == 0 ? "rep" : "rep2");
		ck_assert_msg(json_is_object(util_get(r, "snapshot.hold")), "not held");
		ck_assert_str_eq(util_str(r, "snapshot.hold.reason"), "second");
		ck_assert_str_eq(util_str(r, "snapshot.state"), "closed");
		json_decref(r);
	}
}
END_TEST

START_TEST(test_delete_during_outage_is_written_back)
{
	json_t *r;

	host_a_as_own_user();
	json_decref(util_call_ok(a,
	    "{\"op\":\"record_failure\",\"name\":\"gone\",\"ctx\":{"
	    "\"failure_threshold\":1,\"break_ms\":600000}}"));
	json_decref(util_call_ok(a, "{\"op\":\"record_failure\",\"name\":\"kept\"}"));
	host_a_cut_off();
	r = util_call_ok(a, "{\"op\":\"delete\",\"name\":\"gone\"}");
	ck_assert(util_bool(r, "existed"));
	json_decref(r);
	r = util_call_ok(a, "{\"op\":\"delete\",\"name\":\"kept\"}");
	ck_assert(util_bool(r, "existed"));
	json_decref(r);
	/* "kept" trips on b meanwhile: a trip a never saw stands. */
	json_decref(util_call_ok(b, "{\"op\":\"set_state\",\"name\":\"kept\",\"state\":\"open\"}"));
	host_a_let_in(1, 1);
	r = util_call_ok(b, "{\"op\":\"get\",\"name\":\"gone\"}");
	ck_assert_msg(!util_bool(r, "stored"), "the circuit deleted during the outage is back");
	json_decref(r);
	r = util_call_ok(b, "{\"op\":\"allow\",\"name\":\"gone\"}");
	ck_assert(util_bool(r, "allowed"));
	json_decref(r);
	r = util_call_ok(b, "{\"op\":\"get\",\"name\":\"kept\"}");
	ck_assert(util_bool(r, "stored"));
	ck_assert_str_eq(util_str(r, "snapshot.state"), "open");
	json_decref(r);
}
END_TEST

START_TEST(test_forced_state_during_outage_is_written_back)
{
	json_t *r;
	int watcher, watcher_b;

	host_a_as_own_user();
	json_decref(util_call_ok(a,
	    "{\"op\":\"record_failure\",\"name\":\"fc\",\"ctx\":{"
	    "\"failure_threshold\":1,\"break_ms\":600000}}"));
	json_decref(util_call_ok(a,
	    "{\"op\":\"record_failure\",\"name\":\"fc2\",\"ctx\":{"
	    "\"failure_threshold\":1,\"break_ms\":600000}}"));
	host_a_cut_off();
	/* The operator closes both open circuits on a. */
	r = util_call_ok(a, "{\"op\":\"set_state\",\"name\":\"fc\",\"state\":\"closed\"}");
	ck_assert_str_eq(util_str(r, "snapshot.state"), "closed");
	json_decref(r);
	json_decref(
	    util_call_ok(a, "{\"op\":\"set_state\",\"name\":\"fc2\",\"state\":\"closed\"}"));
	/* fc2 closes and trips again on b meanwhile: a new trip. */
	json_decref(
	    util_call_ok(b, "{\"op\":\"set_state\",\"name\":\"fc2\",\"state\":\"closed\"}"));
	json_decref(util_call_ok(b, "{\"op\":\"record_failure\",\"name\":\"fc2\"}"));
	r = util_call_ok(b, "{\"op\":\"allow\",\"name\":\"fc\"}");
	ck_assert(!util_bool(r, "allowed"));
	json_decref(r);
	/* A watcher on a: fc2 is closed there. */
	watcher = harness_connect(&host_a);
	ck_assert(watcher >= 0);
	json_decref(util_call_ok(watcher, "{\"op\":\"watch\",\"names\":[\"fc2\"]}"));
	/* A watcher on b: fc is open there. */
	watcher_b = harness_connect(&host_b);
	ck_assert(watcher_b >= 0);
	json_decref(util_call_ok(watcher_b, "{\"op\":\"watch\",\"names\":[\"fc\"]}"));
	host_a_let_in(1, 1);
	/* The trip that stands is news on a: the fleet's circuit, merged. */
	r = util_next_event(watcher, "change", NULL, "closed", "open");
	ck_assert_str_eq(util_str(r, "reason"), "merged with the fleet's circuit");
	json_decref(r);
	close(watcher);
	/* On b, the close is the write-back's, and says so (the reason b logs
	 * too), not "forced by an operator" as if made on b. */
	r = util_next_event(watcher_b, "change", NULL, "open", "closed");
	ck_assert_msg(strncmp(util_str(r, "reason"), "written back: ", 14) == 0, "reason %s",
	    util_str(r, "reason"));
	json_decref(r);
	close(watcher_b);
	r = util_call_ok(b, "{\"op\":\"allow\",\"name\":\"fc\"}");
	ck_assert_msg(util_bool(r, "allowed"), "the circuit closed during the outage is open");
	ck_assert_str_eq(util_str(r, "state"), "closed");
	json_decref(r);
	r = util_call_ok(b, "{\"op\":\"allow\",\"name\":\"fc2\"}");
	ck_assert_msg(!util_bool(r, "allowed"), "a trip the operator never saw was undone");
	json_decref(r);
	r = util_call_ok(a, "{\"op\":\"metrics\"}");
	ck_assert_ptr_nonnull(
	    strstr(util_str(r, "text"), "cbd_backend_writebacks_total{result=\"applied\"} 1\n"));
	ck_assert_ptr_nonnull(
	    strstr(util_str(r, "text"), "cbd_backend_writebacks_total{result=\"skipped\"} 1\n"));
	json_decref(r);
}
END_TEST

/* Past FLEET_SYNC_WRITEBACK_MAX (4096) circuits an action is not remembered:
 * counted. */
START_TEST(test_writeback_bound_is_counted)
{
	json_t *r;

	host_a_as_own_user();
	host_a_cut_off();
	for (int i = 0; i < 4097; i++)
		json_decref(util_call_ok(a, "{\"op\":\"delete\",\"name\":\"d%d\"}", i));
	/* A circuit already remembered is not another one. */
	json_decref(util_call_ok(a, "{\"op\":\"delete\",\"name\":\"d0\"}"));
	r = util_call_ok(a, "{\"op\":\"stats\"}");
	ck_assert_int_eq(util_int(r, "backend.writeback_dropped"), 1);
	json_decref(r);
}
END_TEST

START_TEST(test_trip_on_one_host_is_refused_on_the_other)
{
	json_t *r;

	json_decref(util_call_ok(a,
	    "{\"op\":\"record_failure\",\"name\":\"pay\",\"ctx\":{"
	    "\"failure_threshold\":2,\"break_ms\":60000}}"));
	r = util_call_ok(a, "{\"op\":\"record_failure\",\"name\":\"pay\"}");
	ck_assert_str_eq(util_str(r, "snapshot.state"), "open");
	json_decref(r);
	/* Host b's very next call fails fast, with the policy a created. */
	r = util_call_ok(b, "{\"op\":\"allow\",\"name\":\"pay\"}");
	ck_assert(!util_bool(r, "allowed"));
	ck_assert_int_gt(util_int(r, "retry_after_ms"), 0);
	ck_assert_int_le(util_int(r, "retry_after_ms"), 60000);
	json_decref(r);
	r = util_call_ok(b, "{\"op\":\"get\",\"name\":\"pay\"}");
	ck_assert_str_eq(util_str(r, "snapshot.state"), "open");
	ck_assert_int_eq(util_int(r, "snapshot.policy.failure_threshold"), 2);
	ck_assert_str_eq(util_str(r, "snapshot.policy.source.failure_threshold"), "client");
	ck_assert_int_eq(util_int(r, "snapshot.totals.failures"), 2);
	ck_assert_int_eq(util_int(r, "snapshot.totals.rejected"), 1);
	json_decref(r);
}
END_TEST

START_TEST(test_one_trial_across_hosts)
{
	json_t *ra, *rb, *r;
	int granted;

	json_decref(util_call_ok(a,
	    "{\"op\":\"record_failure\",\"name\":\"db\",\"ctx\":{\"failure_threshold\":1,"
	    "\"break_ms\":1000,\"half_open_max\":1,\"now\":%lld}}",
	    (long long)T0));
	ra = util_call_ok(a, "{\"op\":\"allow\",\"name\":\"db\",\"ctx\":{\"now\":%lld}}",
	    (long long)(T0 + 1000));
	rb = util_call_ok(b, "{\"op\":\"allow\",\"name\":\"db\",\"ctx\":{\"now\":%lld}}",
	    (long long)(T0 + 1001));
	granted = util_bool(ra, "allowed") + util_bool(rb, "allowed");
	ck_assert_int_eq(granted, 1);
	ck_assert(util_bool(ra, "allowed"));
	ck_assert_ptr_nonnull(util_str(ra, "permit"));
	ck_assert_str_eq(util_str(rb, "state"), "half_open");
	json_decref(rb);
	/* The permit's connection closes: its slot goes back to the fleet. */
	close(a);
	a = harness_connect(&host_a);
	ck_assert(a >= 0);
	ck_assert(util_stats_reach(a, "slots", 0));
	/* Host a's calls reach Redis in order: once this one is answered,
	 * the slot's release has been applied. */
	json_decref(util_call_ok(a, "{\"op\":\"get\",\"name\":\"db\"}"));
	r = util_call_ok(b, "{\"op\":\"allow\",\"name\":\"db\",\"ctx\":{\"now\":%lld}}",
	    (long long)(T0 + 1002));
	ck_assert_msg(util_bool(r, "allowed"), "the closed connection's slot stayed taken");
	json_decref(r);
	json_decref(ra);
}
END_TEST

START_TEST(test_slot_of_a_dead_host_goes_by_its_ttl)
{
	json_t *r;

	json_decref(util_call_ok(a,
	    "{\"op\":\"record_failure\",\"name\":\"q\",\"ctx\":{\"failure_threshold\":1,"
	    "\"break_ms\":1000,\"slot_ttl_ms\":5000,\"now\":%lld}}",
	    (long long)T0));
	r = util_call_ok(a, "{\"op\":\"allow\",\"name\":\"q\",\"ctx\":{\"now\":%lld}}",
	    (long long)(T0 + 1000));
	ck_assert(util_bool(r, "allowed"));
	json_decref(r);
	/* Host a dies holding the trial: nobody gives the slot back. */
	kill(host_a.pid, SIGKILL);
	ck_assert_int_ge(harness_wait(&host_a), 0);
	r = util_call_ok(b, "{\"op\":\"allow\",\"name\":\"q\",\"ctx\":{\"now\":%lld}}",
	    (long long)(T0 + 2000));
	ck_assert(!util_bool(r, "allowed"));
	json_decref(r);
	r = util_call_ok(b, "{\"op\":\"allow\",\"name\":\"q\",\"ctx\":{\"now\":%lld}}",
	    (long long)(T0 + 6001));
	ck_assert_msg(util_bool(r, "allowed"), "the dead host's slot never expired");
	json_decref(r);
}
END_TEST

START_TEST(test_hold_on_one_host_is_seen_on_the_other)
{
	json_t *r;

	json_decref(util_call_ok(a,
	    "{\"op\":\"set_state\",\"name\":\"search\",\"state\":\"open\","
	    "\"hold\":true,\"ttl_ms\":600000,\"reason\":\"deploy 42\"}"));
	r = util_call_ok(b, "{\"op\":\"get\",\"name\":\"search\"}");
	ck_assert_str_eq(util_str(r, "snapshot.hold.state"), "open");
	ck_assert_str_eq(util_str(r, "snapshot.hold.reason"), "deploy 42");
	json_decref(r);
	r = util_call_ok(b, "{\"op\":\"allow\",\"name\":\"search\"}");
	ck_assert(!util_bool(r, "allowed"));
	json_decref(r);
	/* Released on b: a's next call sees half_open and gets the trial. */
	r = util_call_ok(b, "{\"op\":\"release\",\"name\":\"search\"}");
	ck_assert(util_bool(r, "released"));
	json_decref(r);
	r = util_call_ok(a, "{\"op\":\"allow\",\"name\":\"search\"}");
	ck_assert(util_bool(r, "allowed"));
	ck_assert_str_eq(util_str(r, "state"), "half_open");
	json_decref(r);
}
END_TEST

START_TEST(test_watch_on_one_host_sees_a_trip_on_the_other)
{
	json_t *r;

	r = util_call_ok(b, "{\"op\":\"watch\",\"names\":[\"mail\"]}");
	json_decref(r);
	json_decref(util_call_ok(a,
	    "{\"op\":\"record_failure\",\"name\":\"mail\",\"ctx\":{"
	    "\"failure_threshold\":1}}"));
	json_decref(util_next_event(b, "change", "mail", "closed", "open"));
	r = util_call_ok(b, "{\"op\":\"stats\"}");
	ck_assert_int_ge(util_int(r, "backend.events_in"), 1);
	json_decref(r);
}
END_TEST

START_TEST(test_redis_lost_hosts_break_locally_and_write_back)
{
	json_t *r;

	json_decref(util_call_ok(a,
	    "{\"op\":\"record_failure\",\"name\":\"before\",\"ctx\":{"
	    "\"failure_threshold\":1,\"break_ms\":600000}}"));
	/* b learns of it by the event, before Redis goes. */
	r = util_call_ok(b, "{\"op\":\"get\",\"name\":\"before\"}");
	ck_assert_str_eq(util_str(r, "snapshot.state"), "open");
	json_decref(r);
	redis_kill(&redis);
	ck_assert(util_stats_reach_str(a, "backend.health", "degraded"));
	ck_assert(util_stats_reach_str(b, "backend.health", "degraded"));
	/* Metrics say so too. */
	r = util_call_ok(a, "{\"op\":\"metrics\"}");
	ck_assert_ptr_nonnull(
	    strstr(util_str(r, "text"), "cbd_backend_health{health=\"degraded\"} 1\n"));
	ck_assert_ptr_nonnull(strstr(util_str(r, "text"), "cbd_backend_health{health=\"up\"} 0\n"));
	json_decref(r);
	/* An open circuit stays open on both hosts. */
	r = util_call_ok(b, "{\"op\":\"allow\",\"name\":\"before\"}");
	ck_assert(!util_bool(r, "allowed"));
	json_decref(r);
	/* An operator's hold placed while Redis is away holds fleet-wide
	 * once it is back. */
	json_decref(util_call_ok(a,
	    "{\"op\":\"set_state\",\"name\":\"maint\",\"state\":\"open\","
	    "\"hold\":true,\"reason\":\"outage work\"}"));
	/* New failures open circuits locally. */
	r = util_call_ok(a,
	    "{\"op\":\"record_failure\",\"name\":\"during\",\"ctx\":{"
	    "\"failure_threshold\":1,\"break_ms\":600000}}");
	ck_assert_str_eq(util_str(r, "snapshot.state"), "open");
	json_decref(r);
	/* Redis is back (empty): what opened on a meanwhile opens fleet-wide. */
	ck_assert(redis_restart(&redis));
	ck_assert(util_stats_reach_str(a, "backend.health", "up"));
	ck_assert(util_stats_reach_str(b, "backend.health", "up"));
	/* a's write-back (the open and the hold) is sent, and in Redis once
	 * a request a sends after it is answered (one connection, in order). */
	ck_assert(util_stats_reach_min(a, "backend.merged", 2));
	json_decref(util_call_ok(a, "{\"op\":\"get\",\"name\":\"during\"}"));
	r = util_call_ok(b, "{\"op\":\"allow\",\"name\":\"during\"}");
	ck_assert_msg(!util_bool(r, "allowed"), "the circuit opened during the outage is closed");
	json_decref(r);
	r = util_call_ok(b, "{\"op\":\"get\",\"name\":\"maint\"}");
	ck_assert_str_eq(util_str(r, "snapshot.hold.state"), "open");
	ck_assert_str_eq(util_str(r, "snapshot.hold.reason"), "outage work");
	json_decref(r);
	r = util_call_ok(a, "{\"op\":\"stats\"}");
	ck_assert_int_ge(util_int(r, "backend.merged"), 2);
	ck_assert_int_ge(util_int(r, "backend.degraded"), 1);
	json_decref(r);
}
END_TEST

START_TEST(test_frozen_redis_is_answered_from_the_copy)
{
	json_t *r;

	json_decref(util_call_ok(a,
	    "{\"op\":\"record_failure\",\"name\":\"f\",\"ctx\":{"
	    "\"failure_threshold\":1,\"break_ms\":600000}}"));
	kill(redis.pid, SIGSTOP);
	/* Answered after redis_timeout_ms from a's copy: open stays open. */
	r = util_call_ok(a, "{\"op\":\"allow\",\"name\":\"f\"}");
	ck_assert(!util_bool(r, "allowed"));
	json_decref(r);
	r = util_call_ok(a, "{\"op\":\"stats\"}");
	ck_assert_int_ge(util_int(r, "backend.timeouts"), 1);
	ck_assert_str_eq(util_str(r, "backend.health"), "degraded");
	json_decref(r);
	kill(redis.pid, SIGCONT);
	ck_assert(util_stats_reach_str(a, "backend.health", "up"));
	r = util_call_ok(a, "{\"op\":\"get\",\"name\":\"f\"}");
	ck_assert_str_eq(util_str(r, "snapshot.state"), "open");
	json_decref(r);
}
END_TEST

/* SIGTERM while a request waits on Redis: the request is answered (here
 * from the copy, Redis being frozen) before the connection closes. */
START_TEST(test_shutdown_answers_a_request_waiting_on_redis)
{
	int watcher = harness_connect(&host_a);
	int64_t gets;
	json_t *r;

	ck_assert(watcher >= 0);
	json_decref(util_call_ok(a, "{\"op\":\"record_failure\",\"name\":\"sd\"}"));
	r = util_call_ok(watcher, "{\"op\":\"stats\"}");
	gets = util_int(r, "ops.get.requests");
	json_decref(r);
	kill(redis.pid, SIGSTOP);
	ck_assert(util_write_all(a, "{\"id\":9,\"op\":\"get\",\"name\":\"sd\"}\n", 32));
	/* SIGTERM once the request is read and waits on the frozen Redis
	 * (counted as it is read, then sent at once). A request not read
	 * yet when SIGTERM comes is refused as shutting_down instead. */
	ck_assert(util_stats_reach(watcher, "ops.get.requests", gets + 1));
	kill(host_a.pid, SIGTERM);
	r = util_next_json(a, "reply before the connection closed");
	kill(redis.pid, SIGCONT);
	ck_assert_int_eq(util_int(r, "id"), 9);
	ck_assert(util_bool(r, "ok"));
	ck_assert_int_eq(util_int(r, "snapshot.failure_count"), 1);
	json_decref(r);
	ck_assert(util_wait_eof(a));
	close(watcher);
}
END_TEST

START_TEST(test_skewed_host_agrees_on_the_break)
{
	static const char *const skew[] = { "CBD_TEST_CLOCK_SKEW_MS=300000", NULL };
	json_t *ra, *rb;
	int64_t diff;

	/* Host b's clock runs 5 minutes ahead. */
	close(b);
	harness_stop(&host_b);
	start_host(&host_b, &b, skew);
	json_decref(util_call_ok(a,
	    "{\"op\":\"record_failure\",\"name\":\"skew\",\"ctx\":{"
	    "\"failure_threshold\":1,\"break_ms\":60000}}"));
	/* By its own clock the 60 s break is long over; by the fleet's it is
	 * not. */
	rb = util_call_ok(b, "{\"op\":\"allow\",\"name\":\"skew\"}");
	ra = util_call_ok(a, "{\"op\":\"allow\",\"name\":\"skew\"}");
	ck_assert_msg(!util_bool(rb, "allowed"), "the skewed host let a trial through");
	ck_assert(!util_bool(ra, "allowed"));
	diff = util_int(ra, "retry_after_ms") - util_int(rb, "retry_after_ms");
	ck_assert_msg(diff > -5000 && diff < 5000, "hosts disagree on the break by %lld ms",
	    (long long)diff);
	json_decref(ra);
	json_decref(rb);
}
END_TEST

START_TEST(test_script_loaded_again_after_noscript)
{
	json_t *r;

	ck_assert_int_eq(redis_command("SCRIPT FLUSH"), '+');
	r = util_call_ok(a, "{\"op\":\"record_failure\",\"name\":\"n\"}");
	ck_assert_int_eq(util_int(r, "snapshot.totals.failures"), 1);
	json_decref(r);
	r = util_call_ok(a, "{\"op\":\"stats\"}");
	ck_assert_int_eq(util_int(r, "backend.noscript"), 1);
	ck_assert_str_eq(util_str(r, "backend.health"), "up");
	json_decref(r);
}
END_TEST

START_TEST(test_cbctl_stats_shows_the_backend)
{
	const char *cbctl = getenv("CBCTL_BINARY");
	char out[8192], want[512];
	const char *argv[] = { cbctl, "-s", host_a.socket_path, "stats", NULL };

	if (cbctl == NULL)
		return; /* make check sets it */
	ck_assert_int_eq(util_run(argv, out, sizeof out), 0);
	snprintf(want, sizeof want, "backend: redis unix:%s, up\n", redis.socket_path);
	ck_assert_msg(strstr(out, want) != NULL, "cbctl stats said:\n%s", out);
}
END_TEST

/* Every fleet series the Grafana dashboard's fleet row queries is one a
 * fleet cbd exports (cbd-metrics-test checks the others). */
START_TEST(test_dashboard_fleet_series_exported)
{
	char path[1024], name[128], type[160];
	json_t *dash, *panel, *target, *r;
	json_error_t err;
	const char *text;
	size_t i, k;
	int found = 0;

	snprintf(path, sizeof path, "%s/conf/grafana-cbd.json", getenv("CBD_SRCDIR"));
	dash = json_load_file(path, 0, &err);
	ck_assert_msg(dash != NULL, "%s: %s", path, err.text);
	r = util_call_ok(a, "{\"op\":\"metrics\"}");
	text = util_str(r, "text");
	json_array_foreach (json_object_get(dash, "panels"), i, panel) {
		json_array_foreach (json_object_get(panel, "targets"), k, target) {
			const char *p = json_string_value(json_object_get(target, "expr"));

			while (p != NULL && (p = strstr(p, "cbd_backend_")) != NULL) {
				size_t n = strspn(p, "abcdefghijklmnopqrstuvwxyz_");

				snprintf(name, sizeof name, "%.*s", (int)n, p);
				snprintf(type, sizeof type, "# TYPE %s ", name);
				ck_assert_msg(strstr(text, type) != NULL,
				    "the dashboard queries %s", name);
				found++;
				p += n;
			}
		}
	}
	ck_assert_int_ge(found, 6);
	json_decref(r);
	json_decref(dash);
}
END_TEST

static Suite *
fleet_suite(void)
{
	Suite *s = suite_create("fleet");
	TCase *tc = tcase_create("fleet");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_trip_on_one_host_is_refused_on_the_other);
	tcase_add_test(tc, test_one_trial_across_hosts);
	tcase_add_test(tc, test_slot_of_a_dead_host_goes_by_its_ttl);
	tcase_add_test(tc, test_hold_on_one_host_is_seen_on_the_other);
	tcase_add_test(tc, test_watch_on_one_host_sees_a_trip_on_the_other);
	tcase_add_test(tc, test_redis_lost_hosts_break_locally_and_write_back);
	tcase_add_test(tc, test_frozen_redis_is_answered_from_the_copy);
	tcase_add_test(tc, test_shutdown_answers_a_request_waiting_on_redis);
	tcase_add_test(tc, test_skewed_host_agrees_on_the_break);
	tcase_add_test(tc, test_script_loaded_again_after_noscript);
	tcase_add_test(tc, test_cbctl_stats_shows_the_backend);
	tcase_add_test(tc, test_dashboard_fleet_series_exported);
	tcase_add_test(tc, test_release_during_outage_is_written_back);
	tcase_add_test(tc, test_release_during_outage_spares_a_newer_hold);
	tcase_add_test(tc, test_hold_replaced_during_outage_is_written_back);
	tcase_add_test(tc, test_delete_during_outage_is_written_back);
	tcase_add_test(tc, test_forced_state_during_outage_is_written_back);
	tcase_add_test(tc, test_writeback_bound_is_counted);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	if (!redis_available()) {
		printf("cbd-fleet-test: SKIP (redis-server not installed)\n");
		return 77;
	}
	return check_run(fleet_suite(), NULL);
}
