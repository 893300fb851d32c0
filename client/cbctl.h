/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cbctl.h — what cbctl's files share: the invocation (connection, output
 * mode, parsed options), exit codes, messages and time formatting. Not
 * installed; libcbclient's API stays in cbclient.h.
 */
#ifndef CBCTL_H
#define CBCTL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "cbclient.h"

enum {
	EXIT_OK = 0,
	EXIT_REFUSED = 1,
	EXIT_USAGE = 2,
	EXIT_UNREACHABLE = 3,
};

/* How long connecting may take (a cbd too busy to accept). */
#define CBCTL_CONNECT_TIMEOUT_MS 1000

/* Most options a command may be given (each parsed option takes a row). */
#define CBCTL_OPTIONS_MAX 16
/* Room for a command option's name ("--state"). */
#define CBCTL_OPTION_NAME_SIZE 32
/* Most positional arguments (watch's names). */
#define CBCTL_ARGS_MAX 256

/* One option given to a command: its long name ("--for") and its value
 * (NULL for a flag). */
typedef struct cbctl_option {
	char name[CBCTL_OPTION_NAME_SIZE];
	const char *value;
} cbctl_option;

typedef struct cbctl {
	cbc_conn *conn;
	bool json;
	bool color;
	int io_ms;
	int argc; /* positional arguments after the command */
	const char *argv[CBCTL_ARGS_MAX];
	int optc; /* the command's own options, in order */
	cbctl_option opts[CBCTL_OPTIONS_MAX];
} cbctl;

/* "cbctl: " + the message + newline on stderr. */
void cbctl_errorf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The value of the command's option name (the last one given); NULL when
 * absent. *given (may be NULL) says whether it was given at all. */
const char *cbctl_option_get(const cbctl *ctl, const char *name, bool *given);

/* A time in ms since the epoch as local time ("2026-11-30 10:01:02"),
 * "-" for CBC_TIME_NONE. */
void cbctl_format_time(int64_t ms, char *buf, size_t size);
/* The realtime clock in ms (for "in 9m58s"). */
int64_t cbctl_now_ms(void);

/* The reply of the connection's last request, parsed (NULL when none). */
json_t *cbctl_last_reply(cbctl *ctl);

/* Report a failed libcbclient call and map it to an exit code. */
int cbctl_fail_status(cbctl *ctl, cbc_status status, const cbc_error *err);

/* Print the hint for a socket the user may not connect to: the group
 * that may (the socket's own), or the directory in the way. */
void cbctl_permission_hint(const char *path);

/* A raw connection to cbd's socket (for what libcbclient's request/reply
 * API does not do: reading events, the peer's credentials). The fd, or -1
 * after printing why (the hint too on EACCES): exit EXIT_UNREACHABLE. */
int cbctl_connect(const cbctl *ctl);

/* A duration: ms as a plain integer, or an integer with a unit (ms, s,
 * m, h). False when it is not one, or not in 1..2^53 ms. */
bool cbctl_parse_duration(const char *text, int64_t *out);

/* The lines read from a raw connection (cbctl-watch.c). */
typedef struct cbctl_line_buf {
	char *data;
	size_t len, size;
} cbctl_line_buf;

/* Send the watch request on fd: ctl's positional names, or all of them
 * (false after printing why). */
bool cbctl_watch_send(const cbctl *ctl, int fd);

/* Read what fd has into buf: 1 read, 0 end of file, -1 error (printed). */
int cbctl_watch_read(const cbctl *ctl, int fd, cbctl_line_buf *buf);

/* The commands living in their own files. */
int cbctl_cmd_stats(cbctl *ctl); /* cbctl-stats.c */
int cbctl_cmd_watch(cbctl *ctl); /* cbctl-watch.c */
int cbctl_cmd_reload(cbctl *ctl); /* cbctl-reload.c */
int cbctl_cmd_top(cbctl *ctl); /* cbctl-top.c */

#endif
