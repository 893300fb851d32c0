/* SPDX-License-Identifier: Apache-2.0 */
/*
 * replay.c — main() for a fuzz target built without libFuzzer: feeds
 * every file named on the command line, or every file of the directories
 * named, to LLVMFuzzerTestOneInput once. With no arguments it replays the
 * target's checked-in seed corpus, $CBD_SRCDIR/tests/fuzz/corpus/NAME
 * (make check runs it so). A target aborts on a bad result, so a clean
 * exit means every input passed.
 */
#include <dirent.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#ifndef FUZZ_CORPUS
#error "FUZZ_CORPUS must name the target's corpus directory"
#endif

/* The largest input replayed (libFuzzer's -max_len is far smaller). */
#define REPLAY_MAX_BYTES (16u << 20)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Replay one file; false when it cannot be read. The input is an
 * exact-size buffer, so reading past it is caught under ASan. */
static bool
replay_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	struct stat st;
	uint8_t *data;
	size_t n;

	if (f == NULL || fstat(fileno(f), &st) != 0 || st.st_size > REPLAY_MAX_BYTES) {
		fprintf(stderr, "%s: cannot read (or larger than %u bytes)\n", path,
		    REPLAY_MAX_BYTES);
		if (f != NULL)
			fclose(f);
		return false;
	}
	data = malloc(st.st_size > 0 ? (size_t)st.st_size : 1);
	n = data != NULL ? fread(data, 1, (size_t)st.st_size, f) : 0;
	fclose(f);
	if (data == NULL || n != (size_t)st.st_size) {
		free(data);
		return false;
	}
	LLVMFuzzerTestOneInput(data, n);
	free(data);
	return true;
}

static int
name_compare(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Replay every regular file of dir, in name order; returns the count
 * replayed, or -1 on error. */
static long
replay_dir(const char *dir)
{
	struct dirent **entries;
	int n = scandir(dir, &entries, NULL, NULL);
	long done = 0;
	char **names;

	if (n < 0) {
		perror(dir);
		return -1;
	}
	names = calloc((size_t)n + 1, sizeof *names);
	for (int i = 0; names != NULL && i < n; i++)
		names[i] = entries[i]->d_name;
	if (names != NULL)
		qsort(names, (size_t)n, sizeof *names, name_compare);
	for (int i = 0; names != NULL && i < n && done >= 0; i++) {
		char path[4096];
		struct stat st;

		snprintf(path, sizeof path, "%s/%s", dir, names[i]);
		if (stat(path, &st) != 0 || !S_ISREG(st.st_mode))
			continue;
		done = replay_file(path) ? done + 1 : -1;
	}
	if (names == NULL)
		done = -1;
	free(names);
	for (int i = 0; i < n; i++)
		free(entries[i]);
	free(entries);
	return done;
}

int
main(int argc, char **argv)
{
	char corpus[4096];
	long total = 0;

	if (argc < 2) {
		const char *srcdir = getenv("CBD_SRCDIR");

		snprintf(corpus, sizeof corpus, "%s/tests/fuzz/corpus/%s",
		    srcdir != NULL ? srcdir : ".", FUZZ_CORPUS);
		argv[0] = corpus;
		argc = 1;
	} else {
		argv++;
		argc--;
	}
	for (int i = 0; i < argc; i++) {
		struct stat st;
		long n;

		if (stat(argv[i], &st) != 0) {
			perror(argv[i]);
			return 1;
		}
		n = S_ISDIR(st.st_mode) ? replay_dir(argv[i]) : replay_file(argv[i]) ? 1 : -1;
		if (n < 0)
			return 1;
		total += n;
	}
	printf("replayed %ld inputs through the %s target: no failure\n", total, FUZZ_CORPUS);
	return total > 0 ? 0 : 1;
}
