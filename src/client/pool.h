/* pool.h -- the nodes a client knows, a bounded pool of connections to each, and which are
 * skipped after a failure: the state the failover calls (calls.c) choose from. A background
 * thread probes a failed node (connect, get_timestamp) when its backoff ends, so callers never
 * wait on a node that is still down while another serves. */
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
    bool stopping;
    bool prober_started;
    pthread_t prober;
} sfc_pool;

/* Splits "host:port" or "[v6]:port" into host and port 1..65535; false with why. */
bool sfc_pool_parse_server(const char *name, char *host, size_t hostlen, int *port,
                           char *why, size_t whylen);

/* Sets up an empty pool and starts its prober. False with why on failure. */
bool sfc_pool_init(sfc_pool *p, const sfc_options *o, char *why, size_t whylen);
void sfc_pool_destroy(sfc_pool *p);

/* Replaces the list with names (each valid for sfc_pool_parse_server). Nodes on both lists
 * keep their connections and state; nodes gone close theirs once no call holds them. */
bool sfc_pool_set_servers(sfc_pool *p, const char *const *names, int n);

/* While no list was ever set, why (shown in errors of calls that waited for one). */
void sfc_pool_set_why_no_list(sfc_pool *p, const char *why);

/* A node for the next try, held (release it): a serving node not in tried, taken round
 * robin; else, as a last resort, a skipped one not in tried, the soonest due first. Waits
 * for a first list until deadline (CLOCK_MONOTONIC ms). NULL when none is left, with why. */
sfc_server *sfc_pool_pick(sfc_pool *p, sfc_server *const *tried, int ntried, int64_t deadline,
                          char *why, size_t whylen);
void sfc_pool_release(sfc_pool *p, sfc_server *s);

/* How many nodes the list has now. */
int sfc_pool_count(sfc_pool *p);

/* A connection to s, idle or new, whose reads and writes end by deadline (monotonic ms):
 * waiting for one to come back when all connections_per_server are in use and connecting
 * both spend from it, and the socket's timeout is what is left. NULL with why (a failed
 * connect sets *connect_failed). *reused says it served a call before. */
sfc_conn *sfc_pool_take(sfc_pool *p, sfc_server *s, int64_t deadline, bool *reused,
                        bool *connect_failed, char *why, size_t whylen);

/* Closes s's idle connections (one of them broke: a node that restarted broke them all). */
void sfc_pool_drop_idle(sfc_pool *p, sfc_server *s);

/* Puts a connection back after a complete answer. */
void sfc_pool_give(sfc_pool *p, sfc_server *s, sfc_conn *c);

/* Closes a connection that broke or timed out. */
void sfc_pool_discard(sfc_pool *p, sfc_server *s, sfc_conn *c);

/* s answered: it is up. */
void sfc_pool_succeeded(sfc_pool *p, sfc_server *s);

/* s failed (why): skip it for its backoff, doubled for each failure in a row, and close its
 * idle connections when they are likely as dead (close_idle). */
void sfc_pool_failed(sfc_pool *p, sfc_server *s, const char *why, bool close_idle);

/* Up to max nodes' states; returns the number known. */
int sfc_pool_list(sfc_pool *p, sfc_server_state *out, int max, int *up);

#endif
