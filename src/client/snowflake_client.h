/* snowflake_client.h -- libsnowflake-client: ids from a fleet of snowflaked nodes, with
 * failover, for programs that call the service instead of embedding the generator.
 *
 * A client knows its nodes from a list ("host:port,...") or from ZooKeeper: the children of
 * worker_id_path, whose data is each node's "host:port", watched so that nodes joining,
 * fencing and leaving are followed without a restart (embedded holders, which serve no
 * Thrift, are skipped). It keeps a bounded pool of framed binary connections to each node
 * and spreads calls over the nodes. A call that meets a failed connect, a broken or silent
 * connection, a closed port or ServiceUnavailable moves to another node within the call's
 * deadline; the node that failed is skipped for a backoff (doubling, capped) and then a
 * background probe (get_id, which a node that does not serve refuses) checks it before
 * calls use it again; when every node failed, the call tries them all again after a short
 * pause (10 ms, doubling up to 200 ms) until its deadline. A node's host name is looked up
 * within the try's time on a thread of its own (the system's resolver; addresses kept for
 * at most 10 s): a name that does not resolve in time is skipped like a refused connect.
 * The caller's own errors (InvalidUserAgentError, InvalidRequestError) are returned at
 * once; InvalidSystemClock is tried on one other node before it is returned.
 *
 * With prefetch on, a background thread keeps up to `prefetch` ids fetched with get_ids and
 * sfc_next_id hands them out locally, never one whose timestamp is more than max_id_age_ms
 * behind the local clock (the original's promise: ids k-sorted within a second); a call
 * that finds none asks the nodes itself, with failover, until its own deadline.
 *
 * Every function is thread-safe and every call returns by its deadline, also when every
 * node is down (SFC_ERR_UNAVAILABLE, naming each node tried and why it failed). The
 * client's threads (and the ZooKeeper client's) block every signal but the faults: a signal
 * sent to the process is handled on one of the program's own threads.
 * Functions that can fail return SFC_OK (0) or a negative SFC_ERR_* code and, when given an
 * sfc_error, fill it with a message a person can act on. Link with
 * `pkg-config --libs snowflake-client`. */
#ifndef SNOWFLAKE_CLIENT_H
#define SNOWFLAKE_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum {
    SFC_OK = 0,
    SFC_ERR_ARG = -1,         /* a bad option or argument; the message names its range */
    SFC_ERR_NOMEM = -2,
    SFC_ERR_REFUSED = -3,     /* the request is the caller's error (InvalidUserAgentError,
                                 InvalidRequestError); asking again will not help */
    SFC_ERR_CLOCK = -4,       /* InvalidSystemClock from two nodes in a row */
    SFC_ERR_UNAVAILABLE = -5  /* no node gave ids by the deadline; the message says why */
};

#define SFC_ERROR_MAX 1024
#define SFC_SERVER_MAX 280 /* "host:port" and its terminating NUL */

typedef struct sfc_error {
    int code;
    char message[SFC_ERROR_MAX];
} sfc_error;

typedef struct sfc_options {
    const char *servers;          /* "host:port,..." (IPv6 as [addr]:port), or NULL; not "" */
    const char *zookeeper_hosts;  /* "host:port,..." of a ZooKeeper ensemble, or NULL; exactly
                                     one of servers and zookeeper_hosts is set (non-NULL) */
    const char *worker_id_path;   /* where the nodes register (default "/snowflake-servers") */
    int zookeeper_session_timeout_ms; /* 1000..600000 (default 10000) */
    const char *agent;            /* the user agent sent (default "snowflake-client") */
    int timeout_ms;               /* a call's deadline, failovers included: 1..600000
                                     (default 1000) */
    int try_timeout_ms;           /* one node's connect and answer: 1..timeout_ms (default
                                     250); with one node known it may take the whole deadline */
    int connections_per_server;   /* pooled connections to one node: 1..1024 (default 4) */
    int backoff_ms;               /* a failed node's first skip: 1..60000 (default 100) */
    int backoff_max_ms;           /* the doubling stops here: backoff_ms..600000 (default 5000) */
    int prefetch;                 /* ids kept fetched: 0 (off, the default) or 1..1000000 */
    int prefetch_batch;           /* ids asked per get_ids when refilling: 1..10000, the
                                     nodes' default max_batch_size (default 1000; no more
                                     than the nodes' own max_batch_size) */
    int max_id_age_ms;            /* a prefetched id's age limit: 1..60000 (default 1000) */
    int64_t epoch_ms;             /* the nodes' epoch, for the age of ids (default Twitter's) */
} sfc_options;

