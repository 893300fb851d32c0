/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cache.c — the cached mode of remote breakers: one watch connection per
 * process and socket path, shared by every breaker that uses it, keeping
 * the snapshot of each circuit those breakers name, and carrying their
 * outcomes to cbd as noreply lines.
 *
 * Design (README "Cached mode"):
 *   - The connection is owned by a reader thread, started when the first
 *     breaker of the process joins and stopped when the last one leaves.
 *     It connects, sends one watch for every name, applies the watch
 *     reply's snapshots and the change/policy/delete events as they
 *     arrive, and reconnects (every CACHE_RECONNECT_MS) when cbd goes
 *     away. Other events are ignored.
 *   - Protocol 3's snapshots are compact (no policy, a policy_rev): each
 *     entry keeps the last policy reported with its policy_rev. The watch
 *     request and synced outcomes ask for the policy ("policy": true),
 *     a policy event (a reload changed it) brings it, and a snapshot of
 *     another policy_rev makes the kept one stale: until a snapshot
 *     brings it again, the circuit's rule is unknown (every failure is
 *     synced, and the synced reply brings the policy).
 *   - An entry is valid only between the watch reply that read it and the
 *     loss of the connection: a lost connection invalidates every entry
 *     until the next watch reply re-reads them. Callers only ever read
 *     entries under the cache's lock.
 *   - Outcomes are appended to one output buffer as noreply lines. A
 *     failure (what trips circuits) is written at once by the caller, with
 *     everything queued before it; successes are written by the reader
 *     thread on a CACHE_FLUSH_US timer that runs while calls flow, so a
 *     steady stream of closed calls costs no system call each: one write
 *     carries every line queued in the period. When the socket cannot
 *     take it all, the rest waits for POLLOUT. A caller that finds
 *     CBC_CACHE_OUT_MAX bytes pending (cbd reads slower than calls
 *     come) writes what the socket takes and waits for room, at most
 *     ROOM_TIMEOUT_MS: its outcome then queues behind the earlier ones,
 *     so every outcome reaches cbd once and in order. With no live
 *     connection, or cbd frozen past that wait, the caller reports
 *     through the store instead.
 *   - Counted successes: each connection starts with a hello whose reply
 *     says whether cbd takes a success's "count" (outcome_counts lists
 *     "success"). While it does, a success that is not slow is counted in
 *     an open fold of its breaker's line instead of queued, and each fold
 *     goes out as one line with "count" before any other line is queued
 *     (order kept: a success only moves later), with the next write, at
 *     CACHE_FOLD_COUNT_MAX, when CACHE_FOLDS_MAX are open, and at a
 *     disconnect or the release, where it is a queued line like the
 *     others. A lost connection keeps every line not wholly written,
 *     the one half written included (cbd drops a line's head that came
 *     without its newline): the next connection carries each once.
 *   - A frozen cbd (SIGSTOP, hung) keeps the connection open, so the
 *     reader checks that cbd still answers: PROBE_INTERVAL_MS after the
 *     last line received it sends a hello on the watch connection, and
 *     when nothing at all has come back PROBE_TIMEOUT_MS later it drops
 *     the connection as if cbd had gone away (counted in probe_timeouts).
 *   - After fork() the child forgets its parent's caches (pthread_atfork):
 *     breakers the child inherited fall back to the store; breakers it
 *     creates get a cache of their own.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

/* libcbclient never exits: a failed HASH_ADD is reported, not fatal. */
#define HASH_NONFATAL_OOM 1
static _Thread_local int cache_hash_oom;
#define uthash_nonfatal_oom(obj) (cache_hash_oom = 1)
#include <uthash.h>

#include "internal.h"

/* Successes wait at most this long in the output before the reader
 * thread writes them, together (µs); failures are written at once. A
 * success's delay changes nothing but how fresh cbd's counts are (the
 * failure after it is written after it), and each period costs the
 * reader one wake-up while calls flow: 1 ms keeps that near 0.1 % of a
 * core per process. */
#define CACHE_FLUSH_US 1000
/* The reader keeps that period's timer running this long after the last
 * success that came within CACHE_HOT_US of the one before (µs), so a
 * steady flow of calls never has to wake it. */
#define CACHE_HOT_US 50000
/* After it, for CACHE_WARM_US after the last success, the reader writes
 * sparse successes on a slower timer (CACHE_WARM_FLUSH_US), so that
 * their callers do not wake anyone: a wake-up after an idle spell costs
 * the waker 18-32 µs on a 2-core VM (a send waking cbd or a pipe or
 * eventfd write waking the reader; a plain system call 2.6 µs), a queued
 * line ~1 µs. Past it the reader sleeps without a timer (an idle process
 * costs nothing): a lone success is written by its caller, and the
 * second within CACHE_HOT_US wakes the reader's timer again. */
#define CACHE_WARM_US 1000000
#define CACHE_WARM_FLUSH_US 10000
/* Wait between reconnect attempts while cbd is away (ms). */
#define CACHE_RECONNECT_MS 20
/* Longest event or reply line the reader accepts (a watch reply carries a
 * snapshot per name: about 1 KiB each). Past it: the connection is dropped
 * and counted in line_too_long. */
#define CACHE_LINE_MAX (CBC_CACHE_NAMES_MAX * 2048u)
/* First size of the read and write buffers; they double as needed. */
#define CACHE_BUF_INITIAL 4096u
/* At release, what the socket does not take at once is written by a
 * detached thread as cbd reads it; the release waits for it at most
 * CACHE_CLOSE_FLUSH_MS (ms: so a process ending right after has it
 * written if cbd reads), then lets it go on (never waiting for cbd). It
 * gives up when cbd has read nothing for CACHE_CLOSE_TAIL_IDLE_MS (ms): a
 * cbd frozen or hung past it loses that tail, which is all it holds.
 * Without a thread, the release writes for CACHE_CLOSE_FLUSH_MS and drops
 * the rest. */
#define CACHE_CLOSE_FLUSH_MS 200
#define CACHE_CLOSE_TAIL_IDLE_MS 60000
/* Names per watch request (keeps each line far below max_line_bytes). */
#define CACHE_WATCH_BATCH 64u
/* A frozen cbd (SIGSTOP, hung) keeps the watch connection open: without a
 * check the cache would stay live, closed calls would run from it and
 * their failures would queue unread, tripping nothing. So when nothing
 * has been received for PROBE_INTERVAL_MS the reader sends a hello, and
 * when still nothing has come PROBE_TIMEOUT_MS after it, it drops the
 * connection as lost: a frozen cbd is noticed within ~1.5 s of its last
 * line, and calls take the uncached path (timeouts, the store policy).
 * The timeout leaves a busy cbd (a backlog of noreply lines read before
 * the hello) time to answer; the interval costs an idle process two
 * wake-ups a second. */
#define PROBE_INTERVAL_MS 500
#define PROBE_TIMEOUT_MS 1000
/* The probe's id: "cache-probe-N". Nothing else the cache sends has an
 * id (watch requests carry none, noreply lines get no reply). */
#define PROBE_ID_PREFIX "cache-probe-"
/* An outcome that could trip its circuit by the process's own counts is
 * sent on the watch connection with this id ("cache-sync-N") and its
 * caller waits for the reply (at most SYNC_TIMEOUT_MS, then as if cbd
 * were frozen: the probe's bound), which the reader applies to the entry
 * before the change event the outcome causes: the next call is decided
 * on cbd's answer, so one process alone never runs more calls than the
 * circuit's rule allows. */
#define SYNC_ID_PREFIX "cache-sync-"
#define SYNC_TIMEOUT_MS PROBE_TIMEOUT_MS
/* How long a caller that found CBC_CACHE_OUT_MAX bytes already queued
 * waits for cbd to read some before it reports through the store (ms):
 * the probe's bound, past which cbd counts as frozen. A live cbd makes
 * room within its read of a socket buffer (~1 ms). */
