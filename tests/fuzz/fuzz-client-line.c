/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz-client-line.c — fuzz target for libcbclient's readers of what cbd
 * sends: the input is one or more lines (LF-separated), each read the way
 * the client reads a reply or a watch event. For every line:
 *   - the reply decoder (cbci_reply_decode) and the watch cache's line
 *     handler take it, whatever it is (nothing may crash or leak);
 *   - a line in the flat subset (proto-scan.h) must be JSON to jansson
 *     too, and its snapshot readings (the line's object, and the object
 *     under "snapshot" when there is one) must be the same from the flat
 *     view as from jansson values, status and message included;
 *   - an object line is fed to two watch caches, as it is and made
 *     non-flat by an ignored array member: what they make of it (a fresh
 *     snapshot, the event, bad-line and refusal counts) must be the same.
 * A difference aborts, so the fuzzer flags it (message on stderr).
 *
 * libFuzzer entry point; tests/fuzz/replay.c drives it without libFuzzer
 * (make check replays tests/fuzz/corpus/client-line).
 */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "client-readers.h"
#include "proto-scan.h"

/* Lines read from one input; the rest is ignored. */
#define FUZZ_LINES_MAX 64
/* A padded line's room (the flat subset ends at PROTO_FLAT_TEXT_MAX). */
#define FUZZ_PADDED_SIZE (PROTO_FLAT_TEXT_MAX + 32)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* ~11 KiB each: static. */
static proto_flat flat;
static char padded[FUZZ_PADDED_SIZE];

static void
fail(const char *what, const char *why, const char *line, size_t len)
{
	fprintf(stderr, "fuzz-client-line: %s: %s\nline: %.*s\n", what, why, (int)len, line);
	abort();
}

/* The snapshot readings of node (flat) and obj (jansson) must agree. */
static void
readings_agree(const proto_node *node, const json_t *obj, const char *line, size_t len)
{
	char why[READERS_WHY_SIZE];
	reading a, b;

	reading_of_node(node, &a);
	reading_of_json(obj, &b);
	if (readings_differ(&a, &b, why, sizeof why))
		fail("flat and jansson snapshot readings differ", why, line, len);
}

static void
line_check(cache_pair *pair, cbci_cache *loose, const char *line, size_t len)
{
	/* ~11 KiB: static. */
	static cbci_reply reply;
	char why[READERS_WHY_SIZE];
	proto_node node;
	json_t *obj;
	int under;

	/* Whatever it is: decoded, then freed; applied by a cache. */
	cbci_reply_decode(&reply, line, len, NULL);
	cbci_reply_free(&reply);
	cbci_cache_apply_line(loose, line, len);
	if (!proto_scan_flat(line, len, &flat))
		return;
	obj = json_loadb(line, len, JSON_REJECT_DUPLICATES, NULL);
	if (obj == NULL)
		fail("flat but not JSON to jansson", "json_loadb refused it", line, len);
	if (json_is_object(obj)) {
		node = proto_node_flat(&flat, 0);
		readings_agree(&node, obj, line, len);
		under = proto_flat_find(&flat, 0, "snapshot");
		if (under >= 0 && json_is_object(json_object_get(obj, "snapshot"))) {
			node = proto_node_flat(&flat, under);
			readings_agree(&node, json_object_get(obj, "snapshot"), line, len);
		}
		/* An input with the pad's own name would repeat it. */
		if (proto_flat_find(&flat, 0, "zz_pad") < 0 &&
		    line_padded(line, len, padded, sizeof padded) &&
		    cache_pair_differ(pair, line, len, padded, why, sizeof why))
			fail("the caches read the line differently flat and padded", why, line,
			    len);
	}
	json_decref(obj);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* Made once: a cache starts a reader thread (that finds no socket). */
	static cache_pair pair;
	static cbci_cache *loose;
	static bool ready;
	const char *p = (const char *)data, *end = p + size;

	if (!ready) {
		loose = cbci_cache_acquire("/nonexistent/fuzz-client-line-loose.sock", NULL);
		if (!cache_pair_open(&pair, "fuzz-client-line") || loose == NULL ||
		    cbci_cache_watch(loose, "svc.a") == NULL)
			fail("setup", "out of resources", "", 0);
		ready = true;
	}
	for (int n = 0; n < FUZZ_LINES_MAX && p < end; n++) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t len = nl != NULL ? (size_t)(nl - p) : (size_t)(end - p);

		line_check(&pair, loose, p, len);
		p += len + (nl != NULL);
	}
	return 0;
}
