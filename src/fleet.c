/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fleet.c — fleet mode's link to Redis (see fleet.h): two hiredis async
 * connections on cbd's event loop, one for the circuit script and one
 * subscribed to the fleet's event channel; loading the script (SCRIPT
 * LOAD, again after NOSCRIPT); the health of the link; the timeout that
 * answers a request from this host's copy when Redis is slow or gone.
 *
 * Redis is taken for up (at start, after an outage) only once a probe
 * script that writes has run with EVALSHA; an error reply Redis gives
 * instead of running the circuit script (NOPERM, READONLY, OOM, ...)
 * is an outage like a lost connection.
 *
 * Redis losing the fleet's data (restarted empty, FLUSHALL, a failover to
 * an empty replica) is found by the epoch: a random value in the key
 * PREFIXepoch, which the probe creates when it is missing. The circuit
 * script is sent the epoch this cbd knows and refuses to act (NOEPOCH)
 * when Redis holds another or none, so nothing is answered from an
 * emptied Redis: the call is answered locally, Redis is away, and the
 * probe that takes it for up again finds the epoch new, and the recovery
 * re-seeds Redis from this host's copy (fleet-sync.c). The probe runs
 * every FLEET_RECONNECT_MS too (a host with no traffic finds the loss),
 * and a Redis whose run_id changed (restarted, or another server after a
 * failover, which may miss the last writes) is re-seeded as well.
 *
 * With redis = sentinel://..., the sentinels are asked for the master
 * (fleet-sentinel.c, each in turn) before every connection; the master's
 * ROLE is checked; a +switch-master from the sentinel watched answers the
 * calls the old master had from this host's copy (their fate is unknown),
 * and connects to the new master at once (FLEET_SWITCHING): requests not
 * sent yet, and new ones, wait for it (op-fleet.c's queue and folds: no
 * room) until it is probed and re-seeded, or redis_timeout_ms after the
 * switch (then Redis is away, as after a timeout).
 *
 * Calls are answered in the order they were sent (Redis answers one
 * connection in order), so they wait in one FIFO and one timer watches
 * the oldest. When the oldest is older than redis_timeout_ms, Redis is
 * taken for lost: every waiting call is answered locally at once, both
 * connections are dropped and cbd reconnects every FLEET_RECONNECT_MS.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include <event2/event.h>
#include <hiredis/adapters/libevent.h>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>

#include "clock.h"
#include "conf.h"
#include "fleet-args.h"
#include "fleet-sentinel.h"
#include "fleet.h"
#include "log-limit.h"
#include "log.h"
#include "daemon.h"

/* The script's text (src/fleet.lua, built into fleet-script.c). */
extern const char fleet_script_text[];

/* Run before Redis is taken for up (at start and after an outage), and
 * every FLEET_RECONNECT_MS while it is: the way the circuit script is run
 * (EVALSHA) and a write, so that a Redis that would refuse the circuit
 * script (an ACL user without EVALSHA, a replica's READONLY, maxmemory's
 * OOM) is found away, not up. It answers the fleet's epoch (KEYS[2]),
 * made from ARGV[2] when Redis has none (a new fleet, or lost data). */
static const char probe_script_text[] = "redis.call('SET', KEYS[1], ARGV[1], 'PX', 60000) "
					"local e = redis.call('GET', KEYS[2]) "
					"if e then return e end "
					"redis.call('SET', KEYS[2], ARGV[2]) "
					"return ARGV[2]";

/* Why a Redis whose epoch is gone or new is re-seeded. */
static const char lost_data_why[] =
    "lost the fleet's data (its epoch key is gone or new: restarted empty, flushed, or "
    "failed over to an empty replica)";

struct fleet_call {
	fleet_call *prev, *next; /* the FIFO of calls Redis has not answered */
	fleet_done_fn done; /* NULL: answered already, or the caller is gone */
	void *arg;
	int64_t sent_ms; /* monotonic */
	char op[16];
	char name[CT_NAME_MAX + 1];
	/* The script's arguments after op and channel (fleet-args.h),
	 * kept to send again after NOSCRIPT. */
	char *argv[FLEET_ARGS];
	bool resent;
	bool queued; /* waits for the first SCRIPT LOAD (not sent yet) */
};

static struct {
	fleet_health health;
	conf_redis_address conf_addr; /* the redis key */
	conf_redis_address addr; /* the server in use (Sentinel: the master) */
	char addr_text[160];
	char epoch[FLEET_EPOCH_SIZE]; /* the fleet's epoch as last seen; "": none yet */
	char run_id[FLEET_RUN_ID_SIZE]; /* the server's, as last seen; "": unknown */
	char new_run_id[FLEET_RUN_ID_SIZE]; /* the new connection's, until the probe */
	bool lost_data; /* the circuit script answered NOEPOCH */
	struct event *heartbeat_ev; /* the probe while up, every FLEET_RECONNECT_MS */
	bool heartbeat_pending;
	bool hold_requests; /* fleet_hold_requests: a re-seed under way */
	struct event *switch_ev; /* FLEET_SWITCHING's bound (redis_timeout_ms) */
	bool addr_fresh; /* Sentinel just named the master: connect to it */
	bool sentinel_logged; /* no sentinel answered: logged this outage */
	char origin[FLEET_ORIGIN_SIZE];
	char channel[FLEET_KEY_MAX];
	char *auth_user; /* NULL: AUTH with the password alone */
	char *auth_password; /* NULL: no AUTH */
	redisAsyncContext *main; /* script calls */
	redisAsyncContext *sub; /* SUBSCRIBE */
	bool script_ready; /* SCRIPT LOAD answered on main, and the probe */
	char sha[41];
	char probe_sha[41];
	fleet_call *head, *tail;
	unsigned inflight; /* calls in the FIFO */
	fleet_room_fn on_room;
	/* Script calls made so far (fleet_seq), and its value when the
	 * subscription to the event channel was last confirmed. */
	uint64_t seq;
	uint64_t events_mark;
	bool events_live; /* the current event connection's SUBSCRIBE confirmed */
	/* This host's ping through the event channel (every heartbeat): one
	 * not back within redis_timeout_ms makes every copy stale until it is
	 * (an event connection that hangs without closing). */
	bool ping_out;
	int64_t ping_sent_ms; /* monotonic */
	uint64_t ping_seq;
	struct event *timeout_ev;
	struct event *reconnect_ev;
	int64_t outage_since; /* realtime ms; 0: none */
	fleet_event_fn on_event;
	fleet_recover_fn on_recover;
	fleet_stats stats;
} fleet;