#define ROOM_TIMEOUT_MS PROBE_TIMEOUT_MS
/* Counted successes (cbd's hello lists "success" in outcome_counts): a
 * success that is not slow is not queued as a line of its own but
 * counted in an open fold of its breaker's line (the exact bytes of its
 * prefix: breakers of one name may send different ctx), which goes out
 * as one line with "count" before any other line is queued, when the
 * output is written, at CACHE_FOLD_COUNT_MAX, when CACHE_FOLDS_MAX folds
 * are open (all of them then), and at a disconnect or the release. */
#define CACHE_FOLDS_MAX 64u
/* The most successes one counted line carries (cbd takes 1..this). */
#define CACHE_FOLD_COUNT_MAX PROTO_SUCCESS_COUNT_MAX
/* A longer line prefix is not folded (its successes go one line each). */
#define CACHE_FOLD_PREFIX_MAX 4096u

/* The circuit's rule as the last snapshot read reported it, the counts
 * that snapshot carried (base) and the process's own outcomes since
 * (own): enough to tell whether one more own outcome could trip the
 * circuit. Own counts are zeroed, and the rule read, only from a snapshot
 * known to include them and to be of the stored circuit (a change or
 * policy event, a synced outcome's reply); a watch reply may predate the
 * creating request, so it only sets the base. The rule is kept with its
 * policy_rev (rev): a snapshot of another rev makes it unknown. Until a
 * rule is read every failure is synced. An outcome counted twice costs a
 * round trip, never an overshoot. (As the Python, Node and Go clients
 * count.) */
typedef struct cache_own {
	bool known, rate, count_window, cannot_trip;
	int64_t rev; /* the rule's policy_rev (0: a protocol 2 cbd's) */
	int64_t threshold, min_calls, fail_rate, win_size, slow_ms, slow_rate;
	int64_t base_fc, base_calls, base_fails, base_slow;
	int64_t own_fc, own_calls, own_fails, own_slow;
} cache_own;

/* An open fold: count successes of the line prefix (its bytes, owned:
 * the breaker may be freed first; the buffer is kept for the slot's next
 * fold). */
typedef struct cache_fold {
	char *prefix;
	size_t len, cap;
	uint64_t count;
} cache_fold;

struct cbci_cache_entry {
	UT_hash_handle hh;
	bool valid; /* read by the current connection's watch reply */
	cbc_state state;
	int64_t opened_at; /* CBC_TIME_NONE when not open */
	int64_t break_ms; /* current_break_ms, else the policy's break_ms */
	int64_t retry_after_ms; /* as reported, with received_at */
	int64_t received_at; /* realtime ms when the snapshot arrived */
	bool held; /* hold_state until hold_until (CBC_TIME_NONE: released) */
	cbc_state hold_state;
	int64_t hold_until;
	uint64_t seq; /* change and policy events applied */
	cbc_snapshot last; /* the last event's snapshot (seq), or the last
			    * snapshot read (has_last); with the kept policy
			    * when it is of its policy_rev */
	bool has_last;
	cache_own own;
	cbci_policy_kept policy; /* the last policy reported, with its rev */
	char name[];
};

struct cbci_cache {
	pthread_mutex_t lock;
	struct cbci_cache *next; /* the registry */
	unsigned refs; /* breakers using it */
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	int fd; /* -1 while disconnected */
	bool answered; /* a line came on this connection: cbd answers */
	bool broken; /* a send failed: the reader reconnects */
	bool stop;
	int wake[2]; /* callers wake the reader: stop, pending output */
	pthread_t thread;
	cbci_cache_entry *entries;
	size_t names;
	/* Pending lines: a ring of out_cap bytes, out_len of them pending
	 * from out_head on (wrapping at out_cap): a send takes them in place
	 * and nothing is ever moved, except when the ring grows. */
	char *out;
	size_t out_head, out_len, out_cap;
	/* Bytes of the first pending line already written on this
	 * connection (its head: the rest waits for POLLOUT). It stays in the
	 * ring whole until its newline is written: a lost connection sends
	 * it again, whole, on the next one (cbd never carries out a line
	 * without its newline: the old one dropped that head). */
	size_t out_sent;
	unsigned room_waiters; /* callers waiting for room in out */
	bool blocked; /* the socket took less than all: wait for POLLOUT */
	bool cold; /* the reader sleeps without a timer: wake it */
	/* Monotonic µs of the last success queued, from the coarse clock
	 * (no TSC read per call; a tick late at most, against CACHE_HOT_US). */
	int64_t lazy_at;
	int64_t dense_at; /* the same, of the last success within CACHE_HOT_US
			   * of the one before it */
	char *in; /* bytes read, not yet a full line */
	size_t in_len, in_cap;
	/* The line being applied (reader thread only; its flat view is
	 * ~11 KiB, kept off the reader's stack). */
	cbci_reply line;
	/* The probe (reader thread only): monotonic µs of the last line
	 * received (or of the connect), of the outstanding probe (0: none),
	 * and the last probe's number. */
	int64_t rx_at;
	int64_t probe_at;
	/* Synced outcomes: the last number sent, the last answered (or
	 * given up: a lost connection answers them all), and the waiters'
	 * condition. */
	uint64_t sync_sent, sync_done;
	pthread_cond_t synced;
	uint64_t probe_seq;
	/* This connection's cbd takes counted successes: false from every
	 * connect until its hello reply lists "success" in outcome_counts
	 * (an older cbd answers bad_request to a count on a success, and a
	 * noreply line's error is never seen). */
	bool counts_ok;
	/* The open folds (folds[0..nfolds)). */
	cache_fold folds[CACHE_FOLDS_MAX];
	unsigned nfolds;
	cbc_cache_stats stats;
};

/* Every cache of this process, one per socket path. */
static pthread_mutex_t cache_registry_lock = PTHREAD_MUTEX_INITIALIZER;
static cbci_cache *cache_registry;
static pthread_once_t cache_atfork_once = PTHREAD_ONCE_INIT;
/* Bumped in a forked child: handles taken before the fork are stale. */
static unsigned cache_generation;

static void
cache_atfork_prepare(void)
{
	pthread_mutex_lock(&cache_registry_lock);
}

static void
cache_atfork_parent(void)
{
	pthread_mutex_unlock(&cache_registry_lock);
}

/* The child has no reader threads: forget the parent's caches (their
 * memory is abandoned, their sockets closed in the child only). */
static void
cache_atfork_child(void)
{
	for (cbci_cache *c = cache_registry; c != NULL; c = c->next) {
		if (c->fd >= 0)
			close(c->fd);
		close(c->wake[0]);
		close(c->wake[1]);
	}
	cache_registry = NULL;
	cache_generation++;
	pthread_mutex_unlock(&cache_registry_lock);
}

static void
cache_atfork_install(void)
{
	pthread_atfork(cache_atfork_prepare, cache_atfork_parent, cache_atfork_child);
}

unsigned
cbci_cache_generation(void)
{
	return __atomic_load_n(&cache_generation, __ATOMIC_RELAXED);
}

/* Make room for need more bytes in *buf. */
static bool
cache_buf_reserve(char **buf, size_t len, size_t *cap, size_t need)
{
	size_t c = *cap == 0 ? CACHE_BUF_INITIAL : *cap;
	char *grown;

	if (len + need <= *cap)
		return true;
	while (c < len + need)
		c *= 2;
	grown = realloc(*buf, c);
	if (grown == NULL)
		return false;
	*buf = grown;
	*cap = c;
	return true;
}

/* Wake the reader thread (it polls the pipe). */
static void
cache_wake(cbci_cache *c)
{
	char byte = 0;
	ssize_t n = write(c->wake[1], &byte, 1);

	(void)n; /* full pipe: the reader is awake already */
}

/* The ring's pending bytes from the off-th on as (at most) two spans;
 * returns how many (0: none). */
static int
cache_out_spans_from(const cbci_cache *c, size_t off, struct iovec iov[2])
{
	size_t start = c->out_head + off, len = c->out_len - off, first;

	if (len == 0)
		return 0;
	if (start >= c->out_cap)
		start -= c->out_cap;
	first = c->out_cap - start;
	if (len <= first) {
		iov[0] = (struct iovec){ c->out + start, len };
		return 1;
	}
	iov[0] = (struct iovec){ c->out + start, first };
	iov[1] = (struct iovec){ c->out, len - first };
	return 2;
}

