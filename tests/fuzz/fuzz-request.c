/*
 * fuzz-request.c — fuzz target for cbd's whole request path: the input is
 * one or more request lines from one connection, answered by op_dispatch
 * on a fresh in-memory circuit table. Every request must get exactly one
 * reply, each one valid JSON object line and none `internal`; anything
 * else aborts so the fuzzer flags it. An input starting with '!' comes from a peer that is
 * not an admin (the '!' is dropped).
 *
 * libFuzzer entry point; tests/fuzz/replay.c drives it without libFuzzer.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz-daemon.h"
#include "server.h"

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

	if (size > 0 && text[0] == '!') {
		uid = fuzz_other_uid();
		text++;
		size--;
	}
	if (!fuzz_daemon_start() || (c = fuzz_client_new(uid)) == NULL) {
		fprintf(stderr, "fuzz-request: out of memory setting up\n");
		abort();
	}
	expected = fuzz_client_feed(c, text, size);
	out = fuzz_client_output(c, &out_len);
	/* A dropped connection (a limit) owes no more replies; the ones
	 * queued must still be whole lines. */
	if (c->state == SERVER_CLIENT_DEAD)
		expected = FUZZ_ANY_COUNT;
	if (!fuzz_replies_check(out, out_len, expected, no_internal, NULL, why, sizeof why)) {
		fprintf(stderr, "fuzz-request: bad reply: %s\n", why);
		abort();
	}
	fuzz_daemon_stop();
	return 0;
}
