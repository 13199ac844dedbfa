/* loop_epoll.c -- the epoll backend of the loop (loop.h): a socket is watched for readiness
 * on the loop's epoll instance (loop.c, which hands what it reports to the handlers) and its
 * input handler reads it when ready. */
#define _GNU_SOURCE
#include "loop.h"

#include <errno.h>
#include <sys/epoll.h>

#include <glib.h>

/* Starts watching a socket just added for input. */
bool sf_loop_epoll_add(sf_loop *l, sf_loop_fd *w)
{
    w->events = EPOLLIN | EPOLLRDHUP;
    struct epoll_event ev = {.events = w->events, .data.ptr = w};
    return epoll_ctl(l->epfd, EPOLL_CTL_ADD, w->fd, &ev) == 0;
}

/* Registers a socket's new epoll interest. Apart from sf_loop_epoll_want, whose common
 * case (no change) is then a handful of instructions on every call served. */
static G_GNUC_NO_INLINE bool sf_loop_epoll_modify(sf_loop *l, sf_loop_fd *w, uint32_t events)
{
    struct epoll_event ev = {.events = events, .data.ptr = w};
    if (epoll_ctl(l->epfd, EPOLL_CTL_MOD, w->fd, &ev) != 0) {
        w->handlers->failed(l->owner, w->ctx, SF_LOOP_WANT_FAILED, errno);
        return false;
    }
    w->events = events;
    return true;
}

/* Changes a socket's epoll interest when it changed. */
bool sf_loop_epoll_want(sf_loop *l, sf_loop_fd *w, bool want_in, bool want_out)
{
    uint32_t events = 0;
    if (want_in)
        events |= EPOLLIN | EPOLLRDHUP;
    if (want_out)
        events |= EPOLLOUT;
    return w->events == events || sf_loop_epoll_modify(l, w, events);
}