/* The ring's pending bytes as (at most) two spans; returns how many. */
static int
cache_out_spans(const cbci_cache *c, struct iovec iov[2])
{
	return cache_out_spans_from(c, 0, iov);
}

/* The pending bytes up to the last newline among the pending bytes
 * [from, to) (counted from the head); 0 when there is none. Scans back
 * from to: about a line. */
static size_t
cache_out_lines_before(const cbci_cache *c, size_t from, size_t to)
{
	while (to > from) {
		size_t i = c->out_head + --to;

		if (c->out[i >= c->out_cap ? i - c->out_cap : i] == '\n')
			return to + 1;
	}
	return 0;
}

/* Drop the first n pending bytes (written lines). */
static void
cache_out_consume(cbci_cache *c, size_t n)
{
	c->out_len -= n;
	c->out_head = c->out_len == 0 ? 0 : (c->out_head + n) % c->out_cap;
}

static bool cache_folds_put_locked(cbci_cache *c);

/* Send as much pending output as the socket takes now (lock held).
 * Callers waiting for room are told when some was made. */
static void
cache_flush_locked(cbci_cache *c)
{
	/* The open folds go with this write (a success waits at most one
	 * flush, as its line would). */
	if (c->nfolds > 0 && c->fd >= 0 && !c->broken)
		(void)cache_folds_put_locked(c);
	while (c->fd >= 0 && !c->broken && c->out_len > c->out_sent) {
		struct iovec iov[2];
		struct msghdr msg = { .msg_iov = iov };
		ssize_t n;

		msg.msg_iovlen = (size_t)cache_out_spans_from(c, c->out_sent, iov);
		n = sendmsg(c->fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
		if (n > 0) {
			size_t end = c->out_sent + (size_t)n;
			size_t whole = cache_out_lines_before(c, c->out_sent, end);

			c->blocked = false;
			c->stats.sends++;
			/* Whole lines leave the ring; a line's written head stays
			 * with it (out_sent). */
			cache_out_consume(c, whole);
			c->out_sent = end - whole;
			if (c->room_waiters > 0)
				pthread_cond_broadcast(&c->synced);
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			c->blocked = true; /* the reader sends the rest when writable */
			return;
		}
		c->broken = true;
	}
}

/* Does the output have room for len more bytes (CBC_CACHE_OUT_MAX)? */
static bool
cache_room(const cbci_cache *c, size_t len)
{
	return c->out_len + len <= CBC_CACHE_OUT_MAX;
}

/* Make room in the ring for len more bytes, growing it (doubling; the
 * pending bytes then start the new one) when they do not fit (lock
 * held). */
static bool
cache_out_grow(cbci_cache *c, size_t len)
{
	size_t cap = c->out_cap == 0 ? CACHE_BUF_INITIAL : c->out_cap;
	struct iovec iov[2];
	char *grown;
	int spans;

	if (c->out_len + len <= c->out_cap)
		return true;
	while (cap < c->out_len + len)
		cap *= 2;
	grown = malloc(cap);
	if (grown == NULL)
		return false;
	spans = c->out_len > 0 ? cache_out_spans(c, iov) : 0;
	for (int i = 0; i < spans; i++)
		memcpy(grown + (i == 0 ? 0 : iov[0].iov_len), iov[i].iov_base, iov[i].iov_len);
	free(c->out);
	c->out = grown;
	c->out_cap = cap;
	c->out_head = 0;
	return true;
}

/* Copy len bytes to the ring's end (room made: cache_out_grow). */
static void
cache_out_copy(cbci_cache *c, const char *data, size_t len)
{
	size_t tail = c->out_head + c->out_len, first;

	if (tail >= c->out_cap)
		tail -= c->out_cap;
	first = c->out_cap - tail < len ? c->out_cap - tail : len;
	memcpy(c->out + tail, data, first);
	if (first < len)
		memcpy(c->out, data + first, len - first);
	c->out_len += len;
}

/* Append len bytes to the ring, raw (lock held): no fold goes before. */
static bool
cache_out_put_raw(cbci_cache *c, const char *data, size_t len)
{
	if (len == 0)
		return true;
	if (!cache_out_grow(c, len))
		return false;
	cache_out_copy(c, data, len);
	return true;
}

/* Put every open fold into the ring as one line: its prefix, then
 * `,"count":N}` (N > 1; else the plain line) and a newline, past
 * CBC_CACHE_OUT_MAX too (at most CACHE_FOLDS_MAX lines: it holds no more
 * than the lines they replace). Lock held. False when out of memory: the
 * folds not put stay open (and a line meant to follow them is not
 * queued: it would overtake them). */
static bool
cache_folds_put_locked(cbci_cache *c)
{
	unsigned i;

	for (i = 0; i < c->nfolds; i++) {
		cache_fold *f = &c->folds[i];
		char tail[48];
		size_t tail_len = f->count > 1
		    ? (size_t)snprintf(tail, sizeof tail, ",\"count\":%llu}\n",
			  (unsigned long long)f->count)
		    : (size_t)snprintf(tail, sizeof tail, "}\n");

		if (!cache_out_grow(c, f->len + tail_len))
			break;
		cache_out_copy(c, f->prefix, f->len);
		cache_out_copy(c, tail, tail_len);
		c->stats.noreply_lines++;
		if (f->count > 1)
			c->stats.folded += f->count;
	}
	if (i == c->nfolds) {
		c->nfolds = 0;
		return true;
	}
	/* Out of memory: the folds left move to the front (their buffers
	 * swapped with the ones put: each slot keeps one). */
	for (unsigned j = i; j < c->nfolds; j++) {
		cache_fold t = c->folds[j - i];

		c->folds[j - i] = c->folds[j];
		c->folds[j] = t;
	}
	c->nfolds -= i;
	return false;
}

/* Append len bytes (a line) to the ring after the open folds (lock
 * held): nothing overtakes a success. */
static bool
cache_out_put(cbci_cache *c, const char *data, size_t len)
{
	if (c->nfolds > 0 && !cache_folds_put_locked(c))
		return false;
	return cache_out_put_raw(c, data, len);
}

/* Count a success of the line prefix (len bytes) in its open fold
 * instead of queuing its line (lock held): when this connection's cbd
 * takes counted successes, the entry's rule is known and the call is
 * not slow by it (nor by slow_ms, the breaker's own slow_call_ms: -1
 * none), and the reader's timer runs (a lone success of an idle process
 * is written by its caller, as a line). *hint: the caller's slot the
 * last time (read and written under the lock). The hot path: a
 * comparison with that fold and an increment. False: queue the line. */
static bool
cache_fold_locked(cbci_cache *c, const cbci_cache_entry *e, const char *prefix, size_t len,
    unsigned *hint, int64_t slow_ms, int64_t duration_ms)
{
	const cbc_policy *p = &e->policy.policy;
	cache_fold *f = &c->folds[*hint % CACHE_FOLDS_MAX];
	int64_t now;
	bool dense;

	if (!c->counts_ok || c->fd < 0 || c->broken || !p->known || len > CACHE_FOLD_PREFIX_MAX ||
	    (p->slow_call_ms > 0 && duration_ms >= p->slow_call_ms) ||
	    (slow_ms >= 0 && duration_ms >= slow_ms))
		return false;
	now = clock_monotonic_coarse_ms() * 1000;
	dense = now - c->lazy_at < CACHE_HOT_US;
	if (c->cold && !dense)
		return false;
	if (*hint >= c->nfolds || f->len != len || memcmp(f->prefix, prefix, len) != 0) {
		f = NULL;
		for (unsigned i = 0; i < c->nfolds; i++) {
			if (c->folds[i].len == len &&
			    memcmp(c->folds[i].prefix, prefix, len) == 0) {
				f = &c->folds[i];
				*hint = i;
				break;
			}
		}
	}
	if (f == NULL) {
		if (c->nfolds == CACHE_FOLDS_MAX && !cache_folds_put_locked(c))
			return false;
		f = &c->folds[c->nfolds];
		if (f->cap < len) {
			char *grown = realloc(f->prefix, len);

			if (grown == NULL)
				return false;
			f->prefix = grown;
			f->cap = len;
		}
		memcpy(f->prefix, prefix, len);
		f->len = len;
		f->count = 0;
		*hint = c->nfolds++;
	}
	if (f->count >= CACHE_FOLD_COUNT_MAX)
		return false; /* full and out of memory: the line tries again */
	f->count++;
	c->lazy_at = now;
	if (dense)
		c->dense_at = now;
	if (f->count == CACHE_FOLD_COUNT_MAX)
		(void)cache_folds_put_locked(c); /* (out of memory: later) */
	/* Wake the reader to run its timer now that successes flow. */
	if (c->cold && dense) {
		c->cold = false;
		cache_wake(c);
	}
	return true;
}

/* Append one line (with its newline) to the output (lock held). */
static bool
cache_append_locked(cbci_cache *c, const char *line, size_t len)
{
	if (!cache_room(c, len)) {
		c->stats.out_full++;
		return false;
	}
	return cache_out_put(c, line, len);
}

/* ms from now on CLOCK_REALTIME, for pthread_cond_timedwait. */
static struct timespec
cache_deadline(int64_t ms)
{
	struct timespec t;

	clock_gettime(CLOCK_REALTIME, &t);
	t.tv_sec += (time_t)(ms / 1000);
	t.tv_nsec += (long)(ms % 1000) * 1000000L;
	if (t.tv_nsec >= 1000000000L) {
		t.tv_sec++;
		t.tv_nsec -= 1000000000L;
	}
	return t;
}

/* The output is full (CBC_CACHE_OUT_MAX: cbd reads slower than calls
 * come): write what the socket takes now, and while that leaves no room
 * for len bytes, wait (lock released) until the reader thread's writes
 * make some, cbd goes away, or ROOM_TIMEOUT_MS passes (cbd frozen).
 * True when there is room and the connection is still up: the line then
 * queues behind every earlier one (nothing overtakes it through the
 * store). Counted in out_full once per call that found it full. */
static bool
cache_wait_room_locked(cbci_cache *c, size_t len)
{
	struct timespec until;
	int rc = 0;

	if (cache_room(c, len))
		return true;
	c->stats.out_full++;
	cache_flush_locked(c);
	if (cache_room(c, len) || c->fd < 0 || c->broken)
		return c->fd >= 0 && !c->broken;
	until = cache_deadline(ROOM_TIMEOUT_MS);
	/* The reader writes the rest when the socket is writable: wake it
	 * to poll for that now (blocked) rather than at its next timer. */
	c->cold = false;
	cache_wake(c);
	c->room_waiters++;
	while (rc == 0 && c->fd >= 0 && !c->broken && !cache_room(c, len))
		rc = pthread_cond_timedwait(&c->synced, &c->lock, &until);
	c->room_waiters--;
	return c->fd >= 0 && !c->broken && cache_room(c, len);
}

/* Queue watch requests for names[0..n) (lock held). */
static bool
cache_queue_watch_locked(cbci_cache *c, cbci_cache_entry **names, size_t n)
{
	bool ok = true;

	for (size_t i = 0; ok && i < n; i += CACHE_WATCH_BATCH) {
		/* "policy": true: the snapshots carry the policy (protocol
		 * 3; an older cbd ignores the member and sends it anyway). */
		json_t *req = json_pack("{s:s, s:[], s:b}", "op", "watch", "names", "policy", 1);
		json_t *arr = json_object_get(req, "names");
		char *text;

		for (size_t j = i; req != NULL && j < n && j < i + CACHE_WATCH_BATCH; j++)
			json_array_append_new(arr, json_string(names[j]->name));
		text = req != NULL ? json_dumps(req, JSON_COMPACT) : NULL;
		json_decref(req);
		ok = text != NULL;
		if (ok) {
			size_t len = strlen(text);

			text[len] = '\n'; /* the NUL becomes the newline */
			ok = cache_append_locked(c, text, len + 1);
		}
		free(text);
	}
	return ok;
}

/* A snapshot's counts into own's base; with reset (a snapshot that
 * includes the process's own outcomes, of the stored circuit), also its
 * rule, and the own counts start again. */
static void
own_set_base(cache_own *o, const cbc_snapshot *s, bool reset)
{
	const cbc_policy *p = &s->policy;

	if (reset && p->known) {
		o->known = true;
		o->rev = s->policy_rev;
		o->rate = p->trip == CBC_TRIP_RATE;
		o->count_window = p->window != CBC_WINDOW_TIME;
		o->threshold = p->failure_threshold;
		o->min_calls = p->minimum_calls;
		o->fail_rate = p->failure_rate;
		o->win_size = p->window_size;
		o->slow_ms = p->slow_call_ms > 0 ? p->slow_call_ms : -1;
		o->slow_rate = p->slow_call_rate;
		o->cannot_trip = s->hold.held || p->min_reporters > 1;
	} else if (s->policy_rev != o->rev) {
		/* Another policy than the rule's (a reload, a new circuit):
		 * unknown until a snapshot brings it. */
		o->known = false;
	}
	o->base_fc = s->failure_count > 0 ? s->failure_count : 0;
	o->base_calls = s->window.known ? s->window.calls : 0;
	o->base_fails = s->window.known ? s->window.failures : 0;
	o->base_slow = s->window.known ? s->window.slow : 0;
	if (reset)
		o->own_fc = o->own_calls = o->own_fails = o->own_slow = 0;
}

/* Add one own outcome (of ms) to o; true when it could trip the circuit:
 * then it must be sent with its reply awaited. */
static bool
own_count(cache_own *o, bool failure, int64_t ms)
{
	bool slow = o->slow_ms >= 0 && ms >= o->slow_ms;
	int64_t hi, lo;

	if (failure)
		o->own_fc++;
	else
		o->base_fc = o->own_fc = 0;
	o->own_calls++;
	o->own_fails += failure;
	o->own_slow += slow;
	if (!o->known)
		return failure; /* no rule read yet: any failure might trip it */
	if (o->cannot_trip)
		return false;
	if (!o->rate)
		return failure && o->base_fc + o->own_fc >= o->threshold;
	if (!failure && !slow)
		return false;
	/* The window holds at most base + own calls and at least the larger
	 * of the two (either may include the other): judge the rate at its
	 * highest. */
	hi = o->base_calls + o->own_calls;
	lo = o->base_calls > o->own_calls ? o->base_calls : o->own_calls;
	if (o->count_window) {
		hi = hi < o->win_size ? hi : o->win_size;
		lo = lo < o->win_size ? lo : o->win_size;
	}
	if (hi < o->min_calls)
		return false;
	if (failure && (o->base_fails + o->own_fails) * 100 >= o->fail_rate * lo)
		return true;
	return slow && (o->base_slow + o->own_slow) * 100 >= o->slow_rate * lo;
}

/* Read a snapshot into an entry, valid from now (the kept policy already
 * put into s when of its rev). */
static void
cache_entry_set(cbci_cache_entry *e, const cbc_snapshot *s)
{
	e->valid = true;
	e->state = s->state;
	e->opened_at = s->opened_at;
	/* Without either, the countdown cbd reported (retry_after_ms). */
	e->break_ms = s->current_break_ms >= 0 ? s->current_break_ms
	    : s->policy.known                  ? s->policy.break_ms
					       : -1;
	e->retry_after_ms = s->retry_after_ms;
	e->received_at = clock_realtime_ms();
	e->held = s->hold.held;
	e->hold_state = s->hold.state;
	e->hold_until = s->hold.until;
}

/* Apply one snapshot object from a reply or an event: parsed without
 * the lock (callers keep deciding meanwhile), applied under it. */
static void
cache_apply_snapshot(cbci_cache *c, proto_node *obj, bool event, bool synced)
{
	proto_node name_node = proto_node_get(obj, "name");
	const char *name = proto_node_string(&name_node, NULL);
	cbci_cache_entry *e = NULL;
	cbc_snapshot snap;
	cbc_error err;
	bool ok;

	if (name == NULL)
		return;
	ok = cbci_reply_snapshot_node(obj, name, &snap, &err) == CBC_OK;
	pthread_mutex_lock(&c->lock);
	HASH_FIND_STR(c->entries, name, e);
	if (!ok) {
		c->stats.bad_lines++;
		if (e != NULL)
			e->valid = false; /* cannot tell its state: ask cbd */
	} else if (e != NULL) {
		cbci_policy_keep(&e->policy, &snap);
		cache_entry_set(e, &snap);
		own_set_base(&e->own, &snap, event || synced);
		/* The latest reading (a newer one replaces an event's not
		 * yet handed out: it is newer still). */
		e->last = snap;
		e->has_last = true;
		/* An event's snapshot is of a stored circuit (a watch reply's
		 * may be the initial one of a name not created yet). */
		if (event)
			e->seq++;
	}
	pthread_mutex_unlock(&c->lock);
}

/* Apply one message from cbd, in either form. */
static void
cache_apply_message(cbci_cache *c, proto_node *msg)
{
	/* Read in the order cbd writes an event's members. */
	proto_node event_node = proto_node_get(msg, "event");
	proto_node id_node = proto_node_get(msg, "id");
	proto_node ok = proto_node_get(msg, "ok");
	const char *event = proto_node_string(&event_node, NULL);
	const char *id = proto_node_string(&id_node, NULL);

	if (id != NULL && strncmp(id, SYNC_ID_PREFIX, strlen(SYNC_ID_PREFIX)) == 0) {
		/* A synced outcome's reply: its snapshot (after the outcome)
		 * into the entry, before the event it may cause; then its
		 * waiters go on. */
		proto_node snap = proto_node_get(msg, "snapshot");
		uint64_t n = strtoull(id + strlen(SYNC_ID_PREFIX), NULL, 10);

		if (proto_node_is_object(&snap))
			cache_apply_snapshot(c, &snap, false, true);
		pthread_mutex_lock(&c->lock);
		if (n > c->sync_done)
			c->sync_done = n;
		pthread_cond_broadcast(&c->synced);
		pthread_mutex_unlock(&c->lock);
		return;
	}
	if (id != NULL && strncmp(id, PROBE_ID_PREFIX, strlen(PROBE_ID_PREFIX)) == 0) {
		/* A hello's reply (the connect's or a probe's): the line itself
		 * was the sign of life (cache_read); it says whether this cbd
		 * takes counted successes (outcome_counts lists "success"; an
		 * older cbd has no such member). */
		proto_node counts = proto_node_get(msg, "outcome_counts");
		size_t n = proto_node_array_size(&counts);
		bool takes = false;

		for (size_t i = 0; i < n && !takes; i++) {
			proto_node item = proto_node_array_get(&counts, i);
			const char *what = proto_node_string(&item, NULL);

			takes = what != NULL && strcmp(what, "success") == 0;
		}
		pthread_mutex_lock(&c->lock);
		c->counts_ok = takes && c->fd >= 0 && !c->broken;
		pthread_mutex_unlock(&c->lock);
		return;
	}
	if (event != NULL) {
		pthread_mutex_lock(&c->lock);
		c->stats.events++;
		c->stats.last_event_us = clock_monotonic_us();
		pthread_mutex_unlock(&c->lock);
	}
	if (!proto_node_is_object(msg)) {
		pthread_mutex_lock(&c->lock);
		c->stats.bad_lines++;
		pthread_mutex_unlock(&c->lock);
	} else if (event != NULL &&
	    (strcmp(event, "change") == 0 || strcmp(event, "policy") == 0)) {
		/* A policy event (protocol 3: a reload changed the circuit's
		 * policy) is a change event's snapshot, with the policy and
		 * without a state change. */
		proto_node snap = proto_node_get(msg, "snapshot");

		cache_apply_snapshot(c, &snap, true, false);
	} else if (event != NULL && strcmp(event, "delete") == 0) {
		proto_node name_node = proto_node_get(msg, "name");
		const char *name = proto_node_string(&name_node, NULL);
		cbci_cache_entry *e = NULL;

		pthread_mutex_lock(&c->lock);
		if (name != NULL)
			HASH_FIND_STR(c->entries, name, e);
		if (e != NULL && e->valid) {
			/* Gone: the next call creates it closed, with a
			 * policy_rev of its own (and maybe another policy). */
			e->state = CBC_STATE_CLOSED;
			e->held = false;
			e->opened_at = CBC_TIME_NONE;
		}
		if (e != NULL) {
			cbci_policy_forget(&e->policy);
			e->own.known = false;
		}
		pthread_mutex_unlock(&c->lock);
	} else if (proto_node_is_true(&ok)) {
		/* A watch reply: its snapshots are in an array, never in a
		 * flat view. */
		proto_node snaps = proto_node_get(msg, "snapshots");
		size_t n = proto_node_array_size(&snaps);

		for (size_t i = 0; i < n; i++) {
			proto_node s = proto_node_array_get(&snaps, i);

			cache_apply_snapshot(c, &s, false, false);
		}
	} else if (event == NULL) {
		/* ok:false to a watch (a protocol 1 cbd): entries stay invalid
		 * and breakers keep asking cbd. */
		pthread_mutex_lock(&c->lock);
		c->stats.refused++;
		pthread_mutex_unlock(&c->lock);
	}
}

void
cbci_cache_apply_line(cbci_cache *c, const char *line, size_t len)
{
	/* Events and probe replies are plain (proto-scan.h): read from the
	 * flat view, no jansson values at all (every watching process reads
	 * every event). Anything else (a watch reply's array, escapes,
	 * reals) is json_loadb's. */
	cbci_reply_decode(&c->line, line, len, NULL);
	cache_apply_message(c, &c->line.top);
	cbci_reply_free(&c->line);
}

/* Queue a hello with the probe's next id (lock held): its reply is a
 * sign of life and says whether cbd takes counted successes. Past
 * CBC_CACHE_OUT_MAX too; out of memory it is not sent. */
static void
cache_queue_hello_locked(cbci_cache *c)
{
	char line[64];
	int len =
	    snprintf(line, sizeof line, "{\"op\":\"hello\",\"id\":\"" PROBE_ID_PREFIX "%llu\"}\n",
		(unsigned long long)++c->probe_seq);

	(void)cache_out_put(c, line, (size_t)len);
}

/* Drop the connection: every entry invalid until re-watched (lock held). */
static void
cache_disconnect_locked(cbci_cache *c)
{
	cbci_cache_entry *e, *tmp;

	if (c->fd >= 0) {
		close(c->fd);
		c->stats.disconnects++;
	}
	c->fd = -1;
	c->broken = false;
	c->blocked = false;
	c->in_len = 0;
	/* Lines not yet written stay queued for the next connection, and so
	 * does a line half written, whole: cbd drops a line's head that
	 * comes without its newline, so it reaches cbd once. */
	c->out_sent = 0;
	/* The open folds are queued lines too: kept for the next connection
	 * (as one line each, after the lines queued before them). That
	 * connection's cbd folds nothing until its hello reply says so. */
	c->counts_ok = false;
	(void)cache_folds_put_locked(c);
	HASH_ITER (hh, c->entries, e, tmp)
		e->valid = false;
	/* Synced outcomes waiting for a reply get none: their callers go on
	 * (the next call asks cbd: every entry is invalid). */
	c->sync_done = c->sync_sent;
	pthread_cond_broadcast(&c->synced);
}

/* Try to connect and watch every name (lock held). */
static void
cache_connect_locked(cbci_cache *c)
{
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	cbci_cache_entry **all, *e, *tmp;
	size_t n = 0;
	int fd;

	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return;
	memcpy(addr.sun_path, c->path, strlen(c->path) + 1);
	if (connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
		close(fd);
		return;
	}
	all = calloc(c->names + 1, sizeof *all);
	if (all == NULL) {
		close(fd);
		return;
	}
	HASH_ITER (hh, c->entries, e, tmp)
		all[n++] = e;
	c->fd = fd;
	c->answered = false; /* live once cbd answers (a frozen cbd's
			      * listener still accepts) */
	c->stats.connects++;
	/* The first probe comes PROBE_INTERVAL_MS after the connect when
	 * nothing (the watch reply) arrives before. */
	c->rx_at = clock_monotonic_us();
	c->probe_at = 0;
	if (!cache_queue_watch_locked(c, all, n))
		c->broken = true;
	free(all);
	/* Does this cbd take counted successes? Until its reply says so,
	 * every success goes as a line of its own. */
	c->counts_ok = false;
	cache_queue_hello_locked(c);
	cache_flush_locked(c);
}

/* Read what cbd sent and apply every full line (lock not held while
 * reading: only this thread reads). False: the connection is gone. */
static bool
cache_read(cbci_cache *c)
{
	for (;;) {
		ssize_t n;
		size_t start = 0;

		if (!cache_buf_reserve(&c->in, c->in_len, &c->in_cap, CACHE_BUF_INITIAL))
			return false;
		size_t room = c->in_cap - c->in_len;

		n = recv(c->fd, c->in + c->in_len, room, MSG_DONTWAIT);
		if (n == 0)
			return false;
		if (n < 0)
			return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
		c->in_len += (size_t)n;
		for (char *nl; (nl = memchr(c->in + start, '\n', c->in_len - start)) != NULL;) {
			cbci_cache_apply_line(c, c->in + start, (size_t)(nl - (c->in + start)));
			start = (size_t)(nl - c->in) + 1;
		}
		if (start > 0) {
			/* Any line is life: it answers the outstanding probe. */
			c->rx_at = clock_monotonic_us();
			c->probe_at = 0;
			if (!c->answered) {
				pthread_mutex_lock(&c->lock);
				c->answered = true;
				pthread_mutex_unlock(&c->lock);
			}
		}
		memmove(c->in, c->in + start, c->in_len - start);
		c->in_len -= start;
		if (c->in_len > CACHE_LINE_MAX) {
			pthread_mutex_lock(&c->lock);
			c->stats.line_too_long++;
			pthread_mutex_unlock(&c->lock);
			return false;
		}
		/* A short read took all there was: back to poll, without a
		 * recv that says EAGAIN (a syscall per event in every watching
		 * process; an EOF shows at the next poll). */
		if ((size_t)n < room)
			return true;
	}
}

/* At release, when no tail thread could be started: give queued outcomes
 * up to CACHE_CLOSE_FLUSH_MS to be written (lock held; released while
 * waiting). */
static void
cache_close_flush_locked(cbci_cache *c)
{
	int64_t deadline = clock_monotonic_ms() + CACHE_CLOSE_FLUSH_MS;

	cache_flush_locked(c);
	while (c->fd >= 0 && !c->broken && c->out_len > 0) {
		struct pollfd pfd = { .fd = c->fd, .events = POLLOUT };
		int64_t left = deadline - clock_monotonic_ms();

		if (left <= 0)
			break;
		pthread_mutex_unlock(&c->lock);
		poll(&pfd, 1, (int)left);
		pthread_mutex_lock(&c->lock);
		cache_flush_locked(c);
	}
}

/* What the release left for cbd to read: the connection and the output
 * the socket did not take, written by a detached thread of its own, which
 * closes done (the write end of a pipe, or -1) when it ends. */
typedef struct cache_tail {
	int fd, done;
	size_t len;
	char buf[];
} cache_tail;

/* Write the tail as cbd reads it (reading and dropping what cbd sends,
 * so its replies never block it), then close the connection; give up
 * when cbd took nothing for CACHE_CLOSE_TAIL_IDLE_MS or went away. */
static void *
cache_tail_thread(void *arg)
{
	cache_tail *t = arg;
	size_t off = 0;

	while (off < t->len) {
		struct pollfd pfd = { .fd = t->fd, .events = POLLIN | POLLOUT };
		char sink[4096];
		int n = poll(&pfd, 1, CACHE_CLOSE_TAIL_IDLE_MS);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0 || (pfd.revents & (POLLERR | POLLNVAL)))
			break;
		if ((pfd.revents & POLLIN) && recv(t->fd, sink, sizeof sink, MSG_DONTWAIT) == 0)
			break; /* cbd closed the connection */
		if (pfd.revents & POLLOUT) {
			ssize_t w =
			    send(t->fd, t->buf + off, t->len - off, MSG_DONTWAIT | MSG_NOSIGNAL);

			if (w > 0)
				off += (size_t)w;
			else if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
				break;
		} else if (pfd.revents & POLLHUP) {
			break;
		}
	}
	close(t->fd);
	if (t->done >= 0)
		close(t->done);
	free(t);
	return NULL;
}

