/* loop.c -- the loop's core (loop.h), which both backends use and which calls neither: the
 * epoll instance, which holds the descriptors that only signal (a listener, a wake-up) on
 * both backends and every socket on epoll; what it reports, handed to each descriptor's
 * handlers; and a socket's close. */
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

void sf_loop_close(sf_loop *l)
{
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

void sf_loop_close_fd(sf_loop_fd *w)
{
    int err = errno;
    close(w->fd); /* which also takes it out of the epoll instance */
    w->fd = -1;
    errno = err;
}

/* Calls a descriptor's handlers for what epoll reported: input alone, the common case, goes
 * to its input handler while it wants input; otherwise an error ends it; room to send
 * comes first, so that replies drain before more input is read; a hang-up both ways while
 * only output was wanted ends it too (nothing can be sent); input, EOF included, goes to
 * its input handler while it wants input. */
static void sf_loop_dispatch(sf_loop *l, sf_loop_fd *w, uint32_t ev)
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

bool sf_loop_take(sf_loop *l, int timeout_ms)
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
        sf_loop_dispatch(l, w, events[i].events);
    }
    return true;
}
