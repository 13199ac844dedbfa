/* loop_uring.c -- the io_uring backend of the loop (loop.h): one receive is queued per socket
 * and completes with its bytes, and one wait per turn submits and reaps them all; the ring
 * polls the loop's epoll instance (loop.c) for the descriptors that only signal. The ring
 * itself (buffers, submission) is uring.c. */
#define _GNU_SOURCE
#include "loop.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>

#include <glib.h>

#include "uring.h"

/* What a request is for (sf_uring_event.kind). */
enum {
    SF_OP_RECV = 1,     /* a socket's receive */
    SF_OP_WRITABLE = 2, /* a poll for room to send on a socket */
    SF_OP_EVENTS = 3,   /* a poll of the loop's epoll instance */
};

bool sf_loop_make_ring(sf_loop *l, char *why, size_t whylen)
{
    l->uring = sf_uring_new(why, whylen);
    return l->uring != NULL;
}

void sf_loop_drop_ring(sf_loop *l)
{
    sf_uring_free(l->uring);
    l->uring = NULL;
}

void sf_loop_start(sf_loop *l)
{
    if (l->uring == NULL)
        return;
    char why[160];
    bool started = sf_uring_start(l->uring, why, sizeof why);
    if (started && sf_uring_poll(l->uring, l->epfd, POLLIN, l, SF_OP_EVENTS))
        return;
    if (started)
        snprintf(why, sizeof why, "%s", g_strerror(errno));
    g_warning("server thread %d cannot use io_uring (%s): it serves on epoll", l->index, why);
    sf_loop_drop_ring(l);
}

/* Queues the first receive of a socket just added. */
bool sf_loop_uring_add(sf_loop *l, sf_loop_fd *w)
{
    w->recv_queued = sf_uring_recv(l->uring, w->fd, w, SF_OP_RECV);
    return w->recv_queued;
}

/* A request in flight holds the socket open past close(): cancels w's, so that the peer
 * sees its connection end now. */
bool sf_loop_uring_forget(sf_loop *l, sf_loop_fd *w)
{
    return !((w->recv_queued && !sf_uring_cancel(l->uring, w, SF_OP_RECV)) ||
             (w->poll_queued && !sf_uring_cancel(l->uring, w, SF_OP_WRITABLE)));
}

bool sf_loop_cancel_input(sf_loop *l, sf_loop_fd *w)
{
    return l->uring != NULL && w->recv_queued && sf_uring_cancel(l->uring, w, SF_OP_RECV);
}

/* The ring could not take a request for w: tells its owner. Out of line, so that the
 * common case of sf_loop_uring_want stays short. */
static G_GNUC_NO_INLINE bool sf_loop_uring_refused(sf_loop *l, sf_loop_fd *w)
{
    w->handlers->failed(l->owner, w->ctx, SF_LOOP_WANT_FAILED, errno);
    return false;
}

/* Queues what w waits for and has not queued yet. A receive queued earlier and no longer
 * wanted (the output backed up meanwhile) is left to complete: its bytes go to the input
 * handler, which holds them like any input held back, and no further receive is queued
 * until the owner wants input again. */
bool sf_loop_uring_want(sf_loop *l, sf_loop_fd *w, bool want_in, bool want_out)
{
    if (want_in && !w->recv_queued &&
        !(w->recv_queued = sf_uring_recv(l->uring, w->fd, w, SF_OP_RECV)))
        return sf_loop_uring_refused(l, w);
    if (want_out && !w->poll_queued &&
        !(w->poll_queued = sf_uring_poll(l->uring, w->fd, POLLOUT, w, SF_OP_WRITABLE)))
        return sf_loop_uring_refused(l, w);
    return true;
}

/* A socket's receive completed: hands what it brought (its bytes; word that more may wait,
 * or that the peer sent FIN) to the input handler, or its error to the failed handler. A
 * receive cancelled or interrupted brings nothing, and the input handler decides what to
 * wait for next. */
static void sf_loop_received(sf_loop *l, sf_loop_fd *w, const sf_uring_event *e)
{
    w->recv_queued = false;
    if (w->fd < 0)
        return; /* removed meanwhile: the bytes are nobody's */
    const sf_loop_handlers *h = w->handlers;
    if (e->res > 0) {
        h->input(l->owner, w->ctx, e->data, (size_t)e->res,
                 e->res == SF_URING_BUFFER_SIZE ? SF_LOOP_READ : 0);
    } else if (e->res == 0) {
        h->input(l->owner, w->ctx, NULL, 0, SF_LOOP_EOF);
    } else if (e->res == -ENOBUFS) {
        /* Data came when every buffer was taken: read it now, as epoll would, rather
         * than queue again behind the sockets that took them. */
        h->input(l->owner, w->ctx, NULL, 0, SF_LOOP_READ);
    } else if (e->res == -ECANCELED || e->res == -EINTR || e->res == -EAGAIN) {
        h->input(l->owner, w->ctx, NULL, 0, 0);
    } else {
        h->failed(l->owner, w->ctx, SF_LOOP_RECV_FAILED, -e->res);
    }
}

/* Handles one socket's completion. */
static void sf_loop_complete(sf_loop *l, sf_uring_event *e)
{
    sf_loop_fd *w = e->owner;
    if (e->kind == SF_OP_RECV) {
        sf_loop_received(l, w, e);
    } else {
        w->poll_queued = false;
        if (w->fd >= 0 && e->res != -ECANCELED)
            w->handlers->writable(l->owner, w->ctx); /* an error shows in the send */
    }
    sf_uring_release(l->uring, e);
}

/* The epoll instance has events (a listener, a wake-up): handles them and polls it again.
 * False when the loop must end. */
static bool sf_loop_take_events(sf_loop *l)
{
    bool ok = sf_loop_take(l, 0);
    if (!sf_uring_poll(l->uring, l->epfd, POLLIN, l, SF_OP_EVENTS)) {
        g_critical("server thread %d cannot watch its listener and wake-up on io_uring: %s",
                   l->index, g_strerror(errno));
        ok = false;
    }
    return ok;
}

/* One turn: submits what was queued, waits for completions (at most timeout_ms) and handles
 * every one that has arrived, in order, before waiting again: left in the ring, older ones
 * would wait behind those the next wait brings. The epoll instance comes last, as on
 * epoll, so that a client gone in the same turn frees its slot before new connections are
 * counted against max_connections. False when the loop must end. */
bool sf_loop_uring_turn(sf_loop *l, int timeout_ms)
{
    sf_uring_event events[SF_LOOP_MAX_EVENTS];
    int n = sf_uring_wait(l->uring, timeout_ms, events, SF_LOOP_MAX_EVENTS);
    if (n < 0) {
        g_critical("io_uring wait in server thread %d failed: %s", l->index, g_strerror(-n));
        return false;
    }
    bool events_ready = false;
    while (n > 0) {
        for (int i = 0; i < n; i++) {
            if (events[i].kind == SF_OP_EVENTS)
                events_ready = true;
            else
                sf_loop_complete(l, &events[i]);
        }
        n = n == SF_LOOP_MAX_EVENTS ? sf_uring_harvest(l->uring, events, SF_LOOP_MAX_EVENTS)
                                    : 0;
    }
    return !events_ready || sf_loop_take_events(l);
}
