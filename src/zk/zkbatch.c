/* zkbatch.c -- several ZooKeeper requests in one round trip, and the registry's multi
 * (zkbatch.h). The completions run on the client library's completion thread and
 * only copy the answer. */
#define _GNU_SOURCE
#include "zkbatch.h"

#include <stdlib.h>
#include <string.h>

/* A send in flight: how many of its requests still wait for their answer. */
typedef struct sf_zkbatch {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int pending;
} sf_zkbatch;

/* A read answered: one fewer to wait for. */
static void sf_zkbatch_done(sf_zkbatch_req *r, int rc, const struct Stat *stat)
{
    sf_zkbatch *b = r->batch;
    r->rc = rc;
    if (rc == ZOK && stat != NULL)
        r->stat = *stat;
    pthread_mutex_lock(&b->mu);
    if (--b->pending == 0)
        pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
}

static void sf_zkbatch_data_done(int rc, const char *value, int len, const struct Stat *stat,
                                   const void *data)
{
    sf_zkbatch_req *r = (sf_zkbatch_req *)data;
    size_t n = rc == ZOK && value != NULL && len > 0 ? (size_t)len : 0;
    if (n >= sizeof r->data)
        n = sizeof r->data - 1;
    memcpy(r->data, value != NULL ? value : "", n);
    r->data[n] = '\0';
    sf_zkbatch_done(r, rc, stat);
}

static void sf_zkbatch_stat_done(int rc, const struct Stat *stat, const void *data)
{
    sf_zkbatch_done((sf_zkbatch_req *)data, rc, stat);
}

static void sf_zkbatch_kids_done(int rc, const struct String_vector *kids,
                                   const struct Stat *stat, const void *data)
{
    sf_zkbatch_req *r = (sf_zkbatch_req *)data;
    if (rc == ZOK && kids != NULL && kids->count > 0) {
        /* The client frees its copy after this returns: keep our own. */
        r->kids.data = calloc((size_t)kids->count, sizeof *r->kids.data);
        for (int i = 0; r->kids.data != NULL && i < kids->count; i++) {
            r->kids.data[r->kids.count] = strdup(kids->data[i]);
            if (r->kids.data[r->kids.count] != NULL)
                r->kids.count++;
        }
        if (r->kids.count < kids->count)
            rc = ZSYSTEMERROR; /* out of memory: the listing is not whole */
    }
    sf_zkbatch_done(r, rc, stat);
}

/* Clears a request's answer and counts it as awaited. */
static void sf_zkbatch_add(sf_zkbatch *b, sf_zkbatch_req *req)
{
    req->rc = ZOK;
    req->data[0] = '\0';
    memset(&req->stat, 0, sizeof req->stat);
    req->kids = (struct String_vector){0, NULL};
    req->batch = b;
    pthread_mutex_lock(&b->mu);
    b->pending++;
    pthread_mutex_unlock(&b->mu);
}

/* A request the client refused to queue: it has its reason and no answer to wait for. */
static void sf_zkbatch_queued(sf_zkbatch *b, sf_zkbatch_req *req, int rc)
{
    if (rc == ZOK)
        return;
    req->rc = rc;
    pthread_mutex_lock(&b->mu);
    b->pending--;
    pthread_mutex_unlock(&b->mu);
}

static const char **sf_zkbatch_op_path(zoo_op_t *op)
{
    switch (op->type) {
    case ZOO_CREATE_OP:
    case ZOO_CREATE_CONTAINER_OP:
        return &op->create_op.path;
    case ZOO_DELETE_OP:
        return &op->delete_op.path;
    case ZOO_SETDATA_OP:
        return &op->set_op.path;
    case ZOO_CHECK_OP:
        return &op->check_op.path;
    default:
        return NULL;
    }
}

int sf_zkbatch_amulti(zhandle_t *zh, int count, const zoo_op_t *ops, zoo_op_result_t *results,
                  void_completion_t done, const void *data)
{
    int state = zoo_state(zh);
    if (state == ZOO_EXPIRED_SESSION_STATE || state == ZOO_AUTH_FAILED_STATE)
        return ZINVALIDSTATE;
    if (state != ZOO_CONNECTED_STATE)
        return ZCONNECTIONLOSS;
    if (count < 1 || count > SF_ZKBATCH_MULTI_MAX)
        return ZBADARGUMENTS;
    zoo_op_t copy[SF_ZKBATCH_MULTI_MAX];
    char *paths[SF_ZKBATCH_MULTI_MAX] = {NULL};
    for (int i = 0; i < count; i++) {
        copy[i] = ops[i];
        const char **path = sf_zkbatch_op_path(&copy[i]);
        if (path == NULL || (paths[i] = strdup(*path)) == NULL) {
            for (int j = 0; j < i; j++)
                free(paths[j]);
            return path == NULL ? ZBADARGUMENTS : ZSYSTEMERROR;
        }
        *path = paths[i];
    }
    int rc = zoo_amulti(zh, count, copy, results, done, data);
    /* Sent, the paths were written into the request. Refused, the client freed the first
     * copy if it refused the first sub-request, and nothing if the second: the first is
     * given up (a few bytes, when the session went under the call). */
    for (int i = rc == ZOK ? 0 : 1; i < count; i++)
        free(paths[i]);
    return rc;
}

static void sf_zkbatch_multi_done(int rc, const void *data)
{
    sf_zkbatch_done((sf_zkbatch_req *)data, rc, NULL);
}

/* Queues one request on zh; the client's verdict on queueing it. */
static int sf_zkbatch_queue(zhandle_t *zh, sf_zkbatch_req *q)
{
    switch (q->kind) {
    case SF_ZKBATCH_GET:
        return zoo_aget(zh, q->path, 0, sf_zkbatch_data_done, q);
    case SF_ZKBATCH_EXISTS:
        return zoo_aexists(zh, q->path, 0, sf_zkbatch_stat_done, q);
    case SF_ZKBATCH_CHILDREN:
        return zoo_aget_children2(zh, q->path, 0, sf_zkbatch_kids_done, q);
    case SF_ZKBATCH_MULTI:
        return sf_zkbatch_amulti(zh, q->count, q->ops, q->results, sf_zkbatch_multi_done, q);
    default:
        return ZBADARGUMENTS;
    }
}

void sf_zkbatch_send(zhandle_t *zh, sf_zkbatch_req *reqs, int n)
{
    sf_zkbatch b = {.pending = 0};
    pthread_mutex_init(&b.mu, NULL);
    pthread_cond_init(&b.cv, NULL);
    for (int i = 0; i < n; i++) {
        if (reqs[i].kind == SF_ZKBATCH_NONE) {
            reqs[i].kids = (struct String_vector){0, NULL}; /* so req_free frees nothing */
            continue;
        }
        sf_zkbatch_add(&b, &reqs[i]);
        sf_zkbatch_queued(&b, &reqs[i], sf_zkbatch_queue(zh, &reqs[i]));
    }
    pthread_mutex_lock(&b.mu);
    while (b.pending > 0)
        pthread_cond_wait(&b.cv, &b.mu);
    pthread_mutex_unlock(&b.mu);
    pthread_cond_destroy(&b.cv);
    pthread_mutex_destroy(&b.mu);
}

void sf_zkbatch_req_free(sf_zkbatch_req *req)
{
    for (int i = 0; i < req->kids.count; i++)
        free(req->kids.data[i]);
    free(req->kids.data);
    req->kids.data = NULL;
    req->kids.count = 0;
}
