/* pool.c -- the nodes, their connections and their backoff, under one lock held only for
 * list and pointer work: connects, calls and closes happen outside it. A call takes the
 * lock once to acquire a node and a connection and once to release them. */
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
#include "common/hostport.h"
#include "common/threads.h"

#ifdef SFC_COUNT_POOL_LOCKS
static _Thread_local uint64_t sfc_pool_locks;
uint64_t sfc_pool_locks_taken(void)
{
    return sfc_pool_locks;
}
#define SFC_POOL_LOCK(p) (sfc_pool_locks++, pthread_mutex_lock(&(p)->lock))
#else
#define SFC_POOL_LOCK(p) pthread_mutex_lock(&(p)->lock)
#endif
#define SFC_POOL_UNLOCK(p) pthread_mutex_unlock(&(p)->lock)

/* Takes s's idle connections off it, to be closed once the lock is let go. Lock held. */
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
    char err[300];
    if (!sf_client_open(&c->rpc, s->host, s->port, timeout_ms, err, sizeof err)) {
        snprintf(why, whylen, "cannot connect to %s: %s", s->name, err);
        free(c);
        return NULL;
    }
    c->timeout_ms = timeout_ms;
    return c;
}

/* s answered: it is up. One node back while every node was skipped means the fleet is
 * coming back from an outage: the others are probed now rather than at the end of backoffs
 * grown long while it lasted. Lock held. */
static void sfc_pool_mark_up(sfc_pool *p, sfc_server *s, int64_t now)
{
    s->calls++;
    if (s->retry_at == 0 && s->failures == 0)
        return;
    bool others_down = true;
    for (int i = 0; i < p->n && others_down; i++)
        others_down = p->servers[i] == s || p->servers[i]->retry_at != 0;
    if (s->retry_at != 0 && others_down) {
        for (int i = 0; i < p->n; i++)
            if (p->servers[i]->retry_at > now)
                p->servers[i]->retry_at = now;
        pthread_cond_broadcast(&p->probe_wake);
    }
    s->retry_at = 0;
    s->failures = 0;
    pthread_cond_broadcast(&p->changed);
}

/* s failed (why): skip it for its backoff, doubled for each failure in a row. Concurrent
 * calls that failed on one outage count once: the backoff doubles per failed probe, not per
 * caller. Lock held. */
static void sfc_pool_mark_failed(sfc_pool *p, sfc_server *s, const char *why, int64_t now)
{
    snprintf(s->last_error, sizeof s->last_error, "%s", why);
    if (s->retry_at != 0 && !s->probing)
        return;
    int64_t wait = p->backoff_ms;
    for (int i = 0; i < s->failures && wait < p->backoff_max_ms; i++)
        wait *= 2;
    s->failures++;
    s->retry_at = now + (wait < p->backoff_max_ms ? wait : p->backoff_max_ms);
    pthread_cond_broadcast(&p->probe_wake);
}

/* Frees a node that left the list once nothing holds it. Lock held; returns its idle
 * connections, to be closed unlocked. */
