/* discover.c -- the ZooKeeper watch behind a client's node list. One thread reads the
 * children and their data with the synchronous API whenever the watcher says something
 * changed; the watcher itself (on ZooKeeper's thread) only sets flags. */
#define _POSIX_C_SOURCE 200809L
#include "discover.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The synchronous API exists only in the multi-threaded client. */
#ifndef THREADED
#define THREADED
#endif
#include <zookeeper/zookeeper.h>

#include "common/clocks.h"
#include "common/hostport.h"
#include "common/threads.h"
#include "common/zkpath.h"
#include "rpc/resolve.h"

struct sfc_discover {
    pthread_mutex_t lock;
    pthread_cond_t wake;
    char *hosts;
    char *path;
    int session_timeout_ms;
    sfc_discover_list_fn on_list;
    sfc_discover_why_fn on_why;
    void *ctx;
    zhandle_t *zh;
    bool connected, expired, dirty, stopping, listed;
    pthread_t thread;
};

void sfc_discover_set_logging(int verbose)
{
    zoo_set_debug_level(verbose ? ZOO_LOG_LEVEL_INFO : ZOO_LOG_LEVEL_ERROR);
}

/* Session changes and child/exists watches: note them and wake the thread. */
static void sfc_discover_watcher(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
    (void)zh;
    (void)path;
    sfc_discover *d = ctx;
    pthread_mutex_lock(&d->lock);
    if (type == ZOO_SESSION_EVENT) {
        d->connected = state == ZOO_CONNECTED_STATE;
        d->expired = state == ZOO_EXPIRED_SESSION_STATE || state == ZOO_AUTH_FAILED_STATE;
    }
    d->dirty = true; /* after a reconnect too: changes may have been missed */
    pthread_cond_signal(&d->wake);
    pthread_mutex_unlock(&d->lock);
}

/* Sorts children by worker id, so the list (and the round robin over it) is stable. */
static int sfc_discover_by_id(const void *a, const void *b)
{
    int64_t x = -1, y = -1;
    sf_zkpath_parse_worker_id(*(char *const *)a, &x);
    sf_zkpath_parse_worker_id(*(char *const *)b, &y);
    return (x > y) - (x < y);
}

/* Reads the children and their data once, setting the watch again. ZOK, or the error. */
static int sfc_discover_read(sfc_discover *d, zhandle_t *zh, char *why, size_t whylen)
{
    struct String_vector kids = {0, NULL};
    int rc = zoo_wget_children(zh, d->path, sfc_discover_watcher, d, &kids);
    if (rc == ZNONODE) { /* nothing registered yet: be told when the path appears */
        rc = zoo_wexists(zh, d->path, sfc_discover_watcher, d, NULL);
        if (rc == ZNONODE) {
            d->on_list(d->ctx, NULL, 0);
            return ZOK;
        }
        if (rc == ZOK) /* made in between: its children's watch is the one that matters */
            rc = zoo_wget_children(zh, d->path, sfc_discover_watcher, d, &kids);
    }
    if (rc != ZOK) {
        snprintf(why, whylen, "listing %s in ZooKeeper %s failed: %s", d->path, d->hosts,
                 zerror(rc));
        return rc;
    }
    qsort(kids.data, (size_t)kids.count, sizeof *kids.data, sfc_discover_by_id);
    char **names = calloc(kids.count > 0 ? (size_t)kids.count : 1, sizeof *names);
    int n = 0;
    for (int i = 0; names != NULL && i < kids.count; i++) {
        int64_t worker;
        if (!sf_zkpath_parse_worker_id(kids.data[i], &worker))
            continue;
        char node[SF_ZKPATH_MAX + 32], data[300];
        int len = (int)sizeof data - 1;
        snprintf(node, sizeof node, "%s/%s", d->path, kids.data[i]);
        if (zoo_get(zh, node, 0, data, &len, NULL) != ZOK || len <= 0)
            continue; /* gone since listed, or no address */
        data[len] = '\0';
        int64_t dc;
        if (sf_zkpath_parse_embedded(data, &dc))
            continue; /* a program on libsnowflake-zk: no port to call */
        names[n] = strdup(data);
        n += names[n] != NULL;
    }
    deallocate_String_vector(&kids);
    if (names == NULL) {
        snprintf(why, whylen, "out of memory for the node list");
        return ZSYSTEMERROR;
    }
    d->on_list(d->ctx, (const char *const *)names, n);
    for (int i = 0; i < n; i++)
        free(names[i]);
    free(names);
    return ZOK;
}

