/* SPDX-License-Identifier: Apache-2.0 */
/*
 * log.h — cbd's logging: one line per event on stderr, level first.
 */
#ifndef CBD_LOG_H
#define CBD_LOG_H

#include <stdbool.h>
#include <stddef.h>

typedef enum log_level {
	LOG_LEVEL_ERROR = 0,
	LOG_LEVEL_WARNING,
	LOG_LEVEL_INFO,
	LOG_LEVEL_DEBUG,
} log_level;

#define LOG_LEVEL_COUNT 4
/* Longest log line; longer ones are cut. */
#define LOG_LINE_MAX 4096
/* Longest text quoted whole: a circuit name (daemon.c
 * checks CT_NAME_MAX fits). */
#define LOG_QUOTE_TEXT_MAX 256
/* Room for a quoted text: every byte escaped (\xNN), two quotes, NUL. */
#define LOG_QUOTE_SIZE (4 * LOG_QUOTE_TEXT_MAX + 3)

/* Line formats: text ("LEVEL: message"), or one JSON object a line. */
typedef enum log_format {
	LOG_FORMAT_TEXT = 0,
	LOG_FORMAT_JSON,
} log_format;

/* One named value of an event, a member of its JSON line (text lines
 * carry it in the message already). raw: written unquoted (a number). */
typedef struct log_field {
	const char *key;
	const char *value;
	bool raw;
} log_field;

void log_set_level(log_level level);
/* Start each text line with the local time (ignored under journald,
 * which stamps lines itself). */
void log_set_timestamps(bool on);
void log_set_format(log_format format);
/* Is stderr the journal? JOURNAL_STREAM names its device and inode when
 * systemd connected it (systemd.exec(5)): compared with stderr's. */
bool log_stderr_is_journal(void);
log_level log_get_level(void);
bool log_enabled(log_level level);

/* Wire/config name of a level ("info"); parse one back. */
const char *log_level_name(log_level level);
bool log_level_parse(const char *text, log_level *out);

/* Write "LEVEL: message" as one line to stderr (one write); control bytes
 * in the message are escaped as \xNN. */
void log_msg(log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* log_msg with the event's fields (n of them) for JSON lines. */
void log_fields(log_level level, const log_field *fields, size_t n, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#define log_error(...) log_msg(LOG_LEVEL_ERROR, __VA_ARGS__)
#define log_warning(...) log_msg(LOG_LEVEL_WARNING, __VA_ARGS__)
#define log_info(...) log_msg(LOG_LEVEL_INFO, __VA_ARGS__)
#define log_debug(...) log_msg(LOG_LEVEL_DEBUG, __VA_ARGS__)

/* A broken invariant: log it and abort. */
void fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

/* name in double quotes into buf, '"' and '\\' escaped with a backslash
 * and control bytes as \xNN; cut to fit size. Returns buf. */
const char *log_quote(const char *name, char *buf, size_t size);

#endif
