/* SPDX-License-Identifier: Apache-2.0 */
/*
 * persist-writer.c — the state file journal's writer thread (see
 * persist-writer.h): a path and bytes in under a mutex, appended and
 * fdatasync'ed, a byte on a pipe out.
 */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "persist-writer.h"

/* What the main thread and the writer share (under lock). */
static struct {
	pthread_mutex_t lock;
	pthread_cond_t wake;
	pthread_t thread;
	bool running; /* the thread was started and not yet joined */
	bool stop; /* the thread ends once the batch it has is done */
	bool in_flight; /* a batch handed over and its result not yet taken */
	bool has_job; /* ... and the thread has not yet taken it */
	bool finished; /* ... and its result is in ok/why */
	char path[4096];
	char *buf;
	size_t len;
	bool ok;
	char why[4300];
	int done_r, done_w; /* the pipe: a byte per finished batch */
} w = { .lock = PTHREAD_MUTEX_INITIALIZER,
	.wake = PTHREAD_COND_INITIALIZER,
	.done_r = -1,
	.done_w = -1 };

/* The writer thread's own: the journal open now (-1: none) and its path;
 * has its directory entry been synced since it was opened? */
static int journal_fd = -1;
static char journal_open[4096];
static bool dir_synced;

void
persist_sync_dir(const char *path)
{
	char *copy = strdup(path);
	int fd;

	if (copy == NULL)
		return;
	fd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd >= 0) {
		fsync(fd);
		close(fd);
	}
	free(copy);
}

bool
persist_write_all(int fd, const char *buf, size_t len)
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

/* Append buf to path and fdatasync (in the writer thread); false with
 * what failed in why. */
static bool
append(const char *path, const char *buf, size_t len, char *why, size_t why_size)
{
	bool ok;

	if (journal_fd >= 0 && strcmp(journal_open, path) != 0) {
		close(journal_fd);
		journal_fd = -1;
	}
	if (journal_fd < 0) {
		struct stat st;

		/* Never through a symlink, never blocking on a FIFO. */
		journal_fd = open(path,
		    O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0600);
		if (journal_fd < 0 || fstat(journal_fd, &st) != 0 || !S_ISREG(st.st_mode)) {
			snprintf(why, why_size, "cannot open %s: %s", path,
			    journal_fd < 0 ? strerror(errno) : "not a regular file");
			if (journal_fd >= 0)
				close(journal_fd);
			journal_fd = -1;
			return false;
		}
		snprintf(journal_open, sizeof journal_open, "%s", path);
		dir_synced = false;
	}
	ok = persist_write_all(journal_fd, buf, len) && fdatasync(journal_fd) == 0;
	if (!ok) {
		snprintf(why, why_size, "cannot write %s: %s", path, strerror(errno));
		/* Opened afresh for the next batch (which carries these
		 * records again): after a failed fdatasync the kernel may
		 * have dropped the pages and report nothing more. */
		close(journal_fd);
		journal_fd = -1;
		return false;
	}
	/* Once per open: the file may be new, and its name must survive a
	 * crash too. */
	if (!dir_synced) {
		persist_sync_dir(path);
		dir_synced = true;
	}
	return true;
}

static void *
writer_main(void *arg)
{
	char path[sizeof w.path], why[sizeof w.why];

	(void)arg;
	for (;;) {
		char *buf;
		size_t len;
		bool ok;

		pthread_mutex_lock(&w.lock);
		while (!w.has_job && !w.stop)
			pthread_cond_wait(&w.wake, &w.lock);
		if (!w.has_job) {
			pthread_mutex_unlock(&w.lock);
			break;
		}
		memcpy(path, w.path, sizeof path);
		buf = w.buf;
		len = w.len;
		w.buf = NULL;
		w.has_job = false;
		pthread_mutex_unlock(&w.lock);

		why[0] = '\0';
		ok = append(path, buf, len, why, sizeof why);
		free(buf);

		pthread_mutex_lock(&w.lock);
		w.ok = ok;
		memcpy(w.why, why, sizeof why);
		w.finished = true;
		pthread_mutex_unlock(&w.lock);
		/* The pipe is non-blocking: full means a byte is there already. */
		while (write(w.done_w, "", 1) < 0 && errno == EINTR)
			;
	}
	if (journal_fd >= 0)
		close(journal_fd);
	journal_fd = -1;
	return NULL;
}

int
persist_writer_start(void)
{
	int fds[2], err;
	sigset_t all, old;

	if (w.running)
		return w.done_r;
	if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0)
		return -1;
	w.done_r = fds[0];
	w.done_w = fds[1];
	w.stop = w.in_flight = w.has_job = w.finished = false;
	/* cbd's signals are the main thread's (libevent's handlers). */
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	err = pthread_create(&w.thread, NULL, writer_main, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (err != 0) {
		close(fds[0]);
		close(fds[1]);
		w.done_r = w.done_w = -1;
		errno = err;
		return -1;
	}
	w.running = true;
	return w.done_r;
}

bool
persist_writer_submit(const char *path, char *buf, size_t len)
{
	bool taken = false;

	pthread_mutex_lock(&w.lock);
	if (w.running && !w.in_flight && strlen(path) < sizeof w.path) {
		memcpy(w.path, path, strlen(path) + 1);
		w.buf = buf;
		w.len = len;
		w.in_flight = w.has_job = true;
		w.finished = false;
		taken = true;
		pthread_cond_signal(&w.wake);
	}
	pthread_mutex_unlock(&w.lock);
	if (!taken)
		free(buf);
	return taken;
}

bool
persist_writer_busy(void)
{
	bool busy;

	pthread_mutex_lock(&w.lock);
	busy = w.in_flight;
	pthread_mutex_unlock(&w.lock);
	return busy;
}

bool
persist_writer_done(bool *ok, char *why, size_t why_size)
{
	char drain[64];
	bool got = false;

	if (w.done_r >= 0)
		while (read(w.done_r, drain, sizeof drain) > 0)
			;
	pthread_mutex_lock(&w.lock);
	if (w.in_flight && w.finished) {
		*ok = w.ok;
		if (why_size > 0)
			snprintf(why, why_size, "%s", w.why);
		w.in_flight = w.finished = false;
		got = true;
	}
	pthread_mutex_unlock(&w.lock);
	return got;
}

void
persist_writer_stop(void)
{
	if (!w.running)
		return;
	pthread_mutex_lock(&w.lock);
	w.stop = true;
	pthread_cond_signal(&w.wake);
	pthread_mutex_unlock(&w.lock);
	pthread_join(w.thread, NULL);
	w.running = false;
	free(w.buf); /* a batch handed over after the thread ended: none */
	w.buf = NULL;
	w.in_flight = w.has_job = w.finished = w.stop = false;
	close(w.done_r);
	close(w.done_w);
	w.done_r = w.done_w = -1;
}