/* At release (lock held; reader thread): everything queued is written
 * now, in order, as far as the socket takes it; the rest (cbd reads
 * nothing: frozen, or slower than the queue) goes to a tail thread that
 * writes it as cbd reads, so no timer of a loaded machine drops what
 * breakers queued before their release, and the release waits for cbd
 * at most CACHE_CLOSE_FLUSH_MS. Lines kept from a lost connection get one
 * connect of their own (a Unix socket's succeeds or fails at once). */
static void
cache_close_locked(cbci_cache *c)
{
	cache_tail *t;
	pthread_attr_t attr;
	pthread_t thread;
	bool started = false;
	int done[2] = { -1, -1 };

	/* The open folds are queued lines too. */
	(void)cache_folds_put_locked(c);
	if (c->fd < 0 && c->out_len > 0)
		cache_connect_locked(c);
	cache_flush_locked(c);
	if (c->fd >= 0 && !c->broken && c->out_len > 0 &&
	    (t = malloc(sizeof *t + c->out_len)) != NULL) {
		struct iovec iov[2];
		/* (The head of a line already written goes on after it: the
		 * same connection.) */
		int spans = cache_out_spans_from(c, c->out_sent, iov);

		t->fd = c->fd;
		t->len = 0;
		for (int i = 0; i < spans; i++) { /* the ring's two spans, in order */
			memcpy(t->buf + t->len, iov[i].iov_base, iov[i].iov_len);
			t->len += iov[i].iov_len;
		}
		if (pipe2(done, O_CLOEXEC) != 0)
			done[0] = done[1] = -1;
		t->done = done[1];
		if (pthread_attr_init(&attr) == 0) {
			started =
			    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED) == 0 &&
			    pthread_create(&thread, &attr, cache_tail_thread, t) == 0;
			pthread_attr_destroy(&attr);
		}
		if (started) {
			c->fd = -1; /* the tail thread's now */
			c->out_len = 0;
			c->out_head = 0;
			c->out_sent = 0;
		} else {
			free(t);
			if (done[1] >= 0)
				close(done[1]);
		}
	}
	if (!started)
		cache_close_flush_locked(c);
	cache_disconnect_locked(c);
	if (started && done[0] >= 0) {
		/* The tail thread ends (done's write end closes: POLLHUP) or
		 * goes on without us. */
		struct pollfd pfd = { .fd = done[0], .events = POLLIN };
		int64_t deadline = clock_monotonic_ms() + CACHE_CLOSE_FLUSH_MS, left;

		pthread_mutex_unlock(&c->lock);
		while ((left = deadline - clock_monotonic_ms()) > 0 &&
		    poll(&pfd, 1, (int)left) < 0 && errno == EINTR)
			;
		pthread_mutex_lock(&c->lock);
	}
	if (done[0] >= 0)
		close(done[0]);
}