static void fleet_connect(void);

const char *
fleet_health_name(fleet_health health)
{
	switch (health) {
	case FLEET_OFF:
		return "off";
	case FLEET_CONNECTING:
		return "connecting";
	case FLEET_UP:
		return "up";
	case FLEET_SWITCHING:
		return "switching";
	case FLEET_DEGRADED:
		return "degraded";
	}
	return "unknown";
}

fleet_health
fleet_state(void)
{
	return fleet.health;
}

/* At start: is the first connection under way (Sentinel: being asked for
 * the master)? */
static bool
connecting(void)
{
	return fleet.main != NULL || fleet_sentinel_asking();
}

bool
fleet_up(void)
{
	/* At start, requests wait (up to redis_timeout_ms) for the first
	 * connection rather than be answered by a copy Redis never sees. */
	return fleet.health == FLEET_UP || fleet.health == FLEET_SWITCHING ||
	    (fleet.health == FLEET_CONNECTING && connecting());
}

bool
fleet_writes_back(void)
{
	return !fleet_up() || fleet.health == FLEET_SWITCHING;
}

bool
fleet_enabled(void)
{
	return fleet.health != FLEET_OFF;
}

const fleet_stats *
fleet_counters(void)
{
	return &fleet.stats;
}

bool
fleet_has_room(void)
{
	return fleet.inflight < FLEET_INFLIGHT_MAX && !fleet.hold_requests &&
	    fleet.health != FLEET_SWITCHING;
}

static void room_tell(void);

void
fleet_hold_requests(bool hold)
{
	fleet.hold_requests = hold;
	if (!hold)
		room_tell();
}

void
fleet_set_room_hook(fleet_room_fn fn)
{
	fleet.on_room = fn;
}

void
fleet_count_queued(void)
{
	fleet.stats.queued++;
}

const char *
fleet_address(void)
{
	return fleet.addr_text;
}

const char *
fleet_origin(void)
{
	return fleet.origin;
}

void
fleet_count_unavailable(void)
{
	fleet.stats.unavailable++;
}

void
fleet_count_copy_answer(void)
{
	fleet.stats.copy_answers++;
}

void
fleet_count_fold(size_t n, bool full)
{
	fleet.stats.folds++;
	fleet.stats.coalesced += n;
	fleet.stats.fold_full += full;
}

uint64_t
fleet_seq(void)
{
	return fleet.seq;
}

bool
fleet_events_live(void)
{
	return fleet.events_live && fleet.sub != NULL;
}

bool
fleet_events_fresh(uint64_t stamp)
{
	return fleet.health == FLEET_UP && fleet.events_live && fleet.sub != NULL &&
	    !fleet.hold_requests && stamp >= fleet.events_mark &&
	    (!fleet.ping_out ||
		clock_monotonic_ms() - fleet.ping_sent_ms <= cbd.conf.redis_timeout_ms);
}

/* --- the FIFO of waiting calls --- */

static void
fifo_push(fleet_call *call)
{
	call->next = NULL;
	call->prev = fleet.tail;
	if (fleet.tail != NULL)
		fleet.tail->next = call;
	else
		fleet.head = call;
	fleet.tail = call;
	fleet.inflight++;
}

static void
fifo_unlink(fleet_call *call)
{
	if (call->prev != NULL)
		call->prev->next = call->next;
	else
		fleet.head = call->next;
	if (call->next != NULL)
		call->next->prev = call->prev;
	else
		fleet.tail = call->prev;
	call->prev = call->next = NULL;
	fleet.inflight--;
}

/* Room for more calls may have come: tell the one waiting for it. */
static void
room_tell(void)
{
	if (fleet.on_room != NULL && (fleet_has_room() || !fleet_up()))
		fleet.on_room();
}

static void
call_free(fleet_call *call)
{
	fleet_args_free(call->argv);
	free(call);
}

/* Run call's done (once). */
static void
call_answer(fleet_call *call, const json_t *reply)
{
	fleet_done_fn done = call->done;

	call->done = NULL;
	if (done != NULL)
		done(reply, call->arg);
}

/* Answer every waiting call with NULL (this host's copy answers them),
 * in order, before anything else can be sent. Calls hiredis has are
 * freed by its callbacks when the connection is freed; calls never handed
 * to it (waiting for the script) are freed here. */
static void
calls_answer_all(void)
{
	for (fleet_call *c = fleet.head; c != NULL; c = c->next)
		call_answer(c, NULL);
	for (fleet_call *c = fleet.head, *next; c != NULL; c = next) {
		next = c->next;
		if (c->queued) {
			fifo_unlink(c);
			call_free(c);
		}
	}
}

/* Answer every waiting call locally and drop both connections. hiredis
 * hands every call it has a NULL reply (its callback frees it) and runs
 * the disconnect callbacks, which find the pointers already NULL. */
static void
contexts_free(void)
{
	redisAsyncContext *main = fleet.main, *sub = fleet.sub;

	calls_answer_all();
	fleet.events_live = false;
	fleet.ping_out = false;
	fleet.main = fleet.sub = NULL;
	if (main != NULL)
		redisAsyncFree(main);
	if (sub != NULL)
		redisAsyncFree(sub);
}

