/* SPDX-License-Identifier: Apache-2.0 */
/*
 * json-alloc.h — jansson's allocator in cbd: free lists by size class in
 * front of malloc, for the small values every request makes and frees.
 */
#ifndef CBD_JSON_ALLOC_H
#define CBD_JSON_ALLOC_H

#include <stdbool.h>

/* Size classes (JSON_ALLOC_CLASS_BYTES apart) the free lists serve; larger
 * blocks go straight to malloc. */
#define JSON_ALLOC_CLASSES 8
#define JSON_ALLOC_CLASS_BYTES 32
/* Free blocks kept per class: what a burst of requests leaves behind is
 * bounded (8 classes x 512 blocks x at most 272 bytes = 1.1 MiB). */
#define JSON_ALLOC_KEEP 512

/* Make jansson allocate through the free lists. Call before any jansson
 * value exists (a value must be freed by the allocator that made it).
 * Does nothing in sanitizer builds, whose checks need plain malloc. */
void json_alloc_install(void);

/* A bulk load (the state file at start, 100,000 circuits: millions of
 * small values made at once and freed at once). Between begin and end,
 * every value jansson makes is carved from large blocks, its free costs
 * nothing, and end gives the blocks back whole: no millions of malloc
 * chunks to free and coalesce (which stalled the first turn of the loop
 * for seconds), and no need to free the values one by one. Nothing made
 * in between may outlive end. The caller is the only thread using
 * jansson meanwhile. begin says whether the load is in bulk (false in
 * sanitizer builds, whose checks need plain malloc: free as usual). */
bool json_alloc_bulk_begin(void);
/* Give the blocks back; ordinary allocation again. */
void json_alloc_bulk_end(void);

/* Free the blocks kept (at exit, after the last jansson value is gone). */
void json_alloc_release(void);

#endif
