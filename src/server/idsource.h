/* idsource.h -- where the handler's ids come from: one interface that a registration in
 * ZooKeeper (libsnowflake-zk), a standalone worker (standalone.h) and the tests all provide,
 * so that every call of the service takes the same path whatever holds the worker id.
 * Plain C: a source is a table of functions and the context they are called with. */
#ifndef SF_IDSOURCE_H
#define SF_IDSOURCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/snowflake.h"
#include "zk/snowflake_zk.h"

/* Room for any reason a source gives (a fence's or a registration's). */
#define SF_ID_SOURCE_REASON_MAX 2048

/* How a request for ids ended. */
typedef enum {
    SF_IDS_OK = 0,
    SF_IDS_REFUSED, /* not serving, or fenced while the ids were made (never handed out) */
    SF_IDS_CLOCK    /* the clock is behind the last id, or out of the epoch's range */
} sf_ids_outcome;

/* What a source's holder wants to know about it beyond ids: enough for the handler's
 * get_worker_id, /health and /metrics. */
typedef struct sf_id_source_ops {
    /* Makes count (>= 1) ids into ids, strictly increasing. Otherwise why (len bytes) says
     * why, and *discarded counts ids made but dropped by the fence (refusals only). Called
     * on every request's thread at once: must not block but for the generator's own waits. */
    sf_ids_outcome (*next_ids)(void *ctx, int64_t *ids, size_t count, char *why, size_t len,
                               size_t *discarded);
    /* The worker and datacenter id in use (or last used), -1 while none. Cheap: called for
     * every get_worker_id. */
    void (*ids)(void *ctx, int64_t *datacenter_id, int64_t *worker_id);
    /* False while ids would be handed out now; otherwise true with why (len bytes). */
    bool (*refusal)(void *ctx, char *why, size_t len);
    /* Why ids are refused now and since when; true when the figures of a ZooKeeper session
     * are in it too (a registration), false for a source without one. */
    bool (*health)(void *ctx, sfz_health *out);
    /* The generator's counters; and, registered, how many worker ids are taken under the
     * path claimed in (path filled, len bytes), or -1 when that is not known. */
    int64_t (*stats)(void *ctx, sf_worker_stats *out, char *path, size_t len);
    /* Refuses ids for good from now on, saying reason (to stop). */
    void (*close)(void *ctx, const char *reason);
} sf_id_source_ops;

typedef struct sf_id_source {
    const sf_id_source_ops *ops;
    void *ctx;
} sf_id_source;

/* The source of a registration: ids from zk, which fences them by its own lease. */
sf_id_source sf_id_source_for_registration(sfz *zk);

#endif /* SF_IDSOURCE_H */