/* Arm the timer for the oldest waiting call. */
static void
timeout_schedule(void)
{
	int64_t due, now = clock_monotonic_ms();
	struct timeval tv;

	if (fleet.head == NULL) {
		evtimer_del(fleet.timeout_ev);
		return;
	}
	due = fleet.head->sent_ms + cbd.conf.redis_timeout_ms - now;
	if (due < 0)
		due = 0;
	tv.tv_sec = (time_t)(due / 1000);
	tv.tv_usec = (suseconds_t)(due % 1000) * 1000;
	evtimer_add(fleet.timeout_ev, &tv);
}

/* --- health --- */

static void
reconnect_schedule(void)
{
	struct timeval tv = { FLEET_RECONNECT_MS / 1000, (FLEET_RECONNECT_MS % 1000) * 1000 };

	if (!evtimer_pending(fleet.reconnect_ev, NULL))
		evtimer_add(fleet.reconnect_ev, &tv);
}

/* Redis is lost (why) since the call sent at oldest_ms (monotonic; the
 * outage's start; -1: no call waited, it starts now): answer every
 * waiting call locally, drop both connections, reconnect later. */
static void
fleet_lose_since(const char *why, int64_t oldest_ms)
{
	if (fleet.health == FLEET_UP || fleet.health == FLEET_CONNECTING ||
	    fleet.health == FLEET_SWITCHING) {
		/* At start, what this host answers counts from the start;
		 * after a switch, from the switch (switch_begin). */
		if (fleet.health == FLEET_UP) {
			/* From the oldest call Redis did not answer: it is answered
			 * here, and what it opens is written back (FLEET_OUTAGE_SLACK_MS
			 * earlier: its request's clock was read before it was sent). */
			fleet.outage_since = clock_realtime_ms();
			if (oldest_ms >= 0)
				fleet.outage_since -=
				    clock_monotonic_ms() - oldest_ms + FLEET_OUTAGE_SLACK_MS;
		}
		fleet.health = FLEET_DEGRADED;
		fleet.stats.degraded++;
		log_warning("fleet: redis %s: %s; answering from this host's copy of each circuit "
			    "until it is back",
		    cbd.conf.redis, why);
	}
	fleet.script_ready = false;
	contexts_free();
	evtimer_del(fleet.timeout_ev);
	evtimer_del(fleet.switch_ev);
	reconnect_schedule();
	/* Requests waiting for room are answered here now. */
	room_tell();
}

/* Redis is lost (why), since the oldest call it did not answer. */
static void
fleet_lose(const char *why)
{
	fleet_lose_since(why, fleet.head != NULL ? fleet.head->sent_ms : -1);
}

/* Connect again at once, not after FLEET_RECONNECT_MS (Redis is there,
 * but lost its data or is another server). */
static void
reconnect_now(void)
{
	evtimer_del(fleet.reconnect_ev);
	fleet_connect();
}

static void
timeout_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	(void)arg;
	if (fleet.head == NULL)
		return;
	/* Answers Redis sent while cbd was busy elsewhere are not late: read
	 * what the socket holds before judging. */
	if (fleet.main != NULL &&
	    clock_monotonic_ms() - fleet.head->sent_ms >= cbd.conf.redis_timeout_ms)
		redisAsyncHandleRead(fleet.main);
	if (fleet.head == NULL) {
		evtimer_del(fleet.timeout_ev);
		return;
	}
	if (clock_monotonic_ms() - fleet.head->sent_ms >= cbd.conf.redis_timeout_ms) {
		for (fleet_call *c = fleet.head; c != NULL; c = c->next)
			if (c->done != NULL)
				fleet.stats.timeouts++;
		fleet_lose("did not answer within redis_timeout_ms");
		return;
	}
	timeout_schedule();
}

/* The new master was not up within redis_timeout_ms of the switch:
 * Redis is away; what waited for it is answered from this host's copy. */
static void
switch_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	(void)arg;
	if (fleet.health != FLEET_SWITCHING)
		return;
	fleet.stats.switch_timeouts++;
	fleet_lose_since("the new master was not up within redis_timeout_ms of the switch", -1);
}

static void
reconnect_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	(void)arg;
	fleet_connect();
}

/* --- the script connection --- */

static void script_reply_cb(redisAsyncContext *ac, void *reply, void *privdata);

/* EVALSHA call on the script connection. False when it cannot be queued. */
static bool
script_queue(fleet_call *call)
{
	char keys[4][FLEET_KEY_MAX];
	const char *argv[10 + FLEET_ARGS];
	const char *prefix = cbd.conf.redis_prefix;

	snprintf(keys[0], sizeof keys[0], "%s{%s}", prefix, call->name);
	snprintf(keys[1], sizeof keys[1], "%s{%s}:slots", prefix, call->name);
	snprintf(keys[2], sizeof keys[2], "%s{%s}:window", prefix, call->name);
	snprintf(keys[3], sizeof keys[3], "%sepoch", prefix);
	if (!call->queued) {
		call->sent_ms = clock_monotonic_ms();
		if (!fleet.script_ready) {
			/* Sent once the script is loaded (script_load_cb). */
			call->queued = true;
			fifo_push(call);
			if (!evtimer_pending(fleet.timeout_ev, NULL))
				timeout_schedule();
			return true;
		}
		fifo_push(call);
	}
	call->queued = false;
	argv[0] = "EVALSHA";
	argv[1] = fleet.sha;
	argv[2] = "4";
	argv[3] = keys[0];
	argv[4] = keys[1];
	argv[5] = keys[2];
	argv[6] = keys[3];
	argv[7] = call->op;
	argv[8] = fleet.channel;
	for (int i = 0; i < FLEET_ARGS; i++)
		argv[9 + i] = call->argv[i];
	/* The script acts only on a Redis holding this epoch (NOEPOCH). */
	argv[9 + FLEET_ARGS] = fleet.epoch;
	if (redisAsyncCommandArgv(fleet.main, script_reply_cb, call, 10 + FLEET_ARGS, argv, NULL) !=
	    REDIS_OK) {
		fifo_unlink(call);
		return false;
	}
	fleet.stats.calls++;
	if (!evtimer_pending(fleet.timeout_ev, NULL))
		timeout_schedule();
	return true;
}

