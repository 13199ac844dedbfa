/* registry_peers.h -- the original Snowflake's start-up sanity checks against the peers that
 * hold worker ids in ZooKeeper: each must report the id it holds and our datacenter, and their
 * mean clock must be near ours; and the list of those peers, for the live clock checks.
 * Separate from the registry, which only claims and fences.
 *
 * Convention: returns 0 or -1 with an actionable message in the caller's err buffer
 * (sf_registry_peers_check: SF_REGISTRY_NOT_YET for a failure that can pass). */
#ifndef SF_REGISTRY_PEERS_H
#define SF_REGISTRY_PEERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#ifndef THREADED
#define THREADED
#endif
#include <zookeeper/zookeeper.h>

#include "common/registry_options.h"
#include "registry.h"

/* What the checks need; the strings and callbacks are the registry's. */
typedef struct sf_registry_peers {
    zhandle_t *zh;
    const char *worker_id_path;
    const char *host_port;          /* our own node's data: never checked, or NULL */
    int64_t datacenter_id;
    bool skip_unreachable_peers;
    int64_t max_clock_skew_ms;
    sf_registry_peer_fn query_peer; /* NULL: only embedded holders' nodes are checked */
    void *peer_ctx;
    sf_registry_log_fn log;         /* NULL = standard error */
    void *log_ctx;
    bool (*cancelled)(void *ctx);   /* true when start-up is being cancelled; may be NULL */
    void *cancel_ctx;
} sf_registry_peers;

/* Queries every peer listed under worker_id_path and checks its worker id, its datacenter id,
 * and the peers' mean clock against ours; an embedded holder is not queried (it serves no
 * Thrift), its node's datacenter is checked. Returns 0; SF_REGISTRY_NOT_YET with err filled
 * when what failed can pass (a peer that does not answer or whose node is stale, the clocks
 * apart); -1 with err filled for a peer of another datacenter or worker id. */
int sf_registry_peers_check(const sf_registry_peers *p, char *err, size_t errlen);

/* Copies into out (at most max) the node data, "host:port", of every peer under
 * worker_id_path that serves Thrift: not ours, not an embedded holder. Returns how many, or
 * -1 with err filled when the path cannot be listed. */
int sf_registry_peers_list(const sf_registry_peers *p, char (*out)[SF_REGISTRY_PEER_MAX],
                           int max, char *err, size_t errlen);

#endif /* SF_REGISTRY_PEERS_H */