static sfc_conn *sfc_pool_drop_if_unused(sfc_server *s)
{
    if (s->listed || s->refs > 0)
        return NULL;
    sfc_conn *idle = sfc_pool_unlink_idle(s);
    free(s);
    return idle;
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

/* Checks s on a new connection of its own, which joins the pool if s passes. Lock held on
 * entry and return, let go while it talks to s. */
static void sfc_pool_probe(sfc_pool *p, sfc_server *s)
{
    SFC_POOL_UNLOCK(p);
    char why[600];
    sfc_outcome out = SFC_TRY_BROKEN;
    sfc_conn *c = sfc_conn_open(s, p->try_timeout_ms, why, sizeof why);
    if (c != NULL)
        out = p->probe(p->probe_ctx, c, s->name, why, sizeof why);
    bool up = out == SFC_TRY_OK || out == SFC_TRY_REFUSED;
    if (c != NULL && !up) {
        sf_client_close(&c->rpc);
        free(c);
        c = NULL;
    }
    SFC_POOL_LOCK(p);
    int64_t now = sf_clocks_mono_ms();
    sfc_conn *to_close = NULL;
    if (up) {
        s->open++;
        c->next = s->idle;
        s->idle = c;
        sfc_pool_mark_up(p, s, now);
    } else {
        sfc_pool_mark_failed(p, s, why, now);
        to_close = sfc_pool_unlink_idle(s);
    }
    s->probing = false;
    s->refs--;
    sfc_conn *gone = sfc_pool_drop_if_unused(s);
    SFC_POOL_UNLOCK(p);
    sfc_pool_close_all(to_close);
    sfc_pool_close_all(gone);
    SFC_POOL_LOCK(p);
}

static void *sfc_pool_prober(void *arg)
{
    sfc_pool *p = arg;
    SFC_POOL_LOCK(p);
    while (!p->stopping) {
        int64_t wait_ms;
        sfc_server *s = sfc_pool_due(p, sf_clocks_mono_ms(), &wait_ms);
        if (s != NULL) {
            sfc_pool_probe(p, s);
            continue;
        }
        struct timespec until =
            sf_clocks_mono_timespec(sf_clocks_mono_ms() + (wait_ms < 0 ? 1000 : wait_ms));
        pthread_cond_timedwait(&p->probe_wake, &p->lock, &until);
    }
    SFC_POOL_UNLOCK(p);
    return NULL;
}

bool sfc_pool_init(sfc_pool *p, const sfc_options *o, sfc_probe_fn probe, void *probe_ctx,
                   char *why, size_t whylen)
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
    p->probe = probe;
    p->probe_ctx = probe_ctx;
    snprintf(p->why_no_list, sizeof p->why_no_list, "no node is known yet");
    int rc = sf_threads_start(&p->prober, NULL, sfc_pool_prober, p);
    if (rc != 0) {
        snprintf(why, whylen, "cannot start the prober thread: %s", strerror(rc));
        return false;
    }
    p->prober_started = true;
    return true;
}