static void script_load_cb(redisAsyncContext *ac, void *reply, void *privdata);
static void probe_load_cb(redisAsyncContext *ac, void *reply, void *privdata);
static void probe_cb(redisAsyncContext *ac, void *reply, void *privdata);

/* Is r Redis refusing to run a script, rather than the script's own
 * error ("ERR ..." from fleet.lua or the Lua runtime) or NOSCRIPT? */
static bool
fleet_refuses(const redisReply *r)
{
	return r != NULL && r->type == REDIS_REPLY_ERROR && strncmp(r->str, "ERR", 3) != 0 &&
	    strncmp(r->str, "NOSCRIPT", 8) != 0;
}

static void
script_reply_cb(redisAsyncContext *ac, void *reply, void *privdata)
{
	fleet_call *call = privdata;
	redisReply *r = reply;
	json_error_t jerr;
	json_t *doc = NULL;

	(void)ac;
	fifo_unlink(call);
	if (r == NULL || call->done == NULL) {
		call_answer(call, NULL);
		call_free(call);
		room_tell();
		return;
	}
	if (r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOSCRIPT", 8) == 0 && !call->resent &&
	    fleet.main != NULL) {
		/* Redis lost the script (SCRIPT FLUSH, a failover): load it
		 * again; this call follows the load on the same connection. */
		fleet.stats.noscript++;
		call->resent = true;
		if (redisAsyncCommand(fleet.main, script_load_cb, NULL, "SCRIPT LOAD %s",
			fleet_script_text) == REDIS_OK &&
		    script_queue(call)) {
			timeout_schedule();
			return;
		}
	}
	if (fleet_refuses(r)) {
		/* Redis refuses to run the script (NOPERM, READONLY, OOM,
		 * ...): it is away until it runs it again (fleet_lose answers
		 * every waiting call locally; logged once per outage). */
		char why[FLEET_WHY_MAX];

		fleet.stats.errors++;
		int64_t sent_ms = call->sent_ms;

		if (strncmp(r->str, "NOEPOCH", 7) == 0) {
			/* Nothing ran: Redis is re-seeded before it answers. */
			fleet.lost_data = true;
			snprintf(why, sizeof why, "%s", lost_data_why);
		} else {
			snprintf(why, sizeof why,
			    "answers the circuit script with an error (%.200s)", r->str);
		}
		call_answer(call, NULL);
		call_free(call);
		fleet_lose_since(why, sent_ms);
		if (fleet.lost_data)
			reconnect_now(); /* Redis is there: re-seed it */
		return;
	}
	if (r->type == REDIS_REPLY_STRING)
		doc = json_loadb(r->str, r->len, 0, &jerr);
	if (doc == NULL) {
		fleet.stats.errors++;
		if (log_limit_allow_kind(LOG_LIMIT_FLEET_SCRIPT, ""))
			log_warning("fleet: the circuit script failed on %s for circuit of %zu "
				    "bytes: "
				    "%.200s",
			    call->op, strlen(call->name),
			    r->type == REDIS_REPLY_ERROR ? r->str : "a reply that is not JSON");
	}
	call_answer(call, doc);
	json_decref(doc);
	call_free(call);
	timeout_schedule();
	room_tell();
}

fleet_call *
fleet_call_script(const char *op, const char *name, json_t *args, fleet_done_fn done, void *arg)
{
	fleet_call *call;
	bool ready = fleet.health == FLEET_CONNECTING ? connecting()
	    : fleet.health == FLEET_SWITCHING         ? fleet.main != NULL
						      : fleet.main != NULL && fleet.script_ready;

	if (!ready || strlen(op) >= sizeof call->op || strlen(name) > CT_NAME_MAX)
		return NULL;
	call = calloc(1, sizeof *call);
	if (call == NULL)
		return NULL;
	snprintf(call->op, sizeof call->op, "%s", op);
	snprintf(call->name, sizeof call->name, "%s", name);
	if (!fleet_args_make(name, fleet.origin, args, call->argv) || !script_queue(call)) {
		call_free(call);
		return NULL;
	}
	call->done = done;
	call->arg = arg;
	fleet.seq++;
	return call;
}

void
fleet_call_cancel(fleet_call *call)
{
	if (call != NULL)
		call->done = NULL;
}

/* A SCRIPT LOAD reply: its sha into sha (41 bytes), else Redis is lost
 * with the reason why. */