static void *sfc_discover_run(void *arg)
{
    sfc_discover *d = arg;
    char why[400];
    pthread_mutex_lock(&d->lock);
    while (!d->stopping) {
        if (d->expired || d->zh == NULL) { /* a new session: the old one cannot come back */
            zhandle_t *old = d->zh;
            d->zh = NULL;
            d->expired = d->connected = false;
            pthread_mutex_unlock(&d->lock);
            if (old != NULL)
                zookeeper_close(old);
            zhandle_t *zh = zookeeper_init(d->hosts, sfc_discover_watcher,
                                           d->session_timeout_ms, NULL, d, 0);
            pthread_mutex_lock(&d->lock);
            d->zh = zh;
            if (zh == NULL) {
                snprintf(why, sizeof why, "cannot start a ZooKeeper client for %s: %s",
                         d->hosts, strerror(errno));
                if (!d->listed)
                    d->on_why(d->ctx, why);
            }
        }
        if (d->zh != NULL && d->connected && d->dirty) {
            d->dirty = false;
            zhandle_t *zh = d->zh;
            pthread_mutex_unlock(&d->lock);
            int rc = sfc_discover_read(d, zh, why, sizeof why);
            pthread_mutex_lock(&d->lock);
            if (rc == ZOK) {
                d->listed = true;
                continue;
            }
            d->dirty = true; /* try again shortly */
            if (!d->listed)
                d->on_why(d->ctx, why);
        } else if (!d->listed && !d->connected) {
            snprintf(why, sizeof why, "not connected to ZooKeeper %s yet", d->hosts);
            d->on_why(d->ctx, why);
        }
        struct timespec until = sf_clocks_mono_timespec(sf_clocks_mono_ms() + 200);
        pthread_cond_timedwait(&d->wake, &d->lock, &until);
    }
    zhandle_t *zh = d->zh;
    d->zh = NULL;
    pthread_mutex_unlock(&d->lock);
    if (zh != NULL)
        zookeeper_close(zh);
    return NULL;
}

/* Why zookeeper_init refused hosts, which it says only through errno (ENOENT, EINVAL): the
 * first entry whose name does not resolve, else errno's text. */
static void sfc_discover_why_init(const char *hosts, int cause, char *why, size_t whylen)
{
    char *copy = strdup(hosts), *save = NULL;
    for (char *tok = copy != NULL ? strtok_r(copy, ",", &save) : NULL; tok != NULL;
         tok = strtok_r(NULL, ",", &save)) {
        char host[SF_HOSTPORT_HOST_MAX], err[400];
        int port;
        sf_addrs addrs;
        tok[strcspn(tok, "/")] = '\0'; /* the chroot after the last entry */
        if (!sf_hostport_parse(tok, host, sizeof host, &port, err, sizeof err) ||
            sf_resolve(host, port, sf_clocks_mono_ms() + 1000, &addrs, err, sizeof err) != 0) {
            snprintf(why, whylen, "zookeeper_hosts '%s': %s", hosts, err);
            free(copy);
            return;
        }
    }
    free(copy);
    snprintf(why, whylen, "zookeeper_hosts '%s': the ZooKeeper client refused them: %s", hosts,
             strerror(cause));
}

sfc_discover *sfc_discover_start(const char *hosts, const char *path, int session_timeout_ms,
                                 sfc_discover_list_fn on_list, sfc_discover_why_fn on_why,
                                 void *ctx, char *why, size_t whylen)
{
    sfc_discover *d = calloc(1, sizeof *d);
    if (d == NULL || (d->hosts = strdup(hosts)) == NULL || (d->path = strdup(path)) == NULL) {
        snprintf(why, whylen, "out of memory for the ZooKeeper watch");
        if (d != NULL)
            free(d->hosts);
        free(d);
        return NULL;
    }
    d->session_timeout_ms = session_timeout_ms;
    d->on_list = on_list;
    d->on_why = on_why;
    d->ctx = ctx;
    d->dirty = true;
    pthread_mutex_init(&d->lock, NULL);
    if (sf_clocks_cond_init(&d->wake) != 0) {
        snprintf(why, whylen, "cannot set up the ZooKeeper watch's condition");
        pthread_mutex_destroy(&d->lock);
        free(d->path);
        free(d->hosts);
        free(d);
        return NULL;
    }
    sigset_t mask; /* the client's two threads are started inside, with the caller's mask */
    sf_threads_block(&mask);
    d->zh = zookeeper_init(hosts, sfc_discover_watcher, session_timeout_ms, NULL, d, 0);
    int init_errno = errno;
    sf_threads_unblock(&mask);
    int rc = d->zh == NULL ? (init_errno != 0 ? init_errno : EINVAL)
                           : sf_threads_start(&d->thread, NULL, sfc_discover_run, d);
    if (rc != 0) {
        if (d->zh == NULL)
            sfc_discover_why_init(hosts, rc, why, whylen);
        else
            snprintf(why, whylen, "cannot start the ZooKeeper watch for '%s': %s", hosts,
                     strerror(rc));
        if (d->zh != NULL)
            zookeeper_close(d->zh);
        pthread_cond_destroy(&d->wake);
        pthread_mutex_destroy(&d->lock);
        free(d->path);
        free(d->hosts);
        free(d);
        return NULL;
    }
    return d;
}

void sfc_discover_stop(sfc_discover *d)
{
    pthread_mutex_lock(&d->lock);
    d->stopping = true;
    pthread_cond_signal(&d->wake);
    pthread_mutex_unlock(&d->lock);
    pthread_join(d->thread, NULL);
    pthread_cond_destroy(&d->wake);
    pthread_mutex_destroy(&d->lock);
    free(d->path);
    free(d->hosts);
    free(d);
}
