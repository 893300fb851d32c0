/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fleet.h — fleet mode's link to Redis (backend = redis): the connection
 * that runs the circuit script (src/fleet.lua) with EVALSHA, the one that
 * subscribes to the fleet's events, their health, and the timeout that
 * sends a request to this host's own copy instead of waiting.
 *
 * Transport only: what a script call means, and what becomes of its
 * reply, is op-fleet.c's. cbd never blocks on Redis: hiredis runs on
 * cbd's libevent loop (its libevent adapter).
 */
#ifndef CBD_FLEET_H
#define CBD_FLEET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

/* Wait between attempts to reach Redis while it is away (ms). */
#define FLEET_RECONNECT_MS 1000
/* Longest origin id (hex of 64 random bits). */
#define FLEET_ORIGIN_SIZE 17
/* Longest key prefix + "{" + name + "}:window". */
#define FLEET_KEY_MAX 512
/* Script calls Redis runs at once for this host's requests (sent, not
 * yet answered); past it a request waits its turn in cbd, its connection
 * read no further, and its wait does not count toward redis_timeout_ms
 * (a burst of outcomes neither times out nor is lost). */
#define FLEET_INFLIGHT_MAX 32
/* An outage is taken to start this long before the oldest call Redis did
 * not answer was sent (ms): the request's clock, which dates what it
 * opens, was read before, by more than a ms on a loaded host or under
 * valgrind. A circuit that opened in Redis just before is merged again,
 * which changes nothing (a merge opens, never closes). */
#define FLEET_OUTAGE_SLACK_MS 1000
/* Longest reason an outage is logged with. */
#define FLEET_WHY_MAX 320
/* Longest epoch (hex of 64 random bits): the value of the key PREFIXepoch
 * that tells a Redis holding the fleet's data from one that lost it. */
#define FLEET_EPOCH_SIZE 17
/* Longest Redis run_id (INFO server) kept, with its NUL. */
#define FLEET_RUN_ID_SIZE 41

typedef enum fleet_health {
	FLEET_OFF = 0, /* backend = memory */
	FLEET_CONNECTING, /* not yet reached since start: this host's copy answers */
	FLEET_UP, /* Redis answers circuit ops */
	/* Sentinel named another master (+switch-master): the calls the old
	 * one had were answered from this host's copy; requests not sent yet,
	 * and new ones, wait for the new master (at most redis_timeout_ms
	 * from the switch, then Redis is away: degraded). */
	FLEET_SWITCHING,
	FLEET_DEGRADED, /* Redis lost or too slow: this host's copy answers */
} fleet_health;

/* Counters for stats and metrics. */
typedef struct fleet_stats {
	uint64_t calls; /* script calls sent */
	uint64_t timeouts; /* calls answered locally after redis_timeout_ms */
	uint64_t errors; /* script errors and undecodable replies */
	uint64_t unavailable; /* requests answered locally while Redis was away */
	uint64_t degraded; /* times Redis was lost */
	uint64_t merged; /* circuits written back after an outage */
	uint64_t written_back; /* operator actions written back after an outage */
	uint64_t writeback_skipped; /* ... not, the fleet's circuit having changed */
	uint64_t writeback_dropped; /* ... not remembered: FLEET_SYNC_WRITEBACK_MAX */
	uint64_t events_in; /* events from other hosts applied */
	uint64_t events_bad; /* events that could not be read */
	uint64_t noscript; /* script reloads after NOSCRIPT */
	uint64_t queued; /* requests that waited for room (FLEET_INFLIGHT_MAX) */
	uint64_t data_lost; /* times Redis was found to have lost the fleet's data */
	uint64_t reseeds; /* re-seeds of Redis from this host's copy, completed */
	uint64_t reseeded; /* circuits a re-seed wrote (held, open or half_open) */
	uint64_t master_switches; /* times Sentinel named another master */
	/* switches whose new master was not up within redis_timeout_ms: the
	 * requests that waited for it were answered from this host's copy */
	uint64_t switch_timeouts;
	uint64_t restored; /* circuits written back: Redis's was older than the copy */
	uint64_t copy_answers; /* allow and get answered from a fresh copy, no script call */
	uint64_t folds; /* script calls carrying a fold of two or more outcomes */
	uint64_t coalesced; /* outcomes those calls carried */
	uint64_t fold_full; /* folds sent because FLEET_FOLD_MAX outcomes were in */
} fleet_stats;

