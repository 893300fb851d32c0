/* SPDX-License-Identifier: Apache-2.0 */
/*
 * redis-util.c — start, kill, restart and stop a private redis-server for
 * the fleet-mode tests (see redis-util.h).
 */

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <netinet/in.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "redis-util.h"

/* How long a start or stop may take before the test gives up (ms). */
#define REDIS_WAIT_MS 10000
#define REDIS_POLL_MS 20

static void
sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

bool
redis_available(void)
{
	const char *path = getenv("PATH");
	char buf[4096];

	if (path == NULL)
		return false;
	for (const char *p = path; *p != '\0';) {
		size_t len = strcspn(p, ":");

		if (len > 0 && len + sizeof "/redis-server" < sizeof buf) {
			snprintf(buf, sizeof buf, "%.*s/redis-server", (int)len, p);
			if (access(buf, X_OK) == 0)
				return true;
		}
		p += len + (p[len] == ':');
	}
	return false;
}

int
redis_free_port(void)
{
	struct sockaddr_in addr = { .sin_family = AF_INET,
		.sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof addr;
	int port = 0, fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return 0;
	if (bind(fd, (struct sockaddr *)&addr, sizeof addr) == 0 &&
	    getsockname(fd, (struct sockaddr *)&addr, &len) == 0)
		port = ntohs(addr.sin_port);
	close(fd);
	return port;
}

/* Does the server on r's socket (a Sentinel: its port) answer PING with
 * +PONG? */
static bool
redis_pings(const redis_server *r)
{
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	struct sockaddr_in in = { .sin_family = AF_INET,
		.sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	char reply[16] = "";
	bool ok = false;
	int fd = socket(r->sentinel ? AF_INET : AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int connected;

	if (fd < 0)
		return false;
	snprintf(addr.sun_path, sizeof addr.sun_path, "%s", r->socket_path);
	in.sin_port = htons((uint16_t)r->port);
	connected = r->sentinel ? connect(fd, (struct sockaddr *)&in, sizeof in)
				: connect(fd, (struct sockaddr *)&addr, sizeof addr);
	if (connected == 0 && send(fd, "PING\r\n", 6, MSG_NOSIGNAL) == 6) {
		struct timeval tv = { 1, 0 };

		setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
		ok = recv(fd, reply, sizeof reply - 1, 0) >= 5 && strncmp(reply, "+PONG", 5) == 0;
	}
	close(fd);
	return ok;
}

static bool
redis_spawn(redis_server *r)
{
	pid_t parent = getpid();
	pid_t pid = fork();

	if (pid < 0)
		return false;
	if (pid == 0) {
		int devnull = open("/dev/null", O_RDWR);

		/* Never outlive a test that dies without stopping us. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(127);
		if (devnull >= 0) {
			dup2(devnull, STDIN_FILENO);
			dup2(devnull, STDOUT_FILENO);
		}
		if (r->sentinel) {
			char conf[128];

			snprintf(conf, sizeof conf, "%s/sentinel.conf", r->dir);
			execlp("redis-server", "redis-server", conf, "--sentinel", (char *)NULL);
		} else if (r->port > 0) {
			char port[16], master[16];

			snprintf(port, sizeof port, "%d", r->port);
			snprintf(master, sizeof master, "%d", r->replica_of);
			if (r->replica_of > 0)
				execlp("redis-server", "redis-server", "--port", port, "--bind",
				    "127.0.0.1", "--unixsocket", r->socket_path, "--unixsocketperm",
				    "700", "--save", "", "--appendonly", "no", "--dir", r->dir,
				    "--loglevel", "warning", "--replicaof", "127.0.0.1", master,
				    (char *)NULL);
			else
				execlp("redis-server", "redis-server", "--port", port, "--bind",
				    "127.0.0.1", "--unixsocket", r->socket_path, "--unixsocketperm",
				    "700", "--save", "", "--appendonly", "no", "--dir", r->dir,
				    "--loglevel", "warning", (char *)NULL);
		} else {
			execlp("redis-server", "redis-server", "--port", "0", "--unixsocket",
			    r->socket_path, "--unixsocketperm", "700", "--save", "", "--appendonly",
			    "no", "--dir", r->dir, "--loglevel", "warning", (char *)NULL);
		}
		_exit(127);
	}
	r->pid = pid;
	for (int waited = 0; waited < REDIS_WAIT_MS; waited += REDIS_POLL_MS) {
		if (waitpid(pid, NULL, WNOHANG) == pid) {
			r->pid = -1;
			return false;
		}
		if (redis_pings(r))
			return true;
		sleep_ms(REDIS_POLL_MS);
	}
	redis_kill(r);
	return false;
}

/* r's temp dir and socket path (r's port, replica_of, sentinel kept). */
static bool
redis_dir(redis_server *r)
{
	r->pid = -1;
	snprintf(r->dir, sizeof r->dir, "/tmp/cbd-redis-XXXXXX");
	if (mkdtemp(r->dir) == NULL) {
		r->dir[0] = '\0';
		return false;
	}
	snprintf(r->socket_path, sizeof r->socket_path, "%s/redis.sock", r->dir);
	return true;
}

bool
redis_start(redis_server *r)
{
	memset(r, 0, sizeof *r);
	if (!redis_dir(r))
		return false;
	if (!redis_spawn(r)) {
		redis_stop(r);
		return false;
	}
	return true;
}

bool
redis_start_tcp(redis_server *r, int replica_of)
{
	memset(r, 0, sizeof *r);
	r->port = redis_free_port();
	r->replica_of = replica_of;
	if (r->port == 0 || !redis_dir(r))
		return false;
	if (!redis_spawn(r)) {
		redis_stop(r);
		return false;
	}
	return true;
}

bool
redis_start_sentinel(redis_server *r, const char *master, int master_port)
{
	char path[128];
	FILE *f;

	memset(r, 0, sizeof *r);
	r->sentinel = true;
	r->port = redis_free_port();
	snprintf(r->master, sizeof r->master, "%s", master);
	if (r->port == 0 || !redis_dir(r))
		return false;
	snprintf(path, sizeof path, "%s/sentinel.conf", r->dir);
	f = fopen(path, "w");
	if (f == NULL) {
		redis_stop(r);
		return false;
	}
	/* Sentinel rewrites its file: it must be its own, in the temp dir. */
	fprintf(f,
	    "port %d\nbind 127.0.0.1\ndir %s\nloglevel warning\n"
	    "sentinel monitor %s 127.0.0.1 %d 1\n"
	    "sentinel down-after-milliseconds %s 1000\n"
	    "sentinel failover-timeout %s 10000\n",
	    r->port, r->dir, master, master_port, master, master);
	fclose(f);
	if (!redis_spawn(r)) {
		redis_stop(r);
		return false;
	}
	return true;
}

void
redis_kill(redis_server *r)
{
	if (r->pid <= 0)
		return;
	kill(r->pid, SIGKILL);
	waitpid(r->pid, NULL, 0);
	r->pid = -1;
}

bool
redis_restart(redis_server *r)
{
	redis_kill(r);
	unlink(r->socket_path);
	return redis_spawn(r);
}

void
redis_stop(redis_server *r)
{
	if (r->pid > 0) {
		int waited = 0;

		kill(r->pid, SIGTERM);
		while (waitpid(r->pid, NULL, WNOHANG) == 0 && waited < REDIS_WAIT_MS) {
			sleep_ms(REDIS_POLL_MS);
			waited += REDIS_POLL_MS;
		}
		if (waited >= REDIS_WAIT_MS)
			redis_kill(r);
		r->pid = -1;
	}
	if (r->dir[0] != '\0') {
		char path[128];

		unlink(r->socket_path);
		snprintf(path, sizeof path, "%s/dump.rdb", r->dir);
		unlink(path);
		snprintf(path, sizeof path, "%s/sentinel.conf", r->dir);
		unlink(path);
		if (rmdir(r->dir) != 0)
			fprintf(stderr, "redis-util: cannot remove %s: %s\n", r->dir,
			    strerror(errno));
		r->dir[0] = '\0';
	}
}

char *
redis_read_file(const char *path)
{
	char *text = NULL;
	long len;
	FILE *f;

	f = fopen(path, "rb");
	if (f == NULL)
		return NULL;
	if (fseek(f, 0, SEEK_END) == 0 && (len = ftell(f)) > 0 && fseek(f, 0, SEEK_SET) == 0 &&
	    (text = malloc((size_t)len + 1)) != NULL) {
		if (fread(text, 1, (size_t)len, f) != (size_t)len) {
			free(text);
			text = NULL;
		} else {
			text[len] = '\0';
		}
	}
	fclose(f);
	return text;
}

char *
redis_fleet_script(void)
{
	const char *srcdir = getenv("CBD_SRCDIR");
	char path[1024];

	snprintf(path, sizeof path, "%s/src/fleet.lua", srcdir != NULL ? srcdir : ".");
	return redis_read_file(path);
}
