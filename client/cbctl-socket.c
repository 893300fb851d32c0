/*
 * cbctl-socket.c — cbctl's own connection to cbd's Unix socket, for the
 * commands libcbclient's request/reply calls do not fit: watch (event
 * lines after the reply) and reload (the peer's pid, SO_PEERCRED).
 */
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "cbctl.h"

int
cbctl_connect(const cbctl *ctl)
{
	const char *path = cbc_conn_socket_path(ctl->conn);
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
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
	while (connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
		e = errno;
		if (e == EINTR)
			continue;
		close(fd);
		cbctl_errorf("cannot reach cbd at %s: %s", path, strerror(e));
		if (e == EACCES)
			cbctl_permission_hint();
		return -1;
	}
	return fd;
}