/* Check that cbd still answers (lock held; reader thread only): queue a
 * probe when nothing was received for PROBE_INTERVAL_MS, drop the
 * connection when nothing came PROBE_TIMEOUT_MS after the probe. Returns
 * the monotonic µs of the next check, or -1 when none is due (no
 * connection, or no names: nothing to keep valid). */
static int64_t
cache_probe_locked(cbci_cache *c, int64_t now)
{
	if (c->fd < 0 || c->broken || c->names == 0)
		return -1;
	if (c->probe_at != 0) {
		if (now - c->probe_at < PROBE_TIMEOUT_MS * 1000LL)
			return c->probe_at + PROBE_TIMEOUT_MS * 1000LL;
		/* cbd is not answering: as if it had gone away. */
		c->stats.probe_timeouts++;
		cache_disconnect_locked(c);
		return -1;
	}
	if (now - c->rx_at < PROBE_INTERVAL_MS * 1000LL)
		return c->rx_at + PROBE_INTERVAL_MS * 1000LL;
	/* Queued after whatever waits (cbd answers it once it has read
	 * those), past CBC_CACHE_OUT_MAX too: a full output is when the
	 * question matters most. Out of memory it is not sent, and the
	 * connection is dropped unless another line comes. */
	cache_queue_hello_locked(c);
	c->probe_at = now;
	return c->probe_at + PROBE_TIMEOUT_MS * 1000LL;
}

