/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cbd.c — main: command line, configuration, then the server's loop.
 */
#include "config.h"

#include <getopt.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

#include "clock.h"
#include "conf.h"
#include "json-alloc.h"
#include "log.h"
#include "server.h"

/* Allocations this large or larger are mapped on their own (mallopt). */
#define CBD_MMAP_THRESHOLD (1024 * 1024)

static void
usage(FILE *out)
{
	fprintf(out,
	    "usage: cbd [-c FILE] [-s SOCKET] [-t] [-v] [-h] [-V]\n"
	    "  -c, --config FILE    configuration file (default: none, built-in defaults)\n"
	    "  -s, --socket SOCKET  Unix socket to listen on (overrides the file;\n"
	    "                       default %s)\n"
	    "  -t, --check          check the configuration and exit (0: valid, 1: not)\n"
	    "  -v, --verbose        log at debug level\n"
	    "  -h, --help           this help\n"
	    "  -V, --version        print the version\n"
	    "cbd runs in the foreground and logs to stderr. SIGHUP reloads the\n"
	    "configuration; SIGTERM or SIGINT stops it.\n",
	    CONF_DEFAULT_SOCKET);
}

int
main(int argc, char **argv)
{
	const char *config_path = NULL, *socket_path = NULL;
	char err[CONF_ERROR_SIZE];
	bool check = false, verbose = false;
	int opt, rc;

	static const struct option longopts[] = {
		{ "config", required_argument, NULL, 'c' },
		{ "socket", required_argument, NULL, 's' },
		{ "check", no_argument, NULL, 't' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};

	while ((opt = getopt_long(argc, argv, "c:s:tvhV", longopts, NULL)) != -1) {
		switch (opt) {
		case 'c':
			config_path = optarg;
			break;
		case 's':
			socket_path = optarg;
			break;
		case 't':
			check = true;
			break;
		case 'v':
			verbose = true;
			break;
		case 'h':
			usage(stdout);
			return 0;
		case 'V':
			printf("cbd %s (protocol %d)\n", PACKAGE_VERSION, PROTO_VERSION);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "cbd: unexpected argument \"%s\"\n", argv[optind]);
		usage(stderr);
		return 2;
	}
	/* Before the first jansson value (the configuration makes none, but
	 * everything after it does). */
	json_alloc_install();
	/* Output buffers of long lists grow by megabytes: mapped on their own,
	 * realloc moves their pages (mremap) instead of copying them, and a
	 * freed one goes back to the system. Fixed: glibc's own threshold
	 * rises after such frees, and then every growth is a copy. */
	mallopt(M_MMAP_THRESHOLD, CBD_MMAP_THRESHOLD);
	if (config_path != NULL) {
		if (!conf_load(config_path, &cbd.conf, err, sizeof err)) {
			/* Every error, each on its own line. */
			for (char *line = strtok(err, "\n"); line != NULL;
			     line = strtok(NULL, "\n"))
				fprintf(stderr, "cbd: %s\n", line);
			return 1;
		}
	} else if (!conf_init_defaults(&cbd.conf)) {
		fprintf(stderr, "cbd: out of memory\n");
		return 1;
	}
	if (strcmp(cbd.conf.backend, "redis") == 0 && cbd.conf.redis[0] == '\0') {
		fprintf(stderr,
		    "cbd: %s: backend = redis needs redis = unix:/path or "
		    "tcp://host:port\n",
		    config_path != NULL ? config_path : "(built-in defaults)");
		conf_free(&cbd.conf);
		return 1;
	}
	if (check && socket_path != NULL && socket_path[0] == '\0') {
		fprintf(stderr, "cbd: -s: the socket path must not be empty\n");
		conf_free(&cbd.conf);
		return 1;
	}
	if (check) {
		printf("cbd: configuration %s is valid\n",
		    config_path != NULL ? config_path : "(built-in defaults)");
		conf_free(&cbd.conf);
		return 0;
	}
	if (getenv("CBD_TEST_CLOCK_SKEW_MS") != NULL)
		clock_set_realtime_skew_ms(strtoll(getenv("CBD_TEST_CLOCK_SKEW_MS"), NULL, 10));
	cbd.conf_path = config_path;
	cbd.socket_override = socket_path;
	cbd.verbose = verbose;
	log_set_level(verbose ? LOG_LEVEL_DEBUG : (log_level)cbd.conf.log_level);
	log_set_timestamps(cbd.conf.log_timestamps != 0);
	log_set_format(
	    strcmp(cbd.conf.log_format, "json") == 0 ? LOG_FORMAT_JSON : LOG_FORMAT_TEXT);
	if (!server_start()) {
		server_free();
		libevent_global_shutdown();
		return 1;
	}
	rc = server_loop();
	server_free();
	libevent_global_shutdown();
	json_alloc_release();
	return rc;
}
