/* loop_epoll.c -- the epoll backend of a server thread's loop (loop.h): a connection is
 * watched for readiness and read by conn.c when ready. Also serves the io_uring backend,
 * whose ring polls this thread's epoll instance for the listener and the wake-up. */
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

/* Starts watching a connection just adopted for input. */
bool sf_loop_epoll_add(sf_thread *t, sf_conn *c)
{
    c->events = EPOLLIN | EPOLLRDHUP;
    struct epoll_event ev = {.events = c->events, .data.ptr = c};
    return epoll_ctl(t->epfd, EPOLL_CTL_ADD, c->fd, &ev) == 0;
}

/* Registers or updates a connection's epoll interest when it changed. */
bool sf_loop_epoll_watch(sf_thread *t, sf_conn *c, bool want_in, bool want_out)
{
    uint32_t events = 0;
    if (want_in)
        events |= EPOLLIN | EPOLLRDHUP;
    if (want_out)
        events |= EPOLLOUT;
    if (c->events == events)
        return true;
    struct epoll_event ev = {.events = events, .data.ptr = c};
    if (epoll_ctl(t->epfd, EPOLL_CTL_MOD, c->fd, &ev) != 0)
        g_warning("epoll_ctl on connection from %s failed: %s", c->peer, g_strerror(errno));
    c->events = events;
    return true;
}

/* Handles what the thread's epoll instance reports, waiting up to timeout_ms: on epoll
 * everything, on io_uring the listener and the wake-up. False when the loop must end. */
bool sf_loop_epoll_turn(sf_thread *t, bool draining, int timeout_ms)
{
    struct epoll_event events[SF_MAX_EVENTS];
    int n = epoll_wait(t->epfd, events, SF_MAX_EVENTS, timeout_ms);
    if (n < 0 && errno != EINTR) {
        g_critical("epoll_wait in server thread %d failed: %s", t->index, g_strerror(errno));
        return false;
    }
    for (int i = 0; i < n; i++) {
        void *tag = events[i].data.ptr;
        uint32_t ev = events[i].events;
        if (tag == &sf_tag_listener) {
            if (!draining)
                sf_thread_accept(t);
        } else if (tag == &sf_tag_wake) {
            sf_thread_take_queue(t);
        } else {
            sf_conn *c = tag;
            if (c->fd < 0)
                continue; /* closed earlier in this batch */
            if (ev & EPOLLERR) {
                sf_conn_close(t, c);
                continue;
            }
            if ((ev & EPOLLOUT) && !sf_conn_writable(t, c))
                continue;
            if ((ev & EPOLLHUP) && !(c->events & EPOLLIN)) {
                sf_conn_close(t, c); /* gone both ways: nothing can be sent */
                continue;
            }
            if ((ev & (EPOLLIN | EPOLLRDHUP | EPOLLHUP)) && (c->events & EPOLLIN))
                sf_conn_serve(t, c, NULL, 0, true);
            if (t->out_total > t->out_budget)
                sf_thread_enforce_budget(t);
        }
    }
    return true;
}
