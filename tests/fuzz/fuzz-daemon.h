/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz-daemon.h — cbd's request path in-process, without a socket: the
 * server's globals set up as server_start() would (config defaults, an
 * in-memory circuit table, an event base that never runs), connections
 * that are a server_client with no descriptor, and a checker that every
 * reply is one valid JSON object line ($CBD_FUZZ_LOG_LEVEL sets the log
 * level, default error). Used by the fuzz targets and the
 * malloc failure sweep.
 */
#ifndef CBD_FUZZ_DAEMON_H
#define CBD_FUZZ_DAEMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "server-client.h"

/* The slot token prefix of the in-process daemon (a fixed instance id,
 * so that runs are reproducible). */
#define FUZZ_INSTANCE_ID UINT64_C(0x00c0ffee00c0ffee)

/* Set up the daemon context like server_start() minus the socket and signals; false
 * when out of memory. */
bool fuzz_daemon_start(void);
/* Close every connection and free everything (server_free()). */
void fuzz_daemon_stop(void);

/* A connection from uid with no descriptor: its events exist (so closing
 * it works) but are never added. NULL when out of memory. */
server_client *fuzz_client_new(uid_t uid);

/* Answer every line of data as cbd would (LF-separated, a CR before LF
 * stripped, empty lines ignored, max_line_bytes enforced). Returns the
 * number of replies expected. */
size_t fuzz_client_feed(server_client *c, const char *data, size_t len);

/* The replies queued on c, and forget them. */
const char *fuzz_client_output(server_client *c, size_t *len);
void fuzz_client_output_reset(server_client *c);

/* fuzz_replies_check's `expected` when any number of lines will do. */
#define FUZZ_ANY_COUNT SIZE_MAX

/* Check that out holds exactly `expected` lines, each one compact JSON
 * object with a boolean "ok", and "error" {code, message} when not ok;
 * calls visit (may be NULL) on each parsed reply. On a bad reply it
 * describes it into why and returns false. */
bool fuzz_replies_check(const char *out, size_t len, size_t expected,
    void (*visit)(const json_t *reply, size_t i, void *arg), void *arg, char *why, size_t why_size);

#endif