static bool
script_sha_take(const redisReply *r, char *sha, const char *why)
{
	if (r->type != REDIS_REPLY_STRING || r->len != 40) {
		log_error("fleet: redis %s: SCRIPT LOAD failed: %.200s", cbd.conf.redis,
		    r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
		fleet_lose(why);
		return false;
	}
	memcpy(sha, r->str, 40);
	sha[40] = '\0';
	return true;
}

static void
script_load_cb(redisAsyncContext *ac, void *reply, void *privdata)
{
	redisReply *r = reply;
	bool was_up = fleet.health == FLEET_UP;

	(void)privdata;
	if (r == NULL || ac != fleet.main ||
	    !script_sha_take(r, fleet.sha, "cannot load the circuit script"))
		return;
	if (was_up)
		return; /* reloaded after NOSCRIPT */
	/* Not up before the probe ran (probe_load_cb, probe_cb). */
	if (redisAsyncCommand(fleet.main, probe_load_cb, NULL, "SCRIPT LOAD %s",
		probe_script_text) != REDIS_OK)
		fleet_lose("cannot load the probe script");
}

/* Random 64 bits in hex (an epoch). */
static void
random_hex(char out[FLEET_EPOCH_SIZE])
{
	uint64_t id;

	if (getrandom(&id, sizeof id, 0) != (ssize_t)sizeof id)
		id = (uint64_t)clock_monotonic_us() ^ ((uint64_t)getpid() << 32) ^
		    (uint64_t)clock_realtime_ms();
	snprintf(out, FLEET_EPOCH_SIZE, "%016" PRIx64, id);
}

/* Run the probe script on the script connection (cb gets its reply). */
static bool
probe_send(redisCallbackFn *cb)
{
	char key[FLEET_KEY_MAX], epoch_key[FLEET_KEY_MAX], fresh[FLEET_EPOCH_SIZE];

	snprintf(key, sizeof key, "%sprobe:%s", cbd.conf.redis_prefix, fleet.origin);
	snprintf(epoch_key, sizeof epoch_key, "%sepoch", cbd.conf.redis_prefix);
	random_hex(fresh);
	return redisAsyncCommand(fleet.main, cb, NULL, "EVALSHA %s 2 %s %s %s %s", fleet.probe_sha,
		   key, epoch_key, fleet.origin, fresh) == REDIS_OK;
}

/* The probe script is loaded: run it. */
static void
probe_load_cb(redisAsyncContext *ac, void *reply, void *privdata)
{
	redisReply *r = reply;

	(void)privdata;
	if (r == NULL || ac != fleet.main ||
	    !script_sha_take(r, fleet.probe_sha, "cannot load the probe script"))
		return;
	if (!probe_send(probe_cb))
		fleet_lose("cannot run the probe script");
}

/* The epoch a probe answered (r), else Redis is lost. */
static const char *
probe_epoch(const redisReply *r)
{
	char why[FLEET_WHY_MAX];

	if (r->type == REDIS_REPLY_STRING && r->len > 0 && r->len < FLEET_EPOCH_SIZE)
		return r->str;
	fleet.stats.errors++;
	snprintf(why, sizeof why, "answers a script with an error (%.200s)",
	    r->type == REDIS_REPLY_ERROR ? r->str : "an unexpected reply");
	fleet_lose(why);
	return NULL;
}

/* The probe ran: Redis runs scripts that write; it is up. Before it is,
 * is it the server with the fleet's data it was? */
static void
probe_cb(redisAsyncContext *ac, void *reply, void *privdata)
{
	redisReply *r = reply;
	bool was_up = fleet.health == FLEET_UP;
	const char *epoch, *reseed = NULL;

	(void)privdata;
	if (r == NULL || ac != fleet.main || (epoch = probe_epoch(r)) == NULL)
		return;
	fleet.script_ready = true;
	if (was_up)
		return;
	if (fleet.lost_data || (fleet.epoch[0] != '\0' && strcmp(fleet.epoch, epoch) != 0)) {
		fleet.stats.data_lost++;
		reseed = lost_data_why;
	} else if (fleet.run_id[0] != '\0' && fleet.new_run_id[0] != '\0' &&
	    strcmp(fleet.run_id, fleet.new_run_id) != 0) {
		reseed = "is another server than before (restarted, or failed over: it may miss "
			 "the last writes)";
	}
	snprintf(fleet.epoch, sizeof fleet.epoch, "%s", epoch);
	if (reseed == lost_data_why) {
		/* Tell the other cbds at once: each re-seeds what it knows
		 * before a request finds the circuit missing in Redis. */
		char note[128];

		snprintf(note, sizeof note, "{\"origin\":\"%s\",\"epoch\":\"%s\"}", fleet.origin,
		    fleet.epoch);
		redisAsyncCommand(fleet.main, NULL, NULL, "PUBLISH %s %s", fleet.channel, note);
	}
	if (fleet.new_run_id[0] != '\0')
		memcpy(fleet.run_id, fleet.new_run_id, sizeof fleet.run_id);
	fleet.lost_data = false;
	/* Requests that waited for the first connection go first, in order. */
	for (fleet_call *c = fleet.head; c != NULL;) {
		fleet_call *next = c->next;

		if (c->queued && !script_queue(c)) {
			fifo_unlink(c);
			call_answer(c, NULL);
			call_free(c);
		}
		c = next;
	}
	/* Write back what changed while Redis was away (re-seed it, when it
	 * lost the fleet's data) before any request reaches it: on this
	 * connection, in order. */
	if (fleet.on_recover != NULL && (fleet.outage_since != 0 || reseed != NULL))
		fleet.on_recover(fleet.outage_since != 0 ? fleet.outage_since : clock_realtime_ms(),
		    reseed);
	if (fleet.health == FLEET_DEGRADED)
		log_info("fleet: redis %s%s%s is back; circuits are shared again", cbd.conf.redis,
		    fleet.conf_addr.sentinels > 0 ? ", master " : "",
		    fleet.conf_addr.sentinels > 0 ? fleet.addr_text : "");
	else if (fleet.health == FLEET_SWITCHING)
		log_info("fleet: redis %s, new master %s, is up; requests that waited for it go "
			 "to it now",
		    cbd.conf.redis, fleet.addr_text);
	else
		log_info("fleet: redis %s%s%s reached; circuits are shared through it",
		    cbd.conf.redis, fleet.conf_addr.sentinels > 0 ? ", master " : "",
		    fleet.conf_addr.sentinels > 0 ? fleet.addr_text : "");
	fleet.health = FLEET_UP;
	fleet.outage_since = 0;
	evtimer_del(fleet.switch_ev);
	/* Requests that waited for room (the switch) go now, unless a
	 * re-seed holds them (they go when it ends). */
	room_tell();
}

/* --- the probe while up --- */

static void
heartbeat_reply_cb(redisAsyncContext *ac, void *reply, void *privdata)
{
	redisReply *r = reply;
	const char *epoch;

	(void)privdata;
	fleet.heartbeat_pending = false;
	if (r == NULL || ac != fleet.main)
		return;
	if (r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOSCRIPT", 8) == 0) {
		/* Redis lost its scripts (SCRIPT FLUSH): the circuit script
		 * reloads itself; the probe's is loaded again here. */
		fleet.stats.noscript++;
		if (redisAsyncCommand(fleet.main, probe_load_cb, NULL, "SCRIPT LOAD %s",
			probe_script_text) != REDIS_OK)
			fleet_lose("cannot load the probe script");
		return;
	}
	if ((epoch = probe_epoch(r)) == NULL)
		return;
	if (fleet.epoch[0] != '\0' && strcmp(fleet.epoch, epoch) != 0) {
		fleet.lost_data = true;
		fleet_lose(lost_data_why);
		reconnect_now(); /* Redis is there: re-seed it */
	}
}

static void
heartbeat_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	(void)arg;
	if (fleet.conf_addr.sentinels > 0 && fleet.health == FLEET_UP)
		fleet_sentinel_watch();
	if (fleet.health == FLEET_UP && fleet.main != NULL && fleet.events_live &&
	    !fleet.ping_out) {
		/* Through the event channel and back (fleet_events_fresh). */
		char note[96];

		snprintf(note, sizeof note, "{\"origin\":\"%s\",\"ping\":%" PRIu64 "}",
		    fleet.origin, ++fleet.ping_seq);
		if (redisAsyncCommand(fleet.main, NULL, NULL, "PUBLISH %s %s", fleet.channel,
			note) == REDIS_OK) {
			fleet.ping_out = true;
			fleet.ping_sent_ms = clock_monotonic_ms();
		}
	}
	if (fleet.health != FLEET_UP || !fleet.script_ready || fleet.main == NULL ||
	    fleet.heartbeat_pending)
		return;
	fleet.heartbeat_pending = probe_send(heartbeat_reply_cb);
}

