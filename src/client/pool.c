/* pool.c -- the nodes, their connections and their backoff, under one lock held only for
 * list and pointer work: connects, calls and closes happen outside it. */
#define _POSIX_C_SOURCE 200809L
#include "pool.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>

#include "common/clocks.h"

bool sfc_pool_parse_server(const char *name, char *host, size_t hostlen, int *port,
                           char *why, size_t whylen)
{
    const char *colon = strrchr(name, ':');
    const char *h = name;
    size_t hl = colon != NULL ? (size_t)(colon - name) : 0;
    if (name[0] == '[') { /* [v6]:port */
        const char *close = strchr(name, ']');
        if (close == NULL || close[1] != ':') {
            snprintf(why, whylen, "'%s' is not [address]:port", name);
            return false;
        }
        h = name + 1;
        hl = (size_t)(close - h);
        colon = close + 1;
    }
    if (colon == NULL || hl == 0 || hl >= hostlen) {
        snprintf(why, whylen, "'%s' is not host:port (a host of 1..%zu characters)", name,
                 hostlen - 1);
        return false;
    }
    char *end;
    errno = 0;
    long v = strtol(colon + 1, &end, 10);
    if (colon[1] == '\0' || *end != '\0' || errno != 0 || v < 1 || v > 65535) {
        snprintf(why, whylen, "'%s' has no valid port: allowed 1..65535", name);
        return false;
    }
    memcpy(host, h, hl);
    host[hl] = '\0';
    *port = (int)v;
    return true;
}

/* Frees a node that left the list once nothing holds it. Called with the lock held; closes
 * its idle connections after copying them out, so the caller closes them unlocked. */
static sfc_conn *sfc_pool_unlink_idle(sfc_server *s)
{
    sfc_conn *idle = s->idle;
    s->idle = NULL;
    for (sfc_conn *c = idle; c != NULL; c = c->next)
        s->open--;
    return idle;
}

static void sfc_pool_close_all(sfc_conn *c)
{
    while (c != NULL) {
        sfc_conn *next = c->next;
        sf_client_close(&c->rpc);
        free(c);
        c = next;
    }
}

/* Bounds a socket's reads and writes by ms (>= 1). A timeout already set a little under ms
 * is kept: setting one costs two system calls, and what is left of a deadline differs by a
 * millisecond or so from call to call. False leaves the connection unfit for use. */
static bool sfc_conn_set_timeout(sfc_conn *c, int ms)
{
    int slack = ms / 8 > 10 ? ms / 8 : 10;
    if (c->timeout_ms <= ms && c->timeout_ms >= ms - slack)
        return true;
    struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
    int fd = c->rpc.socket->sd;
    if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) != 0 ||
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) != 0)
        return false;
    c->timeout_ms = ms;
    return true;
}

static sfc_conn *sfc_conn_open(const sfc_server *s, int timeout_ms, char *why, size_t whylen)
{
    sfc_conn *c = calloc(1, sizeof *c);
    if (c == NULL) {
        snprintf(why, whylen, "out of memory for a connection to %s", s->name);
        return NULL;
    }
    char err[200];
    if (!sf_client_open(&c->rpc, s->host, s->port, timeout_ms, err, sizeof err)) {
        snprintf(why, whylen, "cannot connect to %s: %s", s->name, err);
        free(c);
        return NULL;
    }
    c->timeout_ms = timeout_ms;
    return c;
}

/* The prober's check of a node whose backoff ended: the original client's validation,
 * a get_timestamp on a new connection. */
static bool sfc_pool_probe_one(sfc_pool *p, sfc_server *s, char *why, size_t whylen)
{
    sfc_conn *c = sfc_conn_open(s, p->try_timeout_ms, why, whylen);
    if (c == NULL)
        return false;
    gint64 ts = 0;
    GError *error = NULL;
    if (!sf_thrift_snowflake_if_get_timestamp(c->rpc.api, &ts, &error)) {
        snprintf(why, whylen, "%s did not answer get_timestamp: %s", s->name,
                 error != NULL ? error->message : "unknown error");
        g_clear_error(&error);
        sf_client_close(&c->rpc);
        free(c);
        return false;
    }
    pthread_mutex_lock(&p->lock);
    s->open++;
    c->next = s->idle;
    s->idle = c;
    pthread_mutex_unlock(&p->lock);
    return true;
}

/* Takes the node whose backoff ended first, if it has ended, marking it probing; else the
 * time to sleep until one does (-1: none is down). Lock held. */
