/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cbd-oom-test.c — the malloc failure sweep: no allocation failure aborts
 * cbd. A scripted session (every op, errors included) runs through cbd's
 * request path in-process (tests/fuzz/fuzz-daemon.c) with the Nth
 * allocation failing, for N = 1, 2, ... until a run completes without
 * reaching N. Every run must end with each request answered by one valid
 * JSON line (its usual answer, or `internal`), the circuit table
 * consistent, cbd still serving, and everything freed: each run is a
 * child process, so the sanitizer build's leak check (or valgrind, see
 * tests/oom-valgrind.sh) judges each N on its own. CBD_OOM_N=N runs
 * that N alone; CBD_OOM_STEP=K tries every Kth N; CBD_OOM_OUTPUT=1 fails
 * the output buffer's growth too.
 *
 * Allocations fail through the linker's --wrap (malloc, calloc, realloc,
 * strdup, strndup: our objects, linked statically) and
 * json_set_alloc_funcs (jansson). libevent's own allocations are not
 * counted: the request path makes none.
 *
 * One exception: inside json_loadb only the first allocation may fail.
 * jansson (2.14 and older) ignores a failed allocation while its lexer
 * saves a token, then asserts or runs past the buffer
 * (akheron/jansson#362): that is not cbd's to fix, and an N that lands
 * there is counted as skipped.
 */
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <check.h>
#include <jansson.h>

#include "check-run.h"
#include "conf.h"
#include "fuzz-daemon.h"
#include "log.h"
#include "op.h"
#include "server.h"

/* Output room reserved before a run: server-client.c's output growth
 * path is not under test here (see oom_run). */
#define OOM_OUT_RESERVE (1u << 20)
/* Most N tried; the session makes far fewer allocations. */
#define OOM_SWEEP_MAX 20000
/* The session's request count, at most. */
#define OOM_LINES_MAX 64

/* --- the failing allocator --- */

void *__real_malloc(size_t size);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t size);
char *__real_strdup(const char *s);
char *__real_strndup(const char *s, size_t n);
void *__wrap_malloc(size_t size);
void *__wrap_calloc(size_t n, size_t size);
void *__wrap_realloc(void *p, size_t size);
char *__wrap_strdup(const char *s);
char *__wrap_strndup(const char *s, size_t n);

json_t *__real_json_loadb(const char *buffer, size_t buflen, size_t flags, json_error_t *error);
json_t *__wrap_json_loadb(const char *buffer, size_t buflen, size_t flags, json_error_t *error);

static unsigned long oom_calls; /* allocations counted since armed */
static unsigned long oom_fail_at; /* 0: none fails */
static bool oom_armed;
static bool oom_injected; /* the failure happened */
static bool oom_skipped; /* the Nth allocation was in jansson's lexer */
static bool oom_applied; /* a write answered internal took effect anyway */
static unsigned long oom_loadb_calls; /* allocations in this json_loadb; 0: not in one */
static bool oom_in_loadb;

/* Count one allocation; true when it must fail. */
static bool
oom_fail_now(void)
{
	if (!oom_armed)
		return false;
	if (++oom_calls != oom_fail_at)
		return false;
	if (oom_in_loadb && oom_loadb_calls > 1) {
		oom_skipped = true;
		return false;
	}
	oom_injected = true;
	return true;
}

json_t *
__wrap_json_loadb(const char *buffer, size_t buflen, size_t flags, json_error_t *error)
{
	json_t *v;

	oom_in_loadb = true;
	oom_loadb_calls = 0;
	v = __real_json_loadb(buffer, buflen, flags, error);
	oom_in_loadb = false;
	return v;
}

void *
__wrap_malloc(size_t size)
{
	return oom_fail_now() ? NULL : __real_malloc(size);
}

void *
__wrap_calloc(size_t n, size_t size)
{
	return oom_fail_now() ? NULL : __real_calloc(n, size);
}

void *
__wrap_realloc(void *p, size_t size)
{
	return oom_fail_now() ? NULL : __real_realloc(p, size);
}

char *
__wrap_strdup(const char *s)
{
	return oom_fail_now() ? NULL : __real_strdup(s);
}

