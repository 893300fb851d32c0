/*
 * fuzz-request.c — fuzz target for cbd's whole request path: the input is
 * one or more request lines from one connection, answered by op_dispatch
 * on a fresh in-memory circuit table. Every request must get exactly one
 * reply (unless a limit drops the connection), each one valid JSON object
 * line and none `internal`; anything else aborts so the fuzzer flags it.
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

#include "fuzz-daemon.h"
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
		srv.conf.max_circuits = FUZZ_TIGHT_CIRCUITS;
		srv.conf.max_line_bytes = FUZZ_TIGHT_LINE;
		srv.conf.max_output_bytes = FUZZ_TIGHT_OUTPUT;
		circuit_table_set_max_circuits(srv.table, FUZZ_TIGHT_CIRCUITS);
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
	return 0;
}
