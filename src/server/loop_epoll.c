/* loop_epoll.c -- the loop's epoll instance (loop.h): the epoll backend, on which a socket is
 * watched for readiness and its input handler reads it when ready, and the part both
 * backends share: the descriptors that only signal, whose instance the io_uring backend
 * polls. */
#define _GNU_SOURCE
#include "loop.h"

#include <errno.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <glib.h>

void sf_loop_init(sf_loop *l, void *owner, int index)
{
    *l = (sf_loop){.epfd = -1, .owner = owner, .index = index};
}

bool sf_loop_open(sf_loop *l)
{
    l->epfd = epoll_create1(EPOLL_CLOEXEC);
    return l->epfd >= 0;
}

void sf_loop_free(sf_loop *l)
{
    sf_loop_drop_ring(l);
    if (l->epfd >= 0)
        close(l->epfd);
    l->epfd = -1;
}

/* A descriptor that only signals has one handler for whatever epoll reports on it. */
static void sf_loop_ready_input(void *owner, void *ctx, G_GNUC_UNUSED const uint8_t *got,
                                G_GNUC_UNUSED size_t len, G_GNUC_UNUSED unsigned flags)
{
    ((sf_loop_fd *)ctx)->ready(owner);
}

static void sf_loop_ready_failed(void *owner, void *ctx, G_GNUC_UNUSED sf_loop_failure why,
                                 G_GNUC_UNUSED int err)
{
    ((sf_loop_fd *)ctx)->ready(owner);
}

static const sf_loop_handlers sf_loop_ready_handlers = {
    .input = sf_loop_ready_input,
    .failed = sf_loop_ready_failed,
};

bool sf_loop_add_ready(sf_loop *l, sf_loop_fd *w, int fd, void (*ready)(void *owner))
{
    *w = (sf_loop_fd){.fd = fd, .events = EPOLLIN, .handlers = &sf_loop_ready_handlers,
                      .ctx = w, .ready = ready};
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = w};
    if (epoll_ctl(l->epfd, EPOLL_CTL_ADD, fd, &ev) == 0)
        return true;
    w->fd = -1;
    return false;
}

bool sf_loop_remove_ready(sf_loop *l, sf_loop_fd *w)
{
    int fd = w->fd;
    w->fd = -1; /* an event of the same batch is dropped */
    return fd >= 0 && epoll_ctl(l->epfd, EPOLL_CTL_DEL, fd, NULL) == 0;
}

bool sf_loop_remove(sf_loop *l, sf_loop_fd *w)
{
    bool cancelled = l->uring == NULL || sf_loop_uring_forget(l, w);
    int err = errno;
    close(w->fd); /* which also takes it out of the epoll instance */
    w->fd = -1;
    errno = err;
    return cancelled;
}

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

/* Calls a descriptor's handlers for what epoll reported: input alone, the common case, goes
 * to its input handler while it wants input; otherwise an error ends it; room to send
 * comes first, so that replies drain before more input is read; a hang-up both ways while
 * only output was wanted ends it too (nothing can be sent); input, EOF included, goes to
 * its input handler while it wants input. */
static void sf_loop_epoll_dispatch(sf_loop *l, sf_loop_fd *w, uint32_t ev)
{
    const sf_loop_handlers *h = w->handlers;
    if (ev == EPOLLIN && (w->events & EPOLLIN)) {
        h->input(l->owner, w->ctx, NULL, 0, SF_LOOP_READ);
        return;
    }
    if (ev & EPOLLERR) {
        h->failed(l->owner, w->ctx, SF_LOOP_BROKEN, 0);
        return;
    }
    if (ev & EPOLLOUT) {
        h->writable(l->owner, w->ctx);
        if (w->fd < 0)
            return;
    }
    if (!(w->events & EPOLLIN)) {
        if (ev & EPOLLHUP)
            h->failed(l->owner, w->ctx, SF_LOOP_BROKEN, 0);
        return;
    }
    if (ev & (EPOLLIN | EPOLLRDHUP | EPOLLHUP))
        h->input(l->owner, w->ctx, NULL, 0, SF_LOOP_READ);
}

bool sf_loop_epoll_turn(sf_loop *l, int timeout_ms)
{
    struct epoll_event events[SF_LOOP_MAX_EVENTS];
    int n = epoll_wait(l->epfd, events, SF_LOOP_MAX_EVENTS, timeout_ms);
    if (n < 0 && errno != EINTR) {
        g_critical("epoll_wait in server thread %d failed: %s", l->index, g_strerror(errno));
        return false;
    }
    for (int i = 0; i < n; i++) {
        sf_loop_fd *w = events[i].data.ptr;
        if (w->fd < 0)
            continue; /* removed earlier in this batch */
        sf_loop_epoll_dispatch(l, w, events[i].events);
    }
    return true;
}
