/* SPDX-License-Identifier: Apache-2.0 */
/*
 * server.c — the server: the listening Unix socket (or one inherited from
 * systemd), accept with peer credentials and max_connections (clamped
 * to the descriptor limit; a spare descriptor refuses clients when out of
 * them), the connection lists, signals (SIGTERM/SIGINT stop, SIGHUP reloads), the
 * open-circuits warning and sd_notify.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#ifdef HAVE_SYSTEMD
#include <systemd/sd-daemon.h>
#endif

#include "clock.h"
#include "encode.h"
#include "events.h"
#include "fleet.h"
#include "housekeeping.h"
#include "log-limit.h"
#include "log.h"
#include "metrics-http.h"
#include "fleet-copy.h"
#include "fleet-sync.h"
#include "op-wait.h"
#include "op.h"
#include "server.h"
#include "stats.h"
#include "watch.h"

/* Spare descriptors beyond max_connections (listener, logs, libevent). */
#define SERVER_SPARE_FDS 32
/* Pending connections the kernel may queue for accept. */
#define SERVER_BACKLOG 1024
/* Most changed restart-only keys a reload names (the table has fewer). */
#define SERVER_RESTART_KEYS_MAX 16

server srv = { .listen_fd = -1, .spare_fd = -1 };

/* c closed: what the ops and the watchers keep for it goes. */
static void
server_client_closed(server_client *c)
{
	op_conn_closed(c);
	watch_forget(c);
}

const server_client_hooks server_hooks = {
	.line = op_dispatch,
	.step = op_conn_step,
	.closed = server_client_closed,
	.dead = server_client_dead,
};

void
server_set_state(daemon_state state)
{
	if (cbd.state == state)
		return;
	log_debug("server: %s -> %s", daemon_state_name(cbd.state), daemon_state_name(state));
	cbd.state = state;
}

void
server_notify(const char *state)
{
#ifdef HAVE_SYSTEMD
	sd_notify(0, state);
#else
	(void)state;
#endif
}

/* Unlink c from the list at *head. */
static void
list_remove(server_client **head, server_client *c)
{
	if (c->prev != NULL)
		c->prev->next = c->next;
	else
		*head = c->next;
	if (c->next != NULL)
		c->next->prev = c->prev;
	c->prev = c->next = NULL;
}

/* Push c on the list at *head. */
static void
list_push(server_client **head, server_client *c)
{
	c->prev = NULL;
	c->next = *head;
	if (*head != NULL)
		(*head)->prev = c;
	*head = c;
}

void
server_add_client(server_client *c)
{
	c->id = ++srv.next_client_id;
	list_push(&srv.clients, c);
	stats.connections_current++;
	stats.connections_total++;
}

/* Accept again at once (a descriptor freed, or the pause is over). */
static void
accept_resume(void)
{
	if (!srv.accept_paused)
		return;
	srv.accept_paused = false;
	event_del(srv.accept_pause_ev);
	if (srv.listen_fd >= 0 && cbd.state != DAEMON_STOPPING)
		event_add(srv.listen_ev, NULL);
}

void
server_client_dead(server_client *c)
{
	list_remove(&srv.clients, c);
	list_push(&srv.dead, c);
	stats.connections_current--;
	event_active(srv.reap_ev, EV_TIMEOUT, 0);
	accept_resume(); /* its descriptor is free now */
}

/* Free closed connections, outside their own callbacks. */
static void
server_reap(evutil_socket_t fd, short what, void *arg)
{
	while (srv.dead != NULL) {
		server_client *c = srv.dead;

		list_remove(&srv.dead, c);
		server_client_free(c);
	}
	if (cbd.state == DAEMON_STOPPING && srv.clients == NULL)
		event_base_loopexit(cbd.base, NULL);
}