char *
__wrap_strndup(const char *s, size_t n)
{
	return oom_fail_now() ? NULL : __real_strndup(s, n);
}

/* jansson's allocator (it links dynamically, so --wrap does not see it). */
static void *
oom_json_malloc(size_t size)
{
	if (oom_in_loadb)
		oom_loadb_calls++;
	return oom_fail_now() ? NULL : __real_malloc(size);
}

/* --- the session --- */

/* Every op, trips, slots, permits and error answers; `now` fixed so runs
 * are reproducible. Circuit "a" trips on its third failure. */
static const char *const session[] = {
	"{\"id\":1,\"op\":\"hello\",\"client\":\"oom-test/1\"}",
	"{\"id\":2,\"op\":\"record_failure\",\"name\":\"a\",\"ctx\":{\"failure_threshold\":3,"
	"\"now\":1000}}",
	"{\"id\":3,\"op\":\"record_failure\",\"name\":\"a\",\"ctx\":{\"failure_threshold\":3,"
	"\"now\":1001}}",
	"{\"id\":4,\"op\":\"record_failure\",\"name\":\"a\",\"ctx\":{\"failure_threshold\":3,"
	"\"now\":1002}}",
	"{\"id\":5,\"op\":\"get\",\"name\":\"a\",\"ctx\":{\"now\":1003}}",
	"{\"id\":6,\"op\":\"allow\",\"name\":\"a\",\"ctx\":{\"break_ms\":100,\"now\":1004}}",
	"{\"id\":7,\"op\":\"allow\",\"name\":\"a\",\"ctx\":{\"break_ms\":100,\"now\":1200}}",
	"{\"id\":8,\"op\":\"record\",\"name\":\"b\",\"outcome\":\"failure\",\"ctx\":{\"now\":1000}"
	"}",
	"{\"id\":9,\"op\":\"set_state\",\"name\":\"c\",\"state\":\"open\",\"ctx\":{\"now\":1000}}",
	"{\"id\":10,\"op\":\"cas\",\"name\":\"c\",\"from\":\"open\",\"to\":\"half_open\","
	"\"ctx\":{\"now\":1001}}",
	"{\"id\":11,\"op\":\"acquire_slot\",\"name\":\"c\",\"ctx\":{\"half_open_max\":2,"
	"\"now\":1002}}",
	"{\"id\":12,\"op\":\"acquire_slot\",\"name\":\"c\",\"ctx\":{\"half_open_max\":2,"
	"\"now\":1002}}",
	"{\"id\":13,\"op\":\"release_slot\",\"name\":\"c\","
	"\"token\":\"00c0ffee00c0ffee-0000000000000002\",\"ctx\":{\"now\":1003}}",
	"{\"id\":14,\"op\":\"record\",\"name\":\"e\",\"outcome\":\"ignore\"}",
	"{\"id\":15,\"op\":\"list\",\"ctx\":{\"now\":1300}}",
	"{\"id\":16,\"op\":\"list\",\"state\":\"open\"}",
	"{\"id\":17,\"op\":\"stats\"}",
	"{\"id\":18,\"op\":\"record_failure\",\"name\":\"d\"}",
	"{\"id\":19,\"op\":\"delete\",\"name\":\"d\"}",
	"{\"id\":\"s\",\"op\":\"get\",\"name\":\"nosuch\"}",
	"{\"id\":21,\"op\":\"record_success\",\"name\":\"f\"}",
	"{\"id\":22,\"op\":\"get\",\"name\":\"\"}",
	"{\"id\":23,\"op\":\"cas\",\"name\":\"c\",\"from\":\"shut\",\"to\":\"open\"}",
	"{\"op\":\"get\",\"name\":\"a\",\"ctx\":{\"now\":99999999999999999999}}",
	"{\"op\":\"get\" \"name\"}",
	"{\"id\":26,\"op\":\"frobnicate\"}",
	"[\"not\",\"an\",\"object\"]",
	/* Enough circuits for a list written in pieces (more than a step). */
	"{\"id\":100,\"op\":\"record_success\",\"name\":\"p1\"}",
	"{\"id\":101,\"op\":\"record_success\",\"name\":\"p2\"}",
	"{\"id\":102,\"op\":\"record_success\",\"name\":\"p3\"}",
	"{\"id\":103,\"op\":\"record_success\",\"name\":\"p4\"}",
	"{\"id\":104,\"op\":\"record_success\",\"name\":\"p5\"}",
	"{\"id\":105,\"op\":\"list\"}",
};

