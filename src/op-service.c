/* SPDX-License-Identifier: Apache-2.0 */
/*
 * op-service.c — the service ops (see op-service.h): hello, stats,
 * metrics (watch and unwatch are in op-list.c: they answer with
 * snapshots in steps, as list does).
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>

#include "daemon.h"
#include "log.h"
#include "metrics.h"
#include "op-service.h"
#include "stats-report.h"
#include "stats.h"

/* A metrics op's text is cut to 1/this of max_output_bytes. */
#define OP_METRICS_CUT_DIVISOR 2

/* hello's outcome_counts: the outcomes record (and record_success)
 * takes a `count` of; a cbd without the member takes none for successes
 * (clients then send them one a line). */
bool
op_hello(op_call *call)
{
	/* (Made once; each reply holds a reference.) */
	static json_t *outcome_counts;

	const char *client;

	if (!proto_get_text(call->request, "client", false, &client, NULL, &call->err))
		return false;
	if (client != NULL && log_enabled(LOG_LEVEL_DEBUG)) {
		char quoted[LOG_QUOTE_SIZE];

		log_debug("connection %llu: hello from %s", (unsigned long long)call->client->id,
		    log_quote(client, quoted, sizeof quoted));
	}
	if (json_object_set_new(op_reply(call), "server", json_string(PACKAGE_NAME)) != 0 ||
	    json_object_set_new(op_reply(call), "version", json_string(PACKAGE_VERSION)) != 0 ||
	    json_object_set_new(op_reply(call), "protocol", json_integer(PROTO_VERSION)) != 0 ||
	    (outcome_counts == NULL &&
		(outcome_counts = json_pack("[ss]", "rejected", "success")) == NULL) ||
	    json_object_set(op_reply(call), "outcome_counts", outcome_counts) != 0)
		return proto_fail(&call->err, PROTO_INTERNAL, "out of memory");
	return true;
}

bool
op_stats(op_call *call)
{
	size_t count;
	const char *const *names = stats_op_names(&count);

	if (!stats_to_json(op_reply(call), names, count, cbd.table))
		return proto_fail(&call->err, PROTO_INTERNAL, "out of memory");
	return true;
}

bool
op_metrics(op_call *call)
{
	size_t len, fit = (size_t)cbd.conf.max_output_bytes / OP_METRICS_CUT_DIVISOR;
	char *buf = metrics_text(fit, &len);
	bool cut = buf != NULL && len > fit;
	json_t *body;

	/* Cut like list (§10): at a line's end, within half of
	 * max_output_bytes (escaped in JSON the text grows, at most
	 * twofold), so that the client is answered, not dropped. The text
	 * is made no further than the first line past the cut. */
	if (cut) {
		while (fit > 0 && buf[fit - 1] != '\n')
			fit--;
		len = fit;
		stats_limit_hit(STATS_LIMIT_METRICS_CUT);
	}
	body = buf != NULL ? json_stringn(buf, len) : NULL;
	free(buf);
	if (body == NULL || json_object_set_new(op_reply(call), "text", body) != 0 ||
	    (cut && json_object_set_new(op_reply(call), "truncated", json_true()) != 0))
		return proto_fail(&call->err, PROTO_INTERNAL, "out of memory");
	return true;
}
