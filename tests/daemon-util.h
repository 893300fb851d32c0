/* SPDX-License-Identifier: Apache-2.0 */
/*
 * daemon-util.h — helpers shared by cbd's integration tests: JSON calls
 * over a harness connection, bounded reads, running programs, logs.
 */
#ifndef CBD_DAEMON_UTIL_H
#define CBD_DAEMON_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "cbd-harness.h"

/* Room for one reply line in the tests. */
#define UTIL_REPLY_SIZE (1 << 20)

/* Send a printf-formatted request line, parse the reply; NULL on failure. */
json_t *util_call(int fd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* util_call that must answer ok (a check assertion otherwise, naming the
 * caller's line, the request and cbd's message). A macro for __LINE__. */
#define util_call_ok(fd, ...) util_call_ok_at(__LINE__, (fd), __VA_ARGS__)
json_t *util_call_ok_at(int line, int fd, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The error code of a reply, or NULL when it is ok. */
const char *util_code(const json_t *reply);

/* An integer / bool / string at a dotted path ("snapshot.failure_count";
 * a number indexes an array: "policy_conflict.0"). */
int64_t util_int(const json_t *obj, const char *path);
bool util_bool(const json_t *obj, const char *path);
const char *util_str(const json_t *obj, const char *path);
const json_t *util_get(const json_t *obj, const char *path);

/* Poll stats on conn until member `path` equals want; false when it does
 * not within harness_timeout_ms(). */
bool util_stats_reach(int conn, const char *path, int64_t want);
/* The same until it is at least `least`. */
bool util_stats_reach_min(int conn, const char *path, int64_t least);
/* The same for a string member ("backend.health"). */
bool util_stats_reach_str(int conn, const char *path, const char *want);

bool util_write_all(int fd, const void *buf, size_t len);
/* Read one line (bounded wait); false on EOF, error or timeout. */
bool util_read_line(int fd, char *buf, size_t size);
/* Is the peer's side closed (EOF within the bounded wait)? */
bool util_wait_eof(int fd);
/* The next line on fd, parsed (a check assertion saying "no <what>" when
 * none comes within the bounded wait, or when it is not JSON). */
json_t *util_next_json(int fd, const char *what);
/* The next line on fd as a watch event, checked: its "event" and, when not
 * NULL, its name ("name" for a delete, else "snapshot.name"), "from" and
 * "snapshot.state". Returned for more checks; json_decref it. */
json_t *util_next_event(int fd, const char *event, const char *name, const char *from,
    const char *state);

/* Run argv (NULL-ended) with stdout+stderr captured into out; returns the
 * exit code, or -1 when it did not exit within the bounded wait. */
int util_run(const char *const *argv, char *out, size_t size);

/* Wait (bounded) until the file at path contains text. */
bool util_wait_file(const char *path, const char *text);

/* The log-file fixture of the tests that read cbd's log. */
#define UTIL_LOG_PATH_SIZE 64
/* A fresh empty file for the log; its name in path (a check assertion
 * when it cannot be made). The test unlinks it at teardown. */
void util_log_create(char path[UTIL_LOG_PATH_SIZE]);
/* Start cbd into h with config text (NULL: none) and extra arguments
 * (NULL-ended; NULL: none), its stderr into log_path (a check assertion
 * when it does not start). */
void util_start_logged(cbd_harness *h, const char *config, const char *const *args,
    const char *log_path);
/* Lines of the file at path holding text (a check assertion when it
 * cannot be read). */
int util_log_count(const char *path, const char *text);
/* Is there anything (a socket, a file, a link) at path? */
bool util_path_exists(const char *path);

/* The fixture of one cbd and a connection: start cbd into h with config
 * (NULL: none) and connect *fd to it (a check assertion when either
 * fails). */
void util_start_conn(cbd_harness *h, int *fd, const char *config);
/* A free loopback port (bound then released; a race with another program
 * is possible but harmless: cbd then fails to start and the test says so). */
int util_free_port(void);
/* util_start_conn with metrics_listen on a free loopback port (*port) and
 * the rest of [cbd] from extra. */
void util_start_metrics(cbd_harness *h, int *fd, int *port, const char *extra);
/* Decode an HTTP chunked body in place (NUL-ended); false when it is not
 * well formed or does not end with its last chunk. */
bool util_http_dechunk(char *body);
/* Close *fd when it is open; -1 after. */
void util_close(int *fd);
/* Its teardown: close *fd, stop h. */
void util_stop_conn(cbd_harness *h, int *fd);

/* Connect as uid/gid (a forked child setuid()s), send line, read one
 * reply into reply. False when anything failed. */
bool util_request_as(const cbd_harness *h, unsigned uid, unsigned gid, const char *line,
    char *reply, size_t size);

#endif
