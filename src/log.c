/* SPDX-License-Identifier: Apache-2.0 */
/*
 * log.c — one line per event on stderr, level first, or one JSON object
 * a line (log_format = json); when stderr is the journal each line also
 * carries the journal's <N> priority prefix.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "log.h"

static log_level current_level = LOG_LEVEL_INFO;
static bool timestamps;
static log_format format;

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
log_set_format(log_format f)
{
	format = f;
}

bool
log_stderr_is_journal(void)
{
	static int known = -1;
	const char *stream = getenv("JOURNAL_STREAM");
	unsigned long long dev, ino;
	struct stat st;

	if (known < 0)
		known = stream != NULL && sscanf(stream, "%llu:%llu", &dev, &ino) == 2 &&
		    fstat(STDERR_FILENO, &st) == 0 && (unsigned long long)st.st_dev == dev &&
		    (unsigned long long)st.st_ino == ino;
	return known == 1;
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

/* The length of the valid UTF-8 sequence at p (at most left bytes), 0
 * when there is none. */
static size_t
utf8_length(const unsigned char *p, size_t left)
{
	size_t n = p[0] < 0xc2 ? 0 : p[0] < 0xe0 ? 2 : p[0] < 0xf0 ? 3 : p[0] < 0xf5 ? 4 : 0;

	if (n == 0 || n > left)
		return 0;
	for (size_t i = 1; i < n; i++) {
		if ((p[i] & 0xc0) != 0x80)
			return 0;
	}
	/* Overlong three- and four-byte forms, surrogates, past U+10FFFF. */
	if ((p[0] == 0xe0 && p[1] < 0xa0) || (p[0] == 0xed && p[1] >= 0xa0) ||
	    (p[0] == 0xf0 && p[1] < 0x90) || (p[0] == 0xf4 && p[1] >= 0x90))
		return 0;
	return n;
}

/* text as a JSON string (quoted) at line + *len, cut so that *len stays
 * at most size - 2 (nothing written when even "" does not fit); bytes
 * that are not UTF-8 become U+FFFD. */
static void
json_put_string(char *line, size_t *len, size_t size, const char *text, size_t n)
{
	static const char hex[] = "0123456789abcdef";
	const unsigned char *p = (const unsigned char *)text;
	size_t o = *len, room = size - 2;

	if (o + 2 > room)
		return;
	line[o++] = '"';
	for (size_t i = 0; i < n;) {
		size_t u = p[i] < 0x80 ? 1 : utf8_length(p + i, n - i);

		if (p[i] < 0x20 || p[i] == '"' || p[i] == '\\') {
			if (o + 6 + 1 > room)
				break;
			line[o++] = '\\';
			if (p[i] == '"' || p[i] == '\\') {
				line[o++] = (char)p[i];
			} else {
				memcpy(line + o, "u00", 3);
				o += 3;
				line[o++] = hex[p[i] >> 4];
				line[o++] = hex[p[i] & 0xf];
			}
			i++;
		} else if (u == 0) {
			if (o + 6 + 1 > room)
				break;
			memcpy(line + o, "\\ufffd", 6);
			o += 6;
			i++;
		} else {
			if (o + u + 1 > room)
				break;
			memcpy(line + o, p + i, u);
			o += u;
			i += u;
		}
	}
	line[o++] = '"';
	*len = o;
}

/* One JSON object a line: time (UTC, RFC 3339), level, msg, the fields. */
static size_t
log_json_line(char *line, size_t size, size_t len, log_level level, const char *text, size_t n,
    const log_field *fields, size_t count)
{
	struct timespec ts;
	struct tm tm;

	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	len += strftime(line + len, size - len, "{\"time\":\"%Y-%m-%dT%H:%M:%S", &tm);
	len += (size_t)snprintf(line + len, size - len,
	    ".%03ldZ\",\"level\":\"%s\",\"msg\":", ts.tv_nsec / 1000000, levels[level].name);
	/* Strings end by size - 6: room for ':', '}' and the newline. */
	json_put_string(line, &len, size - 4, text, n);
	for (size_t i = 0; i < count; i++) {
		size_t vlen = fields[i].value != NULL ? strlen(fields[i].value) : 0;

		if (fields[i].value == NULL || len + strlen(fields[i].key) + vlen + 8 > size - 6)
			continue; /* a field that does not fit whole is left out */
		line[len++] = ',';
		json_put_string(line, &len, size - 4, fields[i].key, strlen(fields[i].key));
		line[len++] = ':';
		if (fields[i].raw) {
			memcpy(line + len, fields[i].value, vlen);
			len += vlen;
		} else {
			json_put_string(line, &len, size - 4, fields[i].value, vlen);
		}
	}
	line[len++] = '}';
	line[len++] = '\n';
	return len;
}

/* Format and write one line; shared by log_msg, log_fields and fatal.
 * Control bytes (client text may hold them) are escaped, so one event
 * stays one line and no raw byte from a client reaches the log. */
static void __attribute__((format(printf, 4, 0)))
log_vwrite(log_level level, const log_field *fields, size_t count, const char *fmt, va_list ap)
{
	static const char hex[] = "0123456789abcdef";
	char text[LOG_LINE_MAX], line[LOG_LINE_MAX];
	bool journal = log_stderr_is_journal();
	size_t len = 0;
	int n;

	if (journal)
		len = (size_t)snprintf(line, sizeof line, "<%d>", levels[level].priority);
	if (format == LOG_FORMAT_JSON) {
		n = vsnprintf(text, sizeof text, fmt, ap);
		n = n < 0 ? 0 : (size_t)n >= sizeof text ? (int)sizeof text - 1 : n;
		len = log_json_line(line, sizeof line, len, level, text, (size_t)n, fields, count);
		if (write(STDERR_FILENO, line, len) < 0)
			return;
		return;
	}
	if (!journal && timestamps) {
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
	log_vwrite(level, NULL, 0, fmt, ap);
	va_end(ap);
}

void
log_fields(log_level level, const log_field *fields, size_t n, const char *fmt, ...)
{
	va_list ap;

	if (!log_enabled(level))
		return;
	va_start(ap, fmt);
	log_vwrite(level, fields, n, fmt, ap);
	va_end(ap);
}

void
fatal(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	log_vwrite(LOG_LEVEL_ERROR, NULL, 0, fmt, ap);
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