/* ROLE on a new connection: a replica (a stale address, a sentinel not
 * yet told of a failover) is not used. An error (ROLE not allowed to
 * this user) leaves it to the probe's write. */
static void
role_cb(redisAsyncContext *ac, void *reply, void *privdata)
{
	redisReply *r = reply;
	char why[FLEET_WHY_MAX];

	(void)privdata;
	if (r == NULL || ac != fleet.main || r->type != REDIS_REPLY_ARRAY || r->elements < 1 ||
	    r->element[0]->type != REDIS_REPLY_STRING || strcmp(r->element[0]->str, "master") == 0)
		return;
	fleet.stats.errors++;
	snprintf(why, sizeof why, "is not a master (ROLE %.40s)", r->element[0]->str);
	fleet_lose(why);
}

/* INFO server on a new connection: the server's run_id. */
static void
info_cb(redisAsyncContext *ac, void *reply, void *privdata)
{
	redisReply *r = reply;
	const char *at;

	(void)privdata;
	if (r == NULL || ac != fleet.main)
		return;
	fleet.new_run_id[0] = '\0';
	if (r->type != REDIS_REPLY_STRING)
		return;
	at = strstr(r->str, "run_id:");
	if (at != NULL) {
		size_t len = strspn(at + 7, "0123456789abcdefABCDEF");

		if (len > 0 && len < sizeof fleet.new_run_id) {
			memcpy(fleet.new_run_id, at + 7, len);
			fleet.new_run_id[len] = '\0';
		}
	}
}

static void
auth_cb(redisAsyncContext *ac, void *reply, void *privdata)
{
	redisReply *r = reply;

	(void)privdata;
	if (r == NULL || ac != fleet.main)
		return;
	if (r->type == REDIS_REPLY_ERROR) {
		log_error("fleet: redis %s: AUTH failed: %.200s", cbd.conf.redis, r->str);
		fleet_lose("AUTH failed");
	}
}

/* --- the event connection --- */

static void
event_cb(redisAsyncContext *ac, void *reply, void *privdata)
{
	redisReply *r = reply;
	const json_t *origin;
	json_error_t jerr;
	json_t *event;

	(void)privdata;
	if (r == NULL || ac != fleet.sub || r->type != REDIS_REPLY_ARRAY || r->elements != 3 ||
	    r->element[0]->type != REDIS_REPLY_STRING)
		return;
	if (strcmp(r->element[0]->str, "subscribe") == 0) {
		/* Redis ran the SUBSCRIBE: every change a script call made
		 * after now reaches this host as an event (fleet_events_fresh). */
		fleet.events_live = true;
		fleet.events_mark = fleet.seq;
		return;
	}
	if (strcmp(r->element[0]->str, "message") != 0 || r->element[2]->type != REDIS_REPLY_STRING)
		return;
	event = json_loadb(r->element[2]->str, r->element[2]->len, 0, &jerr);
	origin = json_object_get(event, "origin");
	if (!json_is_object(event) || !json_is_string(origin)) {
		fleet.stats.events_bad++;
		json_decref(event);
		return;
	}
	/* A ping (heartbeat_cb): this host's is back; another host's is
	 * nothing here (not counted). */
	if (json_is_integer(json_object_get(event, "ping"))) {
		if (strcmp(json_string_value(origin), fleet.origin) == 0 &&
		    (uint64_t)json_integer_value(json_object_get(event, "ping")) == fleet.ping_seq)
			fleet.ping_out = false;
		json_decref(event);
		return;
	}
	/* Another cbd found Redis had lost the fleet's data: probe now rather
	 * than at the next heartbeat (no event: not counted). */
	if (json_is_string(json_object_get(event, "epoch"))) {
		if (strcmp(json_string_value(json_object_get(event, "epoch")), fleet.epoch) != 0)
			heartbeat_cb(-1, 0, NULL);
		json_decref(event);
		return;
	}
	/* This cbd applied its own changes when their calls returned. */
	if (strcmp(json_string_value(origin), fleet.origin) != 0 && fleet.on_event != NULL) {
		fleet.stats.events_in++;
		fleet.on_event(event);
	}
	json_decref(event);
}

static void
connect_cb(const redisAsyncContext *ac, int status)
{
	if (status == REDIS_OK)
		return;
	/* hiredis frees ac after this callback. */
	if (ac == fleet.main)
		fleet.main = NULL;
	if (ac == fleet.sub)
		fleet.sub = NULL;
	if (fleet.health == FLEET_UP || fleet.health == FLEET_CONNECTING ||
	    fleet.health == FLEET_SWITCHING)
		fleet_lose(ac->errstr);
	reconnect_schedule();
}

