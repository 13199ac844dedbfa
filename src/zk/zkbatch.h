/* zkbatch.h -- several ZooKeeper requests in one round trip: each is queued before any
 * answer is awaited, and the client library sends them back to back on the session's one
 * connection, where the server answers them in order. A claim made of a dozen sequential
 * reads waits a dozen round trips, which on a busy ensemble is most of a start; batched it
 * waits a few. Also the one way the registry sends a multi (sf_zkbatch_amulti). Used by the
 * registry and the peer checks, a module of its own: knows nothing of the registry.
 *
 * A caller describes its requests in an array (on its stack) and sends them with one call,
 * which returns once every request has its answer or the reason it has none: the client
 * library completes each request, also on a lost connection or a closing handle. */
#ifndef SF_ZKBATCH_H
#define SF_ZKBATCH_H

#include <pthread.h>
#include <stdbool.h>
#ifndef THREADED
#define THREADED
#endif
#include <zookeeper/zookeeper.h>

#define SF_ZKBATCH_DATA_MAX 512

/* The most sub-requests of a multi (sf_zkbatch_amulti says why). */
#define SF_ZKBATCH_MULTI_MAX 2

typedef enum sf_zkbatch_kind {
    SF_ZKBATCH_NONE = 0, /* no request: left as it is (a zeroed array's default) */
    SF_ZKBATCH_GET,      /* the node's data and stat */
    SF_ZKBATCH_EXISTS,   /* the node's stat */
    SF_ZKBATCH_CHILDREN, /* the node's children's names and stat */
    SF_ZKBATCH_MULTI,    /* a multi, sent by sf_zkbatch_amulti */
} sf_zkbatch_kind;

/* One request and, once sent, its answer. */
typedef struct sf_zkbatch_req {
    sf_zkbatch_kind kind;
    const char *path;          /* get, exists, children: copied when queued */
    int count;                 /* multi: ops and results as for sf_zkbatch_amulti */
    const zoo_op_t *ops;
    zoo_op_result_t *results;

    int rc;                           /* ZOK, or why there is no answer */
    char data[SF_ZKBATCH_DATA_MAX];   /* get: the node's data, cut to fit, NUL-ended */
    struct Stat stat;                 /* get, exists, children: the node's stat */
    struct String_vector kids;        /* children: the names (sf_zkbatch_req_free frees) */
    struct sf_zkbatch *batch;         /* the send it is part of, while in flight */
} sf_zkbatch_req;

/* Queues every request of reqs[0..n-1] at once and returns when each has its answer (rc,
 * and what its kind reads); a request that could not be queued holds the reason in rc. */
void sf_zkbatch_send(zhandle_t *zh, sf_zkbatch_req *reqs, int n);

/* Frees what a request's answer kept (children's names). */
void sf_zkbatch_req_free(sf_zkbatch_req *req);

/* Sends a multi (zoo_amulti) of at most two sub-requests, around the client's way with a
 * multi it refuses (3.8, upstream too): once a sub-request's path is refused (a handle in an
 * unrecoverable state, the session expired or its credential refused; or a path it finds
 * invalid), the next sub-request is not made but still frees the path of the one before,
 * which the client never allocated (more than two: freed again for each), and with a chroot
 * the refused path is freed twice. So a multi is never sent on a handle whose session is not
 * connected (ZINVALIDSTATE once expired or refused, else ZCONNECTIONLOSS: nothing sent);
 * the sub-requests' paths are copies made here, so that what the client frees when the state
 * changes under the call is ours to lose, never the caller's buffer (the first copy is left
 * to the client then, the other freed here); and the registry opens its sessions without a
 * chroot, putting it into its paths itself. ops as zoo_*_op_init makes them; results, stats
 * and buffers as for zoo_amulti. */
int sf_zkbatch_amulti(zhandle_t *zh, int count, const zoo_op_t *ops, zoo_op_result_t *results,
                      void_completion_t done, const void *data);

#endif /* SF_ZKBATCH_H */
