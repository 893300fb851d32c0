/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fleet-sentinel.c — asking Redis Sentinel for fleet mode's master and
 * watching for failovers (see fleet-sentinel.h): hiredis async
 * connections on cbd's event loop, one asking SENTINEL
 * get-master-addr-by-name (a sentinel that cannot be reached, does not
 * know the master or does not answer within FLEET_SENTINEL_TIMEOUT_MS,
 * or redis_timeout_ms if longer, is passed over for the next), one
 * subscribed to +switch-master on the sentinel that answered last.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <hiredis/adapters/libevent.h>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>

#include "daemon.h"
#include "fleet-sentinel.h"

static struct {
	const conf_redis_address *conf;
	fleet_sentinel_master_fn on_master;
	fleet_sentinel_none_fn on_none;
	redisAsyncContext *ask; /* asking conf->sentinel[at] */
	redisAsyncContext *sub; /* subscribed to +switch-master */
	int at;
	int good; /* the last that named the master */
	struct event *timeout_ev; /* the asked sentinel's time to answer */
} sentinel;

static void ask_next(void);

static void
connect_cb(const redisAsyncContext *ac, int status)
{
	if (status == REDIS_OK)
		return;
	/* hiredis frees ac after this callback. */
	if (ac == sentinel.sub) {
		/* The next sentinel is watched at the next call. */
		sentinel.sub = NULL;
		sentinel.good = (sentinel.good + 1) % sentinel.conf->sentinels;
	}
	if (ac == sentinel.ask) {
		sentinel.ask = NULL;
		ask_next();
	}
}

static void
disconnect_cb(const redisAsyncContext *ac, int status)
{
	(void)status;
	if (ac == sentinel.sub)
		sentinel.sub = NULL;
	if (ac == sentinel.ask) {
		/* Gone before it named the master. */
		sentinel.ask = NULL;
		ask_next();
	}
}

static redisAsyncContext *
context_new(int i)
{
	redisAsyncContext *ac =
	    redisAsyncConnect(sentinel.conf->sentinel[i].host, sentinel.conf->sentinel[i].port);

	if (ac == NULL)
		return NULL;
	if (ac->err != 0 || redisLibeventAttach(ac, cbd.base) != REDIS_OK) {
		redisAsyncFree(ac);
		return NULL;
	}
	redisAsyncSetConnectCallback(ac, connect_cb);
	redisAsyncSetDisconnectCallback(ac, disconnect_cb);
	return ac;
}

/* Drop a connection (pointer first: the callbacks it runs find it gone). */
static void
drop(redisAsyncContext **slot)
{
	redisAsyncContext *ac = *slot;

	*slot = NULL;
	if (ac != NULL)
		redisAsyncFree(ac);
}

/* A +switch-master message: "MASTER OLD-IP OLD-PORT NEW-IP NEW-PORT". */
static void
event_cb(redisAsyncContext *ac, void *reply, void *privdata)
{
	redisReply *r = reply;
	char name[CONF_REDIS_MASTER_MAX + 1], host[108];
	int port;

	(void)privdata;
	if (r == NULL || ac != sentinel.sub || r->type != REDIS_REPLY_ARRAY || r->elements != 3 ||
	    r->element[0]->type != REDIS_REPLY_STRING ||
	    strcmp(r->element[0]->str, "message") != 0 || r->element[2]->type != REDIS_REPLY_STRING)
		return;
	if (sscanf(r->element[2]->str, "%64s %*s %*d %107s %d", name, host, &port) != 3 ||
	    strcmp(name, sentinel.conf->master) != 0 || port < 1 || port > 65535)
		return;
	sentinel.on_master(host, port, true);
}

void
fleet_sentinel_watch(void)
{
	if (sentinel.sub != NULL || sentinel.conf == NULL)
		return;
	sentinel.sub = context_new(sentinel.good);
	if (sentinel.sub != NULL &&
	    redisAsyncCommand(sentinel.sub, event_cb, NULL, "SUBSCRIBE +switch-master") != REDIS_OK)
		drop(&sentinel.sub);
}

/* A sentinel's answer to SENTINEL get-master-addr-by-name. */
static void
ask_cb(redisAsyncContext *ac, void *reply, void *privdata)
{
	redisReply *r = reply;
	char host[108];
	long port;

	(void)privdata;
	if (r == NULL || ac != sentinel.ask)
		return; /* freed, or gone: disconnect_cb asks the next */
	sentinel.ask = NULL;
	evtimer_del(sentinel.timeout_ev);
	redisAsyncDisconnect(ac);
	if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
	    r->element[0]->type != REDIS_REPLY_STRING ||
	    r->element[1]->type != REDIS_REPLY_STRING || r->element[0]->len >= sizeof host ||
	    (port = strtol(r->element[1]->str, NULL, 10)) < 1 || port > 65535) {
		ask_next();
		return;
	}
	snprintf(host, sizeof host, "%s", r->element[0]->str);
	sentinel.good = sentinel.at;
	fleet_sentinel_watch();
	sentinel.on_master(host, (int)port, false);
}

/* Ask sentinel i (and on) for the master; past the last, on_none. */
static void
ask_from(int i)
{
	struct timeval tv;
	int64_t wait = cbd.conf.redis_timeout_ms > FLEET_SENTINEL_TIMEOUT_MS
	    ? cbd.conf.redis_timeout_ms
	    : FLEET_SENTINEL_TIMEOUT_MS;

	for (; i < sentinel.conf->sentinels; i++) {
		sentinel.at = i;
		sentinel.ask = context_new(i);
		if (sentinel.ask == NULL)
			continue;
		if (redisAsyncCommand(sentinel.ask, ask_cb, NULL,
			"SENTINEL get-master-addr-by-name %s", sentinel.conf->master) != REDIS_OK) {
			drop(&sentinel.ask);
			continue;
		}
		tv.tv_sec = (time_t)(wait / 1000);
		tv.tv_usec = (suseconds_t)(wait % 1000) * 1000;
		evtimer_add(sentinel.timeout_ev, &tv);
		return;
	}
	sentinel.on_none();
}

static void
ask_next(void)
{
	evtimer_del(sentinel.timeout_ev);
	ask_from(sentinel.at + 1);
}

/* A sentinel did not answer in time: the next. */
static void
timeout_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	(void)arg;
	if (sentinel.ask == NULL)
		return;
	drop(&sentinel.ask);
	ask_next();
}

void
fleet_sentinel_ask(void)
{
	if (sentinel.conf != NULL && sentinel.ask == NULL)
		ask_from(0);
}

bool
fleet_sentinel_asking(void)
{
	return sentinel.ask != NULL;
}

bool
fleet_sentinel_start(const conf_redis_address *conf, fleet_sentinel_master_fn on_master,
    fleet_sentinel_none_fn on_none)
{
	memset(&sentinel, 0, sizeof sentinel);
	sentinel.timeout_ev = evtimer_new(cbd.base, timeout_cb, NULL);
	if (sentinel.timeout_ev == NULL)
		return false;
	sentinel.conf = conf;
	sentinel.on_master = on_master;
	sentinel.on_none = on_none;
	return true;
}

void
fleet_sentinel_free(void)
{
	drop(&sentinel.ask);
	drop(&sentinel.sub);
	if (sentinel.timeout_ev != NULL)
		event_free(sentinel.timeout_ev);
	memset(&sentinel, 0, sizeof sentinel);
}
