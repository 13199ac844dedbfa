/* zkbatch.h -- several ZooKeeper requests in one round trip: each is queued before any
 * answer is awaited, and the client library sends them back to back on the session's one
 * connection, where the server answers them in order. A claim made of a dozen sequential
 * reads waits a dozen round trips, which on a busy ensemble is most of a start; batched it
 * waits a few. Also the one way the registry sends a multi (sf_zkbatch_amulti). Used by the
 * registry and the peer checks, a module of its own: knows nothing of the registry.
 *
 * A batch lives on its caller's stack: init, queue reads, wait (every queued read has
 * completed after it, with its answer or the reason it has none: the client library
 * completes each request, also on a lost connection or a closing handle), free. */
#ifndef SF_ZKBATCH_H
#define SF_ZKBATCH_H

#include <pthread.h>
#include <stdbool.h>
#ifndef THREADED
#define THREADED
#endif
#include <zookeeper/zookeeper.h>

#define SF_ZKBATCH_DATA_MAX 512

typedef struct sf_zkbatch {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int pending;
} sf_zkbatch;

/* The most sub-requests of a multi (sf_zkbatch_amulti says why). */
#define SF_ZKBATCH_MULTI_MAX 2

/* One request's answer. */
typedef struct sf_zkbatch_read {
    sf_zkbatch *batch;
    int rc;                               /* ZOK, or why there is no answer */
    char data[SF_ZKBATCH_DATA_MAX];     /* get: the node's data, cut to fit, NUL-ended */
    struct Stat stat;                     /* get, exists, children: the node's stat */
    struct String_vector kids;            /* children: the names (sf_zkbatch_read_free frees) */
} sf_zkbatch_read;

void sf_zkbatch_init(sf_zkbatch *b);

/* Queue one read of path into out; out->rc holds the queueing error when it could not be
 * queued (nothing to wait for then). */
void sf_zkbatch_get(sf_zkbatch *b, zhandle_t *zh, const char *path, sf_zkbatch_read *out);
void sf_zkbatch_exists(sf_zkbatch *b, zhandle_t *zh, const char *path, sf_zkbatch_read *out);
void sf_zkbatch_children(sf_zkbatch *b, zhandle_t *zh, const char *path, sf_zkbatch_read *out);

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

/* A multi in the batch, sent by sf_zkbatch_amulti: out->rc holds its outcome once the batch was
 * waited for (or why it could not be sent). */
void sf_zkbatch_multi(sf_zkbatch *b, zhandle_t *zh, int count, const zoo_op_t *ops,
                        zoo_op_result_t *results, sf_zkbatch_read *out);

/* Waits until every request queued so far has its answer. */
void sf_zkbatch_wait(sf_zkbatch *b);

/* Frees what the reads kept (children's names) and the batch. */
void sf_zkbatch_read_free(sf_zkbatch_read *r);
void sf_zkbatch_free(sf_zkbatch *b);

#endif /* SF_ZKBATCH_H */
