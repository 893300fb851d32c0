/*
 * client-harness-shim.h — the API of tests/cbd-harness.h (daemon branch),
 * for client-harness-shim.c until the real harness is merged.
 */
#ifndef CBD_CLIENT_HARNESS_SHIM_H
#define CBD_CLIENT_HARNESS_SHIM_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

typedef struct cbd_harness {
	pid_t pid;
	char dir[256];
	char socket_path[320];
	char config_path[320];
} cbd_harness;

/* Start $CBD_BINARY on a temp socket, wait until it accepts. */
bool harness_start(cbd_harness *h, const char *config_text);
/* SIGTERM, bounded wait, remove the temp dir. */
void harness_stop(cbd_harness *h);
int harness_connect(const cbd_harness *h);
bool harness_request(int fd, const char *line, char *reply, size_t reply_size);

#endif