/* Called once per call: reply is the script's decoded answer (borrowed),
 * or NULL when Redis did not answer in time, went away, or failed (the
 * caller answers from this host's copy). */
typedef void (*fleet_done_fn)(const json_t *reply, void *arg);

/* Called for each event another cbd published (borrowed). */
typedef void (*fleet_event_fn)(const json_t *event);

/* Called when Redis answers again after an outage, before requests go to
 * it: write back what changed meanwhile (with fleet_call()). reseed
 * (NULL: none) says why Redis must be re-seeded from this host's whole
 * copy: it lost the fleet's data (its epoch is gone or new), or it is
 * another server than before (restarted, failed over: it may miss the
 * last writes). */
typedef void (*fleet_recover_fn)(int64_t outage_since, const char *reseed);

/* Called when calls were answered and there is room for more
 * (FLEET_INFLIGHT_MAX), or Redis went away (fleet_up() says which). */
typedef void (*fleet_room_fn)(void);

typedef struct fleet_call fleet_call;

/* Start fleet mode when the config asks for it (connects in the
 * background). False (logged) on a config error such as an unreadable
 * password file. */
bool fleet_start(fleet_event_fn on_event, fleet_recover_fn on_recover);
void fleet_free(void);

fleet_health fleet_state(void);
const char *fleet_health_name(fleet_health health);
/* Do circuit ops go to Redis now (or wait for it: at start, and while
 * the master switches)? */
bool fleet_up(void);
/* Is what this host's copy answers now written back when Redis answers
 * again (Redis away, or a call the old master had when Sentinel switched
 * it)? */
bool fleet_writes_back(void);
/* Fleet mode configured (whatever its health)? */
bool fleet_enabled(void);
const fleet_stats *fleet_counters(void);
/* The Redis server in use, as text (Sentinel: the master it named last;
 * "" before). */
const char *fleet_address(void);
/* This cbd's id in events and tokens. */
const char *fleet_origin(void);
/* Count a request answered locally because Redis is away. */
void fleet_count_unavailable(void);
/* Count an allow or get answered from this host's fresh copy. */
void fleet_count_copy_answer(void);
/* Count a script call carrying a fold of n outcomes (n >= 2); full: it
 * went because it held FLEET_FOLD_MAX. */
void fleet_count_fold(size_t n, bool full);
/* Script calls made so far: read before a call, it stamps what the call's
 * reply says (fleet_events_fresh). */
uint64_t fleet_seq(void);
/* Is what a script call stamped `stamp` (fleet_seq() before it was made)
 * said still news-proof: Redis is up, the event channel's subscription
 * was confirmed before that call was made and has not dropped since (so
 * every later change of the circuit reaches this host as an event), and
 * no re-seed is under way? */
bool fleet_events_fresh(uint64_t stamp);
/* Is the event channel's subscription confirmed on the current connection? */
bool fleet_events_live(void);
/* Is there room for another request's call (FLEET_INFLIGHT_MAX; none
 * while the master switches: requests wait for the new one)? */
bool fleet_has_room(void);
/* Who is told when room comes (one; NULL: none). */
void fleet_set_room_hook(fleet_room_fn fn);
/* Count a request that waits for room. */
void fleet_count_queued(void);
/* While on, there is no room for requests' calls (they wait their turn,
 * uncounted toward redis_timeout_ms): a re-seed is under way. Turned off,
 * the one waiting for room is told. */
void fleet_hold_requests(bool hold);

/* Run the script's `op` on circuit `name` with the request members in
 * args (borrowed; sent as the script's positional arguments, with name
 * and this cbd's origin). done runs exactly once, never inside this
 * call; NULL when fleet mode is not up (nothing sent) or args has a
 * member of the wrong type. */
fleet_call *fleet_call_script(const char *op, const char *name, json_t *args, fleet_done_fn done,
    void *arg);
/* The caller is gone: done will not run (the call still runs in Redis). */
void fleet_call_cancel(fleet_call *call);

#endif