/* Refuse a connection: one error line (code, message), then close. */
static void __attribute__((format(printf, 3, 4)))
server_refuse(int fd, proto_code code, const char *fmt, ...)
{
	proto_error err = { .code = code };
	json_t *reply;
	char *text;
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err.message, sizeof err.message, fmt, ap);
	va_end(ap);
	stats.errors[code]++;
	reply = proto_reply_error(NULL, &err);
	text = reply != NULL ? json_dumps(reply, JSON_COMPACT) : NULL;
	if (text != NULL) {
		size_t len = strlen(text);

		text[len] = '\n'; /* replaces the NUL; written by length */
		if (write(fd, text, len + 1) < 0)
			log_debug("refused connection: %s", strerror(errno));
	}
	free(text);
	json_decref(reply);
	close(fd);
	log_debug("connection refused: %s", err.message);
}

/* Stop accepting for SERVER_ACCEPT_PAUSE_MS, or until a connection closes. */
static void
accept_pause(void)
{
	struct timeval tv = { 0, SERVER_ACCEPT_PAUSE_MS * 1000 };

	srv.accept_paused = true;
	event_del(srv.listen_ev);
	evtimer_add(srv.accept_pause_ev, &tv);
}

/* (Re)open the spare descriptor that lets cbd refuse a client politely
 * when it has no other left. */
static void
spare_open(void)
{
	if (srv.spare_fd < 0)
		srv.spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
}

/* accept failed for lack of descriptors (err): give each waiting client
 * its capacity line through the spare descriptor, then pause accepting.
 * Logged at most once per SERVER_EMFILE_LOG_MS. */
static void
accept_out_of_fds(int lfd, int err)
{
	int64_t now = clock_monotonic_ms();

	if (srv.emfile_logged_ms == 0 || now - srv.emfile_logged_ms >= SERVER_EMFILE_LOG_MS) {
		if (srv.emfile_unlogged > 0)
			log_warning("accept: %s: refusing new clients until a descriptor frees "
				    "(%llu times more since the last warning)",
			    strerror(err), (unsigned long long)srv.emfile_unlogged);
		else
			log_warning("accept: %s: refusing new clients until a descriptor frees",
			    strerror(err));
		srv.emfile_logged_ms = now;
		srv.emfile_unlogged = 0;
	} else {
		srv.emfile_unlogged++;
	}
	for (int i = 0; i < SERVER_ACCEPT_BATCH && srv.spare_fd >= 0; i++) {
		int fd;

		close(srv.spare_fd);
		srv.spare_fd = -1;
		fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd >= 0) {
			stats_limit_hit(STATS_LIMIT_DESCRIPTORS);
			server_refuse(fd, PROTO_CAPACITY,
			    "cbd is out of file descriptors: connection refused");
		}
		spare_open();
		if (fd < 0)
			break;
	}
	accept_pause();
}

static void
server_accept(evutil_socket_t lfd, short what, void *arg)
{
	for (int i = 0; i < SERVER_ACCEPT_BATCH; i++) {
		struct ucred cred;
		socklen_t len = sizeof cred;
		server_client *c;
		int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return;
			if (errno == EMFILE || errno == ENFILE) {
				accept_out_of_fds(lfd, errno);
				return;
			}
			log_warning("accept: %s; pausing for %d ms", strerror(errno),
			    SERVER_ACCEPT_PAUSE_MS);
			accept_pause();
			return;
		}
		if (stats.connections_current >= (uint64_t)srv.max_clients) {
			stats_limit_hit(STATS_LIMIT_CONNECTIONS);
			server_refuse(fd, PROTO_CAPACITY,
			    "max_connections (%lld) reached: connection refused",
			    (long long)srv.max_clients);
			continue;
		}
		c = server_client_new(fd, &server_hooks);
		if (c == NULL) {
			stats_limit_hit(STATS_LIMIT_NOMEM);
			log_warning("out of memory for a new connection: refused");
			server_refuse(fd, PROTO_INTERNAL,
			    "cbd is out of memory: connection refused");
			continue;
		}
		if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) {
			c->pid = cred.pid;
			c->uid = cred.uid;
			c->gid = cred.gid;
		} else {
			/* Unknown peer: never an admin. */
			c->uid = (uid_t)-1;
			c->gid = (gid_t)-1;
		}
		server_add_client(c);
		server_client_idle_schedule(c);
		log_debug("connection %llu: accepted (pid %ld, uid %ld, gid %ld)",
		    (unsigned long long)c->id, (long)c->pid, (long)c->uid, (long)c->gid);
	}
}

