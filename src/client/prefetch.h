/* prefetch.h -- a bounded buffer of ids fetched ahead with get_ids by a thread of its own, so
 * one call hands out an id without a round trip. An id is handed out only while its
 * timestamp is at most max_age_ms behind the local clock; older ones are dropped. */
#ifndef SFC_PREFETCH_H
#define SFC_PREFETCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "snowflake_client.h"

/* Fetches count ids (with failover); SFC_OK or an error code with err filled. */
typedef int (*sfc_fetch_fn)(void *ctx, int64_t *ids, int count, sfc_error *err);

typedef struct sfc_prefetch sfc_prefetch;

/* Starts the fetcher: it fills the buffer (capacity ids, batch per call) once ids are asked
 * for, and refills it when half of it is gone. NULL with why on failure. */
sfc_prefetch *sfc_prefetch_start(int capacity, int batch, int max_age_ms, int64_t epoch_ms,
                                 sfc_fetch_fn fetch, void *ctx, char *why, size_t whylen);

/* Takes one id young enough, without waiting; false when there is none (the fetcher is
 * woken): the caller asks a node directly. */
bool sfc_prefetch_take(sfc_prefetch *pf, int64_t *id);

/* Ids handed out, dropped as too old, and takes that found the buffer empty. */
void sfc_prefetch_counts(sfc_prefetch *pf, uint64_t *handed, uint64_t *stale, uint64_t *misses);

/* Stops the fetcher and frees the buffer. */
void sfc_prefetch_stop(sfc_prefetch *pf);

#endif