#define SESSION_LINES (sizeof session / sizeof session[0])
_Static_assert(SESSION_LINES <= OOM_LINES_MAX, "raise OOM_LINES_MAX");

/* One run's answers: the error code of each reply (PROTO_OK when ok). */
typedef struct oom_answers {
	proto_code code[OOM_LINES_MAX];
	json_int_t id[OOM_LINES_MAX]; /* OOM_ID_NONE, OOM_ID_STRING or the integer */
	bool undecoded[OOM_LINES_MAX]; /* out of memory decoding the request */
	size_t count;
} oom_answers;

#define OOM_ID_NONE (-1)
#define OOM_ID_STRING (-2)

static void
answer_visit(const json_t *reply, size_t i, void *arg)
{
	oom_answers *a = arg;
	const char *code =
	    json_string_value(json_object_get(json_object_get(reply, "error"), "code"));

	if (i >= OOM_LINES_MAX)
		return;
	const json_t *id = json_object_get(reply, "id");

	a->id[i] = json_is_integer(id) ? json_integer_value(id)
	    : json_is_string(id)       ? OOM_ID_STRING
				       : OOM_ID_NONE;
	a->undecoded[i] =
	    strstr(json_string_value(json_object_get(json_object_get(reply, "error"), "message"))
		    ?: "",
		"decoding") != NULL;
	a->code[i] = PROTO_OK;
	if (code != NULL && !proto_code_parse(code, &a->code[i]))
		a->code[i] = PROTO_INTERNAL; /* fuzz_replies_check rejects unknown codes */
	a->count = i + 1;
}

/* The circuit's snapshot; false when it is not stored. */
static bool
oom_get(const char *name, cb_snapshot *snap)
{
	ct_view view;

	circuit_table_get(cbd.table, name, 0, &view, NULL);
	*snap = view.snap;
	return view.stored;
}

/* Child: report why the run failed and exit non-zero. */
static void __attribute__((noreturn, format(printf, 2, 3)))
oom_fail(unsigned long n, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "N=%lu: ", n);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	_exit(1);
}

/* Counts the circuit table's visitor sees. */
static void
count_visit(const char *name, const ct_view *view, void *arg)
{
	cb_snapshot again;

	(*(size_t *)arg)++;
	if (!oom_get(name, &again) || again.state != view->snap.state)
		abort(); /* the walk and the hash disagree */
}

/* The table after a run: consistent with itself and with every request
 * that was answered ok. */
static void
oom_check_table(unsigned long n, const oom_answers *got)
{
	cb_snapshot snap;
	ct_stats st;
	size_t walked = 0;
	int ok_failures = 0;

	circuit_table_stats(cbd.table, &st);
	circuit_table_foreach(cbd.table, 0, count_visit, &walked);
	if (walked != st.circuits)
		oom_fail(n, "stats count %llu circuits, the table holds %zu",
		    (unsigned long long)st.circuits, walked);
	/* "a": replies 1..3 are its failures. */
	for (size_t i = 1; i <= 3; i++)
		ok_failures += got->code[i] == PROTO_OK;
	oom_get("a", &snap);
	if (ok_failures == 3 && snap.state == CB_STATE_CLOSED)
		oom_fail(n, "a: three failures answered ok, but a is closed");
	if (snap.state == CB_STATE_CLOSED && snap.failure_count < ok_failures)
		oom_fail(n, "a: %d failures answered ok, failure_count is %lld", ok_failures,
		    (long long)snap.failure_count);
	/* Measured, not judged: the write happened, its reply could not be
	 * built. */
	if (snap.state == CB_STATE_CLOSED && snap.failure_count > ok_failures)
		oom_applied = true;
	if (got->code[8] == PROTO_INTERNAL && oom_get("c", &snap) && snap.state != CB_STATE_CLOSED)
		oom_applied = true;
	if (got->code[7] == PROTO_OK && (!oom_get("b", &snap) || snap.failure_count != 1))
		oom_fail(n, "b: record failure answered ok but not stored");
	if (got->code[8] == PROTO_OK && (!oom_get("c", &snap) || snap.state == CB_STATE_CLOSED))
		oom_fail(n, "c: set_state open answered ok but c is closed");
	if (got->code[18] == PROTO_OK && oom_get("d", &snap))
		oom_fail(n, "d: delete answered ok but d is stored");
	if (oom_get("e", &snap) || oom_get("nosuch", &snap))
		oom_fail(n, "a read or an ignored outcome stored a circuit");
	/* Protocol 2: a success creates its circuit. */
	if (got->code[20] == PROTO_OK && !oom_get("f", &snap))
		oom_fail(n, "f: record_success answered ok but f is not stored");
}