/* Accept again after a pause for lack of descriptors. */
static void
server_accept_resume(evutil_socket_t fd, short what, void *arg)
{
	spare_open();
	accept_resume();
}

/* Is something listening on path? Removes a stale socket file. */
static bool
socket_path_free(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct stat st;
	int fd, rc;

	if (lstat(path, &st) != 0) {
		if (errno == ENOENT)
			return true;
		log_error("cannot use socket %s: %s", path, strerror(errno));
		return false;
	}
	if (!S_ISSOCK(st.st_mode)) {
		log_error("%s exists and is not a socket; refusing to replace it", path);
		return false;
	}
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		log_error("socket: %s", strerror(errno));
		return false;
	}
	memcpy(sa.sun_path, path, strlen(path));
	rc = connect(fd, (struct sockaddr *)&sa, sizeof sa);
	close(fd);
	if (rc == 0 || errno == EAGAIN) {
		log_error("another cbd is already listening on %s; refusing to start "
			  "(stop it first, or use another socket with -s)",
		    path);
		return false;
	}
	if (errno != ECONNREFUSED && errno != ENOENT) {
		log_error("cannot check socket %s: %s", path, strerror(errno));
		return false;
	}
	if (unlink(path) != 0 && errno != ENOENT) {
		log_error("cannot remove stale socket %s: %s", path, strerror(errno));
		return false;
	}
	log_info("removed stale socket %s", path);
	return true;
}

/* Bind and listen on srv.socket_path with the configured mode and group. */
static bool
socket_listen(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	const char *path = srv.socket_path;
	struct stat st;
	mode_t old_mask;
	int fd, rc;

	if (strlen(path) >= sizeof sa.sun_path) {
		log_error("socket path %s is too long (at most %zu bytes)", path,
		    sizeof sa.sun_path - 1);
		return false;
	}
	if (!socket_path_free(path))
		return false;
	memcpy(sa.sun_path, path, strlen(path));
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		log_error("socket: %s", strerror(errno));
		return false;
	}
	/* Nobody may connect before the mode below is set. */
	old_mask = umask(0177);
	rc = bind(fd, (struct sockaddr *)&sa, sizeof sa);
	umask(old_mask);
	if (rc != 0) {
		log_error("cannot bind %s: %s%s", path, strerror(errno),
		    errno == ENOENT ? " (does its directory exist? use -s PATH)" : "");
		close(fd);
		return false;
	}
	if (lstat(path, &st) != 0) {
		log_error("cannot stat %s after binding it: %s", path, strerror(errno));
		close(fd);
		return false;
	}
	srv.socket_created = true;
	srv.socket_dev = st.st_dev;
	srv.socket_ino = st.st_ino;
	if (chmod(path, (mode_t)cbd.conf.socket_mode) != 0) {
		log_error("cannot chmod %s: %s", path, strerror(errno));
		close(fd);
		return false;
	}
	if (cbd.conf.socket_group[0] != '\0') {
		struct group *gr = getgrnam(cbd.conf.socket_group);
		char *end;
		long gid;

		if (gr != NULL)
			gid = (long)gr->gr_gid;
		else {
			gid = strtol(cbd.conf.socket_group, &end, 10);
			if (*end != '\0' || gid < 0) {
				log_error("socket_group: no such group \"%s\"",
				    cbd.conf.socket_group);
				close(fd);
				return false;
			}
		}
		if (chown(path, (uid_t)-1, (gid_t)gid) != 0) {
			log_error("cannot give %s to group %s: %s", path, cbd.conf.socket_group,
			    strerror(errno));
			close(fd);
			return false;
		}
	}
	if (listen(fd, SERVER_BACKLOG) != 0) {
		log_error("listen on %s: %s", path, strerror(errno));
		close(fd);
		return false;
	}
	srv.listen_fd = fd;
	return true;
}