static void
disconnect_cb(const redisAsyncContext *ac, int status)
{
	(void)status;
	if (ac != fleet.main && ac != fleet.sub)
		return; /* freed by fleet_lose */
	if (ac == fleet.main)
		fleet.main = NULL;
	else
		fleet.sub = NULL;
	fleet_lose(ac->errstr[0] != '\0' ? ac->errstr : "connection closed");
}

static redisAsyncContext *
context_new(void)
{
	redisAsyncContext *ac = fleet.addr.is_unix
	    ? redisAsyncConnectUnix(fleet.addr.path)
	    : redisAsyncConnect(fleet.addr.path, fleet.addr.port);

	if (ac == NULL)
		return NULL;
	if (ac->err != 0) {
		redisAsyncFree(ac);
		return NULL;
	}
	if (redisLibeventAttach(ac, cbd.base) != REDIS_OK) {
		redisAsyncFree(ac);
		return NULL;
	}
	redisAsyncSetConnectCallback(ac, connect_cb);
	redisAsyncSetDisconnectCallback(ac, disconnect_cb);
	return ac;
}

/* Queue AUTH on a new connection (commands wait for the connect). */
static bool
context_auth(redisAsyncContext *ac)
{
	if (fleet.auth_password == NULL)
		return true;
	if (fleet.auth_user != NULL)
		return redisAsyncCommand(ac, auth_cb, NULL, "AUTH %s %s", fleet.auth_user,
			   fleet.auth_password) == REDIS_OK;
	return redisAsyncCommand(ac, auth_cb, NULL, "AUTH %s", fleet.auth_password) == REDIS_OK;
}

/* --- Sentinel (fleet-sentinel.c asks, this follows) --- */

/* The server in use becomes host:port (Sentinel named it). */
static void
address_set(const char *host, int port)
{
	fleet.addr.is_unix = false;
	snprintf(fleet.addr.path, sizeof fleet.addr.path, "%s", host);
	fleet.addr.port = port;
	snprintf(fleet.addr_text, sizeof fleet.addr_text, "%s:%d", host, port);
}

static bool
address_is(const char *host, int port)
{
	return !fleet.addr.is_unix && fleet.addr.port == port && strcmp(fleet.addr.path, host) == 0;
}

/* Sentinel switched the master: the calls the old one had are answered
 * from this host's copy (their fate is unknown; what they open is written
 * back: the outage counts from the oldest, as fleet_lose_since's), and
 * nothing more goes to it. Requests not sent yet wait for the new master
 * (no room while switching), at most redis_timeout_ms from the first
 * switch (switch_cb). */
static void
switch_begin(void)
{
	bool was_switching = fleet.health == FLEET_SWITCHING;

	if (fleet.health == FLEET_UP) {
		fleet.outage_since = clock_realtime_ms();
		if (fleet.head != NULL)
			fleet.outage_since -=
			    clock_monotonic_ms() - fleet.head->sent_ms + FLEET_OUTAGE_SLACK_MS;
	}
	/* Switching before the calls are answered: a fold or a request
	 * waiting for room that they set going waits for the new master. */
	fleet.health = FLEET_SWITCHING;
	fleet.script_ready = false;
	contexts_free();
	evtimer_del(fleet.timeout_ev);
	evtimer_del(fleet.reconnect_ev);
	if (!was_switching) {
		struct timeval tv = { (time_t)(cbd.conf.redis_timeout_ms / 1000),
			(suseconds_t)(cbd.conf.redis_timeout_ms % 1000) * 1000 };

		evtimer_add(fleet.switch_ev, &tv);
	}
}

/* A sentinel named host:port the master: asked before a connection
 * (connect to it), or by +switch-master (a failover: Redis is away, and
 * the new master is connected to at once). */
static void
sentinel_master(const char *host, int port, bool switched)
{
	if (switched) {
		if (address_is(host, port))
			return;
		fleet.stats.master_switches++;
		switch_begin();
		address_set(host, port);
		log_warning("fleet: redis master %s is now %s (sentinel +switch-master); calls "
			    "the old master had were answered from this host's copy; requests "
			    "not sent yet wait for the new master (at most redis_timeout_ms)",
		    fleet.conf_addr.master, fleet.addr_text);
		fleet.addr_fresh = true;
		reconnect_now();
		return;
	}
	if (!address_is(host, port)) {
		if (fleet.addr_text[0] != '\0' && fleet.health == FLEET_DEGRADED) {
			/* The old master was lost and a sentinel names another
			 * before its +switch-master reached this host: requests
			 * wait for the new one, as after a +switch-master (what
			 * the copy answered meanwhile is written back). */
			fleet.stats.master_switches++;
			switch_begin();
			log_warning("fleet: redis master %s is now %s:%d (sentinel); requests wait "
				    "for it (at most redis_timeout_ms)",
			    fleet.conf_addr.master, host, port);
		} else if (fleet.addr_text[0] != '\0') {
			fleet.stats.master_switches++;
			log_warning("fleet: redis master %s is now %s:%d (sentinel)",
			    fleet.conf_addr.master, host, port);
		}
		/* Nothing more on the old master (requests waiting for the
		 * first connection keep waiting). */
		if (fleet.main != NULL || fleet.sub != NULL)
			contexts_free();
		address_set(host, port);
	}
	fleet.sentinel_logged = false;
	fleet.addr_fresh = true;
	fleet_connect();
}

/* No sentinel named the master: Redis is away until the next attempt. */
static void
sentinel_none(void)
{
	if (!fleet.sentinel_logged)
		log_warning("fleet: no sentinel of %s named the master of %s", cbd.conf.redis,
		    fleet.conf_addr.master);
	fleet.sentinel_logged = true;
	if (fleet.health == FLEET_UP || fleet.health == FLEET_CONNECTING ||
	    fleet.health == FLEET_SWITCHING)
		fleet_lose("no sentinel named the master");
	reconnect_schedule();
}

/* --- connecting --- */