void sfc_pool_destroy(sfc_pool *p)
{
    SFC_POOL_LOCK(p);
    p->stopping = true;
    pthread_cond_broadcast(&p->probe_wake);
    SFC_POOL_UNLOCK(p);
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

bool sfc_pool_set_servers(sfc_pool *p, const char *const *names, int n)
{
    sfc_server **next = calloc(n > 0 ? (size_t)n : 1, sizeof *next);
    if (next == NULL)
        return false;
    int made = 0;
    for (int i = 0; i < n; i++) {
        sfc_server *s = calloc(1, sizeof *s);
        char why[400];
        if (s == NULL) {
            for (int j = 0; j < made; j++)
                free(next[j]);
            free(next);
            return false;
        }
        if (!sf_hostport_parse(names[i], s->host, sizeof s->host, &s->port, why, sizeof why)) {
            free(s);
            continue;
        }
        snprintf(s->name, sizeof s->name, "%s", names[i]);
        s->listed = true;
        next[made++] = s;
    }
    sfc_conn *to_close = NULL;
    SFC_POOL_LOCK(p);
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
    SFC_POOL_UNLOCK(p);
    sfc_pool_close_all(to_close);
    return true;
}

void sfc_pool_set_why_no_list(sfc_pool *p, const char *why)
{
    SFC_POOL_LOCK(p);
    snprintf(p->why_no_list, sizeof p->why_no_list, "%s", why);
    SFC_POOL_UNLOCK(p);
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

/* A serving node not in tried, round robin; else the skipped one due soonest. Lock held. */
static sfc_server *sfc_pool_pick(sfc_pool *p, sfc_server *const *tried, int ntried)
{
    sfc_server *fallback = NULL;
    unsigned start = atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed);
    for (int i = 0; i < p->n; i++) {
        sfc_server *s = p->servers[(start + (unsigned)i) % (unsigned)p->n];
        if (sfc_pool_was_tried(s, tried, ntried))
            continue;
        if (s->retry_at == 0)
            return s;
        if (fallback == NULL || s->retry_at < fallback->retry_at)
            fallback = s;
    }
    return fallback;
}

/* What is left until deadline, at least 1 ms (a socket timeout of 0 would be none). */
static int sfc_ms_left(int64_t deadline)
{
    int64_t left = deadline - sf_clocks_mono_ms();
    return left < 1 ? 1 : left > INT_MAX ? INT_MAX : (int)left;
}

int sfc_pool_acquire(sfc_pool *p, sfc_server *const *tried, int ntried, sfc_server *want,
                     int64_t deadline, sfc_lease *l, char *why, size_t whylen)
{
    memset(l, 0, sizeof *l);
    SFC_POOL_LOCK(p);
    while (want == NULL && (!p->listed_once || (p->n == 0 && ntried == 0))) {
        if (!sfc_pool_wait(p, deadline)) {
            snprintf(why, whylen, "%s", p->listed_once ? "no node is listed" : p->why_no_list);
            SFC_POOL_UNLOCK(p);
            return SFC_POOL_NONE;
        }
    }
    sfc_server *s = want != NULL ? want : sfc_pool_pick(p, tried, ntried);
    if (s == NULL) {
        snprintf(why, whylen, "%s", p->n == 0 ? "no node is listed" : "every node was tried");
        SFC_POOL_UNLOCK(p);
        return SFC_POOL_NONE;
    }
    if (want == NULL)
        s->refs++;
    l->server = s;
    l->failed_as = SFC_TRY_SKIPPED;
    int64_t now = sf_clocks_mono_ms();
    if (deadline <= now) {
        snprintf(why, whylen, "%s not tried: the deadline passed", s->name);
        SFC_POOL_UNLOCK(p);
        return SFC_POOL_NOCONN;
    }
    int64_t try_deadline = p->n <= 1 || deadline - now < p->try_timeout_ms
                               ? deadline : now + p->try_timeout_ms;
    while (s->idle == NULL && s->open >= p->connections_per_server) {
        if (!sfc_pool_wait(p, try_deadline)) {
            snprintf(why, whylen, "all %d connections to %s stayed busy", s->open, s->name);
            SFC_POOL_UNLOCK(p);
            return SFC_POOL_NOCONN;
        }
    }
    sfc_conn *c = s->idle;
    if (c != NULL)
        s->idle = c->next;
    else
        s->open++; /* the slot of the connection about to be made */
    SFC_POOL_UNLOCK(p);
    l->reused = c != NULL;
    l->failed_as = SFC_TRY_BROKEN;
    if (c == NULL && (c = sfc_conn_open(s, sfc_ms_left(try_deadline), why, whylen)) == NULL) {
        l->reserved = true;
        return SFC_POOL_NOCONN;
    }
    c->next = NULL;
    int left = sfc_ms_left(try_deadline);
    if (!sfc_conn_set_timeout(c, left)) {
        snprintf(why, whylen, "setting a %d ms timeout on a connection to %s failed: %s",
                 left, s->name, strerror(errno));
        sf_client_close(&c->rpc);
        free(c);
        l->reserved = true;
        return SFC_POOL_NOCONN;
    }
    l->conn = c;
    return SFC_POOL_CONN;
}

void sfc_pool_release(sfc_pool *p, sfc_lease *l, sfc_outcome out, const char *why)
{
    sfc_server *s = l->server;
    sfc_conn *c = l->conn, *to_close = NULL;
    bool answered = out == SFC_TRY_OK || out == SFC_TRY_REFUSED || out == SFC_TRY_UNAVAILABLE ||
                    out == SFC_TRY_CLOCK;
    if (c != NULL && !answered) { /* broken, or a reply may still be on its way */
        sf_client_close(&c->rpc);
        free(c);
        c = NULL;
        l->reserved = true;
    }
    SFC_POOL_LOCK(p);
    int64_t now = sf_clocks_mono_ms();
    if (c != NULL) {
        c->next = s->idle;
        s->idle = c;
    }
    if (l->reserved)
        s->open--;
    if (c != NULL || l->reserved)
        pthread_cond_broadcast(&p->changed); /* waiters for other nodes share the condition */
    if (out == SFC_TRY_OK || out == SFC_TRY_REFUSED) {
        sfc_pool_mark_up(p, s, now);
    } else if (out == SFC_TRY_UNAVAILABLE || out == SFC_TRY_CLOCK) {
        sfc_pool_mark_failed(p, s, why, now);
    } else if (out == SFC_TRY_BROKEN || out == SFC_TRY_TIMEOUT) {
        sfc_pool_mark_failed(p, s, why, now);
        to_close = sfc_pool_unlink_idle(s); /* as likely dead as the one that failed */
    } else if (out == SFC_TRY_STALE) {
        to_close = sfc_pool_unlink_idle(s); /* so that the next try connects afresh */
    }
    if (out != SFC_TRY_STALE)
        s->refs--;
    sfc_conn *gone = out != SFC_TRY_STALE ? sfc_pool_drop_if_unused(s) : NULL;
    SFC_POOL_UNLOCK(p);
    sfc_pool_close_all(to_close);
    sfc_pool_close_all(gone);
    memset(l, 0, sizeof *l);
}

int sfc_pool_list(sfc_pool *p, sfc_server_state *out, int max, int *up)
{
    SFC_POOL_LOCK(p);
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
    SFC_POOL_UNLOCK(p);
    return n;
}