/* Use a socket passed by systemd; true with listen_fd set when there is
 * one, true with listen_fd -1 when there is none. */
static bool
socket_inherit(void)
{
#ifdef HAVE_SYSTEMD
	int n = sd_listen_fds(1);

	if (n < 0) {
		log_error("socket activation: %s", strerror(-n));
		return false;
	}
	if (n == 0)
		return true;
	if (n > 1) {
		log_error("socket activation passed %d sockets; cbd takes exactly one", n);
		return false;
	}
	if (sd_is_socket_unix(SD_LISTEN_FDS_START, SOCK_STREAM, 1, NULL, 0) <= 0) {
		log_error("socket activation: the inherited socket is not a listening Unix "
			  "stream socket");
		return false;
	}
	srv.listen_fd = SD_LISTEN_FDS_START;
	srv.socket_inherited = true;
	fcntl(srv.listen_fd, F_SETFL, fcntl(srv.listen_fd, F_GETFL) | O_NONBLOCK);
	fcntl(srv.listen_fd, F_SETFD, FD_CLOEXEC);
	struct sockaddr_un sa;
	socklen_t len = sizeof sa;

	if (getsockname(srv.listen_fd, (struct sockaddr *)&sa, &len) == 0 &&
	    len > offsetof(struct sockaddr_un, sun_path) && sa.sun_path[0] != '\0') {
		free(srv.socket_path);
		srv.socket_path =
		    strndup(sa.sun_path, len - offsetof(struct sockaddr_un, sun_path));
		if (srv.socket_path == NULL)
			fatal("out of memory");
	}
#endif
	return true;
}

/* Remove the socket file we bound, only if the path still names it: another
 * cbd (or anything else) may have taken the path since. Once. */
static void
socket_unlink(void)
{
	struct stat st;

	if (!srv.socket_created)
		return;
	srv.socket_created = false;
	if (lstat(srv.socket_path, &st) != 0) {
		if (errno != ENOENT)
			log_warning("cannot check %s: %s", srv.socket_path, strerror(errno));
		return;
	}
	if (!S_ISSOCK(st.st_mode) || st.st_dev != srv.socket_dev || st.st_ino != srv.socket_ino) {
		log_warning("%s is no longer the socket cbd bound; leaving it in place",
		    srv.socket_path);
		return;
	}
	if (unlink(srv.socket_path) != 0 && errno != ENOENT)
		log_warning("cannot remove %s: %s", srv.socket_path, strerror(errno));
}

/* Make room for max_connections descriptors if the hard limit allows; if
 * it does not, serve fewer clients (max_clients), with a warning. */
static void
raise_fd_limit(void)
{
	struct rlimit rl;
	/* The metrics port's connections and the dashboard's streams have
	 * their own bounds, on top. */
	rlim_t http = cbd.conf.metrics_listen[0] == '\0'
	    ? 0
	    : (rlim_t)cbd.conf.metrics_max_connections + (rlim_t)cbd.conf.dashboard_max_clients;
	rlim_t want = (rlim_t)cbd.conf.max_connections + SERVER_SPARE_FDS + http;

	srv.max_clients = cbd.conf.max_connections;
	if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
		return;
	if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < want) {
		struct rlimit up = rl;

		up.rlim_cur =
		    rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= want ? want : rl.rlim_max;
		if (setrlimit(RLIMIT_NOFILE, &up) == 0)
			rl = up;
	}
	if (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= want)
		return;
	if (rl.rlim_cur > 2 * SERVER_SPARE_FDS)
		srv.max_clients = (int64_t)(rl.rlim_cur - SERVER_SPARE_FDS);
	else
		srv.max_clients = rl.rlim_cur >= 2 ? (int64_t)rl.rlim_cur / 2 : 1;
	log_warning("max_connections %lld needs %llu descriptors but the limit is %llu: "
		    "serving at most %lld clients at once",
	    (long long)cbd.conf.max_connections, (unsigned long long)want,
	    (unsigned long long)rl.rlim_cur, (long long)srv.max_clients);
}

