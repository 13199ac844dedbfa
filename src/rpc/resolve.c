/* resolve.c -- see resolve.h. One process-wide table of names under one lock; each lookup
 * is a detached thread that fills its entry and wakes the callers waiting on it. An entry
 * stays while a lookup or a caller holds it; past SF_RESOLVE_NAMES the least recently used
 * idle one makes room. Detached lookups are bounded (SF_RESOLVE_LOOKUPS at once): a caller
 * that finds every slot taken waits for one within its deadline. */
#define _POSIX_C_SOURCE 200809L
#include "resolve.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clocks.h"
#include "common/threads.h"

#define SF_RESOLVE_NAMES 1024
#define SF_RESOLVE_LOOKUPS 16

typedef struct sf_name {
    char *host;
    int64_t ok_at;     /* CLOCK_MONOTONIC ms of the last lookup that gave addresses; 0 none */
    int64_t failed_at; /* of the last one that failed; 0 none */
    int64_t used_at;
    int gai_error;     /* of the last failed lookup */
    int holders;       /* callers waiting on it, and its lookup */
    bool looking;
    sf_addrs addrs;    /* port 0 */
} sf_name;

static struct {
    pthread_mutex_t lock;
    pthread_cond_t done; /* a lookup ended */
    sf_name *names[SF_RESOLVE_NAMES];
    int n, lookups;
} sf_resolver = {.lock = PTHREAD_MUTEX_INITIALIZER};
static pthread_once_t sf_resolver_once = PTHREAD_ONCE_INIT;
static int sf_resolver_init_rc;

static void sf_resolver_init(void)
{
    sf_resolver_init_rc = sf_clocks_cond_init(&sf_resolver.done);
}

static void *sf_resolve_lookup(void *arg)
{
    sf_name *e = arg;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_ADDRCONFIG};
    struct addrinfo *res = NULL;
    int rc = getaddrinfo(e->host, NULL, &hints, &res);
    pthread_mutex_lock(&sf_resolver.lock);
    int64_t now = sf_clocks_mono_ms();
    if (rc == 0) {
        e->addrs.n = 0;
        for (struct addrinfo *ai = res; ai != NULL && e->addrs.n < SF_RESOLVE_MAX_ADDRS;
             ai = ai->ai_next) {
            if (ai->ai_addrlen > sizeof e->addrs.addr[0])
                continue;
            memcpy(&e->addrs.addr[e->addrs.n], ai->ai_addr, ai->ai_addrlen);
            e->addrs.len[e->addrs.n++] = ai->ai_addrlen;
        }
        rc = e->addrs.n > 0 ? 0 : EAI_NONAME;
    }
    if (rc == 0) {
        e->ok_at = now;
    } else {
        e->failed_at = now;
        e->gai_error = rc;
    }
    e->looking = false;
    e->holders--;
    sf_resolver.lookups--;
    pthread_cond_broadcast(&sf_resolver.done);
    pthread_mutex_unlock(&sf_resolver.lock);
    if (res != NULL)
        freeaddrinfo(res);
    return NULL;
}

/* Starts a lookup of e unless one runs or every slot is taken. Lock held. */
static void sf_resolve_start(sf_name *e)
{
    if (e->looking || sf_resolver.lookups >= SF_RESOLVE_LOOKUPS)
        return;
    pthread_attr_t attr;
    pthread_t thread;
    if (pthread_attr_init(&attr) != 0)
        return;
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    e->looking = true;
    e->holders++;
    sf_resolver.lookups++;
    if (sf_threads_start(&thread, &attr, sf_resolve_lookup, e) != 0) {
        e->looking = false;
        e->holders--;
        sf_resolver.lookups--;
    }
    pthread_attr_destroy(&attr);
}

/* The entry for host, made (evicting the least recently used idle one when the table is
 * full) if need be; NULL when every entry is busy or memory ran out. Lock held. */
static sf_name *sf_resolve_entry(const char *host)
{
    sf_name *lru = NULL;
    int at = -1;
    for (int i = 0; i < sf_resolver.n; i++) {
        sf_name *e = sf_resolver.names[i];
        if (strcmp(e->host, host) == 0)
            return e;
        if (e->holders == 0 && (lru == NULL || e->used_at < lru->used_at)) {
            lru = e;
            at = i;
        }
    }
    sf_name *e = calloc(1, sizeof *e);
    if (e == NULL || (e->host = strdup(host)) == NULL) {
        free(e);
        return NULL;
    }
    if (sf_resolver.n < SF_RESOLVE_NAMES) {
        at = sf_resolver.n++;
    } else if (lru != NULL) {
        free(lru->host);
        free(lru);
    } else {
        free(e->host);
        free(e);
        return NULL;
    }
    sf_resolver.names[at] = e;
    return e;
}

