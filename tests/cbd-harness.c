/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cbd-harness.c — starts a real cbd on a private socket for tests (see
 * cbd-harness.h): temp dir, config file, fork/exec, wait until it
 * accepts, bounded line requests, and cleanup at stop or at exit.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cbd-harness.h"

/* Default for every bounded wait. */
#define HARNESS_TIMEOUT_MS 20000
/* Daemons this process may have running at once (for cleanup at exit). */
#define HARNESS_MAX 64
/* Most arguments and environment entries handed to cbd. */
#define HARNESS_ARGV_MAX 32
#define HARNESS_ENV_MAX 256

/* What exit-time cleanup needs: a copy, since the harness may be gone. */
static struct {
	pid_t pid;
	char dir[256];
} running[HARNESS_MAX];
static bool cleanup_registered;

static int
sample_cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

void
harness_sort_samples(double *v, size_t n)
{
	qsort(v, n, sizeof *v, sample_cmp);
}

int
harness_timeout_ms(void)
{
	const char *env = getenv("CBD_HARNESS_TIMEOUT_MS");
	int v = env != NULL ? atoi(env) : 0;

	return v > 0 ? v : HARNESS_TIMEOUT_MS;
}

long long
harness_mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void
harness_sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000 };

	nanosleep(&ts, NULL);
}

/* Remove dir and the files in it (no subdirectories are made). */
static void
remove_dir(const char *dir)
{
	char path[600];
	struct dirent *e;
	DIR *d;

	if (dir[0] == '\0')
		return;
	d = opendir(dir);
	if (d != NULL) {
		while ((e = readdir(d)) != NULL) {
			if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
				continue;
			snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
			unlink(path);
		}
		closedir(d);
	}
	rmdir(dir);
}

/* At exit (a failed check test exits at once): kill what is still running. */
static void
cleanup_at_exit(void)
{
	for (int i = 0; i < HARNESS_MAX; i++) {
		if (running[i].pid <= 0)
			continue;
		kill(running[i].pid, SIGKILL);
		waitpid(running[i].pid, NULL, 0);
		remove_dir(running[i].dir);
		running[i].pid = 0;
	}
}

static void
track(pid_t pid, const char *dir)
{
	if (!cleanup_registered) {
		atexit(cleanup_at_exit);
		cleanup_registered = true;
	}
	for (int i = 0; i < HARNESS_MAX; i++) {
		if (running[i].pid <= 0) {
			running[i].pid = pid;
			snprintf(running[i].dir, sizeof running[i].dir, "%s", dir);
			return;
		}
	}
}

static void
untrack(pid_t pid)
{
	for (int i = 0; i < HARNESS_MAX; i++) {
		if (running[i].pid == pid)
			running[i].pid = 0;
	}
}

double
harness_now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int
harness_connect_path(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd;

	if (strlen(path) >= sizeof sa.sun_path)
		return -1;
	memcpy(sa.sun_path, path, strlen(path));
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
		close(fd);
		return -1;
	}
	return fd;
}

int
harness_connect(const cbd_harness *h)
{
	return harness_connect_path(h->socket_path);
}

bool
harness_send_all(int fd, const char *buf, size_t len)
{
	while (len > 0) {
		ssize_t n = send(fd, buf, len, MSG_NOSIGNAL);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return false;
		buf += n;
		len -= (size_t)n;
	}
	return true;
}

/* Write a config file holding text (empty when NULL). */
static bool
write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	bool ok;

	if (f == NULL)
		return false;
	ok = text == NULL || fputs(text, f) >= 0;
	return fclose(f) == 0 && ok;
}

/* The config file: config_text, and in fleet runs (CBD_TEST_REDIS_SOCKET
 * set by tests/fleet-suites.sh) backend = redis on that server, with a
 * key prefix of this daemon's own so that tests share no circuits. */