/* What the open-circuits warning collects. */
typedef struct open_walk {
	char text[LOG_LINE_MAX / 2];
	size_t len;
	uint64_t count;
	int64_t now; /* the daemon's clock */
} open_walk;

static void
open_visit(const char *name, const ct_view *view, void *arg)
{
	open_walk *w = arg;
	char quoted[LOG_QUOTE_SIZE];
	cb_policy policy;

	if (view->snap.state != CB_STATE_OPEN)
		return;
	/* Only circuits still refusing calls: one whose break is over lets
	 * the next caller try (a held one refuses until its hold ends). */
	conf_policy(&cbd.conf, name, view->declared, &policy, NULL, NULL);
	if (!view->hold.held && breaker_break_elapsed(&view->snap, &policy, w->now))
		return;
	if (w->count++ < SERVER_WARN_NAMES_MAX) {
		int n = snprintf(w->text + w->len, sizeof w->text - w->len, "%s%s",
		    w->len > 0 ? ", " : "", log_quote(name, quoted, sizeof quoted));

		if (n > 0 && (size_t)n < sizeof w->text - w->len)
			w->len += (size_t)n;
	}
}

/* Every open_warning_interval seconds: which circuits are still open. */
static void
server_warn_open(evutil_socket_t fd, short what, void *arg)
{
	open_walk w = { .len = 0, .now = clock_realtime_ms() };

	circuit_table_foreach_pinned(cbd.table, open_visit, &w);
	if (w.count == 0)
		return;
	if (w.count > SERVER_WARN_NAMES_MAX)
		log_warning("%llu circuits still open: %s and %llu more",
		    (unsigned long long)w.count, w.text,
		    (unsigned long long)(w.count - SERVER_WARN_NAMES_MAX));
	else
		log_warning("%llu circuit%s still open: %s", (unsigned long long)w.count,
		    w.count == 1 ? "" : "s", w.text);
}

/* Every LOG_LIMIT_WINDOW_MS: summarize the suppressed transition lines. */
static void
server_log_limit(evutil_socket_t fd, short what, void *arg)
{
	log_limit_flush(clock_monotonic_ms());
}

/* (Re)start the open-circuits warning timer from the config. */
static void
warn_schedule(void)
{
	struct timeval tv = { (time_t)cbd.conf.open_warning_interval, 0 };

	event_del(srv.warn_ev);
	if (cbd.conf.open_warning_interval > 0 && cbd.state != DAEMON_STOPPING)
		event_add(srv.warn_ev, &tv);
}

/* Apply what the config controls at run time. */
static void
server_conf_apply(void)
{
	circuit_table_set_max_circuits(cbd.table, (uint64_t)cbd.conf.max_circuits);
	circuit_table_set_max_slots(cbd.table, (uint64_t)cbd.conf.max_slots);
	circuit_table_set_idle_reclaim(cbd.table, cbd.conf.idle_reclaim_ms);
	raise_fd_limit();
	log_set_level(cbd.verbose ? LOG_LEVEL_DEBUG : (log_level)cbd.conf.log_level);
	log_set_timestamps(cbd.conf.log_timestamps != 0);
	log_set_format(
	    strcmp(cbd.conf.log_format, "json") == 0 ? LOG_FORMAT_JSON : LOG_FORMAT_TEXT);
	warn_schedule();
	for (server_client *c = srv.clients; c != NULL; c = c->next)
		server_client_idle_schedule(c);
}

