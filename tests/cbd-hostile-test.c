/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cbd-hostile-test.c — mutated requests against a real cbd: thousands of
 * lines made by corrupting valid requests (bytes flipped, inserted, cut;
 * numbers made huge, negative or fractional; members duplicated). Every
 * non-empty line must get exactly one well-formed reply with a known
 * error code, and cbd must keep answering and keep its circuits.
 *
 * Deterministic: a fixed seed ($CBD_HOSTILE_SEED overrides it, and a
 * failure prints the seed and the line that broke the rule).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <check.h>
#include <jansson.h>

#include "cbd-harness.h"
#include "check-run.h"
#include "daemon-util.h"
#include "proto.h"

/* How many mutated lines, sent in batches (pipelined). */
#define HOSTILE_LINES 4000
#define HOSTILE_BATCH 50
#define HOSTILE_LINE_MAX 2048
/* cbd's max_line_bytes in this test: small, so long lines are common. */
#define HOSTILE_MAX_LINE_BYTES 512

static const char *const seeds[] = {
	"{\"id\":1,\"op\":\"hello\",\"client\":\"fuzz\"}",
	"{\"id\":2,\"op\":\"get\",\"name\":\"a\",\"ctx\":{\"now\":1000}}",
	"{\"id\":\"x\",\"op\":\"record_failure\",\"name\":\"a\",\"ctx\":{\"failure_threshold\":2,"
	"\"now\":1000}}",
	"{\"op\":\"record_success\",\"name\":\"b\",\"ctx\":{\"success_threshold\":1,\"max_gap_ms\":"
	"5}}",
	"{\"op\":\"cas\",\"name\":\"a\",\"from\":\"open\",\"to\":\"half_open\",\"ctx\":{\"now\":"
	"40000}}",
	"{\"op\":\"set_state\",\"name\":\"c\",\"state\":\"open\"}",
	"{\"op\":\"acquire_slot\",\"name\":\"a\",\"ctx\":{\"half_open_max\":3,\"slot_ttl_ms\":10}}",
	"{\"op\":\"release_slot\",\"name\":\"a\",\"token\":\"0000000000000000-0000000000000001\"}",
	"{\"op\":\"allow\",\"name\":\"a\",\"ctx\":{\"break_ms\":1,\"now\":90000}}",
	"{\"op\":\"record\",\"name\":\"a\",\"outcome\":\"failure\",\"permit\":\"p\"}",
	"{\"op\":\"record\",\"name\":\"\\u00e9t\\u00e9\",\"outcome\":\"ignore\"}",
	"{\"op\":\"delete\",\"name\":\"b\"}",
	"{\"op\":\"list\",\"state\":\"open\"}",
	"{\"op\":\"stats\"}",
	"[1,2,{\"op\":\"get\"}]",
};

#define SEED_COUNT (sizeof seeds / sizeof seeds[0])

static const char *const tokens[] = {
	"null",
	"true",
	"-1",
	"0",
	"1.5",
	"1e400",
	"9007199254740993",
	"99999999999999999999999",
	"\"\"",
	"{}",
	"[]",
	"\"\\u0000\"",
	"\"\\ud800\"",
	"\xff",
	"\xc3",
	"\r",
	"\"op\":\"get\"",
	",",
	":",
	"\"name\":",
	"{\"now\":-5}",
};

#define TOKEN_COUNT (sizeof tokens / sizeof tokens[0])

static const char *const known_codes[] = {
	"parse_error",
	"line_too_long",
	"unknown_op",
	"bad_request",
	"forbidden",
	"capacity",
	"shutting_down",
	"internal",
	NULL,
};

static unsigned long long rng_state;

static unsigned
rng(unsigned bound)
{
	/* xorshift64*: reproducible across platforms. */
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return (unsigned)((rng_state * 2685821657736338717ULL) >> 33) % bound;
}

/* Insert text at pos in line (len bytes), within HOSTILE_LINE_MAX. */
static size_t
insert_at(char *line, size_t len, size_t pos, const char *text, size_t n)
{
	if (len + n >= HOSTILE_LINE_MAX)
		return len;
	memmove(line + pos + n, line + pos, len - pos);
	memcpy(line + pos, text, n);
	return len + n;
}

/* One mutation of line; returns the new length. */
static size_t
mutate(char *line, size_t len)
{
	size_t pos = len > 0 ? rng((unsigned)len) : 0;
	char byte;

	switch (rng(7)) {
	case 0: /* flip a byte */
		if (len > 0)
			line[pos] = (char)rng(256);
		return len;
	case 1: /* insert a random byte */
		byte = (char)rng(256);
		return insert_at(line, len, pos, &byte, 1);
	case 2: /* delete a run */
		if (len > 0) {
			size_t n = 1 + rng(8);

			if (pos + n > len)
				n = len - pos;
			memmove(line + pos, line + pos + n, len - pos - n);
			return len - n;
		}
		return len;
	case 3: { /* insert a nasty token */
		const char *t = tokens[rng(TOKEN_COUNT)];

		return insert_at(line, len, pos, t, strlen(t));
	}
	case 4: /* duplicate a chunk (duplicate members, deep nesting) */
		if (len > 0) {
			size_t n = 1 + rng(len - pos < 40 ? (unsigned)(len - pos) : 40);
			char chunk[64];

			memcpy(chunk, line + pos, n);
			return insert_at(line, len, pos, chunk, n);
		}
		return len;
	case 5: /* truncate */
		return pos;
	default: /* grow past max_line_bytes */
		while (len + 64 < HOSTILE_LINE_MAX && len < HOSTILE_MAX_LINE_BYTES + 200)
			len = insert_at(line, len, len > 0 ? len - 1 : 0,
			    "{\"pad\":\"xxxxxxxxxxxxxxx\"}, ", 26);
		return len;
	}
}

