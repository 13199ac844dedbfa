/* registry_batch.h -- several ZooKeeper reads in one round trip: each is queued before any
 * answer is awaited, and the client library sends them back to back on the session's one
 * connection, where the server answers them in order. A claim made of a dozen sequential
 * reads waits a dozen round trips, which on a busy ensemble is most of a start; batched it
 * waits a few. Used by the registry's parts; knows nothing of the registry.
 *
 * A batch lives on its caller's stack: init, queue reads, wait (every queued read has
 * completed after it, with its answer or the reason it has none: the client library
 * completes each request, also on a lost connection or a closing handle), free. */
#ifndef SF_REGISTRY_BATCH_H
#define SF_REGISTRY_BATCH_H

#include <pthread.h>
#include <stdbool.h>
#ifndef THREADED
#define THREADED
#endif
#include <zookeeper/zookeeper.h>

#define SF_REG_BATCH_DATA_MAX 512

typedef struct sf_reg_batch {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int pending;
} sf_reg_batch;

/* One read's answer. */
typedef struct sf_reg_read {
    sf_reg_batch *batch;
    int rc;                               /* ZOK, or why there is no answer */
    char data[SF_REG_BATCH_DATA_MAX];     /* get: the node's data, cut to fit, NUL-ended */
    struct Stat stat;                     /* get, exists, children: the node's stat */
    struct String_vector kids;            /* children: the names (sf_reg_read_free frees) */
} sf_reg_read;

void sf_reg_batch_init(sf_reg_batch *b);

/* Queue one read of path into out; out->rc holds the queueing error when it could not be
 * queued (nothing to wait for then). */
void sf_reg_batch_get(sf_reg_batch *b, zhandle_t *zh, const char *path, sf_reg_read *out);
void sf_reg_batch_exists(sf_reg_batch *b, zhandle_t *zh, const char *path, sf_reg_read *out);
void sf_reg_batch_children(sf_reg_batch *b, zhandle_t *zh, const char *path, sf_reg_read *out);

/* Waits until every read queued so far has its answer. */
void sf_reg_batch_wait(sf_reg_batch *b);

/* Frees what the reads kept (children's names) and the batch. */
void sf_reg_read_free(sf_reg_read *r);
void sf_reg_batch_free(sf_reg_batch *b);

#endif /* SF_REGISTRY_BATCH_H */