/* Run the session once with the nth allocation failing (0: none), in
 * this process. Fills got; returns whether the failure was reached. */
static bool
oom_session(unsigned long n, oom_answers *got)
{
	server_client *c;
	size_t expected = 0, len;
	const char *out;
	char why[512];

	if (!fuzz_daemon_start() || (c = fuzz_client_new(geteuid())) == NULL)
		oom_fail(n, "out of memory setting up");
	/* server-client.c grows its output buffer with fatal() on failure
	 * (being replaced on the harden branch): reserve the room first so
	 * only the reply-building paths are swept, unless CBD_OOM_OUTPUT=1
	 * asks to sweep the growth path too. */
	if (getenv("CBD_OOM_OUTPUT") == NULL) {
		c->out = malloc(OOM_OUT_RESERVE);
		if (c->out == NULL)
			oom_fail(n, "out of memory setting up");
		c->out_cap = OOM_OUT_RESERVE;
	}

	oom_calls = 0;
	oom_injected = false;
	oom_skipped = false;
	oom_applied = false;
	oom_fail_at = n;
	oom_armed = true;
	for (size_t i = 0; i < SESSION_LINES && c->state == SERVER_CLIENT_OPEN; i++)
		expected += fuzz_client_feed(c, session[i], strlen(session[i]));
	oom_armed = false;

	/* A request left unanswered (dropped connection) counts as failed. */
	*got = (oom_answers){ .count = 0 };
	for (size_t i = 0; i < OOM_LINES_MAX; i++)
		got->code[i] = PROTO_INTERNAL;
	out = fuzz_client_output(c, &len);
	if (c->state != SERVER_CLIENT_OPEN)
		expected = FUZZ_ANY_COUNT; /* dropped: the lines before must be whole */
	if (!fuzz_replies_check(out, len, expected, answer_visit, got, why, sizeof why))
		oom_fail(n, "%s", why);
	fuzz_client_output_reset(c);
	oom_check_table(n, got);

	/* Still serving, on a new connection as on the old one. */
	server_client *again = fuzz_client_new(geteuid());
	const char *probe = "{\"id\":1,\"op\":\"record_failure\",\"name\":\"probe\"}\n"
			    "{\"id\":2,\"op\":\"stats\"}\n";
	oom_answers after = { .code = { PROTO_INTERNAL, PROTO_INTERNAL } };

	if (again == NULL)
		oom_fail(n, "out of memory after the run");
	expected = fuzz_client_feed(again, probe, strlen(probe));
	out = fuzz_client_output(again, &len);
	if (!fuzz_replies_check(out, len, expected, answer_visit, &after, why, sizeof why) ||
	    after.code[0] != PROTO_OK || after.code[1] != PROTO_OK)
		oom_fail(n, "not serving after the run: %s", why);

	/* Slots go back with their connections. */
	server_client_close(c, "oom test");
	server_client_close(again, "oom test");
	ct_stats st;

	circuit_table_stats(cbd.table, &st);
	if (st.slots != 0)
		oom_fail(n, "%llu slots left after every connection closed",
		    (unsigned long long)st.slots);
	fuzz_daemon_stop();
	return oom_injected;
}

