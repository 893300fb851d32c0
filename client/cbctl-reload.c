/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cbctl-reload.c — `cbctl reload`: SIGHUP to cbd, found through the
 * socket's peer credentials (SO_PEERCRED names the process that listens),
 * then waits (bounded by --timeout) for stats to count the reload or its
 * failure. Only a process allowed to signal cbd (root, cbd's user) can;
 * with socket activation the listener may be systemd, which is refused:
 * `systemctl reload cbd` is the way there.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "cbctl.h"

/* How often stats is asked whether the reload happened. */
#define RELOAD_POLL_MS 20
/* The names cbd's process may have (libtool's wrapper runs lt-cbd). */
static const char *const reload_names[] = { "cbd", "lt-cbd" };

/* The pid of the process listening on cbd's socket; -1 after printing why. */
static pid_t
reload_peer_pid(const cbctl *ctl)
{
	struct ucred cred;
	socklen_t len = sizeof cred;
	int fd = cbctl_connect(ctl);

	if (fd < 0)
		return -1;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
		cbctl_errorf("reload: cannot read the peer credentials of %s: %s",
		    cbc_conn_socket_path(ctl->conn), strerror(errno));
		close(fd);
		return -1;
	}
	close(fd);
	if (cred.pid <= 0) {
		cbctl_errorf(
		    "reload: cbd's pid is not visible from here (another pid "
		    "namespace?): use systemctl reload cbd, or kill -HUP in its namespace");
		return -1;
	}
	return cred.pid;
}

/* Whether pid is cbd (its /proc comm), not e.g. systemd holding the socket
 * for socket activation; prints why not. */
static bool
reload_is_cbd(pid_t pid)
{
	char path[64], comm[64] = "";
	FILE *f;

	snprintf(path, sizeof path, "/proc/%ld/comm", (long)pid);
	f = fopen(path, "r");
	if (f == NULL || fgets(comm, sizeof comm, f) == NULL) {
		cbctl_errorf("reload: cannot read %s (%s): cannot tell that pid %ld is cbd", path,
		    f == NULL ? strerror(errno) : "empty", (long)pid);
		if (f != NULL)
			fclose(f);
		return false;
	}
	fclose(f);
	comm[strcspn(comm, "\n")] = '\0';
	for (size_t i = 0; i < sizeof reload_names / sizeof reload_names[0]; i++)
		if (strcmp(comm, reload_names[i]) == 0)
			return true;
	cbctl_errorf("reload: the socket is held by pid %ld (%s), not by cbd (socket "
		     "activation?): use systemctl reload cbd",
	    (long)pid, comm);
	return false;
}

/* stats' reloads and reload_failures, and its last_reload (a new
 * reference, or NULL; may be NULL itself); false after printing why. */
static bool
reload_counts(cbctl *ctl, json_int_t *reloads, json_int_t *failures, json_t **last)
{
	char *reply = NULL;
	cbc_error err;
	cbc_status status = cbc_request(ctl->conn, "{\"op\":\"stats\"}", &reply, &err);
	json_t *obj;

	if (status != CBC_OK) {
		cbc_free(reply);
		cbctl_fail_status(ctl, status, &err);
		return false;
	}
	obj = json_loads(reply, 0, NULL);
	cbc_free(reply);
	*reloads = json_integer_value(json_object_get(obj, "reloads"));
	*failures = json_integer_value(json_object_get(obj, "reload_failures"));
	if (last != NULL) {
		*last = json_object_get(obj, "last_reload");
		json_incref(*last);
	}
	json_decref(obj);
	return true;
}

/* The success line: cbd's pid, and the changed keys that wait for a
 * restart (stats' last_reload.restart_needed). */
static void
reload_print_done(const cbctl *ctl, pid_t pid, const json_t *last)
{
	json_t *restart = json_object_get(last, "restart_needed");
	size_t n = json_array_size(restart), i;
	json_t *key;

	if (ctl->json) {
		char *keys = json_is_array(restart) ? json_dumps(restart, JSON_COMPACT) : NULL;

		printf("{\"reloaded\":true,\"pid\":%ld,\"restart_needed\":%s}\n", (long)pid,
		    keys != NULL ? keys : "[]");
		free(keys);
		return;
	}
	printf("cbd (pid %ld) reloaded its configuration\n", (long)pid);
	if (n == 0)
		return;
	printf("changed keys that keep their old value until cbd restarts:");
	json_array_foreach (restart, i, key)
		printf("%s %s", i > 0 ? "," : "", json_string_value(key));
	printf("\n(systemctl restart cbd applies them)\n");
}

/* The failure: every error cbd found (stats' last_reload.error). */
static void
reload_print_failed(const cbctl *ctl, pid_t pid, const json_t *last)
{
	const char *error = json_string_value(json_object_get(last, "error"));
	const char *p = error, *nl;

	if (ctl->json) {
		json_t *out = json_pack("{s:b, s:I, s:s?}", "reloaded", 0, "pid", (json_int_t)pid,
		    "error", error);
		char *text = out != NULL ? json_dumps(out, JSON_COMPACT) : NULL;

		if (text != NULL)
			printf("%s\n", text);
		free(text);
		json_decref(out);
	}
	if (error == NULL) {
		cbctl_errorf("reload: cbd (pid %ld) kept its old configuration: the file has "
			     "errors (see cbd's log; cbd -t -c FILE checks it)",
		    (long)pid);
		return;
	}
	cbctl_errorf("reload: cbd (pid %ld) kept its old configuration:", (long)pid);
	for (; p != NULL && *p != '\0'; p = nl != NULL ? nl + 1 : NULL) {
		nl = strchr(p, '\n');
		cbctl_errorf("  %.*s", nl != NULL ? (int)(nl - p) : (int)strlen(p), p);
	}
}

int
cbctl_cmd_reload(cbctl *ctl)
{
	json_int_t reloads, failures, r, f;
	json_t *last = NULL;
	struct timespec pause = { 0, RELOAD_POLL_MS * 1000000L };
	pid_t pid = reload_peer_pid(ctl);

	if (pid < 0)
		return EXIT_UNREACHABLE;
	if (!reload_is_cbd(pid))
		return EXIT_REFUSED;
	if (!reload_counts(ctl, &reloads, &failures, NULL))
		return EXIT_UNREACHABLE;
	if (kill(pid, SIGHUP) != 0) {
		int e = errno;

		cbctl_errorf("reload: cannot signal cbd (pid %ld): %s", (long)pid, strerror(e));
		if (e == EPERM)
			cbctl_errorf("hint: only root or cbd's user may reload it (sudo cbctl "
				     "reload, or systemctl reload cbd)");
		return e == ESRCH ? EXIT_UNREACHABLE : EXIT_REFUSED;
	}
	for (int waited = 0; waited <= ctl->io_ms; waited += RELOAD_POLL_MS) {
		if (!reload_counts(ctl, &r, &f, &last))
			return EXIT_UNREACHABLE;
		if (r > reloads) {
			reload_print_done(ctl, pid, last);
			json_decref(last);
			return EXIT_OK;
		}
		if (f > failures) {
			reload_print_failed(ctl, pid, last);
			json_decref(last);
			return EXIT_REFUSED;
		}
		json_decref(last);
		nanosleep(&pause, NULL);
	}
	cbctl_errorf("reload: sent SIGHUP to cbd (pid %ld), but its stats did not count a "
		     "reload within %d ms",
	    (long)pid, ctl->io_ms);
	return EXIT_REFUSED;
}
