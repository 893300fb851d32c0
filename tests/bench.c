/*
 * bench.c — throughput and latency of cbd over its Unix socket. Prints
 * figures; asserts nothing (speed targets are judged by people reading
 * them, never by timed test assertions).
 *
 *   bench [-s SOCKET] [-d SECONDS] [-c CONNS,...] [-p DEPTH]
 *
 * Without -s it starts $CBD_BINARY (else ./src/cbd) on a temporary socket
 * and stops it at the end. Each connection is a thread sending the sidecar
 * pair a service sends per outbound call — allow, then record — on its own
 * circuit name among a shared set of 64, `depth` requests in flight.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define BENCH_CIRCUITS 64
#define BENCH_MAX_CONNS 256
#define BENCH_MAX_DEPTH 1024
#define BENCH_LAT_SAMPLES 200000
#define BENCH_BUF 65536

typedef struct worker {
	pthread_t thread;
	const char *socket_path;
	int index;
	int depth;
	double seconds;
	long requests;
	long errors;
	double *latencies; /* per request, depth 1 only */
	long latency_count;
} worker;

static double
now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int
connect_to(const char *path)
{
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -1;
	snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path);
	if (connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
		close(fd);
		return -1;
	}
	return fd;
}

static bool
write_all(int fd, const char *buf, size_t len)
{
	while (len > 0) {
		ssize_t n = write(fd, buf, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return false;
		buf += n;
		len -= (size_t)n;
	}
	return true;
}

/* Read until `lines` newlines arrived; count replies that are not ok. */
static bool
read_replies(int fd, char *buf, int lines, long *errors)
{
	int seen = 0;

	while (seen < lines) {
		ssize_t n = read(fd, buf, BENCH_BUF);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return false;
		for (ssize_t i = 0; i < n; i++) {
			if (buf[i] == '\n')
				seen++;
		}
		if (memmem(buf, (size_t)n, "\"ok\": false", 11) != NULL ||
		    memmem(buf, (size_t)n, "\"ok\":false", 10) != NULL)
			(*errors)++;
	}
	return true;
}

static void *
worker_run(void *arg)
{
	worker *w = arg;
	char *out = malloc((size_t)w->depth * 160 + 1);
	char *in = malloc(BENCH_BUF);
	int fd = connect_to(w->socket_path);
	double end;

	if (fd < 0 || out == NULL || in == NULL) {
		fprintf(stderr, "bench: worker %d cannot connect to %s\n", w->index,
		    w->socket_path);
		w->errors++;
		goto done;
	}
	end = now_s() + w->seconds;
	while (now_s() < end) {
		size_t len = 0;
		double t0 = now_s();

		for (int i = 0; i < w->depth; i++) {
			int circuit = (w->index * 7 + i) % BENCH_CIRCUITS;

			len += (size_t)sprintf(out + len,
			    (i % 2 == 0) ? "{\"op\":\"allow\",\"name\":\"svc-%d\"}\n"
					 : "{\"op\":\"record\",\"name\":\"svc-%d\",\"outcome\":"
					   "\"success\"}\n",
			    circuit);
		}
		if (!write_all(fd, out, len) || !read_replies(fd, in, w->depth, &w->errors)) {
			w->errors++;
			break;
		}
		w->requests += w->depth;
		if (w->latencies != NULL && w->latency_count < BENCH_LAT_SAMPLES)
			w->latencies[w->latency_count++] = now_s() - t0;
	}
done:
	if (fd >= 0)
		close(fd);
	free(out);
	free(in);
	return NULL;
}

static int
compare_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* One run: conns threads at depth for seconds; prints one line. */
static void
run(const char *path, int conns, int depth, double seconds)
{
	worker *w = calloc((size_t)conns, sizeof *w);
	long total = 0, errors = 0;
	double t0, elapsed;
	double *all = NULL;
	long all_count = 0;

	t0 = now_s();
	for (int i = 0; i < conns; i++) {
		w[i].socket_path = path;
		w[i].index = i;
		w[i].depth = depth;
		w[i].seconds = seconds;
		if (depth == 1)
			w[i].latencies = malloc(sizeof(double) * BENCH_LAT_SAMPLES);
		pthread_create(&w[i].thread, NULL, worker_run, &w[i]);
	}
	for (int i = 0; i < conns; i++) {
		pthread_join(w[i].thread, NULL);
		total += w[i].requests;
		errors += w[i].errors;
		all_count += w[i].latency_count;
	}
	elapsed = now_s() - t0;
	printf("conns %4d  depth %4d  %10.0f req/s  errors %ld", conns, depth,
	    (double)total / elapsed, errors);
	if (depth == 1 && all_count > 0) {
		long k = 0;

		all = malloc(sizeof(double) * (size_t)all_count);
		for (int i = 0; i < conns; i++)
			for (long j = 0; j < w[i].latency_count; j++)
				all[k++] = w[i].latencies[j];
		qsort(all, (size_t)all_count, sizeof(double), compare_double);
		printf("  p50 %.1f us  p99 %.1f us", all[all_count / 2] * 1e6,
		    all[all_count * 99 / 100] * 1e6);
		free(all);
	}
	printf("\n");
	fflush(stdout);
	for (int i = 0; i < conns; i++)
		free(w[i].latencies);
	free(w);
}

/* Start cbd on a temporary socket; returns its pid or -1. */
static pid_t
start_cbd(char *dir, size_t dir_size, char *path, size_t path_size)
{
	const char *binary = getenv("CBD_BINARY");
	char conf[512];
	FILE *f;
	pid_t pid;

	if (binary == NULL)
		binary = "./src/cbd";
	snprintf(dir, dir_size, "/tmp/cbd-bench.XXXXXX");
	if (mkdtemp(dir) == NULL)
		return -1;
	snprintf(path, path_size, "%s/cbd.sock", dir);
	snprintf(conf, sizeof conf, "%s/cbd.conf", dir);
	f = fopen(conf, "w");
	if (f == NULL)
		return -1;
	fprintf(f, "[cbd]\nsocket = %s\nmax_connections = %d\nlog_level = warning\n", path,
	    BENCH_MAX_CONNS + 8);
	fclose(f);
	pid = fork();
	if (pid == 0) {
		execl(binary, binary, "-c", conf, (char *)NULL);
		_exit(127);
	}
	for (int i = 0; i < 200; i++) {
		int fd = connect_to(path);

		if (fd >= 0) {
			close(fd);
			return pid;
		}
		usleep(10000);
	}
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	return -1;
}

int
main(int argc, char **argv)
{
	const char *path = NULL;
	char conns_list[256] = "1,8,50";
	char dir[256], own_path[300];
	double seconds = 2.0;
	int depth = 0;
	pid_t cbd = -1;
	int opt;

	while ((opt = getopt(argc, argv, "s:d:c:p:h")) != -1) {
		switch (opt) {
		case 's':
			path = optarg;
			break;
		case 'd':
			seconds = atof(optarg);
			if (seconds <= 0 || seconds > 60) {
				fprintf(stderr, "bench: -d takes 0..60 seconds\n");
				return 2;
			}
			break;
		case 'c':
			snprintf(conns_list, sizeof conns_list, "%s", optarg);
			break;
		case 'p':
			depth = atoi(optarg);
			if (depth < 1 || depth > BENCH_MAX_DEPTH) {
				fprintf(stderr, "bench: -p takes 1..%d\n", BENCH_MAX_DEPTH);
				return 2;
			}
			break;
		default:
			fprintf(stderr,
			    "usage: bench [-s SOCKET] [-d SECONDS] [-c CONNS,...] [-p DEPTH]\n");
			return opt == 'h' ? 0 : 2;
		}
	}
	signal(SIGPIPE, SIG_IGN);
	if (path == NULL) {
		cbd = start_cbd(dir, sizeof dir, own_path, sizeof own_path);
		if (cbd < 0) {
			fprintf(stderr, "bench: could not start cbd (set CBD_BINARY)\n");
			return 1;
		}
		path = own_path;
	}
	printf("cbd benchmark: allow/record pairs over %s, %.1f s per run\n", path, seconds);
	for (char *tok = strtok(conns_list, ","); tok != NULL; tok = strtok(NULL, ",")) {
		int conns = atoi(tok);

		if (conns < 1 || conns > BENCH_MAX_CONNS)
			continue;
		if (depth > 0) {
			run(path, conns, depth, seconds);
			continue;
		}
		run(path, conns, 1, seconds);
		run(path, conns, 64, seconds);
	}
	if (cbd > 0) {
		kill(cbd, SIGTERM);
		waitpid(cbd, NULL, 0);
		snprintf(own_path, sizeof own_path, "%s/cbd.conf", dir);
		unlink(own_path);
		rmdir(dir);
	}
	return 0;
}
