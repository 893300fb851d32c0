/*
 * client-harness-shim.c — a stand-in for tests/cbd-harness.c (written on
 * the daemon branch) with the same API, so libcbclient's daemon tests can
 * run before it lands. Remove once tests/cbd-harness.c is merged.
 */
#include <errno.h>
#include <fcntl.h>
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

#include "client-harness-shim.h"

bool
harness_start(cbd_harness *h, const char *config_text)
{
	const char *bin = getenv("CBD_BINARY");
	FILE *f;

	memset(h, 0, sizeof *h);
	h->pid = -1;
	if (bin == NULL)
		return false;
	snprintf(h->dir, sizeof h->dir, "/tmp/cbd-test-XXXXXX");
	if (mkdtemp(h->dir) == NULL)
		return false;
	snprintf(h->socket_path, sizeof h->socket_path, "%s/cbd.sock", h->dir);
	snprintf(h->config_path, sizeof h->config_path, "%s/cbd.conf", h->dir);
	f = fopen(h->config_path, "w");
	if (f == NULL)
		return false;
	fputs(config_text != NULL ? config_text : "", f);
	fclose(f);
	h->pid = fork();
	if (h->pid < 0)
		return false;
	if (h->pid == 0) {
		int null = open("/dev/null", O_WRONLY);

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (null >= 0)
			dup2(null, 2);
		execl(bin, bin, "-c", h->config_path, "-s", h->socket_path, (char *)NULL);
		_exit(127);
	}
	for (int i = 0; i < 500; i++) { /* up to ~5 s */
		int fd = harness_connect(h);

		if (fd >= 0) {
			close(fd);
			return true;
		}
		if (waitpid(h->pid, NULL, WNOHANG) == h->pid) {
			h->pid = -1;
			return false;
		}
		usleep(10000);
	}
	harness_stop(h);
	return false;
}

void
harness_stop(cbd_harness *h)
{
	if (h->pid > 0) {
		kill(h->pid, SIGCONT);
		kill(h->pid, SIGTERM);
		for (int i = 0; i < 200; i++) {
			if (waitpid(h->pid, NULL, WNOHANG) == h->pid) {
				h->pid = -1;
				break;
			}
			usleep(10000);
		}
		if (h->pid > 0) {
			kill(h->pid, SIGKILL);
			waitpid(h->pid, NULL, 0);
		}
	}
	h->pid = -1;
	if (h->dir[0] != '\0') {
		unlink(h->socket_path);
		unlink(h->config_path);
		rmdir(h->dir);
	}
}

int
harness_connect(const cbd_harness *h)
{
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -1;
	if (strlen(h->socket_path) >= sizeof addr.sun_path) {
		close(fd);
		return -1;
	}
	memcpy(addr.sun_path, h->socket_path, strlen(h->socket_path) + 1);
	if (connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
		close(fd);
		return -1;
	}
	return fd;
}

bool
harness_request(int fd, const char *line, char *reply, size_t reply_size)
{
	size_t len = strlen(line), got = 0;

	if (write(fd, line, len) != (ssize_t)len || write(fd, "\n", 1) != 1)
		return false;
	while (got + 1 < reply_size) {
		ssize_t n = read(fd, reply + got, 1);

		if (n <= 0)
			return false;
		if (reply[got] == '\n') {
			reply[got] = '\0';
			return true;
		}
		got++;
	}
	return false;
}