/* Outcome of one child run. */
typedef enum oom_result {
	OOM_RUN_FAILED, /* crashed, aborted, leaked or a check failed */
	OOM_RUN_INJECTED, /* passed; the failure was reached */
	OOM_RUN_APPLIED, /* passed; and a write answered internal took effect */
	OOM_RUN_SKIPPED, /* passed; the nth allocation was not failed (jansson's lexer) */
	OOM_RUN_CLEAN, /* passed; the session made fewer than n allocations */
} oom_result;

/* The reference answers, from a run without failures. */
static oom_answers reference;

/* Run the session in a child with the nth allocation failing. */
static oom_result
oom_run(unsigned long n, int *status)
{
	pid_t pid;

	fflush(NULL);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		oom_answers got;
		bool injected = oom_session(n, &got);

		for (size_t i = 0; i < reference.count; i++) {
			if (got.code[i] != reference.code[i] && got.code[i] != PROTO_INTERNAL &&
			    i < got.count)
				oom_fail(n, "reply %zu: %s, expected %s or internal", i,
				    proto_code_name(got.code[i]),
				    proto_code_name(reference.code[i]));
			/* The id is echoed, out of memory or not; only a
			 * request that could not be decoded has none. */
			if (i < got.count && got.id[i] != reference.id[i] &&
			    !(got.id[i] == OOM_ID_NONE && got.undecoded[i]))
				oom_fail(n, "reply %zu: id %lld, expected %lld", i,
				    (long long)got.id[i], (long long)reference.id[i]);
		}
		/* exit(), not _exit(): the leak check runs at exit. */
		exit(!injected ? (oom_skipped ? 4 : 3) : oom_applied ? 5 : 0);
	}
	while (waitpid(pid, status, 0) < 0)
		;
	if (WIFEXITED(*status) && WEXITSTATUS(*status) == 0)
		return OOM_RUN_INJECTED;
	if (WIFEXITED(*status) && WEXITSTATUS(*status) == 3)
		return OOM_RUN_CLEAN;
	if (WIFEXITED(*status) && WEXITSTATUS(*status) == 4)
		return OOM_RUN_SKIPPED;
	if (WIFEXITED(*status) && WEXITSTATUS(*status) == 5)
		return OOM_RUN_APPLIED;
	return OOM_RUN_FAILED;
}

START_TEST(test_reference_session)
{
	/* Without failures every request gets its usual answer. */
	ck_assert(!oom_session(0, &reference));
	ck_assert_uint_eq(reference.count, SESSION_LINES);
	ck_assert_int_eq(reference.code[0], PROTO_OK);
	ck_assert_int_eq(reference.code[21], PROTO_BAD_REQUEST);
	ck_assert_int_eq(reference.code[25], PROTO_UNKNOWN_OP);
	ck_assert_int_eq(reference.code[26], PROTO_PARSE_ERROR);
}
END_TEST