/* stats' last_reload: the result of this reload, error (NULL: none) and
 * the changed keys that wait for a restart. */
static void
reload_note(const char *error, const char *const *restart, size_t count)
{
	json_t *keys = json_array(), *note;

	for (size_t i = 0; keys != NULL && i < count; i++) {
		if (json_array_append_new(keys, json_string(restart[i])) != 0) {
			json_decref(keys);
			keys = NULL;
		}
	}
	note = keys == NULL
	    ? NULL
	    : json_pack("{s:b, s:I, s:o, s:o}", "ok", error == NULL, "at",
		  (json_int_t)clock_realtime_ms(), "error",
		  error != NULL ? json_string(error) : json_null(), "restart_needed", keys);
	json_decref(stats.last_reload);
	stats.last_reload = note; /* NULL when out of memory: reported as null */
}

/* A reload's fresh configuration replaces the old one (its restart-only
 * keys keep their old values); restart names those that differed. */
static void
reload_apply(cbd_conf *fresh, const char *const *restart, size_t restart_count)
{
	if (!conf_keep_fixed(fresh, &cbd.conf)) {
		conf_free(fresh);
		stats.reload_failures++;
		reload_note("out of memory", NULL, 0);
		log_error("reload failed, keeping the old configuration: out of memory");
		return;
	}
	events_policies_reloaded(&cbd.conf, fresh);
	conf_free(&cbd.conf);
	cbd.conf = *fresh;
	server_conf_apply();
	stats.reloads++;
	reload_note(NULL, restart, restart_count);
	log_info("configuration reloaded from %s", cbd.conf_path);
}

/* SIGHUP: re-read the config; a bad one is reported and the old kept. */
static void
server_reload(void)
{
	char err[CONF_ERROR_SIZE], msg[64];
	const char *restart[SERVER_RESTART_KEYS_MAX];
	size_t restart_count = 0;
	struct timespec ts;
	cbd_conf fresh;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	snprintf(msg, sizeof msg, "RELOADING=1\nMONOTONIC_USEC=%llu",
	    (unsigned long long)ts.tv_sec * 1000000 + (unsigned long long)ts.tv_nsec / 1000);
	server_notify(msg);
	server_set_state(DAEMON_RELOADING);
	if (cbd.conf_path == NULL) {
		log_info("reload: no configuration file (built-in defaults); nothing to do");
	} else if (!conf_load(cbd.conf_path, &fresh, err, sizeof err)) {
		stats.reload_failures++;
		reload_note(err, NULL, 0);
		for (char *line = strtok(err, "\n"); line != NULL; line = strtok(NULL, "\n"))
			log_error("reload failed, keeping the old configuration: %s", line);
	} else {
		/* Named before conf_keep_fixed puts the old values back. */
		restart_count =
		    conf_fixed_changed(&fresh, &cbd.conf, restart, SERVER_RESTART_KEYS_MAX);
		reload_apply(&fresh, restart,
		    restart_count < SERVER_RESTART_KEYS_MAX ? restart_count
							    : SERVER_RESTART_KEYS_MAX);
	}
	server_set_state(DAEMON_RUNNING);
	server_notify("READY=1");
}

/* The drain time is up: connections still flushing get only the rest of a
 * line already partly written; after SERVER_DRAIN_LINGER_MS more, every
 * connection left is closed. */
static void
server_drain_timeout(evutil_socket_t fd, short what, void *arg)
{
	struct timeval tv = { SERVER_DRAIN_LINGER_MS / 1000,
		(SERVER_DRAIN_LINGER_MS % 1000) * 1000 };
	server_client *c, *next;

	if (!srv.drain_timed_out) {
		srv.drain_timed_out = true;
		for (c = srv.clients; c != NULL; c = next) {
			next = c->next;
			server_client_drop(c, "shutdown: replies not read in time");
		}
		evtimer_add(srv.drain_ev, &tv);
		return;
	}
	while (srv.clients != NULL)
		server_client_close(srv.clients, "shutdown: last line not read in time");
}