/* What one sfc_next_id(s) call went through. */
typedef struct sfc_call {
    char server[SFC_SERVER_MAX]; /* the node that made the ids ("" when they were prefetched) */
    int tries;                   /* nodes asked, the last one included */
    int failovers;               /* moves to another node */
} sfc_call;

/* One node as the client sees it now. */
typedef struct sfc_server_state {
    char server[SFC_SERVER_MAX];
    bool up;               /* false while skipped after a failure */
    int failures;          /* failures in a row (0 when up) */
    int64_t retry_in_ms;   /* while down: time left until a call probes it */
    int connections;       /* open now */
    uint64_t calls;        /* calls answered */
    char last_error[256];  /* why it last failed, "" if never */
} sfc_server_state;

typedef struct sfc_stats {
    uint64_t calls;           /* sfc_next_id(s) calls that returned ids */
    uint64_t ids;             /* ids returned */
    uint64_t failovers;       /* moves to another node within a call (prefetching too) */
    uint64_t errors;          /* calls that returned an error */
    uint64_t prefetched;      /* ids handed out from the prefetch buffer */
    uint64_t prefetch_stale;  /* prefetched ids dropped as older than max_id_age_ms */
    uint64_t prefetch_misses; /* sfc_next_id calls that found the buffer empty */
    int servers;              /* nodes known */
    int servers_up;           /* of those, not skipped after a failure */
} sfc_stats;

/* Fills o with the defaults (no servers, no ZooKeeper). */
void sfc_options_init(sfc_options *o);

typedef struct sfc_client sfc_client;

/* Checks o (naming any bad option and its range) and starts the client: the node list, or
 * the ZooKeeper watch (whose first answer calls wait for, within their deadline), and the
 * prefetch thread. Connects to nodes only when calls need them. NULL on error. SIGPIPE is
 * set to be ignored unless the program handles it already: a node that closes a connection
 * fails a call, it must not end the program. The first call also mends Thrift 0.17 c_glib's
 * classes for the whole process (finalizers that do not chain up, a flush that hides a
 * failed write): a program with Thrift objects of its own calls it before making them. */
sfc_client *sfc_open(const sfc_options *o, sfc_error *err);

/* One id. call (may be NULL) says which node made it and what it took. */
int sfc_next_id(sfc_client *c, int64_t *id, sfc_call *call, sfc_error *err);

/* count ids (1..1000000; the nodes' max_batch_size may be lower), in the node's order,
 * from one node, asked with get_ids; never from the prefetch buffer. */
int sfc_next_ids(sfc_client *c, int64_t *ids, int count, sfc_call *call, sfc_error *err);

/* sfc_next_id and sfc_next_ids under the user agent of this call instead of the client's
 * (NULL: the client's), for a program that tells its callers apart in the nodes' per-agent
 * counts and audit log. The agent is checked as the option is (SFC_ERR_ARG naming it); an
 * agent other than the client's is never served from the prefetch buffer, whose ids were
 * asked for under the client's. */
int sfc_next_id_as(sfc_client *c, const char *agent, int64_t *id, sfc_call *call,
                   sfc_error *err);
int sfc_next_ids_as(sfc_client *c, const char *agent, int64_t *ids, int count, sfc_call *call,
                    sfc_error *err);

/* What a node says of itself: asked of one serving node, with failover. */
typedef struct sfc_node_info {
    char server[SFC_SERVER_MAX];
    int64_t worker_id;
    int64_t datacenter_id;
    int64_t timestamp_ms;  /* its clock */
    int64_t skew_ms;       /* its clock minus the local clock at the middle of the call */
    int64_t round_trip_ms; /* of get_timestamp */
} sfc_node_info;
int sfc_node_info_get(sfc_client *c, sfc_node_info *info, sfc_error *err);

/* Totals since sfc_open. */
void sfc_get_stats(sfc_client *c, sfc_stats *stats);

/* Up to max nodes' states into out; returns how many nodes are known (may exceed max). */
int sfc_list_servers(sfc_client *c, sfc_server_state *out, int max);

/* Stops the threads, closes every connection and frees c. Calls under way on other threads
 * must have returned. */
void sfc_close(sfc_client *c);

/* ZooKeeper's client library logs to standard error at its INFO level unless told
 * otherwise; false keeps it to errors. Process-wide. */
void sfc_set_zookeeper_logging(bool verbose);

#ifdef __cplusplus
}
#endif

#endif
