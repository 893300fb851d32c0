/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench-load.c — the benchmarks' shared load generator (see bench-load.h):
 * one thread, one epoll set, every connection with one request in flight.
 *
 * Why not a thread per connection: a thread blocked in read() on a Unix
 * socket is woken (for nothing) whenever the server frees the request it
 * sent, since readers and writers of a Unix socket share one wait queue;
 * epoll filters that wake-up by event mask. The threads also spent the
 * load generator's core on context switches, so the server was not what
 * the figures measured.
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench-load.h"
#include "cbd-harness.h"

#define SAMPLES_MAX 2000000
#define READ_BUF 65536

typedef struct bench_conn {
	int fd;
	int index;
	long sent; /* requests sent on this connection */
	double sent_at; /* when the request in flight was sent */
	size_t have; /* reply bytes read so far */
	char *buf;
} bench_conn;

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

/* The end of the reply at the start of c's buffer, or NULL when it is not
 * complete yet; *error when it is an error reply. */
static const char *
reply_end(const bench_conn *c, bench_framing framing, bool *error)
{
	const char *end;

	if (framing == BENCH_RESP) {
		end = resp_end(c->buf, c->buf + c->have);
		*error = end != NULL && c->buf[0] == '-';
		return end;
	}
	end = memchr(c->buf, '\n', c->have);
	if (end == NULL)
		return NULL;
	end++;
	/* Lines and echo: an echoed request has no "ok" and is not an error. */
	*error = framing == BENCH_LINES && strstr(c->buf, "\"ok\":true") == NULL;
	return end;
}

static bool
send_request(bench_conn *c, bench_format_fn fmt, void *arg)
{
	char req[BENCH_REQUEST_MAX];
	size_t len = fmt(req, sizeof req, (c->index + (int)c->sent++) % BENCH_KEYS, arg);

	c->sent_at = harness_now_s();
	return harness_send_all(c->fd, req, len);
}

/* The server whose CPU time the next bench_run reports (0: none). */
static pid_t server_pid;
static bench_figures last;

bench_figures
bench_last(void)
{
	return last;
}

void
bench_server_pid(pid_t pid)
{
	server_pid = pid;
}

/* CPU seconds pid has used: all (schedstat, nanoseconds) and user (stat,
 * clock ticks). False when /proc does not say. */