/* The reader thread: connect, read events, flush output (successes on
 * a CACHE_FLUSH_US timer while calls flow), probe an idle connection,
 * reconnect. */
static void *
cache_thread(void *arg)
{
	cbci_cache *c = arg;

	pthread_mutex_lock(&c->lock);
	while (!c->stop) {
		struct pollfd pfd[2] = { { .fd = c->wake[0], .events = POLLIN } };
		struct timespec ts, *timeout = NULL;
		int64_t now, probe_due, wait_us = -1;
		char drain[64];

		if (c->fd < 0)
			cache_connect_locked(c);
		now = clock_monotonic_us();
		probe_due = cache_probe_locked(c, now);
		cache_flush_locked(c);
		if (c->broken) {
			cache_disconnect_locked(c);
			probe_due = -1;
		}
		c->cold = false;
		if (c->fd < 0) {
			wait_us = CACHE_RECONNECT_MS * 1000LL;
		} else if (now - c->dense_at < CACHE_HOT_US) {
			wait_us = CACHE_FLUSH_US;
		} else if (now - c->lazy_at < CACHE_WARM_US) {
			wait_us = CACHE_WARM_FLUSH_US;
		} else {
			/* Cold means no flush timer (callers write sparse
			 * successes themselves), even with a probe due. */
			c->cold = true;
		}
		if (probe_due >= 0 && (wait_us < 0 || probe_due - now < wait_us))
			wait_us = probe_due > now ? probe_due - now : 0;
		if (wait_us >= 0) {
			ts.tv_sec = (time_t)(wait_us / 1000000);
			ts.tv_nsec = (long)(wait_us % 1000000) * 1000L;
			timeout = &ts;
		}
		pfd[1].fd = c->fd;
		pfd[1].events = (short)(POLLIN | (c->blocked ? POLLOUT : 0));
		pthread_mutex_unlock(&c->lock);
		if (ppoll(pfd, 2, timeout, NULL) > 0 && (pfd[0].revents & POLLIN))
			while (read(c->wake[0], drain, sizeof drain) == (ssize_t)sizeof drain)
				;
		if (pfd[1].fd >= 0 && (pfd[1].revents & (POLLIN | POLLHUP | POLLERR)) &&
		    !cache_read(c)) {
			pthread_mutex_lock(&c->lock);
			cache_disconnect_locked(c);
			continue;
		}
		pthread_mutex_lock(&c->lock);
	}
	cache_close_locked(c);
	pthread_mutex_unlock(&c->lock);
	return NULL;
}

