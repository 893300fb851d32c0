/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz-config.c — fuzz target for cbd's config loader: the input is a
 * config file, loaded with conf_load() (from a memfd, so nothing touches
 * the disk), then resolved and freed. A failed load must leave an error
 * that names the file and no memory; a loaded config resolves policies.
 *
 * libFuzzer entry point; tests/fuzz/replay.c drives it without libFuzzer.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "conf.h"
#include "log.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Names whose policy a loaded config is asked for. */
static const char *const fuzz_names[] = { "a", "db", "payments", "circuit \"x\"" };

/* Write all of data to fd; false on error. */
static bool
write_all(int fd, const uint8_t *data, size_t size)
{
	while (size > 0) {
		ssize_t n = write(fd, data, size);

		if (n <= 0)
			return false;
		data += n;
		size -= (size_t)n;
	}
	return true;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char path[64], err[CONF_ERROR_SIZE];
	cbd_conf cfg, defaults;
	int fd = memfd_create("cbd-fuzz.conf", MFD_CLOEXEC);

	log_set_level(LOG_LEVEL_ERROR);
	if (fd < 0 || !write_all(fd, data, size)) {
		perror("fuzz-config: memfd");
		abort();
	}
	snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
	err[0] = '\0';
	if (!conf_load(path, &cfg, err, sizeof err)) {
		if (strncmp(err, path, strlen(path)) != 0) {
			fprintf(stderr, "fuzz-config: error does not name the file: %s\n", err);
			abort();
		}
		if (cfg.path != NULL || cfg.socket != NULL || cfg.circuits != NULL ||
		    cfg.presets != NULL) {
			fprintf(stderr, "fuzz-config: a failed load left memory behind\n");
			abort();
		}
		close(fd);
		return 0;
	}
	for (size_t i = 0; i < sizeof fuzz_names / sizeof fuzz_names[0]; i++) {
		proto_ctx none = { 0 };
		cb_policy policy;

		proto_policy_sources sources;
		const char *preset;

		conf_policy(&cfg, fuzz_names[i], &none, &policy, &sources, &preset);
	}
	(void)conf_is_admin(&cfg, 12345, 12345);
	/* A reload from defaults to this file keeps the fixed keys. */
	if (conf_init_defaults(&defaults)) {
		conf_keep_fixed(&cfg, &defaults);
		conf_free(&defaults);
	}
	conf_free(&cfg);
	close(fd);
	return 0;
}
