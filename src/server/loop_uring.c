/* loop_uring.c -- the io_uring backend of a server thread's loop (loop.h): one receive is
 * queued per connection and completes with its bytes, and one wait per turn submits and
 * reaps them all. The ring itself (buffers, submission) is uring.c. */
#define _GNU_SOURCE
#include "server_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <netinet/tcp.h>
#include <time.h>
#include <unistd.h>

#include <thrift/c_glib/protocol/thrift_binary_protocol.h>

#include "common/bindaddr.h"
#include "common/clocks.h"
#include "rpc/bounded_protocol.h"
#include "loop.h"

/* Queues the first receive of a connection just adopted. */
bool sf_loop_uring_add(sf_thread *t, sf_conn *c)
{
    c->recv_queued = sf_uring_recv(t->uring, c->fd, c, SF_OP_RECV);
    return c->recv_queued;
}

/* A request in flight holds the socket open past close(): cancels c's, so that the client
 * sees its connection end now. */
void sf_loop_uring_forget(sf_thread *t, sf_conn *c)
{
    if ((c->recv_queued && !sf_uring_cancel(t->uring, c, SF_OP_RECV)) ||
        (c->poll_queued && !sf_uring_cancel(t->uring, c, SF_OP_WRITABLE)))
        g_warning("cannot cancel io_uring requests of connection from %s: %s; it closes when "
                  "they end", c->peer, g_strerror(errno));
}

/* True when c had a receive in flight and it is now being cancelled: its completion (data,
 * or cancelled) will serve c. */
bool sf_loop_uring_cancel_recv(sf_thread *t, sf_conn *c)
{
    return c->recv_queued && sf_uring_cancel(t->uring, c, SF_OP_RECV);
}

/* Frees the ring, which ends every request in flight. */
void sf_loop_uring_close(sf_thread *t)
{
    sf_uring_free(t->uring);
    t->uring = NULL;
}

/* io_uring: queues what c waits for and has not queued yet. A receive queued earlier and
 * no longer wanted (the output backed up meanwhile) is left to complete: its bytes are held
 * like any input held back, and no further receive is queued until the output drains.
 * Closes c and returns false when the ring cannot take a request. */
bool sf_loop_uring_watch(sf_thread *t, sf_conn *c, bool want_in, bool want_out)
{
    if (want_in && !c->recv_queued)
        c->recv_queued = sf_uring_recv(t->uring, c->fd, c, SF_OP_RECV);
    if (want_out && !c->poll_queued)
        c->poll_queued = sf_uring_poll(t->uring, c->fd, POLLOUT, c, SF_OP_WRITABLE);
    if ((want_in && !c->recv_queued) || (want_out && !c->poll_queued)) {
        sf_server_log_limited(&t->server->watch_log, G_LOG_LEVEL_WARNING,
                              "cannot watch connection from %s: io_uring: %s", c->peer,
                              g_strerror(errno));
        sf_conn_close(t, c);
        return false;
    }
    return true;
}

/* A connection's receive completed: serve what it brought (reading on when it filled its
 * buffer, or when the connection drains and nothing else is in flight), or note the
 * client's FIN, or close on an error. */
static void sf_conn_received(sf_thread *t, sf_conn *c, const sf_uring_event *e)
{
    c->recv_queued = false;
    if (c->fd < 0)
        return; /* closed meanwhile: the bytes are not ours to answer */
    if (e->res > 0) {
        bool more = e->res == SF_URING_BUFFER_SIZE || c->draining;
        sf_conn_serve(t, c, e->data, (size_t)e->res, more);
    } else if (e->res == 0) {
        c->peer_closed = true;
        sf_conn_serve(t, c, NULL, 0, false);
    } else if (e->res == -ECANCELED) {
        sf_conn_serve(t, c, NULL, 0, c->draining); /* only a drain cancels a live one */
    } else if (e->res == -ENOBUFS) {
        /* Data came when every buffer was taken: read it now, as epoll would, rather
         * than queue again behind the connections that took them. */
        sf_conn_serve(t, c, NULL, 0, true);
    } else if (e->res == -EINTR || e->res == -EAGAIN) {
        sf_conn_update_interest(t, c);
    } else {
        g_debug("read from %s failed: %s", c->peer, g_strerror(-e->res));
        sf_conn_close(t, c);
    }
}

/* The listener or the wake-up is ready: handles them and watches again. False when the
 * loop must end. */
static bool sf_thread_take_events(sf_thread *t, bool draining)
{
    bool ok = sf_loop_epoll_turn(t, draining, 0);
    if (!sf_uring_poll(t->uring, t->epfd, POLLIN, t, SF_OP_EVENTS)) {
        g_critical("server thread %d cannot watch its listener and wake-up on io_uring: %s",
                   t->index, g_strerror(errno));
        ok = false;
    }
    return ok;
}

/* Handles one connection's io_uring completion. */
static void sf_thread_complete(sf_thread *t, sf_uring_event *e)
{
    sf_conn *c = e->owner;
    if (e->kind == SF_OP_RECV) {
        sf_conn_received(t, c, e);
    } else {
        c->poll_queued = false;
        if (c->fd >= 0 && e->res != -ECANCELED)
            sf_conn_writable(t, c); /* an error shows in the send */
    }
    sf_uring_release(t->uring, e);
    if (t->out_total > t->out_budget)
        sf_thread_enforce_budget(t);
}

/* One turn of the io_uring loop: submits what was queued, waits for completions (at most
 * SF_TICK_MS) and handles every one that has arrived, in order, before waiting again:
 * left in the ring, older ones would wait behind those the next wait brings. The listener
 * comes last, as on epoll, so that a client gone in the same turn frees its slot before
 * new connections are counted against max_connections. False when the loop must end. */
bool sf_loop_uring_turn(sf_thread *t, bool draining)
{
    sf_uring_event events[SF_MAX_EVENTS];
    int n = sf_uring_wait(t->uring, SF_TICK_MS, events, SF_MAX_EVENTS);
    if (n < 0) {
        g_critical("io_uring wait in server thread %d failed: %s", t->index, g_strerror(-n));
        return false;
    }
    bool events_ready = false;
    while (n > 0) {
        for (int i = 0; i < n; i++) {
            if (events[i].kind == SF_OP_EVENTS)
                events_ready = true;
            else
                sf_thread_complete(t, &events[i]);
        }
        n = n == SF_MAX_EVENTS ? sf_uring_harvest(t->uring, events, SF_MAX_EVENTS) : 0;
    }
    return !events_ready || sf_thread_take_events(t, draining);
}

/* Moves this thread onto its io_uring, made by sf_server_start; on failure it runs on
 * epoll, and says so. */
void sf_loop_uring_start(sf_thread *t)
{
    char why[160];
    bool started = sf_uring_start(t->uring, why, sizeof why);
    if (started && sf_uring_poll(t->uring, t->epfd, POLLIN, t, SF_OP_EVENTS))
        return;
    if (started)
        snprintf(why, sizeof why, "%s", g_strerror(errno));
    g_warning("server thread %d cannot use io_uring (%s): it serves on epoll", t->index, why);
    sf_uring_free(t->uring);
    t->uring = NULL;
}
