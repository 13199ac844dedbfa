/* client_internal.h -- the parts of a libsnowflake-client handle its modules share: the pool,
 * the ZooKeeper watch, the prefetch buffer, the counters, and the failover call they all use. */
#ifndef SFC_CLIENT_INTERNAL_H
#define SFC_CLIENT_INTERNAL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "client_error.h"
#include "discover.h"
#include "pool.h"
#include "prefetch.h"
#include "snowflake_client.h"

struct sfc_client {
    sfc_options o;
    char *servers;        /* copies of the options' strings */
    char *zookeeper_hosts;
    char *worker_id_path;
    char *agent;
    sfc_pool pool;
    sfc_discover *discover; /* NULL with a fixed list */
    sfc_prefetch *prefetch; /* NULL with prefetch off */
    atomic_uint_fast64_t calls, ids, failovers, errors;
};

/* Asks a node for count ids (get_id when count is 0, one id) under agent with failover until
 * deadline (CLOCK_MONOTONIC ms). ids has room for max(count, 1). A counted call is the
 * caller's: its ids or its error go into the totals (the prefetch thread's fetches do not). */
int sfc_call_ids(sfc_client *c, const char *agent, int64_t *ids, int count, int64_t deadline,
                 bool counted, sfc_call *call, sfc_error *err);

/* The prober's check of a node (an sfc_probe_fn, ctx the client): get_id, which a node
 * that does not serve refuses, unlike get_timestamp. */
sfc_outcome sfc_call_probe(void *ctx, sfc_conn *conn, const char *server, char *why,
                           size_t whylen);

#endif
