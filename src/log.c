/* SPDX-License-Identifier: Apache-2.0 */
/*
 * log.c — one line per event on stderr, level first; under systemd each
 * line also carries the journal's <N> priority prefix.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "log.h"

static log_level current_level = LOG_LEVEL_INFO;
static bool timestamps;

/* Level names, and the syslog priorities journald reads from "<N>". */
static const struct {
	const char *name;
	int priority;
} levels[LOG_LEVEL_COUNT] = {
	[LOG_LEVEL_ERROR] = { "error", 3 },
	[LOG_LEVEL_WARNING] = { "warning", 4 },
	[LOG_LEVEL_INFO] = { "info", 6 },
	[LOG_LEVEL_DEBUG] = { "debug", 7 },
};

void
log_set_timestamps(bool on)
{
	timestamps = on;
}

void
log_set_level(log_level level)
{
	current_level = level;
}

log_level
log_get_level(void)
{
	return current_level;
}

bool
log_enabled(log_level level)
{
	return level <= current_level;
}

const char *
log_level_name(log_level level)
{
	if ((unsigned)level >= LOG_LEVEL_COUNT)
		return "unknown";
	return levels[level].name;
}

bool
log_level_parse(const char *text, log_level *out)
{
	for (int i = 0; i < LOG_LEVEL_COUNT; i++) {
		if (strcmp(levels[i].name, text) == 0) {
			*out = (log_level)i;
			return true;
		}
	}
	return false;
}

/* Is byte b a control byte, written as \xNN in the log? */
static bool
log_is_control(unsigned char b)
{
	return b < 0x20 || b == 0x7f;
}

/* Format and write one line; shared by log_msg and fatal. Control bytes
 * (client text may hold them) are escaped, so one event stays one line
 * and no raw byte from a client reaches the log. */
static void __attribute__((format(printf, 2, 0)))
log_vwrite(log_level level, const char *fmt, va_list ap)
{
	static const char hex[] = "0123456789abcdef";
	char text[LOG_LINE_MAX], line[LOG_LINE_MAX];
	size_t len = 0;
	int n;

	if (getenv("JOURNAL_STREAM") != NULL) {
		len = (size_t)snprintf(line, sizeof line, "<%d>", levels[level].priority);
	} else if (timestamps) {
		struct timespec ts;
		struct tm tm;

		clock_gettime(CLOCK_REALTIME, &ts);
		localtime_r(&ts.tv_sec, &tm);
		len = strftime(line, sizeof line, "%Y-%m-%d %H:%M:%S", &tm);
		len += (size_t)snprintf(line + len, sizeof line - len, ".%03ld ",
		    ts.tv_nsec / 1000000);
	}
	len += (size_t)snprintf(line + len, sizeof line - len, "%s: ", levels[level].name);
	n = vsnprintf(text, sizeof text, fmt, ap);
	if (n < 0)
		n = 0;
	if ((size_t)n >= sizeof text)
		n = (int)sizeof text - 1;
	/* Leave room for the newline. */
	for (int i = 0; i < n && len < sizeof line - 1; i++) {
		unsigned char b = (unsigned char)text[i];

		if (!log_is_control(b)) {
			line[len++] = (char)b;
			continue;
		}
		if (len + 4 > sizeof line - 1)
			break;
		line[len++] = '\\';
		line[len++] = 'x';
		line[len++] = hex[b >> 4];
		line[len++] = hex[b & 0xf];
	}
	line[len++] = '\n';
	/* Best effort: a log line that cannot be written is lost. */
	if (write(STDERR_FILENO, line, len) < 0)
		return;
}

void
log_msg(log_level level, const char *fmt, ...)
{
	va_list ap;

	if (!log_enabled(level))
		return;
	va_start(ap, fmt);
	log_vwrite(level, fmt, ap);
	va_end(ap);
}

void
fatal(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	log_vwrite(LOG_LEVEL_ERROR, fmt, ap);
	va_end(ap);
	abort();
}

const char *
log_quote(const char *name, char *buf, size_t size)
{
	static const char hex[] = "0123456789abcdef";
	size_t o = 0;

	if (size < 3) {
		if (size > 0)
			buf[0] = '\0';
		return buf;
	}
	buf[o++] = '"';
	/* Each byte takes at most 4; keep room for the closing quote and NUL. */
	for (const char *p = name; *p != '\0' && o + 4 + 2 <= size; p++) {
		unsigned char b = (unsigned char)*p;

		if (log_is_control(b)) {
			buf[o++] = '\\';
			buf[o++] = 'x';
			buf[o++] = hex[b >> 4];
			buf[o++] = hex[b & 0xf];
			continue;
		}
		if (b == '"' || b == '\\')
			buf[o++] = '\\';
		buf[o++] = (char)b;
	}
	buf[o++] = '"';
	buf[o] = '\0';
	return buf;
}
