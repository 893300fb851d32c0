/* SPDX-License-Identifier: Apache-2.0 */
/*
 * conf.h — cbd's configuration: the key table, loading an INI file
 * (libinih) into a cbd_conf, and the policy layers it adds to a ctx.
 */
#ifndef CBD_CONF_H
#define CBD_CONF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "breaker.h"
#include "proto.h"

/* The packaged default socket. */
#define CONF_DEFAULT_SOCKET "/run/cbd/cbd.sock"
/* Room for one error naming file, line and key. */
#define CONF_ERROR_LINE 512
/* Most errors of one file reported (the rest are counted). */
#define CONF_ERRORS_MAX 16
/* Room for every error reported, one a line. */
#define CONF_ERROR_SIZE (CONF_ERRORS_MAX * CONF_ERROR_LINE + 64)

typedef enum conf_type {
	CONF_INT = 0, /* decimal integer within [min, max] */
	CONF_OCTAL, /* file mode, octal, within [min, max] */
	CONF_STRING, /* any text */
	CONF_USERS, /* comma- or space-separated user names or uids */
	CONF_GROUPS, /* comma- or space-separated group names or gids */
	CONF_LEVEL, /* a log level name */
} conf_type;

/* Where a key may appear. */
typedef enum conf_scope {
	CONF_SCOPE_CBD = 0, /* [cbd] */
	CONF_SCOPE_POLICY, /* [defaults], [circuit "NAME"] and [preset "NAME"] */
} conf_scope;

/* One row of the key table. */
typedef struct conf_key {
	conf_scope scope;
	const char *name;
	conf_type type;
	int64_t min;
	int64_t max;
	const char *default_text; /* as documented and as parsed when absent */
	bool reloadable; /* may SIGHUP change it? */
	size_t offset; /* CONF_SCOPE_CBD: member of cbd_conf */
	int ctx_key; /* CONF_SCOPE_POLICY: its proto_ctx_key */
	const char *help; /* one line for docs */
} conf_key;

/* A [circuit "NAME"] or [preset "NAME"] section. */
typedef struct conf_circuit conf_circuit;

typedef struct cbd_conf {
	/* Distinct for every configuration loaded (0: none, or freed): what
	 * conf_policy's memo compares. */
	uint64_t generation;
	char *path; /* the file read, or NULL for built-in defaults */
	char *socket;
	int64_t socket_mode;
	char *socket_group;
	int64_t max_line_bytes;
	int64_t max_circuits;
	int64_t max_connections;
	int64_t max_output_bytes;
	int64_t max_total_output_bytes;
	int64_t client_idle_ms;
	char *admin_users;
	char *admin_groups;
	int64_t log_level;
	int64_t open_warning_interval;
	int64_t log_timestamps;
	char *log_format; /* "text" or "json" */
	int64_t idle_reclaim_ms;
	int64_t max_slots;
	int64_t max_watch_names;
	char *state_file;
	char *metrics_listen;
	int64_t metrics_max_connections;
	int64_t dashboard_max_clients;
	int64_t metrics_max_circuits;
	char *backend; /* "memory" or "redis" */
	char *redis;
	char *redis_prefix;
	int64_t redis_timeout_ms;
	int64_t fleet_coalesce_ms;
	char *redis_password_file;
	/* Resolved from admin_users, and from the members of admin_groups. */
	uid_t *admin_uids;
	size_t admin_uid_count;
	gid_t *admin_gids;
	size_t admin_gid_count;
	proto_ctx defaults; /* [defaults] */
	conf_circuit *circuits; /* [circuit "NAME"] */
	conf_circuit *presets; /* [preset "NAME"] */
} cbd_conf;

/* Sentinels a `redis = sentinel://...` key may name, and the longest
 * master name. */
#define CONF_REDIS_SENTINELS_MAX 8
#define CONF_REDIS_MASTER_MAX 64

/* A parsed `redis` key: a Unix socket path, a TCP host and port, or the
 * Sentinels to ask for the master (sentinel://HOST:PORT[,HOST:PORT...]/
 * MASTER: path and port are then left empty). */
typedef struct conf_redis_address {
	bool is_unix;
	char path[108]; /* the socket path, or the host */
	int port;
	int sentinels; /* 0: not Sentinel */
	struct {
		char host[108];
		int port;
	} sentinel[CONF_REDIS_SENTINELS_MAX];
	char master[CONF_REDIS_MASTER_MAX + 1];
} conf_redis_address;

/* Parse unix:/path, tcp://host:port or sentinel://host:port[,host:port...]/
 * master; false with *why on error. */
bool conf_redis_address_parse(const char *text, conf_redis_address *out, const char **why);

/* The key table. */
size_t conf_key_count(void);
const conf_key *conf_key_at(size_t i);
const conf_key *conf_key_find(conf_scope scope, const char *name);

/* Built-in defaults only. False only when out of memory. */
bool conf_init_defaults(cbd_conf *cfg);

/* Load path into cfg (defaults for absent keys). On error, err holds
 * every error found, one a line in line order, each "FILE:LINE: key:
 * what is wrong", and cfg is left freed. */
bool conf_load(const char *path, cbd_conf *cfg, char *err, size_t err_size);

void conf_free(cbd_conf *cfg);

/* The effective policy of circuit `name` (protocol 2, §1): its
 * [circuit] section, then the policy its creating request declared
 * (`declared`, may be NULL), then [defaults], then the built-in defaults;
 * at each level a named preset's keys come below the level's own.
 * sources (may be NULL) receives where each key came from, *preset (may
 * be NULL) the effective preset's name (NULL: none). */
void conf_policy(const cbd_conf *cfg, const char *name, const proto_ctx *declared, cb_policy *out,
    proto_policy_sources *sources, const char **preset);

/* Whether circuit name's effective policy, a source of it or its preset
 * differs between two configurations (a reload: protocol 3's policy_rev
 * and policy events). */
bool conf_policy_changed(const cbd_conf *old, const cbd_conf *fresh, const char *name,
    const proto_ctx *declared);

/* A preset by name: a [preset] section, else a built-in one; NULL when
 * there is none. A [preset] section with a built-in's name starts from
 * the built-in's keys. */
const proto_ctx *conf_preset_find(const cbd_conf *cfg, const char *name);

/* Keys SIGHUP may not change: keep old's value in fresh, warning when
 * the file asked for another one. False when out of memory (fresh must
 * then be freed, not used). */
bool conf_keep_fixed(cbd_conf *fresh, const cbd_conf *old);

/* How many keys SIGHUP may not change differ between fresh and old; the
 * names of the first max of them (table order) into names. */
size_t conf_fixed_changed(const cbd_conf *fresh, const cbd_conf *old, const char **names,
    size_t max);

/* Is a peer with this uid/gid an admin (uid 0 and cbd's own uid included)? */
bool conf_is_admin(const cbd_conf *cfg, uid_t uid, gid_t gid);

/* Is text a loopback address:port cbd may serve metrics on? On false,
 * *why says what is wrong. */
bool conf_metrics_listen_valid(const char *addr_text, const char **why);

#endif
