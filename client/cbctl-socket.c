/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cbctl-socket.c — cbctl's own connection to cbd's Unix socket, for the
 * commands libcbclient's request/reply calls do not fit: watch (event
 * lines after the reply) and reload (the peer's pid, SO_PEERCRED).
 */
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "cbctl.h"

int
cbctl_connect(const cbctl *ctl)
{
	const char *path = cbc_conn_socket_path(ctl->conn);
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	struct timeval tv = { .tv_sec = CBCTL_CONNECT_TIMEOUT_MS / 1000,
		.tv_usec = CBCTL_CONNECT_TIMEOUT_MS % 1000 * 1000 };
	int fd, e;

	if (strlen(path) >= sizeof addr.sun_path) {
		cbctl_errorf("socket path too long: %s", path);
		return -1;
	}
	memcpy(addr.sun_path, path, strlen(path) + 1);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		cbctl_errorf("cannot create a socket for %s: %s", path, strerror(errno));
		return -1;
	}
	/* SO_SNDTIMEO bounds a blocking connect (a full backlog). */
	if (setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) != 0) {
		cbctl_errorf("cannot set the connect timeout for %s: %s", path, strerror(errno));
		close(fd);
		return -1;
	}
	while (connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
		e = errno;
		if (e == EINTR)
			continue;
		close(fd);
		if (e == EAGAIN || e == EINPROGRESS) {
			cbctl_errorf("cannot reach cbd at %s: connecting timed out after %d ms",
			    path, CBCTL_CONNECT_TIMEOUT_MS);
			return -1;
		}
		cbctl_errorf("cannot reach cbd at %s: %s", path, strerror(e));
		if (e == EACCES)
			cbctl_permission_hint(path);
		return -1;
	}
	return fd;
}