/* Is reply a well-formed protocol reply? */
static bool
reply_ok(const char *reply, char *why, size_t why_size)
{
	json_t *v = json_loads(reply, 0, NULL);
	const json_t *ok = json_object_get(v, "ok");
	bool good = false;

	if (!json_is_object(v) || !json_is_boolean(ok)) {
		snprintf(why, why_size, "not a reply object with ok");
	} else if (json_is_true(ok)) {
		good = true;
	} else {
		const char *code = util_str(v, "error.code");
		const char *message = util_str(v, "error.message");

		for (size_t i = 0; code != NULL && known_codes[i] != NULL; i++)
			good = good || strcmp(code, known_codes[i]) == 0;
		if (!good || message == NULL || message[0] == '\0') {
			good = false;
			snprintf(why, why_size, "unknown error code or empty message");
		}
	}
	json_decref(v);
	return good;
}

START_TEST(test_mutated_requests_get_one_reply_each)
{
	static char lines[HOSTILE_BATCH][HOSTILE_LINE_MAX];
	static char batch[HOSTILE_BATCH * (HOSTILE_LINE_MAX + 1)];
	char reply[1 << 16], why[128];
	const char *seed_env = getenv("CBD_HOSTILE_SEED");
	unsigned long long seed = seed_env != NULL ? strtoull(seed_env, NULL, 0) : 20261129ULL;
	cbd_harness h;
	size_t sent = 0;
	json_t *r;
	int fd;

	rng_state = seed != 0 ? seed : 1;
	ck_assert(harness_start(&h, "[cbd]\nmax_line_bytes = 512\nmax_circuits = 50\n"));
	fd = harness_connect(&h);
	ck_assert_int_ge(fd, 0);
	/* A circuit that must survive everything below (names used by the
	 * corpus cannot reach it: its name is not in any seed). */
	r = util_call(fd,
	    "{\"op\":\"set_state\",\"name\":\"survivor\",\"state\":\"open\",\"ctx\":{\"now\":5}}");
	ck_assert_ptr_nonnull(r);
	json_decref(r);

	while (sent < HOSTILE_LINES) {
		size_t blen = 0;
		int n = 0;

		for (; n < HOSTILE_BATCH; n++) {
			const char *base = seeds[rng(SEED_COUNT)];
			size_t len = strlen(base);
			int rounds = 1 + (int)rng(4);

			memcpy(lines[n], base, len);
			for (int k = 0; k < rounds; k++)
				len = mutate(lines[n], len);
			/* One line each: no LF inside, never empty, no trailing CR
			 * (those are framing, tested elsewhere). */
			for (size_t i = 0; i < len; i++) {
				if (lines[n][i] == '\n')
					lines[n][i] = ' ';
			}
			if (len == 0 || lines[n][len - 1] == '\r')
				lines[n][len++] = 'x';
			memcpy(batch + blen, lines[n], len);
			blen += len;
			batch[blen++] = '\n';
			lines[n][len] = '\0';
		}
		ck_assert(util_write_all(fd, batch, blen));
		for (int i = 0; i < n; i++) {
			ck_assert_msg(util_read_line(fd, reply, sizeof reply),
			    "seed %llu: no reply to line %zu: %.300s", seed, sent + (size_t)i,
			    lines[i]);
			ck_assert_msg(reply_ok(reply, why, sizeof why),
			    "seed %llu: %s: %.300s -> %.300s", seed, why, lines[i], reply);
		}
		sent += (size_t)n;
	}
	/* Still alive, still answering on a new connection, state kept. */
	int other = harness_connect(&h);
	ck_assert_int_ge(other, 0);
	r = util_call(other, "{\"op\":\"get\",\"name\":\"survivor\"}");
	ck_assert_ptr_nonnull(r);
	ck_assert_str_eq(util_str(r, "snapshot.state"), "open");
	ck_assert_int_eq(util_int(r, "snapshot.opened_at"), 5);
	json_decref(r);
	r = util_call(other, "{\"op\":\"stats\"}");
	ck_assert_ptr_nonnull(r);
	ck_assert_int_gt(util_int(r, "errors.parse_error"), 0);
	ck_assert_int_gt(util_int(r, "errors.bad_request"), 0);
	ck_assert_int_gt(util_int(r, "errors.line_too_long"), 0);
	json_decref(r);
	close(other);
	close(fd);
	harness_stop(&h);
}
END_TEST

int
main(void)
{
	Suite *suite = suite_create("cbd hostile input");
	TCase *tc = tcase_create("mutations");

	/* Generous: sanitizer and valgrind builds are much slower. */
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_mutated_requests_get_one_reply_each);
	suite_add_tcase(suite, tc);
	return check_run(suite, NULL);
}