/* A new cache for path with its reader thread; NULL when out of resources. */
static cbci_cache *
cache_new(const char *path)
{
	cbci_cache *c = calloc(1, sizeof *c);

	if (c == NULL)
		return NULL;
	c->fd = -1;
	snprintf(c->path, sizeof c->path, "%s", path);
	if (pthread_mutex_init(&c->lock, NULL) != 0) {
		free(c);
		return NULL;
	}
	if (pthread_cond_init(&c->synced, NULL) != 0) {
		pthread_mutex_destroy(&c->lock);
		free(c);
		return NULL;
	}
	if (pipe2(c->wake, O_CLOEXEC | O_NONBLOCK) != 0) {
		pthread_cond_destroy(&c->synced);
		pthread_mutex_destroy(&c->lock);
		free(c);
		return NULL;
	}
	if (pthread_create(&c->thread, NULL, cache_thread, c) != 0) {
		close(c->wake[0]);
		close(c->wake[1]);
		pthread_cond_destroy(&c->synced);
		pthread_mutex_destroy(&c->lock);
		free(c);
		return NULL;
	}
	return c;
}

cbci_cache *
cbci_cache_acquire(const char *path, cbc_error *err)
{
	cbci_cache *c;

	pthread_once(&cache_atfork_once, cache_atfork_install);
	pthread_mutex_lock(&cache_registry_lock);
	for (c = cache_registry; c != NULL; c = c->next)
		if (strcmp(c->path, path) == 0)
			break;
	if (c == NULL && (c = cache_new(path)) != NULL) {
		c->next = cache_registry;
		cache_registry = c;
	}
	if (c != NULL)
		c->refs++;
	pthread_mutex_unlock(&cache_registry_lock);
	if (c == NULL)
		cbci_fail(err, CBC_ENOMEM, "cannot start the watch cache for %s", path);
	return c;
}

void
cbci_cache_release(cbci_cache *c, unsigned generation)
{
	cbci_cache **pp;
	cbci_cache_entry *e, *tmp;

	if (c == NULL || generation != cbci_cache_generation())
		return; /* a parent's cache, abandoned at fork */
	pthread_mutex_lock(&cache_registry_lock);
	if (--c->refs > 0) {
		pthread_mutex_unlock(&cache_registry_lock);
		return;
	}
	for (pp = &cache_registry; *pp != NULL; pp = &(*pp)->next)
		if (*pp == c) {
			*pp = c->next;
			break;
		}
	pthread_mutex_unlock(&cache_registry_lock);
	pthread_mutex_lock(&c->lock);
	c->stop = true;
	pthread_mutex_unlock(&c->lock);
	cache_wake(c);
	pthread_join(c->thread, NULL);
	HASH_ITER (hh, c->entries, e, tmp) {
		HASH_DEL(c->entries, e);
		free(e);
	}
	close(c->wake[0]);
	close(c->wake[1]);
	pthread_cond_destroy(&c->synced);
	pthread_mutex_destroy(&c->lock);
	for (unsigned i = 0; i < CACHE_FOLDS_MAX; i++)
		free(c->folds[i].prefix);
	free(c->out);
	free(c->in);
	free(c);
}

cbci_cache_entry *
cbci_cache_watch(cbci_cache *c, const char *name)
{
	cbci_cache_entry *e;
	size_t len = strlen(name);

	pthread_mutex_lock(&c->lock);
	HASH_FIND(hh, c->entries, name, len, e);
	if (e == NULL && c->names >= CBC_CACHE_NAMES_MAX) {
		c->stats.names_full++;
	} else if (e == NULL && (e = calloc(1, sizeof *e + len + 1)) != NULL) {
		memcpy(e->name, name, len + 1);
		cache_hash_oom = 0;
		HASH_ADD(hh, c->entries, name[0], len, e);
		if (cache_hash_oom) {
			free(e);
			pthread_mutex_unlock(&c->lock);
			return NULL;
		}
		c->names++;
		if (c->fd >= 0 && !cache_queue_watch_locked(c, &e, 1))
			c->broken = true;
		cache_flush_locked(c);
		if (c->out_len > 0 || c->broken)
			cache_wake(c);
	}
	pthread_mutex_unlock(&c->lock);
	return e;
}

uint64_t
cbci_cache_seq(cbci_cache *c, const cbci_cache_entry *e)
{
	uint64_t seq;

	pthread_mutex_lock(&c->lock);
	seq = e->seq;
	pthread_mutex_unlock(&c->lock);
	return seq;
}

/* Does the circuit have a bulkhead (its snapshots carry in_flight, or
 * its policy max_concurrent) or a retry budget (protocol 3)? Then every
 * permit is cbd's. */
static bool
cache_limited(const cbci_cache_entry *e)
{
	const cbc_policy *p = &e->policy.policy;

	if (e->has_last && e->last.in_flight >= 0)
		return true;
	if (!p->known)
		return false;
	return p->max_concurrent > 0 ||
	    (p->source.retry_budget_percent != CBC_SOURCE_NONE && p->retry_budget_percent >= 0);
}