static bool
write_config(const cbd_harness *h, const char *config_text)
{
	const char *redis = getenv("CBD_TEST_REDIS_SOCKET");
	static unsigned daemons;
	char *text;
	bool ok;

	if (redis == NULL || redis[0] == '\0')
		return write_file(h->config_path, config_text);
	/* A generous redis_timeout_ms: the suites test answers, not how a
	 * loaded machine's Redis keeps time. */
	if (asprintf(&text,
		"%s\n[cbd]\nbackend = redis\nredis = unix:%s\nredis_prefix = t%ld-%u:\n"
		"redis_timeout_ms = 1000\n",
		config_text != NULL ? config_text : "", redis, (long)getpid(), daemons++) < 0)
		return false;
	ok = write_file(h->config_path, text);
	free(text);
	return ok;
}

bool
harness_start_opts(cbd_harness *h, const char *config_text, const harness_opts *opts)
{
	static const harness_opts none;
	const char *binary = getenv("CBD_BINARY");
	const char *argv[HARNESS_ARGV_MAX];
	char *envp[HARNESS_ENV_MAX];
	static char asan_env[512];
	extern char **environ;
	size_t argc = 0, envc = 0;
	long long deadline;
	pid_t parent = getpid();

	if (opts == NULL)
		opts = &none;
	memset(h, 0, sizeof *h);
	if (binary == NULL) {
		fprintf(stderr, "harness: CBD_BINARY is not set\n");
		return false;
	}
	snprintf(h->dir, sizeof h->dir, "/tmp/cbd-test-XXXXXX");
	if (mkdtemp(h->dir) == NULL) {
		h->dir[0] = '\0';
		return false;
	}
	if (opts->socket != NULL)
		snprintf(h->socket_path, sizeof h->socket_path, "%s", opts->socket);
	else
		snprintf(h->socket_path, sizeof h->socket_path, "%s/cbd.sock", h->dir);
	snprintf(h->config_path, sizeof h->config_path, "%s/cbd.conf", h->dir);
	if (!write_config(h, config_text)) {
		remove_dir(h->dir);
		return false;
	}
	for (const char *const *p = opts->prefix; p != NULL && *p != NULL; p++) {
		if (argc + 8 < HARNESS_ARGV_MAX)
			argv[argc++] = strcmp(*p, "@SOCKET@") == 0 ? h->socket_path : *p;
	}
	argv[argc++] = binary;
	argv[argc++] = "-c";
	argv[argc++] = h->config_path;
	if (!opts->no_socket_arg) {
		argv[argc++] = "-s";
		argv[argc++] = h->socket_path;
	}
	for (const char *const *p = opts->args; p != NULL && *p != NULL; p++) {
		if (argc + 1 < HARNESS_ARGV_MAX)
			argv[argc++] = strcmp(*p, "@SOCKET@") == 0 ? h->socket_path : *p;
	}
	argv[argc] = NULL;
	for (char **e = environ; *e != NULL && envc + 2 < HARNESS_ENV_MAX; e++) {
		if (strncmp(*e, "ASAN_OPTIONS=", 13) != 0)
			envp[envc++] = *e;
	}
	/* In a sanitizer build, LeakSanitizer's exit-time scan stops the
	 * world with ptrace; when several daemons exit at once (parallel make
	 * check) it spins for seconds and makes tests time out. cbd's leaks
	 * are checked by valgrind (tests/cbd-valgrind.sh) instead; set
	 * CBD_HARNESS_LSAN=1 to keep LeakSanitizer on. */
	if (getenv("CBD_HARNESS_LSAN") == NULL) {
		const char *asan = getenv("ASAN_OPTIONS");

		snprintf(asan_env, sizeof asan_env, "ASAN_OPTIONS=%s%sdetect_leaks=0",
		    asan != NULL ? asan : "", asan != NULL && asan[0] != '\0' ? ":" : "");
		envp[envc++] = asan_env;
	} else if (getenv("ASAN_OPTIONS") != NULL) {
		snprintf(asan_env, sizeof asan_env, "ASAN_OPTIONS=%s", getenv("ASAN_OPTIONS"));
		envp[envc++] = asan_env;
	}
	for (const char *const *p = opts->env; p != NULL && *p != NULL; p++) {
		if (envc + 1 < HARNESS_ENV_MAX)
			envp[envc++] = (char *)*p;
	}
	envp[envc] = NULL;

	h->pid = fork();
	if (h->pid < 0) {
		h->pid = 0;
		remove_dir(h->dir);
		return false;
	}
	if (h->pid == 0) {
		/* Die with the test, whatever becomes of it. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(127);
		if (opts->log_path != NULL) {
			int fd =
			    open(opts->log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);

			if (fd >= 0)
				dup2(fd, STDERR_FILENO);
		}
		/* The test's own descriptors (check's files, pipes) stay out. */
		if (close_range(3, ~0U, 0) != 0) {
			for (int fd = 3; fd < 1024; fd++)
				close(fd);
		}
		execve(argv[0], (char *const *)argv, envp);
		if (opts->prefix != NULL)
			execvpe(argv[0], (char *const *)argv, envp);
		fprintf(stderr, "harness: cannot run %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	track(h->pid, h->dir);
	if (opts->no_wait)
		return true;
	deadline = harness_mono_ms() + harness_timeout_ms();
	while (harness_mono_ms() < deadline) {
		int status, fd;

		if (waitpid(h->pid, &status, WNOHANG) == h->pid) {
			fprintf(stderr, "harness: cbd exited before accepting (status %d)\n",
			    status);
			untrack(h->pid);
			h->pid = 0;
			remove_dir(h->dir);
			return false;
		}
		fd = harness_connect(h);
		if (fd >= 0) {
			close(fd);
			return true;
		}
		harness_sleep_ms(5);
	}
	fprintf(stderr, "harness: cbd did not accept within %d ms\n", harness_timeout_ms());
	harness_stop(h);
	return false;
}

bool
harness_start(cbd_harness *h, const char *config_text)
{
	return harness_start_opts(h, config_text, NULL);
}

int
harness_wait(cbd_harness *h)
{
	long long deadline = harness_mono_ms() + harness_timeout_ms();
	int status;

	if (h->pid <= 0)
		return -1;
	while (harness_mono_ms() < deadline) {
		pid_t r = waitpid(h->pid, &status, WNOHANG);

		if (r == h->pid) {
			untrack(h->pid);
			h->pid = 0;
			return status;
		}
		if (r < 0 && errno != EINTR)
			return -1;
		harness_sleep_ms(5);
	}
	return -1;
}

void
harness_stop(cbd_harness *h)
{
	if (h->pid > 0) {
		pid_t pid = h->pid;
		int status;

		kill(h->pid, SIGTERM);
		kill(h->pid, SIGCONT); /* in case a test stopped it */
		status = harness_wait(h);
		if (status != -1 && !(WIFEXITED(status) && WEXITSTATUS(status) == 0))
			fprintf(stderr, "harness: cbd (pid %ld) ended with wait status %d\n",
			    (long)pid, status);
		if (status == -1 && h->pid > 0) {
			kill(h->pid, SIGKILL);
			waitpid(h->pid, NULL, 0);
			untrack(h->pid);
			h->pid = 0;
		}
	}
	remove_dir(h->dir);
	h->dir[0] = '\0';
}

bool
harness_request(int fd, const char *line, char *reply, size_t reply_size)
{
	size_t len = strlen(line), got = 0;
	long long deadline = harness_mono_ms() + harness_timeout_ms();

	if (reply_size == 0 || !harness_send_all(fd, line, len) ||
	    ((len == 0 || line[len - 1] != '\n') && !harness_send_all(fd, "\n", 1)))
		return false;
	/* Peek, then take exactly one line, so later replies stay queued. */
	while (got < reply_size - 1) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		long long left = deadline - harness_mono_ms();
		char *nl;
		ssize_t n;

		if (left <= 0 || poll(&p, 1, (int)left) <= 0)
			return false;
		n = recv(fd, reply + got, reply_size - 1 - got, MSG_PEEK);
		if (n <= 0)
			return false;
		nl = memchr(reply + got, '\n', (size_t)n);
		if (nl != NULL)
			n = nl - (reply + got) + 1;
		n = recv(fd, reply + got, (size_t)n, 0);
		if (n <= 0)
			return false;
		got += (size_t)n;
		if (reply[got - 1] == '\n') {
			reply[got - 1] = '\0';
			return true;
		}
	}
	return false;
}