/* SIGTERM/SIGINT: stop accepting, flush replies, remove the socket. */
static void
server_shutdown(const char *why)
{
	struct timeval tv = { SERVER_DRAIN_MS / 1000, (SERVER_DRAIN_MS % 1000) * 1000 };
	server_client *c, *next;

	if (cbd.state == DAEMON_STOPPING)
		return;
	server_set_state(DAEMON_STOPPING);
	server_notify("STOPPING=1");
	log_info("stopping (%s)", why);
	/* No request changes a circuit from here on: keep them now. */
	housekeeping_stop();
	event_del(srv.listen_ev);
	event_del(srv.accept_pause_ev);
	srv.accept_paused = false;
	event_del(srv.warn_ev);
	if (srv.listen_fd >= 0)
		close(srv.listen_fd);
	srv.listen_fd = -1;
	socket_unlink();
	/* Allows waiting for a ticket wait no longer. */
	op_wait_stop();
	for (c = srv.clients; c != NULL; c = next) {
		next = c->next;
		server_client_drain(c);
	}
	evtimer_add(srv.drain_ev, &tv);
	event_active(srv.reap_ev, EV_TIMEOUT, 0);
}

static void
server_signal(evutil_socket_t sig, short what, void *arg)
{
	switch (sig) {
	case SIGHUP:
		if (cbd.state == DAEMON_RUNNING)
			server_reload();
		break;
	case SIGTERM:
		server_shutdown("SIGTERM");
		break;
	case SIGINT:
		server_shutdown("SIGINT");
		break;
	}
}

/* A circuit reclaimed by the table: watchers see it go. */
static void
server_reclaimed(const char *name, void *arg)
{
	events_reclaimed(name);
	fleet_copy_forget(name);
}

/* A random 64-bit id so slot tokens differ across restarts. */
static uint64_t
random_instance_id(void)
{
	uint64_t id;

	if (getrandom(&id, sizeof id, 0) != (ssize_t)sizeof id)
		fatal("getrandom: %s", strerror(errno));
	return id;
}

