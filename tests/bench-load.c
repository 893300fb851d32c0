/*
 * bench-load.c — the benchmarks' shared load generator (see bench-load.h).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench-load.h"
#include "cbd-harness.h"

#define SAMPLES_MAX 400000
#define READ_BUF 65536

typedef struct worker {
	pthread_t thread;
	const char *path;
	bench_framing framing;
	bench_format_fn fmt;
	void *arg;
	int index;
	double seconds;
	long requests;
	long errors;
	double *lat;
	long lat_count;
} worker;

/* Where one RESP value starting at p ends, or NULL when more bytes are
 * needed. */
static const char *
resp_end(const char *p, const char *end)
{
	const char *nl = memchr(p, '\n', (size_t)(end - p));
	long n;

	if (nl == NULL)
		return NULL;
	switch (*p) {
	case '$':
		n = strtol(p + 1, NULL, 10);
		if (n < 0)
			return nl + 1;
		return end - (nl + 1) >= n + 2 ? nl + 1 + n + 2 : NULL;
	case '*':
		n = strtol(p + 1, NULL, 10);
		p = nl + 1;
		for (long i = 0; i < n; i++) {
			if (p >= end || (p = resp_end(p, end)) == NULL)
				return NULL;
		}
		return p;
	}
	return nl + 1; /* + - : */
}

/* Read one reply. */
static bool
read_reply(int fd, bench_framing framing, char *buf, size_t *have, bool *error)
{
	for (;;) {
		const char *end = NULL;

		if (*have > 0) {
			if (framing == BENCH_LINES) {
				char *nl = memchr(buf, '\n', *have);

				end = nl != NULL ? nl + 1 : NULL;
				*error = end != NULL && strstr(buf, "\"ok\":true") == NULL;
			} else {
				end = resp_end(buf, buf + *have);
				*error = end != NULL && buf[0] == '-';
			}
		}
		if (end != NULL) {
			size_t used = (size_t)(end - buf);

			memmove(buf, end, *have - used);
			*have -= used;
			return true;
		}
		ssize_t n = read(fd, buf + *have, READ_BUF - 1 - *have);

		if (n <= 0)
			return false;
		*have += (size_t)n;
		buf[*have] = '\0';
	}
}

static void *
worker_run(void *arg)
{
	worker *w = arg;
	char req[BENCH_REQUEST_MAX], *buf = malloc(READ_BUF);
	int fd = harness_connect_path(w->path);
	double end = harness_now_s() + w->seconds;
	size_t have = 0;
	long i = 0;

	if (fd < 0 || buf == NULL) {
		free(buf);
		return NULL;
	}
	while (harness_now_s() < end) {
		size_t len = w->fmt(req, sizeof req, (w->index + (int)i++) % BENCH_KEYS, w->arg);
		bool error;
		double t = harness_now_s();

		if (!harness_send_all(fd, req, len) ||
		    !read_reply(fd, w->framing, buf, &have, &error))
			break;
		if (w->lat_count < SAMPLES_MAX)
			w->lat[w->lat_count++] = (harness_now_s() - t) * 1e6;
		w->requests++;
		if (error && w->errors++ == 0 && getenv("BENCH_DEBUG") != NULL)
			fprintf(stderr, "first error reply: %.200s\n", buf);
	}
	close(fd);
	free(buf);
	return NULL;
}

double
bench_run(const char *label, const char *path, bench_framing framing, bench_format_fn fmt,
    void *arg, int conns, double seconds)
{
	static worker w[BENCH_CONNS_MAX];
	double *all, rate;
	long total = 0, errors = 0, n = 0;

	if (conns > BENCH_CONNS_MAX)
		conns = BENCH_CONNS_MAX;
	for (int i = 0; i < conns; i++) {
		w[i] = (worker){ .path = path,
			.framing = framing,
			.fmt = fmt,
			.arg = arg,
			.index = i,
			.seconds = seconds };
		w[i].lat = malloc(sizeof(double) * SAMPLES_MAX);
		pthread_create(&w[i].thread, NULL, worker_run, &w[i]);
	}
	for (int i = 0; i < conns; i++) {
		pthread_join(w[i].thread, NULL);
		total += w[i].requests;
		errors += w[i].errors;
		n += w[i].lat_count;
	}
	all = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
	n = 0;
	for (int i = 0; i < conns; i++) {
		memcpy(all + n, w[i].lat, sizeof(double) * (size_t)w[i].lat_count);
		n += w[i].lat_count;
		free(w[i].lat);
	}
	harness_sort_samples(all, (size_t)n);
	rate = (double)total / seconds;
	printf("%-40s %3d conns  %9.0f req/s  p50 %7.1f us  p99 %7.1f us  errors %ld\n", label,
	    conns, rate, n ? all[n / 2] : 0, n ? all[n * 99 / 100] : 0, errors);
	free(all);
	return rate;
}

bool
bench_redis_load(const char *sock, const char *script, char sha[41])
{
	size_t len = strlen(script), have = 0;
	char head[128], reply[128];
	int fd = harness_connect_path(sock);
	bool ok;

	snprintf(head, sizeof head, "*3\r\n$6\r\nSCRIPT\r\n$4\r\nLOAD\r\n$%zu\r\n", len);
	ok = fd >= 0 && harness_send_all(fd, head, strlen(head)) &&
	    harness_send_all(fd, script, len) && harness_send_all(fd, "\r\n", 2);
	/* The reply is "$40\r\n<sha>\r\n": 47 bytes. */
	while (ok && have < 47) {
		ssize_t n = read(fd, reply + have, sizeof reply - 1 - have);

		ok = n > 0;
		have += ok ? (size_t)n : 0;
	}
	if (fd >= 0)
		close(fd);
	reply[have] = '\0';
	return ok && sscanf(reply, "$40\r\n%40s", sha) == 1;
}

int
bench_parse_conns(const char *text, int *conns, int max)
{
	int n = 0;

	while (n < max && *text != '\0') {
		conns[n++] = (int)strtol(text, (char **)&text, 10);
		if (*text == ',')
			text++;
		else if (*text != '\0')
			break;
	}
	return n;
}

size_t
bench_format_record_failure(char *req, size_t size, int key, void *arg)
{
	(void)arg;
	return (size_t)snprintf(req, size,
	    "{\"op\":\"record_failure\",\"name\":\"circuit-%02d\"}\n", key);
}