bool
cbci_cache_held_open(cbci_cache *c, const cbci_cache_entry *e)
{
	bool held;

	pthread_mutex_lock(&c->lock);
	held = e->held && e->hold_state == CBC_STATE_OPEN;
	pthread_mutex_unlock(&c->lock);
	return held;
}

cbci_cache_verdict
cbci_cache_decide(cbci_cache *c, const cbci_cache_entry *e, uint64_t *seen, cbc_snapshot *fresh,
    bool *has_fresh, int64_t *retry_after_ms, const cbci_cache_told *told)
{
	cbci_cache_verdict v = CBCI_CACHE_ASK;
	int64_t left = 0;

	pthread_mutex_lock(&c->lock);
	*has_fresh = e->seq != *seen;
	if (*has_fresh) {
		*fresh = e->last;
		*seen = e->seq;
	}
	if (!e->valid || c->fd < 0 || c->broken) {
		v = CBCI_CACHE_ASK;
	} else if (told != NULL && told->known && told->seq == e->seq && told->state != e->state) {
		/* cbd answered this breaker with another state since the entry
		 * was read (an uncached call tripped or closed it): ask until
		 * the event brings the entry up to it. */
		v = CBCI_CACHE_ASK;
	} else if (cache_limited(e)) {
		/* Protocol 3: a bulkhead ticket is never granted from a cache,
		 * and a retry budget counts every first attempt cbd sees. */
		v = CBCI_CACHE_ASK;
	} else if (e->held && e->hold_state == CBC_STATE_OPEN) {
		/* Held open: refused until the hold ends (the hold's own
		 * until, else the countdown cbd reported). */
		int64_t now = clock_realtime_ms();

		left = e->hold_until != CBC_TIME_NONE ? e->hold_until - now
						      : e->retry_after_ms - (now - e->received_at);
		v = left > 0 ? CBCI_CACHE_REFUSE : CBCI_CACHE_ASK;
		if (e->hold_until == CBC_TIME_NONE && left <= 0) {
			left = 1; /* held until released: still refused */
			v = CBCI_CACHE_REFUSE;
		}
	} else if (e->state == CBC_STATE_CLOSED) {
		v = CBCI_CACHE_PERMIT;
	} else if (e->state == CBC_STATE_OPEN) {
		int64_t now = clock_realtime_ms();

		left = e->opened_at != CBC_TIME_NONE && e->break_ms >= 0
		    ? e->opened_at + e->break_ms - now
		    : e->retry_after_ms - (now - e->received_at);
		v = left > 0 ? CBCI_CACHE_REFUSE : CBCI_CACHE_ASK;
	}
	if (v == CBCI_CACHE_PERMIT)
		c->stats.permitted++;
	else if (v == CBCI_CACHE_REFUSE)
		c->stats.refused_calls++;
	else
		c->stats.asked++;
	*retry_after_ms = left;
	pthread_mutex_unlock(&c->lock);
	return v;
}

/* cbci_cache_send with the lock held. */
static bool
cache_send_locked(cbci_cache *c, const char *line, size_t len, bool urgent)
{
	bool queued = false;

	/* A full output is waited out (bounded), never overtaken: an
	 * outcome through the store would reach cbd before those queued. */
	if (c->fd >= 0 && !c->broken && cache_wait_room_locked(c, len)) {
		/* (Open folds go before the line: not idle then.) */
		bool idle = c->out_len == 0 && c->nfolds == 0;
		int64_t now = clock_monotonic_coarse_ms() * 1000;
		/* Another success within the hot period: calls are flowing. */
		bool dense = !urgent && now - c->lazy_at < CACHE_HOT_US;
		/* Failures, and sparse successes while the reader sleeps (waking
		 * it would cost the caller more than the write), go now. */
		bool write_now = urgent || (c->cold && !dense);

		queued = cache_out_put(c, line, len); /* room: waited for above */
		if (queued && !urgent)
			c->lazy_at = now;
		if (queued && dense)
			c->dense_at = now;
		if (queued && write_now) {
			/* Written now, after whatever is queued (order kept). */
			cache_flush_locked(c);
			if (idle && c->broken) {
				/* cbd went away under us: the line was not
				 * written; the store reports it (and degrades
				 * as its policy says). */
				c->out_head = 0;
				c->out_len = 0;
				c->out_sent = 0;
				queued = false;
			}
		}
		if (queued)
			c->stats.noreply_lines++;
		/* Wake the reader: to reconnect, to wait for room, or to run
		 * its timer now that successes flow. */
		if (c->cold && (c->broken || c->blocked || (queued && dense))) {
			c->cold = false;
			cache_wake(c);
		}
	}
	if (!queued)
		c->stats.store_reports++;
	return queued;
}

bool
cbci_cache_latest(cbci_cache *c, const cbci_cache_entry *e, cbc_snapshot *out)
{
	bool has;

	pthread_mutex_lock(&c->lock);
	has = e->valid && e->has_last && c->fd >= 0 && !c->broken;
	if (has)
		*out = e->last;
	pthread_mutex_unlock(&c->lock);
	return has;
}

bool
cbci_cache_send(cbci_cache *c, const char *line, size_t len, bool urgent)
{
	bool queued;

	pthread_mutex_lock(&c->lock);
	queued = cache_send_locked(c, line, len, urgent);
	pthread_mutex_unlock(&c->lock);
	return queued;
}

bool
cbci_cache_report(cbci_cache *c, cbci_cache_entry *e, const char *line, size_t len,
    const char *prefix, size_t prefix_len, unsigned *hint, int64_t slow_ms, bool failure,
    int64_t duration_ms, bool *could_trip)
{
	bool queued = false;

	pthread_mutex_lock(&c->lock);
	*could_trip = own_count(&e->own, failure, duration_ms);
	if (!*could_trip && !failure &&
	    cache_fold_locked(c, e, prefix, prefix_len, hint, slow_ms, duration_ms))
		queued = true;
	else if (!*could_trip)
		queued = cache_send_locked(c, line, len, failure);
	pthread_mutex_unlock(&c->lock);
	return queued;
}

bool
cbci_cache_sync(cbci_cache *c, const cbci_cache_entry *e, const char *line, size_t len,
    cbc_state *state)
{
	char tail[sizeof SYNC_ID_PREFIX + 32];
	struct timespec until;
	uint64_t n;
	size_t tail_len;
	char *buf;
	bool sent = false;
	int rc = 0;

	buf = malloc(len + sizeof tail);
	if (buf == NULL)
		return false;
	until = cache_deadline(SYNC_TIMEOUT_MS);
	pthread_mutex_lock(&c->lock);
	/* Room first: the wait releases the lock, and the number is taken
	 * after it (the lock then held until the line is queued). */
	if (c->fd >= 0 && !c->broken && cache_wait_room_locked(c, len + sizeof tail)) {
		n = c->sync_sent + 1;
		tail_len = (size_t)snprintf(tail, sizeof tail, ",\"id\":\"%s%llu\"}\n",
		    SYNC_ID_PREFIX, (unsigned long long)n);
		memcpy(buf, line, len);
		memcpy(buf + len, tail, tail_len);
		if (cache_send_locked(c, buf, len + tail_len, true)) {
			c->sync_sent = n;
			c->stats.synced++;
			sent = true;
			while (c->sync_done < n && rc == 0)
				rc = pthread_cond_timedwait(&c->synced, &c->lock, &until);
			if (c->sync_done < n)
				c->stats.sync_timeouts++;
			else if (e->valid)
				*state = e->state;
		}
	}
	pthread_mutex_unlock(&c->lock);
	free(buf);
	return sent;
}

void
cbci_cache_stats(cbci_cache *c, cbc_cache_stats *out)
{
	pthread_mutex_lock(&c->lock);
	*out = c->stats;
	out->live = c->fd >= 0 && !c->broken && c->answered;
	out->folding = c->counts_ok && c->fd >= 0 && !c->broken;
	out->names = c->names;
	pthread_mutex_unlock(&c->lock);
}