bool
server_start(void)
{
	static const int signals[] = { SIGTERM, SIGINT, SIGHUP };

	stats_init();
	stats_name_ops(op_names(), op_count());
	signal(SIGPIPE, SIG_IGN);
	/* Not EVENT_BASE_FLAG_PRECISE_TIMER: it rearms a timerfd every turn of
	 * the loop (a system call per request at low load), and cbd's timers
	 * are milliseconds and more. */
	cbd.base = event_base_new();
	if (cbd.base == NULL || event_base_priority_init(cbd.base, 2) != 0)
		fatal("cannot create the event loop");
	cbd.table = circuit_table_new((uint64_t)cbd.conf.max_circuits, random_instance_id());
	if (cbd.table == NULL)
		fatal("out of memory");
	circuit_table_set_reclaim_hook(cbd.table, server_reclaimed, NULL);
	/* Circuits from the state file are back before the first client. */
	housekeeping_start();
	/* Fleet mode connects in the background; until Redis answers, this
	 * host's copy of each circuit does. */
	if (!fleet_sync_start())
		return false;
	srv.socket_path =
	    strdup(cbd.socket_override != NULL ? cbd.socket_override : cbd.conf.socket);
	if (srv.socket_path == NULL)
		fatal("out of memory");
	/* Signals first, at the higher priority: a SIGTERM seen together with
	 * input is handled before the input (which then gets shutting_down). */
	for (size_t i = 0; i < sizeof signals / sizeof signals[0]; i++) {
		srv.signal_ev[i] = evsignal_new(cbd.base, signals[i], server_signal, NULL);
		if (srv.signal_ev[i] == NULL || event_priority_set(srv.signal_ev[i], 0) != 0 ||
		    event_add(srv.signal_ev[i], NULL) != 0)
			fatal("cannot handle signal %d", signals[i]);
	}
	srv.reap_ev = event_new(cbd.base, -1, 0, server_reap, NULL);
	srv.warn_ev = event_new(cbd.base, -1, EV_PERSIST, server_warn_open, NULL);
	srv.drain_ev = evtimer_new(cbd.base, server_drain_timeout, NULL);
	srv.accept_pause_ev = evtimer_new(cbd.base, server_accept_resume, NULL);
	srv.log_limit_ev = event_new(cbd.base, -1, EV_PERSIST, server_log_limit, NULL);
	if (srv.reap_ev == NULL || srv.warn_ev == NULL || srv.drain_ev == NULL ||
	    srv.accept_pause_ev == NULL || srv.log_limit_ev == NULL)
		fatal("out of memory");
	log_limit_flush(clock_monotonic_ms()); /* the first window starts now */
	struct timeval window = { LOG_LIMIT_WINDOW_MS / 1000, (LOG_LIMIT_WINDOW_MS % 1000) * 1000 };
	event_add(srv.log_limit_ev, &window);
	spare_open();
	if (srv.spare_fd < 0)
		log_warning("cannot open /dev/null as a spare descriptor: %s", strerror(errno));
	if (!socket_inherit())
		return false;
	if (!srv.socket_inherited && !socket_listen())
		return false;
	srv.listen_ev =
	    event_new(cbd.base, srv.listen_fd, EV_READ | EV_PERSIST, server_accept, NULL);
	if (srv.listen_ev == NULL || event_add(srv.listen_ev, NULL) != 0)
		fatal("cannot watch the listening socket");
	if (!metrics_http_start())
		return false;
	server_set_state(DAEMON_RUNNING);
	server_conf_apply();
	log_info("cbd %s listening on %s%s (max_circuits %lld, max_connections %lld)",
	    PACKAGE_VERSION, srv.socket_path, srv.socket_inherited ? " (socket activation)" : "",
	    (long long)cbd.conf.max_circuits, (long long)srv.max_clients);
	server_notify("READY=1");
	return true;
}

int
server_loop(void)
{
	event_base_dispatch(cbd.base);
	log_limit_flush(clock_monotonic_ms()); /* what the last window suppressed */
	log_info("stopped");
	return srv.exit_code;
}

void
server_free(void)
{
	while (srv.clients != NULL)
		server_client_close(srv.clients, "exit");
	while (srv.dead != NULL) {
		server_client *c = srv.dead;

		list_remove(&srv.dead, c);
		server_client_free(c);
	}
	if (srv.listen_fd >= 0)
		close(srv.listen_fd);
	if (srv.spare_fd >= 0)
		close(srv.spare_fd);
	socket_unlink();
	for (size_t i = 0; i < sizeof srv.signal_ev / sizeof srv.signal_ev[0]; i++) {
		if (srv.signal_ev[i] != NULL)
			event_free(srv.signal_ev[i]);
	}
	if (srv.listen_ev != NULL)
		event_free(srv.listen_ev);
	if (srv.accept_pause_ev != NULL)
		event_free(srv.accept_pause_ev);
	if (srv.reap_ev != NULL)
		event_free(srv.reap_ev);
	if (srv.warn_ev != NULL)
		event_free(srv.warn_ev);
	if (srv.drain_ev != NULL)
		event_free(srv.drain_ev);
	if (srv.log_limit_ev != NULL)
		event_free(srv.log_limit_ev);
	json_decref(stats.last_reload);
	stats.last_reload = NULL;
	log_limit_free();
	housekeeping_free();
	fleet_free();
	fleet_sync_free();
	metrics_http_stop();
	encode_cache_clear();
	enc_spares_free();
	if (cbd.base != NULL)
		event_base_free(cbd.base);
	circuit_table_free(cbd.table);
	conf_free(&cbd.conf);
	free(srv.socket_path);
	srv = (server){ .listen_fd = -1, .spare_fd = -1 };
}
