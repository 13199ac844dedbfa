/* pool.h -- the nodes a client knows, a bounded pool of connections to each, and which are
 * skipped after a failure: the bookkeeping behind the failover calls (calls.c), which see
 * it through two verbs, acquire and release. A background thread probes a failed node when
 * its backoff ends, so callers never wait on a node that is still down while another
 * serves. */
#ifndef SFC_POOL_H
#define SFC_POOL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "rpc/client.h"
#include "snowflake_client.h"

/* One pooled connection and the read/write timeout now set on its socket. */
typedef struct sfc_conn {
    sf_client rpc;
    int timeout_ms;
    struct sfc_conn *next;
} sfc_conn;

/* One node. Freed when it has left the list and no call holds it. */
typedef struct sfc_server {
    char name[SFC_SERVER_MAX]; /* "host:port" as listed */
    char host[SFC_SERVER_MAX];
    int port;
    sfc_conn *idle; /* a stack: the most recently used first */
    int open;       /* connections open, idle or in use */
    int refs;       /* calls and probes holding it */
    bool listed;
    bool probing;
    int failures;     /* in a row */
    int64_t retry_at; /* CLOCK_MONOTONIC ms at which the prober tries it; 0 while up */
    uint64_t calls;
    char last_error[256];
} sfc_server;

/* How a try on one node ended, as far as the pool's bookkeeping is concerned. */
typedef enum {
    SFC_TRY_OK,
    SFC_TRY_REFUSED,     /* the caller's error: the node and the connection are fine */
    SFC_TRY_UNAVAILABLE, /* ServiceUnavailable: not serving now; the connection is fine */
    SFC_TRY_CLOCK,       /* InvalidSystemClock; the connection is fine */
    SFC_TRY_BROKEN,      /* no connection could be made, or it broke: reset, a bad frame */
    SFC_TRY_TIMEOUT,     /* no answer within the try's timeout */
    SFC_TRY_STALE,       /* a pooled connection broke: the node dropped its idle ones (it
                            restarted); not a failure of the node. Its idle ones are closed and
                            the lease keeps its hold on the node, for an acquire with want */
    SFC_TRY_SKIPPED      /* not tried: the deadline passed, or all its connections stayed
                            busy; says nothing of the node */
} sfc_outcome;

/* The prober's check of a node on a connection of its own (calls.c asks get_id, which a
 * node that does not serve refuses). */
typedef sfc_outcome (*sfc_probe_fn)(void *ctx, sfc_conn *conn, const char *server, char *why,
                                    size_t whylen);

typedef struct sfc_pool {
    pthread_mutex_t lock;
    pthread_cond_t changed; /* a list arrived, a connection came back, a node came up */
    pthread_cond_t probe_wake;
    sfc_server **servers;
    int n;
    bool listed_once;      /* a list was set (from ZooKeeper: it answered once) */
    char why_no_list[256]; /* while none was: why */
    atomic_uint next;      /* round robin */
    int connections_per_server;
    int try_timeout_ms;
    int backoff_ms;
    int backoff_max_ms;
    sfc_probe_fn probe;
    void *probe_ctx;
    bool stopping;
    bool prober_started;
    pthread_t prober;
} sfc_pool;

/* One try's hold on a node and, when one could be had, a connection to it. */
typedef struct sfc_lease {
    sfc_server *server;
    sfc_conn *conn;
    bool reused;           /* the connection served a call before */
    bool reserved;         /* a connection slot is held with no connection in it */
    sfc_outcome failed_as; /* without a connection: BROKEN (no connect) or SKIPPED */
} sfc_lease;

/* What sfc_pool_acquire found. */
enum {
    SFC_POOL_NONE,   /* no node is left to try (why says why); nothing to release */
    SFC_POOL_CONN,   /* a node and a connection to it */
    SFC_POOL_NOCONN  /* a node but no connection (why): release it with failed_as */
};

/* Sets up an empty pool and starts its prober. False with why on failure. */
bool sfc_pool_init(sfc_pool *p, const sfc_options *o, sfc_probe_fn probe, void *probe_ctx,
                   char *why, size_t whylen);
void sfc_pool_destroy(sfc_pool *p);

/* Replaces the list with names (each valid for sf_hostport_parse). Nodes on both lists keep
 * their connections and state; nodes gone close theirs once no call holds them. */
bool sfc_pool_set_servers(sfc_pool *p, const char *const *names, int n);

/* While no list was ever set, why (shown in errors of calls that waited for one). */
void sfc_pool_set_why_no_list(sfc_pool *p, const char *why);

/* A node for the next try, and a connection to it whose connect and reads end by the try's
 * deadline: try_timeout_ms, or all that is left until deadline (CLOCK_MONOTONIC ms) when
 * only one node is listed or less is left. The node is want when given (a fresh connection
 * after a stale one); else a serving node not in tried, round robin; else, as a last resort,
 * a skipped one not in tried, the soonest due first; with want, the hold of the lease that
 * released it as STALE passes to this one. Waits for a first list, and for a connection
 * when all connections_per_server are in use, within the try's deadline. Every lease with a
 * node is released. */
int sfc_pool_acquire(sfc_pool *p, sfc_server *const *tried, int ntried, sfc_server *want,
                     int64_t deadline, sfc_lease *l, char *why, size_t whylen);

/* Ends a lease: the connection goes back after a complete answer and is closed otherwise;
 * the node is marked up (OK, REFUSED) or skipped for its backoff, doubled for each failure
 * in a row (why says what failed); the node is let go and may be freed. A node that answers
 * while every node was skipped has the others probed at once: the fleet is coming back. */
void sfc_pool_release(sfc_pool *p, sfc_lease *l, sfc_outcome out, const char *why);

/* Up to max nodes' states; returns the number known. */
int sfc_pool_list(sfc_pool *p, sfc_server_state *out, int max, int *up);

#ifdef SFC_COUNT_POOL_LOCKS
/* Test builds: how many times this thread took the pool's lock. */
uint64_t sfc_pool_locks_taken(void);
#endif

#endif