static void
fleet_connect(void)
{
	/* Sentinel: ask for the master before every connection. */
	if (fleet.conf_addr.sentinels > 0 && !fleet.addr_fresh) {
		fleet_sentinel_ask();
		return;
	}
	fleet.addr_fresh = false;
	if (fleet.main == NULL) {
		fleet.main = context_new();
		if (fleet.main != NULL &&
		    (!context_auth(fleet.main) ||
			redisAsyncCommand(fleet.main, role_cb, NULL, "ROLE") != REDIS_OK ||
			redisAsyncCommand(fleet.main, info_cb, NULL, "INFO server") != REDIS_OK ||
			redisAsyncCommand(fleet.main, script_load_cb, NULL, "SCRIPT LOAD %s",
			    fleet_script_text) != REDIS_OK)) {
			redisAsyncContext *ac = fleet.main;

			fleet.main = NULL;
			redisAsyncFree(ac);
		}
	}
	if (fleet.sub == NULL) {
		fleet.sub = context_new();
		if (fleet.sub != NULL &&
		    (!context_auth(fleet.sub) ||
			redisAsyncCommand(fleet.sub, event_cb, NULL, "SUBSCRIBE %s",
			    fleet.channel) != REDIS_OK)) {
			redisAsyncContext *ac = fleet.sub;

			fleet.sub = NULL;
			redisAsyncFree(ac);
		}
	}
	if (fleet.main == NULL || fleet.sub == NULL) {
		if (fleet.health == FLEET_CONNECTING || fleet.health == FLEET_SWITCHING)
			fleet_lose("cannot connect");
		reconnect_schedule();
	}
}

/* Read redis_password_file: "password", or "user password". */
static bool
password_read(const char *path)
{
	char line[1024], *space;
	FILE *f = fopen(path, "r");

	if (f == NULL) {
		log_error("redis_password_file %s: %s", path, strerror(errno));
		return false;
	}
	if (fgets(line, sizeof line, f) == NULL)
		line[0] = '\0';
	fclose(f);
	line[strcspn(line, "\r\n")] = '\0';
	if (line[0] == '\0') {
		log_error("redis_password_file %s: empty (a password, or a user and a password)",
		    path);
		return false;
	}
	space = strchr(line, ' ');
	if (space != NULL) {
		*space = '\0';
		fleet.auth_user = strdup(line);
		fleet.auth_password = strdup(space + 1);
	} else {
		fleet.auth_password = strdup(line);
	}
	explicit_bzero(line, sizeof line);
	if (fleet.auth_password == NULL || (space != NULL && fleet.auth_user == NULL)) {
		log_error("redis_password_file: out of memory");
		return false;
	}
	return true;
}

bool
fleet_start(fleet_event_fn on_event, fleet_recover_fn on_recover)
{
	const char *why;

	memset(&fleet, 0, sizeof fleet);
	if (strcmp(cbd.conf.backend, "redis") != 0)
		return true;
	if (!conf_redis_address_parse(cbd.conf.redis, &fleet.conf_addr, &why)) {
		log_error("redis \"%s\": %s", cbd.conf.redis, why);
		return false;
	}
	if (fleet.conf_addr.sentinels == 0) {
		fleet.addr = fleet.conf_addr;
		snprintf(fleet.addr_text, sizeof fleet.addr_text, "%s", cbd.conf.redis);
	}
	if (cbd.conf.redis_password_file[0] != '\0' && !password_read(cbd.conf.redis_password_file))
		return false;
	random_hex(fleet.origin);
	snprintf(fleet.channel, sizeof fleet.channel, "%sevents", cbd.conf.redis_prefix);
	fleet.on_event = on_event;
	fleet.on_recover = on_recover;
	fleet.timeout_ev = evtimer_new(cbd.base, timeout_cb, NULL);
	fleet.reconnect_ev = evtimer_new(cbd.base, reconnect_cb, NULL);
	fleet.heartbeat_ev = event_new(cbd.base, -1, EV_PERSIST, heartbeat_cb, NULL);
	fleet.switch_ev = evtimer_new(cbd.base, switch_cb, NULL);
	if (fleet.timeout_ev == NULL || fleet.reconnect_ev == NULL || fleet.heartbeat_ev == NULL ||
	    fleet.switch_ev == NULL ||
	    (fleet.conf_addr.sentinels > 0 &&
		!fleet_sentinel_start(&fleet.conf_addr, sentinel_master, sentinel_none))) {
		log_error("fleet: out of memory");
		return false;
	}
	{
		struct timeval tv = { FLEET_RECONNECT_MS / 1000,
			(FLEET_RECONNECT_MS % 1000) * 1000 };

		event_add(fleet.heartbeat_ev, &tv);
	}
	fleet.health = FLEET_CONNECTING;
	/* What opens before Redis is first reached is written back to it. */
	fleet.outage_since = clock_realtime_ms();
	log_info("fleet: backend redis %s, key prefix \"%s\", origin %s", cbd.conf.redis,
	    cbd.conf.redis_prefix, fleet.origin);
	fleet_connect();
	return true;
}

void
fleet_free(void)
{
	if (fleet.health == FLEET_OFF)
		return;
	/* Stopping: what waits on Redis is answered here (calls sent, and
	 * requests waiting for room or in a fold: told by the room hook). */
	fleet.health = FLEET_DEGRADED;
	contexts_free();
	if (fleet.on_room != NULL)
		fleet.on_room();
	fleet_sentinel_free();
	if (fleet.timeout_ev != NULL)
		event_free(fleet.timeout_ev);
	if (fleet.reconnect_ev != NULL)
		event_free(fleet.reconnect_ev);
	if (fleet.heartbeat_ev != NULL)
		event_free(fleet.heartbeat_ev);
	if (fleet.switch_ev != NULL)
		event_free(fleet.switch_ev);
	if (fleet.auth_password != NULL)
		explicit_bzero(fleet.auth_password, strlen(fleet.auth_password));
	free(fleet.auth_user);
	free(fleet.auth_password);
	memset(&fleet, 0, sizeof fleet);
}
