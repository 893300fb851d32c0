/* SPDX-License-Identifier: Apache-2.0 */
/*
 * json-alloc.c — jansson's allocator in cbd (see json-alloc.h).
 *
 * Why: a request decodes into about ten jansson values and its reply into
 * a few more, all freed when it is answered. glibc's per-thread cache keeps
 * seven chunks of a size, so most of these frees would go through malloc's
 * slower paths. A free list per size class makes each allocation and free
 * a few instructions. cbd is one thread. (What it saved: README.md,
 * "Benchmarks", the design figures.)
 */
#include <malloc.h>
#include <stddef.h>
#include <stdlib.h>

#include <jansson.h>

#include "json-alloc.h"

/* A free block's first bytes: the next free block of its class. */
typedef struct free_block {
	struct free_block *next;
} free_block;

static free_block *free_lists[JSON_ALLOC_CLASSES + 1];
static unsigned free_counts[JSON_ALLOC_CLASSES + 1];

#if defined(__SANITIZE_ADDRESS__)
#define JSON_ALLOC_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(memory_sanitizer)
#define JSON_ALLOC_SANITIZED 1
#endif
#endif

#ifndef JSON_ALLOC_SANITIZED
/* Every block is a plain malloc block (no header): what jansson hands out
 * (json_dumps' text) may be given back with free(). A block of class c is
 * malloc(c * JSON_ALLOC_CLASS_BYTES); its class is read back from its
 * usable size, which malloc rounds up by less than a class. */
static void *
json_alloc(size_t size)
{
	size_t cls = size == 0 ? 1 : (size + JSON_ALLOC_CLASS_BYTES - 1) / JSON_ALLOC_CLASS_BYTES;

	if (cls > JSON_ALLOC_CLASSES)
		return malloc(size);
	if (free_lists[cls] != NULL) {
		free_block *b = free_lists[cls];

		free_lists[cls] = b->next;
		free_counts[cls]--;
		return b;
	}
	return malloc(cls * JSON_ALLOC_CLASS_BYTES);
}

static void
json_release(void *p)
{
	size_t usable, cls;

	if (p == NULL)
		return;
	usable = malloc_usable_size(p);
	cls = usable / JSON_ALLOC_CLASS_BYTES;
	/* Only a block whose size is exactly a class's (a larger one's
	 * usable size can also fall in a class's range). */
	if (cls >= 1 && cls <= JSON_ALLOC_CLASSES && usable - cls * JSON_ALLOC_CLASS_BYTES < 16 &&
	    free_counts[cls] < JSON_ALLOC_KEEP) {
		free_block *b = p;

		b->next = free_lists[cls];
		free_lists[cls] = b;
		free_counts[cls]++;
		return;
	}
	free(p);
}

#endif /* !JSON_ALLOC_SANITIZED */

void
json_alloc_install(void)
{
#ifndef JSON_ALLOC_SANITIZED
	json_set_alloc_funcs(json_alloc, json_release);
#endif
}

void
json_alloc_release(void)
{
	for (size_t cls = 1; cls <= JSON_ALLOC_CLASSES; cls++) {
		while (free_lists[cls] != NULL) {
			free_block *b = free_lists[cls];

			free_lists[cls] = b->next;
			free(b);
		}
		free_counts[cls] = 0;
	}
}
