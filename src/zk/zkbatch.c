/* zkbatch.c -- several ZooKeeper requests in one round trip, and the registry's multi
 * (zkbatch.h). The completions run on the client library's completion thread and
 * only copy the answer. */
#define _GNU_SOURCE
#include "zkbatch.h"

#include <stdlib.h>
#include <string.h>

void sf_zkbatch_init(sf_zkbatch *b)
{
    pthread_mutex_init(&b->mu, NULL);
    pthread_cond_init(&b->cv, NULL);
    b->pending = 0;
}

/* A read answered: one fewer to wait for. */
static void sf_zkbatch_done(sf_zkbatch_read *r, int rc, const struct Stat *stat)
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
    sf_zkbatch_read *r = (sf_zkbatch_read *)data;
    size_t n = rc == ZOK && value != NULL && len > 0 ? (size_t)len : 0;
    if (n >= sizeof r->data)
        n = sizeof r->data - 1;
    memcpy(r->data, value != NULL ? value : "", n);
    r->data[n] = '\0';
    sf_zkbatch_done(r, rc, stat);
}

static void sf_zkbatch_stat_done(int rc, const struct Stat *stat, const void *data)
{
    sf_zkbatch_done((sf_zkbatch_read *)data, rc, stat);
}

static void sf_zkbatch_kids_done(int rc, const struct String_vector *kids,
                                   const struct Stat *stat, const void *data)
{
    sf_zkbatch_read *r = (sf_zkbatch_read *)data;
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

/* Readies out for a read, counting it before it is queued (its answer may come at once). */
static void sf_zkbatch_add(sf_zkbatch *b, sf_zkbatch_read *out)
{
    memset(out, 0, sizeof *out);
    out->batch = b;
    out->rc = ZOK;
    pthread_mutex_lock(&b->mu);
    b->pending++;
    pthread_mutex_unlock(&b->mu);
}

/* A read that could not be queued: nothing will answer it. */
static void sf_zkbatch_queued(sf_zkbatch *b, sf_zkbatch_read *out, int rc)
{
    if (rc == ZOK)
        return;
    out->rc = rc;
    pthread_mutex_lock(&b->mu);
    b->pending--;
    pthread_mutex_unlock(&b->mu);
}

void sf_zkbatch_get(sf_zkbatch *b, zhandle_t *zh, const char *path, sf_zkbatch_read *out)
{
    sf_zkbatch_add(b, out);
    sf_zkbatch_queued(b, out, zoo_aget(zh, path, 0, sf_zkbatch_data_done, out));
}

void sf_zkbatch_exists(sf_zkbatch *b, zhandle_t *zh, const char *path, sf_zkbatch_read *out)
{
    sf_zkbatch_add(b, out);
    sf_zkbatch_queued(b, out, zoo_aexists(zh, path, 0, sf_zkbatch_stat_done, out));
}

void sf_zkbatch_children(sf_zkbatch *b, zhandle_t *zh, const char *path, sf_zkbatch_read *out)
{
    sf_zkbatch_add(b, out);
    sf_zkbatch_queued(b, out, zoo_aget_children2(zh, path, 0, sf_zkbatch_kids_done, out));
}

/* The path a sub-request names, for its copy. */
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
    sf_zkbatch_done((sf_zkbatch_read *)data, rc, NULL);
}

void sf_zkbatch_multi(sf_zkbatch *b, zhandle_t *zh, int count, const zoo_op_t *ops,
                        zoo_op_result_t *results, sf_zkbatch_read *out)
{
    sf_zkbatch_add(b, out);
    sf_zkbatch_queued(b, out, sf_zkbatch_amulti(zh, count, ops, results, sf_zkbatch_multi_done,
                                              out));
}

void sf_zkbatch_wait(sf_zkbatch *b)
{
    pthread_mutex_lock(&b->mu);
    while (b->pending > 0)
        pthread_cond_wait(&b->cv, &b->mu);
    pthread_mutex_unlock(&b->mu);
}

void sf_zkbatch_read_free(sf_zkbatch_read *r)
{
    for (int i = 0; i < r->kids.count; i++)
        free(r->kids.data[i]);
    free(r->kids.data);
    r->kids.data = NULL;
    r->kids.count = 0;
}

void sf_zkbatch_free(sf_zkbatch *b)
{
    pthread_cond_destroy(&b->cv);
    pthread_mutex_destroy(&b->mu);
}