static sfc_server *sfc_pool_due(sfc_pool *p, int64_t now, int64_t *wait_ms)
{
    sfc_server *due = NULL;
    *wait_ms = -1;
    for (int i = 0; i < p->n; i++) {
        sfc_server *s = p->servers[i];
        if (s->retry_at == 0 || s->probing)
            continue;
        if (s->retry_at <= now) {
            due = s;
            break;
        }
        if (*wait_ms < 0 || s->retry_at - now < *wait_ms)
            *wait_ms = s->retry_at - now;
    }
    if (due != NULL) {
        due->probing = true;
        due->refs++;
    }
    return due;
}

static void *sfc_pool_prober(void *arg)
{
    sfc_pool *p = arg;
    pthread_mutex_lock(&p->lock);
    while (!p->stopping) {
        int64_t wait_ms;
        sfc_server *s = sfc_pool_due(p, sf_clocks_mono_ms(), &wait_ms);
        if (s == NULL) {
            struct timespec until =
                sf_clocks_mono_timespec(sf_clocks_mono_ms() + (wait_ms < 0 ? 1000 : wait_ms));
            pthread_cond_timedwait(&p->probe_wake, &p->lock, &until);
            continue;
        }
        pthread_mutex_unlock(&p->lock);
        char why[600];
        bool ok = sfc_pool_probe_one(p, s, why, sizeof why);
        if (ok)
            sfc_pool_succeeded(p, s);
        else
            sfc_pool_failed(p, s, why, true);
        pthread_mutex_lock(&p->lock);
        s->probing = false;
        pthread_mutex_unlock(&p->lock);
        sfc_pool_release(p, s);
        pthread_mutex_lock(&p->lock);
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

bool sfc_pool_init(sfc_pool *p, const sfc_options *o, char *why, size_t whylen)
{
    memset(p, 0, sizeof *p);
    if (pthread_mutex_init(&p->lock, NULL) != 0 || sf_clocks_cond_init(&p->changed) != 0 ||
        sf_clocks_cond_init(&p->probe_wake) != 0) {
        snprintf(why, whylen, "cannot set up the pool's lock");
        return false;
    }
    p->connections_per_server = o->connections_per_server;
    p->try_timeout_ms = o->try_timeout_ms;
    p->backoff_ms = o->backoff_ms;
    p->backoff_max_ms = o->backoff_max_ms;
    snprintf(p->why_no_list, sizeof p->why_no_list, "no node is known yet");
    int rc = pthread_create(&p->prober, NULL, sfc_pool_prober, p);
    if (rc != 0) {
        snprintf(why, whylen, "cannot start the prober thread: %s", strerror(rc));
        return false;
    }
    p->prober_started = true;
    return true;
}

void sfc_pool_destroy(sfc_pool *p)
{
    pthread_mutex_lock(&p->lock);
    p->stopping = true;
    pthread_cond_broadcast(&p->probe_wake);
    pthread_mutex_unlock(&p->lock);
    if (p->prober_started)
        pthread_join(p->prober, NULL);
    for (int i = 0; i < p->n; i++) {
        sfc_pool_close_all(sfc_pool_unlink_idle(p->servers[i]));
        free(p->servers[i]);
    }
    free(p->servers);
    pthread_cond_destroy(&p->changed);
    pthread_cond_destroy(&p->probe_wake);
    pthread_mutex_destroy(&p->lock);
}

/* Drops a node that left the list when no call holds it any more. Lock held; returns the
 * idle connections to close unlocked. */
static sfc_conn *sfc_pool_drop_if_unused(sfc_server *s)
{
    if (s->listed || s->refs > 0)
        return NULL;
    sfc_conn *idle = sfc_pool_unlink_idle(s);
    free(s);
    return idle;
}

bool sfc_pool_set_servers(sfc_pool *p, const char *const *names, int n)
{
    sfc_server **next = calloc(n > 0 ? (size_t)n : 1, sizeof *next);
    if (next == NULL)
        return false;
    int made = 0;
    for (int i = 0; i < n; i++) {
        sfc_server *s = calloc(1, sizeof *s);
        char why[128];
        if (s == NULL) {
            for (int j = 0; j < made; j++)
                free(next[j]);
            free(next);
            return false;
        }
        if (!sfc_pool_parse_server(names[i], s->host, sizeof s->host, &s->port, why, sizeof why)) {
            free(s);
            continue;
        }
        snprintf(s->name, sizeof s->name, "%s", names[i]);
        s->listed = true;
        next[made++] = s;
    }
    sfc_conn *to_close = NULL;
    pthread_mutex_lock(&p->lock);
    /* Keep the node already known under each name, with its connections and backoff. */
    for (int i = 0; i < made; i++) {
        for (int j = 0; j < p->n; j++) {
            if (p->servers[j] != NULL && strcmp(p->servers[j]->name, next[i]->name) == 0) {
                free(next[i]);
                next[i] = p->servers[j];
                p->servers[j] = NULL;
                break;
            }
        }
    }
    for (int j = 0; j < p->n; j++) {
        sfc_server *gone = p->servers[j];
        if (gone == NULL)
            continue;
        gone->listed = false;
        sfc_conn *idle = sfc_pool_drop_if_unused(gone);
        while (idle != NULL) {
            sfc_conn *c = idle;
            idle = idle->next;
            c->next = to_close;
            to_close = c;
        }
    }
    free(p->servers);
    p->servers = next;
    p->n = made;
    p->listed_once = true;
    pthread_cond_broadcast(&p->changed);
    pthread_cond_broadcast(&p->probe_wake);
    pthread_mutex_unlock(&p->lock);
    sfc_pool_close_all(to_close);
    return true;
}

void sfc_pool_set_why_no_list(sfc_pool *p, const char *why)
{
    pthread_mutex_lock(&p->lock);
    snprintf(p->why_no_list, sizeof p->why_no_list, "%s", why);
    pthread_mutex_unlock(&p->lock);
}

static bool sfc_pool_was_tried(const sfc_server *s, sfc_server *const *tried, int ntried)
{
    for (int i = 0; i < ntried; i++)
        if (tried[i] == s)
            return true;
    return false;
}

/* Waits on p->changed until deadline; false once it has passed. Lock held. */
static bool sfc_pool_wait(sfc_pool *p, int64_t deadline)
{
    if (deadline <= sf_clocks_mono_ms())
        return false;
    struct timespec until = sf_clocks_mono_timespec(deadline);
    pthread_cond_timedwait(&p->changed, &p->lock, &until);
    return true;
}

sfc_server *sfc_pool_pick(sfc_pool *p, sfc_server *const *tried, int ntried, int64_t deadline,
                          char *why, size_t whylen)
{
    pthread_mutex_lock(&p->lock);
    while (!p->listed_once || (p->n == 0 && ntried == 0)) {
        if (!sfc_pool_wait(p, deadline)) {
            snprintf(why, whylen, "%s", p->listed_once ? "no node is listed" : p->why_no_list);
            pthread_mutex_unlock(&p->lock);
            return NULL;
        }
    }
    sfc_server *pick = NULL, *fallback = NULL;
    unsigned start = atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed);
    for (int i = 0; i < p->n && pick == NULL; i++) {
        sfc_server *s = p->servers[(start + (unsigned)i) % (unsigned)p->n];
        if (sfc_pool_was_tried(s, tried, ntried))
            continue;
        if (s->retry_at == 0)
            pick = s;
        else if (fallback == NULL || s->retry_at < fallback->retry_at)
            fallback = s;
    }
    if (pick == NULL)
        pick = fallback;
    if (pick != NULL)
        pick->refs++;
    else
        snprintf(why, whylen, "%s", p->n == 0 ? "no node is listed" : "every node was tried");
    pthread_mutex_unlock(&p->lock);
    return pick;
}

void sfc_pool_release(sfc_pool *p, sfc_server *s)
{
    pthread_mutex_lock(&p->lock);
    s->refs--;
    sfc_conn *idle = sfc_pool_drop_if_unused(s);
    pthread_mutex_unlock(&p->lock);
    sfc_pool_close_all(idle);
}

int sfc_pool_count(sfc_pool *p)
{
    pthread_mutex_lock(&p->lock);
    int n = p->n;
    pthread_mutex_unlock(&p->lock);
    return n;
}

/* What is left until deadline, at least 1 ms (a socket timeout of 0 would be none). */
static int sfc_ms_left(int64_t deadline)
{
    int64_t left = deadline - sf_clocks_mono_ms();
    return left < 1 ? 1 : left > INT_MAX ? INT_MAX : (int)left;
}

sfc_conn *sfc_pool_take(sfc_pool *p, sfc_server *s, int64_t deadline, bool *reused,
                        bool *connect_failed, char *why, size_t whylen)
{
    *connect_failed = false;
    pthread_mutex_lock(&p->lock);
    while (s->idle == NULL && s->open >= p->connections_per_server) {
        if (!sfc_pool_wait(p, deadline)) {
            snprintf(why, whylen, "all %d connections to %s stayed busy", s->open, s->name);
            pthread_mutex_unlock(&p->lock);
            return NULL;
        }
    }
    sfc_conn *c = s->idle;
    if (c != NULL)
        s->idle = c->next;
    else
        s->open++; /* the slot of the connection about to be made */
    pthread_mutex_unlock(&p->lock);
    *reused = c != NULL;
    if (c == NULL) {
        c = sfc_conn_open(s, sfc_ms_left(deadline), why, whylen);
        if (c == NULL) {
            pthread_mutex_lock(&p->lock);
            s->open--;
            pthread_cond_broadcast(&p->changed);
            pthread_mutex_unlock(&p->lock);
            *connect_failed = true;
            return NULL;
        }
    }
    c->next = NULL;
    int left = sfc_ms_left(deadline);
    if (!sfc_conn_set_timeout(c, left)) {
        snprintf(why, whylen, "setting a %d ms timeout on a connection to %s failed: %s",
                 left, s->name, strerror(errno));
        sfc_pool_discard(p, s, c);
        return NULL;
    }
    return c;
}

void sfc_pool_drop_idle(sfc_pool *p, sfc_server *s)
{
    pthread_mutex_lock(&p->lock);
    sfc_conn *idle = sfc_pool_unlink_idle(s);
    pthread_cond_broadcast(&p->changed);
    pthread_mutex_unlock(&p->lock);
    sfc_pool_close_all(idle);
}

void sfc_pool_give(sfc_pool *p, sfc_server *s, sfc_conn *c)
{
    pthread_mutex_lock(&p->lock);
    c->next = s->idle;
    s->idle = c;
    pthread_cond_broadcast(&p->changed); /* waiters for other nodes share the condition */
    pthread_mutex_unlock(&p->lock);
}

void sfc_pool_discard(sfc_pool *p, sfc_server *s, sfc_conn *c)
{
    sf_client_close(&c->rpc);
    free(c);
    pthread_mutex_lock(&p->lock);
    s->open--;
    pthread_cond_broadcast(&p->changed);
    pthread_mutex_unlock(&p->lock);
}

void sfc_pool_succeeded(sfc_pool *p, sfc_server *s)
{
    pthread_mutex_lock(&p->lock);
    s->calls++;
    if (s->retry_at != 0 || s->failures != 0) {
        s->retry_at = 0;
        s->failures = 0;
        pthread_cond_broadcast(&p->changed);
    }
    pthread_mutex_unlock(&p->lock);
}

void sfc_pool_failed(sfc_pool *p, sfc_server *s, const char *why, bool close_idle)
{
    pthread_mutex_lock(&p->lock);
    snprintf(s->last_error, sizeof s->last_error, "%s", why);
    /* Concurrent calls that failed on one outage count once: the backoff doubles per
     * failed probe, not per caller. */
    if (s->retry_at == 0 || s->probing) {
        int64_t wait = p->backoff_ms;
        for (int i = 0; i < s->failures && wait < p->backoff_max_ms; i++)
            wait *= 2;
        if (wait > p->backoff_max_ms)
            wait = p->backoff_max_ms;
        s->failures++;
        s->retry_at = sf_clocks_mono_ms() + wait;
        pthread_cond_broadcast(&p->probe_wake);
    }
    sfc_conn *idle = close_idle ? sfc_pool_unlink_idle(s) : NULL;
    pthread_mutex_unlock(&p->lock);
    sfc_pool_close_all(idle);
}

int sfc_pool_list(sfc_pool *p, sfc_server_state *out, int max, int *up)
{
    pthread_mutex_lock(&p->lock);
    int64_t now = sf_clocks_mono_ms();
    *up = 0;
    for (int i = 0; i < p->n; i++) {
        const sfc_server *s = p->servers[i];
        *up += s->retry_at == 0;
        if (i >= max)
            continue;
        sfc_server_state *st = &out[i];
        snprintf(st->server, sizeof st->server, "%s", s->name);
        st->up = s->retry_at == 0;
        st->failures = s->failures;
        st->retry_in_ms = s->retry_at == 0 ? 0 : s->retry_at > now ? s->retry_at - now : 0;
        st->connections = s->open;
        st->calls = s->calls;
        snprintf(st->last_error, sizeof st->last_error, "%s", s->last_error);
    }
    int n = p->n;
    pthread_mutex_unlock(&p->lock);
    return n;
}
