/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cbd-harness.h — start a real cbd on a private socket for tests, talk to
 * it one line at a time, and stop it (cleaning up even when a test fails).
 *
 * Needs $CBD_BINARY (make check sets it). A daemon started here is killed
 * if the starting process exits without stopping it (at exit, and by
 * PR_SET_PDEATHSIG, which fires when the *thread* that started it ends:
 * start daemons from a thread that outlives them). Daemons run with
 * LeakSanitizer off (see cbd-harness.c; CBD_HARNESS_LSAN=1 keeps it).
 */
#ifndef CBD_HARNESS_H
#define CBD_HARNESS_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

typedef struct cbd_harness {
	pid_t pid;
	char dir[256];
	char socket_path[320];
	char config_path[320];
} cbd_harness;

/* Start $CBD_BINARY with a config file holding config_text (NULL: none)
 * plus a socket in a fresh temp dir; wait until it accepts. */
bool harness_start(cbd_harness *h, const char *config_text);
/* SIGTERM, wait (bounded), remove the temp dir. */
void harness_stop(cbd_harness *h);
/* A connected fd, or -1. */
int harness_connect(const cbd_harness *h);
/* Send one line, read one reply line (bounded wait). */
bool harness_request(int fd, const char *line, char *reply, size_t reply_size);
/* A connected fd to any Unix socket path (cbd's or another server's), or -1. */
int harness_connect_path(const char *path);
/* Write all of buf (no SIGPIPE, EINTR retried); false when the peer is gone. */
bool harness_send_all(int fd, const char *buf, size_t len);
/* The monotonic clock in seconds, for benchmarks. */
double harness_now_s(void);
/* The monotonic clock in milliseconds, for tests' bounded waits. */
long long harness_mono_ms(void);
/* Sleep ms milliseconds. */
void harness_sleep_ms(int ms);
/* Sort n samples in place, smallest first (benchmarks' percentiles). */
void harness_sort_samples(double *v, size_t n);

/* --- Extensions used by cbd's own tests (not needed by other users). --- */

/* How to start cbd differently. Every member is optional. In prefix and
 * args, "@SOCKET@" stands for the socket path. */
typedef struct harness_opts {
	const char *const *prefix; /* argv before cbd (e.g. systemd-socket-activate) */
	const char *const *args; /* extra cbd arguments, NULL-ended */
	const char *socket; /* socket path instead of one in the temp dir */
	const char *const *env; /* extra NAME=value entries, NULL-ended */
	const char *log_path; /* cbd's stderr goes here (NULL: inherited) */
	bool no_socket_arg; /* do not pass -s socket_path */
	bool no_wait; /* return once started, without connecting */
} harness_opts;

/* harness_start with options. */
bool harness_start_opts(cbd_harness *h, const char *config_text, const harness_opts *opts);

/* Wait (bounded) for h's daemon to exit; its wait status, or -1. */
int harness_wait(cbd_harness *h);

/* Milliseconds every bounded wait allows ($CBD_HARNESS_TIMEOUT_MS, else
 * 20000; raise it under valgrind). */
int harness_timeout_ms(void);

#endif