/* Copies e's addresses into out with port set. */
static void sf_resolve_copy(const sf_name *e, int port, sf_addrs *out)
{
    *out = e->addrs;
    for (int i = 0; i < out->n; i++) {
        struct sockaddr_storage *a = &out->addr[i];
        if (a->ss_family == AF_INET)
            ((struct sockaddr_in *)a)->sin_port = htons((uint16_t)port);
        else if (a->ss_family == AF_INET6)
            ((struct sockaddr_in6 *)a)->sin6_port = htons((uint16_t)port);
    }
}

/* A numeric address needs no lookup: 0 with out filled, or -1 when host is a name. */
static int sf_resolve_numeric(const char *host, int port, sf_addrs *out)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_NUMERICHOST};
    struct addrinfo *res = NULL;
    if (getaddrinfo(host, NULL, &hints, &res) != 0)
        return -1;
    sf_name e = {.addrs.n = 0};
    for (struct addrinfo *ai = res; ai != NULL && e.addrs.n < SF_RESOLVE_MAX_ADDRS;
         ai = ai->ai_next) {
        if (ai->ai_addrlen > sizeof e.addrs.addr[0])
            continue;
        memcpy(&e.addrs.addr[e.addrs.n], ai->ai_addr, ai->ai_addrlen);
        e.addrs.len[e.addrs.n++] = ai->ai_addrlen;
    }
    freeaddrinfo(res);
    if (e.addrs.n == 0)
        return -1;
    sf_resolve_copy(&e, port, out);
    return 0;
}

int sf_resolve(const char *host, int port, int64_t deadline, sf_addrs *out, char *err,
               size_t errlen)
{
    if (sf_resolve_numeric(host, port, out) == 0)
        return 0;
    int64_t started = sf_clocks_mono_ms();
    pthread_once(&sf_resolver_once, sf_resolver_init);
    if (sf_resolver_init_rc != 0) {
        snprintf(err, errlen, "cannot resolve '%s': the resolver's condition failed: %s", host,
                 strerror(sf_resolver_init_rc));
        errno = EHOSTUNREACH;
        return -1;
    }
    pthread_mutex_lock(&sf_resolver.lock);
    sf_name *e = sf_resolve_entry(host);
    if (e == NULL) {
        pthread_mutex_unlock(&sf_resolver.lock);
        snprintf(err, errlen, "cannot resolve '%s': out of memory, or %d names in use at once",
                 host, SF_RESOLVE_NAMES);
        errno = EHOSTUNREACH;
        return -1;
    }
    e->holders++;
    int rc = -1, cause = ETIMEDOUT;
    for (;;) {
        int64_t now = sf_clocks_mono_ms();
        e->used_at = now;
        if (e->ok_at != 0 && now - e->ok_at < SF_RESOLVE_MAX_AGE_MS) {
            if (now - e->ok_at >= SF_RESOLVE_REFRESH_MS &&
                (e->failed_at < e->ok_at || now - e->failed_at >= SF_RESOLVE_FAILED_MS))
                sf_resolve_start(e); /* in the background: these addresses serve meanwhile */
            sf_resolve_copy(e, port, out);
            rc = 0;
            break;
        }
        if (e->failed_at > e->ok_at && now - e->failed_at < SF_RESOLVE_FAILED_MS) {
            snprintf(err, errlen, "cannot resolve '%s': %s", host, gai_strerror(e->gai_error));
            cause = EHOSTUNREACH;
            break;
        }
        sf_resolve_start(e);
        if (now >= deadline) {
            snprintf(err, errlen, "cannot resolve '%s' within %lld ms (the lookup goes on)",
                     host, (long long)(now - started));
            break;
        }
        struct timespec until = sf_clocks_mono_timespec(deadline);
        pthread_cond_timedwait(&sf_resolver.done, &sf_resolver.lock, &until);
    }
    e->holders--;
    pthread_mutex_unlock(&sf_resolver.lock);
    if (rc != 0)
        errno = cause;
    return rc;
}