START_TEST(test_sweep)
{
	unsigned long n, runs = 0, failed = 0, first_failed = 0, skipped = 0, applied = 0;
	int status = 0;
	oom_result r = OOM_RUN_INJECTED;
	const char *only = getenv("CBD_OOM_N"); /* debugging: that N alone */
	const char *step_text = getenv("CBD_OOM_STEP"); /* every step-th N (valgrind) */
	unsigned long last = only != NULL ? strtoul(only, NULL, 10) : OOM_SWEEP_MAX;
	unsigned long step = step_text != NULL ? strtoul(step_text, NULL, 10) : 1;

	if (step == 0)
		step = 1;
	ck_assert(!oom_session(0, &reference));
	for (n = only != NULL ? last : 1; n <= last; n += step) {
		r = oom_run(n, &status);
		if (r == OOM_RUN_CLEAN)
			break;
		runs++;
		skipped += r == OOM_RUN_SKIPPED;
		applied += r == OOM_RUN_APPLIED;
		if (r == OOM_RUN_FAILED) {
			if (failed++ == 0)
				first_failed = n;
			fprintf(stderr, "N=%lu: %s %d\n", n,
			    WIFSIGNALED(status) ? "killed by signal" : "exit status",
			    WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
		}
	}
	printf("malloc sweep: %lu runs (allocation N failing, N = 1, %lu, ... up to the "
	       "session's last): %lu failed, %lu skipped (in jansson's lexer), %lu where a write "
	       "answered internal took effect\n",
	    runs, 1 + step, failed, skipped, applied);
	ck_assert_msg(only != NULL || r == OOM_RUN_CLEAN,
	    "the session never completed within %d allocations", OOM_SWEEP_MAX);
	ck_assert_msg(failed == 0, "%lu of %lu runs failed, the first with allocation %lu", failed,
	    runs, first_failed);
}
END_TEST

/* A config with every section kind, as a reload would read it. */
static const char conf_text[] = "[cbd]\n"
				"socket = /tmp/cbd-oom.sock\n"
				"socket_group = root\n"
				"max_circuits = 1000\n"
				"admin_users = root, 12345\n"
				"admin_groups = root, 54321\n"
				"log_level = error\n"
				"[defaults]\n"
				"failure_threshold = 3\n"
				"break_ms = 1000\n"
				"[circuit \"db\"]\n"
				"half_open_max = 2\n"
				"[circuit \"payments\"]\n"
				"slot_ttl_ms = 500\n"
				"[circuit \"db\"]\n"
				"max_gap_ms = 10\n";

/* Load conf_text with the nth allocation failing, then take the fixed
 * keys from the defaults as a reload does; exits like oom_run's child. */
static void __attribute__((noreturn)) conf_child(unsigned long n, const char *path)
{
	char err[CONF_ERROR_SIZE];
	cbd_conf cfg, old;
	bool loaded;

	log_set_level(LOG_LEVEL_ERROR);
	if (!conf_init_defaults(&old))
		oom_fail(n, "out of memory setting up");
	oom_calls = 0;
	oom_fail_at = n;
	oom_armed = true;
	loaded = conf_load(path, &cfg, err, sizeof err);
	if (loaded && !conf_keep_fixed(&cfg, &old)) {
		conf_free(&cfg);
		loaded = false;
		snprintf(err, sizeof err, "keeping the fixed keys: out of memory");
	}
	oom_armed = false;
	if (!loaded && !oom_injected)
		oom_fail(n, "the config does not load: %s", err);
	if (!loaded && strstr(err, "out of memory") == NULL)
		oom_fail(n, "out of memory reported as: %s", err);
	if (loaded)
		conf_free(&cfg);
	conf_free(&old);
	exit(oom_injected ? 0 : 3);
}

START_TEST(test_conf_sweep)
{
	char path[] = "/tmp/cbd-oom-conf-XXXXXX";
	int fd = mkstemp(path);
	unsigned long n, failed = 0;

	ck_assert_int_ge(fd, 0);
	ck_assert(write(fd, conf_text, sizeof conf_text - 1) == (ssize_t)(sizeof conf_text - 1));
	close(fd);
	for (n = 1; n <= OOM_SWEEP_MAX; n++) {
		int status;
		pid_t pid;

		fflush(NULL);
		pid = fork();
		ck_assert_int_ge(pid, 0);
		if (pid == 0)
			conf_child(n, path);
		while (waitpid(pid, &status, 0) < 0)
			;
		if (WIFEXITED(status) && WEXITSTATUS(status) == 3)
			break;
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
			failed++;
			fprintf(stderr, "config N=%lu: %s %d\n", n,
			    WIFSIGNALED(status) ? "killed by signal" : "exit status",
			    WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
		}
	}
	unlink(path);
	printf("config malloc sweep: %lu runs, %lu failed\n", n - 1, failed);
	ck_assert_msg(failed == 0, "%lu of %lu config loads failed badly", failed, n - 1);
}
END_TEST

static Suite *
oom_suite(void)
{
	Suite *s = suite_create("malloc failure sweep");
	TCase *tc = tcase_create("sweep");

	/* The sweep runs the session once per allocation (about 1200 runs):
	 * seconds normally, much longer under ASan on a loaded machine. */
	tcase_set_timeout(tc, 600);

	tcase_add_test(tc, test_reference_session);
	tcase_add_test(tc, test_sweep);
	tcase_add_test(tc, test_conf_sweep);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	json_set_alloc_funcs(oom_json_malloc, free);
	return check_run(oom_suite(), NULL);
}