static bool
proc_cpu(pid_t pid, double *all, double *user)
{
	char path[64], buf[1024], *p;
	unsigned long long on_cpu, utime;
	FILE *f;
	bool ok;

	snprintf(path, sizeof path, "/proc/%ld/schedstat", (long)pid);
	if ((f = fopen(path, "r")) == NULL)
		return false;
	ok = fscanf(f, "%llu", &on_cpu) == 1;
	fclose(f);
	snprintf(path, sizeof path, "/proc/%ld/stat", (long)pid);
	if (!ok || (f = fopen(path, "r")) == NULL)
		return false;
	ok = fgets(buf, sizeof buf, f) != NULL;
	fclose(f);
	/* After "(comm) ": state is field 3, utime field 14. */
	if (!ok || (p = strrchr(buf, ')')) == NULL ||
	    sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu", &utime) != 1)
		return false;
	*all = (double)on_cpu / 1e9;
	*user = (double)utime / (double)sysconf(_SC_CLK_TCK);
	return true;
}

double
bench_run(const char *label, const char *path, bench_framing framing, bench_format_fn fmt,
    void *arg, int conns, double seconds)
{
	static bench_conn conn[BENCH_CONNS_MAX];
	struct epoll_event ev[BENCH_CONNS_MAX];
	double *lat = malloc(sizeof(double) * SAMPLES_MAX), start, end, rate;
	long total = 0, errors = 0, n = 0;
	double reply_bytes = 0;
	int ep = epoll_create1(0), open = 0;
	double cpu0 = 0, user0 = 0, cpu1 = 0, user1 = 0;
	bool cpu = server_pid > 0 && proc_cpu(server_pid, &cpu0, &user0);

	if (conns > BENCH_CONNS_MAX)
		conns = BENCH_CONNS_MAX;
	for (int i = 0; i < conns; i++) {
		conn[i] = (bench_conn){ .fd = harness_connect_path(path), .index = i };
		conn[i].buf = malloc(READ_BUF);
		if (conn[i].fd < 0 || conn[i].buf == NULL)
			continue;
		/* Writes of one small request do not block; reads wait in epoll. */
		fcntl(conn[i].fd, F_SETFL, fcntl(conn[i].fd, F_GETFL) | O_NONBLOCK);
		epoll_ctl(ep, EPOLL_CTL_ADD, conn[i].fd,
		    &(struct epoll_event){ .events = EPOLLIN, .data.ptr = &conn[i] });
		open++;
	}
	start = harness_now_s();
	end = start + seconds;
	for (int i = 0; i < conns; i++) {
		if (conn[i].fd >= 0 && !send_request(&conn[i], fmt, arg))
			open--;
	}
	while (open > 0) {
		double now = harness_now_s();
		int ready;

		if (now >= end)
			break;
		ready = epoll_wait(ep, ev, BENCH_CONNS_MAX, (int)((end - now) * 1000) + 1);
		if (ready < 0 && errno != EINTR)
			break;
		for (int i = 0; i < ready; i++) {
			bench_conn *c = ev[i].data.ptr;
			ssize_t got = read(c->fd, c->buf + c->have, READ_BUF - 1 - c->have);
			const char *reply;
			bool error;

			if (got <= 0) {
				if (got < 0 && errno == EAGAIN)
					continue;
				epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
				open--;
				continue;
			}
			c->have += (size_t)got;
			c->buf[c->have] = '\0';
			reply = reply_end(c, framing, &error);
			if (reply == NULL)
				continue;
			now = harness_now_s();
			if (n < SAMPLES_MAX)
				lat[n++] = (now - c->sent_at) * 1e6;
			total++;
			reply_bytes += (double)(reply - c->buf);
			if (error && errors++ == 0 && getenv("BENCH_DEBUG") != NULL)
				fprintf(stderr, "first error reply: %.200s\n", c->buf);
			c->have -= (size_t)(reply - c->buf);
			memmove(c->buf, reply, c->have);
			if (now < end && !send_request(c, fmt, arg)) {
				epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
				open--;
			}
		}
	}
	rate = (double)total / (harness_now_s() - start);
	cpu = cpu && proc_cpu(server_pid, &cpu1, &user1) && total > 0;
	server_pid = 0;
	for (int i = 0; i < conns; i++) {
		if (conn[i].fd >= 0)
			close(conn[i].fd);
		free(conn[i].buf);
	}
	close(ep);
	harness_sort_samples(lat, (size_t)n);
	last.reply_bytes = total > 0 ? reply_bytes / (double)total : 0;
	last.cpu_us = cpu ? (cpu1 - cpu0) * 1e6 / (double)total : 0;
	printf("%-40s %3d conns  %9.0f req/s  p50 %7.1f us  p99 %7.1f us  errors %ld  reply %.0f B",
	    label, conns, rate, n ? lat[n / 2] : 0, n ? lat[n * 99 / 100] : 0, errors,
	    last.reply_bytes);
	/* The server's own CPU a request: what it costs, whatever else the
	 * machine runs meanwhile. */
	if (cpu)
		printf("  cpu %.2f us/req (user %.2f)", last.cpu_us,
		    (user1 - user0) * 1e6 / (double)total);
	printf("\n");
	fflush(stdout);
	free(lat);
	return rate;
}

bool
bench_pin(pid_t pid, int cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	return sched_setaffinity(pid, sizeof set, &set) == 0;
}

int
bench_cpus(void)
{
	cpu_set_t set;

	return sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
}

/* The echo server's loop: every byte read is written back, or, with
 * reply_bytes > 0, a line of that many bytes for every line read. */
static void
echo_serve(int listener, size_t reply_bytes)
{
	struct epoll_event ev[64];
	char buf[READ_BUF], *reply = NULL;
	int ep = epoll_create1(0);

	if (reply_bytes > 0 && (reply = malloc(reply_bytes)) != NULL) {
		memset(reply, 'x', reply_bytes - 1);
		reply[reply_bytes - 1] = '\n';
	}
	epoll_ctl(ep, EPOLL_CTL_ADD, listener,
	    &(struct epoll_event){ .events = EPOLLIN, .data.fd = listener });
	for (;;) {
		int ready = epoll_wait(ep, ev, 64, -1);

		for (int i = 0; i < ready; i++) {
			int fd = ev[i].data.fd;

			if (fd == listener) {
				int c = accept4(listener, NULL, NULL, SOCK_NONBLOCK);

				if (c >= 0)
					epoll_ctl(ep, EPOLL_CTL_ADD, c,
					    &(struct epoll_event){ .events = EPOLLIN,
						.data.fd = c });
				continue;
			}
			ssize_t got = read(fd, buf, sizeof buf);

			if (got <= 0) {
				if (got == 0 || errno != EAGAIN)
					close(fd);
				continue;
			}
			if (reply != NULL) {
				for (ssize_t j = 0; j < got; j++) {
					if (buf[j] == '\n' &&
					    write(fd, reply, reply_bytes) != (ssize_t)reply_bytes) {
						close(fd);
						break;
					}
				}
			} else if (write(fd, buf, (size_t)got) != got) {
				close(fd);
			}
		}
	}
}

pid_t
bench_echo_start(const char *path, size_t reply_bytes)
{
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	int listener = socket(AF_UNIX, SOCK_STREAM, 0);
	pid_t pid;

	snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path);
	unlink(path);
	if (listener < 0 || bind(listener, (struct sockaddr *)&addr, sizeof addr) != 0 ||
	    listen(listener, 512) != 0) {
		if (listener >= 0)
			close(listener);
		return -1;
	}
	pid = fork();
	if (pid == 0) {
		/* A run ends with requests in flight: their replies must not
		 * kill the server. */
		signal(SIGPIPE, SIG_IGN);
		echo_serve(listener, reply_bytes);
		_exit(0);
	}
	close(listener);
	return pid;
}

void
bench_echo_stop(pid_t pid, const char *path)
{
	if (pid > 0) {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
	}
	unlink(path);
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
