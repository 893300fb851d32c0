/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench-load.h — the load generator the side-by-side benchmarks share
 * (bench-vs-redis, bench-fleet): N connections driven from one thread
 * through epoll, each with one request in flight, every round trip timed;
 * cbd's lines, Redis's RESP or an echo server's echo. Prints figures,
 * asserts nothing.
 */
#ifndef CBD_BENCH_LOAD_H
#define CBD_BENCH_LOAD_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* Circuits (or keys) the connections spread over. */
#define BENCH_KEYS 64
#define BENCH_CONNS_MAX 256
/* Room for one request. */
#define BENCH_REQUEST_MAX 4096

typedef enum bench_framing {
	BENCH_LINES, /* cbd: one JSON line per reply, ok unless "ok":true is missing */
	BENCH_RESP, /* Redis: one RESP value per reply, an error when it starts with '-' */
	BENCH_ECHO, /* the echo server: the request's own line comes back */
} bench_framing;

/* Write the request for circuit (or key) number key into req; its length. */
typedef size_t (*bench_format_fn)(char *req, size_t size, int key, void *arg);

/* Drive the server on path with conns connections for seconds; print one
 * line (label, req/s, p50, p99, errors); return the requests per second. */
double bench_run(const char *label, const char *path, bench_framing framing, bench_format_fn fmt,
    void *arg, int conns, double seconds);

/* Have the next bench_run also print the CPU time process pid (the
 * server) spent a request, all and user (from /proc). */
void bench_server_pid(pid_t pid);

/* What the last bench_run measured beside its rate: the server's CPU
 * microseconds a request (0: not measured) and the mean reply size in
 * bytes, framing included (a line's LF, RESP's CRLFs). */
typedef struct bench_figures {
	double cpu_us;
	double reply_bytes;
} bench_figures;
bench_figures bench_last(void);

/* Keep process pid (0: this one) on CPU number cpu. */
bool bench_pin(pid_t pid, int cpu);

/* The CPUs this process may run on. */
int bench_cpus(void);

/* An echo server on a Unix socket at path, in a child process (the floor
 * a server on this machine cannot beat); with reply_bytes > 0 it answers
 * every line with a line of that many bytes instead (the floor for a
 * server whose replies are that long). Its pid or -1. */
pid_t bench_echo_start(const char *path, size_t reply_bytes);
void bench_echo_stop(pid_t pid, const char *path);

/* cbd's record_failure on circuit-NN (a bench_format_fn). */
size_t bench_format_record_failure(char *req, size_t size, int key, void *arg);

/* SCRIPT LOAD script into the Redis on sock; its sha in sha (41 bytes). */
bool bench_redis_load(const char *sock, const char *script, char sha[41]);

/* Parse "8,50" into conns (at most max); how many. */
int bench_parse_conns(const char *text, int *conns, int max);

#endif
