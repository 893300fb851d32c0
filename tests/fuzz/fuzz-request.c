/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz-request.c — fuzz target for cbd's whole request path: the input is
 * one or more request lines from one connection, answered by op_dispatch
 * on a fresh in-memory circuit table. Every request must get exactly one
 * reply (unless a limit drops the connection), each one valid JSON object
 * line and none `internal`; anything else aborts so the fuzzer flags it.
 * Each line is also decoded by the fast path (proto-scan.c) and by
 * json_loadb: where the fast path answers, jansson must answer the same
 * text; where jansson refuses, the fast path must refuse too.
 *
 * Leading directive bytes (dropped before the lines): '!' the peer is not
 * an admin; '%' tiny limits (FUZZ_TIGHT_*), so that max_circuits,
 * max_line_bytes and the output bound are reachable with short inputs.
 *
 * libFuzzer entry point; tests/fuzz/replay.c drives it without libFuzzer
 * ($CBD_FUZZ_ECHO set: the replies are printed).
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "fuzz-daemon.h"
#include "proto-scan.h"
#include "server.h"

/* The '%' limits. max_output_bytes is below the config file's minimum on
 * purpose: a list of a dozen circuits reaches it. */
#define FUZZ_TIGHT_CIRCUITS 32
#define FUZZ_TIGHT_LINE 256
#define FUZZ_TIGHT_OUTPUT 4096

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A uid that is neither root nor ours: not an admin by default. */
static uid_t
fuzz_other_uid(void)
{
	return geteuid() == 0 ? 1 : geteuid() + 1;
}

/* Nothing runs out of memory here: `internal` would be a bug. */
static void
no_internal(const json_t *reply, size_t i, void *arg)
{
	const char *code =
	    json_string_value(json_object_get(json_object_get(reply, "error"), "code"));

	if (code != NULL && strcmp(code, "internal") == 0) {
		fprintf(stderr, "fuzz-request: reply %zu is internal\n", i);
		abort();
	}
}

/* The fast path against json_loadb on one line (as line_answer passes
 * it: no LF, no CR before it); abort on a difference. */
static void
scan_check_line(const char *line, size_t len)
{
	json_error_t jerr;
	json_t *scan, *ref;
	char *got, *want;

	if (len > 0 && line[len - 1] == '\r')
		len--;
	if ((scan = proto_scan_request(line, len)) == NULL)
		return; /* json_loadb decodes it, whatever it is */
	ref = json_loadb(line, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &jerr);
	if (ref == NULL) {
		fprintf(stderr, "fuzz-request: the fast path took a line json_loadb refuses: %s\n",
		    jerr.text);
		abort();
	}
	got = json_dumps(scan, JSON_COMPACT);
	want = json_dumps(ref, JSON_COMPACT);
	if (got == NULL || want == NULL || strcmp(got, want) != 0 || !json_equal(scan, ref)) {
		fprintf(stderr, "fuzz-request: fast path %s, json_loadb %s\n", got ? got : "?",
		    want ? want : "?");
		abort();
	}
	free(got);
	free(want);
	json_decref(scan);
	json_decref(ref);
}

/* scan_check_line on every line of the input. */
static void
scan_check(const char *text, size_t size)
{
	const char *end = text + size, *lf;

	for (; text < end; text = lf + 1) {
		if ((lf = memchr(text, '\n', (size_t)(end - text))) == NULL)
			lf = end;
		scan_check_line(text, (size_t)(lf - text));
	}
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *text = (const char *)data;
	uid_t uid = geteuid();
	server_client *c;
	size_t expected, out_len;
	const char *out;
	char why[512];

	bool tight = false;

	for (; size > 0 && (text[0] == '!' || text[0] == '%'); text++, size--) {
		if (text[0] == '!')
			uid = fuzz_other_uid();
		else
			tight = true;
	}
	if (!fuzz_daemon_start() || (c = fuzz_client_new(uid)) == NULL) {
		fprintf(stderr, "fuzz-request: out of memory setting up\n");
		abort();
	}
	if (tight) {
		cbd.conf.max_circuits = FUZZ_TIGHT_CIRCUITS;
		cbd.conf.max_line_bytes = FUZZ_TIGHT_LINE;
		cbd.conf.max_output_bytes = FUZZ_TIGHT_OUTPUT;
		circuit_table_set_max_circuits(cbd.table, FUZZ_TIGHT_CIRCUITS);
	}
	expected = fuzz_client_feed(c, text, size);
	out = fuzz_client_output(c, &out_len);
	if (getenv("CBD_FUZZ_ECHO") != NULL)
		fwrite(out, 1, out_len, stdout);
	/* A dropped connection (a limit; closing, or closed) owes no more
	 * replies; the ones queued must still be whole lines. */
	if (c->state != SERVER_CLIENT_OPEN)
		expected = FUZZ_ANY_COUNT;
	if (!fuzz_replies_check(out, out_len, expected, no_internal, NULL, why, sizeof why)) {
		fprintf(stderr, "fuzz-request: bad reply: %s\n", why);
		abort();
	}
	fuzz_daemon_stop();
	scan_check(text, size);
	return 0;
}
