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

/* The bulk load's blocks: each one malloc'd, carved from its start. */
typedef struct bulk_block {
	struct bulk_block *next;
	size_t size, used;
	max_align_t data[];
} bulk_block;

#define BULK_BLOCK_MIN (4u << 20)

static bulk_block *bulk_blocks;
static bool bulk_active;
/* The allocator in place when the bulk load began. */
static json_malloc_t bulk_prev_malloc;
static json_free_t bulk_prev_free;

static bool
bulk_owns(const void *p)
{
	for (const bulk_block *b = bulk_blocks; b != NULL; b = b->next) {
		const char *start = (const char *)b->data;

		if ((const char *)p >= start && (const char *)p < start + b->size)
			return true;
	}
	return false;
}

static void *
bulk_malloc(size_t size)
{
	const size_t align = sizeof(max_align_t);
	size_t need = (size + align - 1) / align * align;
	bulk_block *b = bulk_blocks;

	if (need == 0)
		need = align;
	if (b == NULL || b->size - b->used < need) {
		/* Each block twice the last: few blocks for bulk_owns to walk. */
		size_t size_next = b != NULL ? b->size * 2 : BULK_BLOCK_MIN;

		while (size_next < need)
			size_next *= 2;
		b = malloc(sizeof *b + size_next);
		if (b == NULL)
			return NULL;
		b->size = size_next;
		b->used = 0;
		b->next = bulk_blocks;
		bulk_blocks = b;
	}
	b->used += need;
	return (char *)b->data + b->used - need;
}

static void
bulk_free(void *p)
{
	if (p != NULL && !bulk_owns(p))
		bulk_prev_free(p);
}

#endif /* !JSON_ALLOC_SANITIZED */

bool
json_alloc_bulk_begin(void)
{
#ifndef JSON_ALLOC_SANITIZED
	if (bulk_active)
		return false;
	json_get_alloc_funcs(&bulk_prev_malloc, &bulk_prev_free);
	bulk_active = true;
	json_set_alloc_funcs(bulk_malloc, bulk_free);
	return true;
#else
	return false;
#endif
}

void
json_alloc_bulk_end(void)
{
#ifndef JSON_ALLOC_SANITIZED
	if (!bulk_active)
		return;
	json_set_alloc_funcs(bulk_prev_malloc, bulk_prev_free);
	while (bulk_blocks != NULL) {
		bulk_block *b = bulk_blocks;

		bulk_blocks = b->next;
		free(b);
	}
	bulk_active = false;
#endif
}

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
