/* loop.h -- sf_loop: how a server thread waits for its sockets, one interface over two
 * backends, calling the handlers each descriptor was added with.
 *
 * The loop knows descriptors, not connections, as Redis's ae.c knows nothing of
 * networking.c: a descriptor comes with a table of handlers and a pointer they are given
 * back, and the loop calls them when input arrived, when there is room to send, or when the
 * socket failed; what a handler does is its owner's business. On epoll (loop_epoll.c) the
 * input handler is told the socket is readable and reads it; on io_uring (loop_uring.c) a
 * receive is queued per socket and completes with the bytes, so one system call per turn
 * submits and reaps the receives of every socket served in that turn. On either, the
 * handlers send at once. The loop's epoll instance (loop.c, the core both backends use,
 * which calls neither) holds the descriptors that only signal (sf_loop_add_ready: a
 * listener, a wake-up) on both backends; on io_uring the ring polls that instance, so
 * accepting and handing over are one code path. The functions below that choose a backend
 * are the interface's own, here. */
#ifndef SF_LOOP_H
#define SF_LOOP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "uring.h"

/* The most events one wait hands out. */
#define SF_LOOP_MAX_EVENTS 128

/* What the input handler is told besides the bytes (flags). With neither, got[0..len) is
 * all there is for now: a receive that did not fill its buffer (len may be 0: it was
 * cancelled, or interrupted). */
enum {
    SF_LOOP_READ = 1, /* the socket may hold input the loop has not taken: read it (epoll:
                       * it is readable; io_uring: a receive filled its buffer, or data came
                       * while every buffer was taken) */
    SF_LOOP_EOF = 2,  /* the peer sent FIN after got */
};

/* Why a socket can no longer be served (the failed handler). */
typedef enum sf_loop_failure {
    SF_LOOP_BROKEN,      /* epoll reported an error, or a hang-up both ways (err 0) */
    SF_LOOP_RECV_FAILED, /* a receive failed with err */
    SF_LOOP_WANT_FAILED, /* sf_loop_want could not queue what was wanted (err) */
} sf_loop_failure;

/* What a descriptor's owner does with its events. owner is the loop's (sf_loop_init), ctx
 * the descriptor's. A handler may remove any descriptor, its own included. */
typedef struct sf_loop_handlers {
    void (*input)(void *owner, void *ctx, const uint8_t *got, size_t len, unsigned flags);
    void (*writable)(void *owner, void *ctx);
    /* Nothing more can pass: the handler removes the socket. */
    void (*failed)(void *owner, void *ctx, sf_loop_failure why, int err);
} sf_loop_handlers;

/* The loop's record of one descriptor, held by its owner (in a connection, say). It
 * must stay allocated while sf_loop_busy says so: a request in flight names it. */
typedef struct sf_loop_fd {
    int fd;                     /* -1 once removed: events still pending for it are dropped */
    uint32_t events;            /* epoll: the interest registered */
    bool recv_queued;           /* io_uring: a receive is in flight */
    bool poll_queued;           /* io_uring: a writability poll is in flight */
    const sf_loop_handlers *handlers;
    void *ctx;
    void (*ready)(void *owner); /* sf_loop_add_ready's */
} sf_loop_fd;

typedef struct sf_loop {
    int epfd;
    sf_uring *uring; /* NULL = epoll */
    void *owner;     /* given to every handler */
    int index;       /* the server thread named in the loop's log lines */
} sf_loop;

/* loop.c: the core, which both backends use and which calls neither. */
/* Sets up an unopened loop whose handlers are given owner. */
void sf_loop_init(sf_loop *l, void *owner, int index);
/* Opens the epoll instance. False (errno set) when it cannot. */
bool sf_loop_open(sf_loop *l);
/* Closes the epoll instance (sf_loop_free closes the loop). */
void sf_loop_close(sf_loop *l);
/* Watches fd for readiness only (a listener, an eventfd), on either backend: ready(owner)
 * is called when it is readable, or when epoll reports an error on it (reading it then
 * meets the error). False (errno set) when it cannot. */
bool sf_loop_add_ready(sf_loop *l, sf_loop_fd *w, int fd, void (*ready)(void *owner));
/* Stops watching a descriptor added with sf_loop_add_ready; it stays open. */
bool sf_loop_remove_ready(sf_loop *l, sf_loop_fd *w);
/* Closes a socket (sf_loop_remove closes it once its requests in flight are cancelled),
 * keeping errno. */
void sf_loop_close_fd(sf_loop_fd *w);
/* Handles what the epoll instance reports, waiting up to timeout_ms: on epoll everything,
 * on io_uring the descriptors added with sf_loop_add_ready. False when the loop must end. */
bool sf_loop_take(sf_loop *l, int timeout_ms);

/* loop_epoll.c: the epoll backend. */
bool sf_loop_epoll_add(sf_loop *l, sf_loop_fd *w);
bool sf_loop_epoll_want(sf_loop *l, sf_loop_fd *w, bool want_in, bool want_out);

/* loop_uring.c: the io_uring backend. */
/* Gives the loop an io_uring, disabled until sf_loop_start. False when io_uring or a
 * feature the loop needs is unavailable; why then says which. */
bool sf_loop_make_ring(sf_loop *l, char *why, size_t whylen);
/* Frees the ring: every request in flight ends. The loop runs on epoll afterwards. */
void sf_loop_drop_ring(sf_loop *l);
/* Moves the loop onto its ring, from the thread that runs it; on failure it runs on
 * epoll, and says so. */
void sf_loop_start(sf_loop *l);
bool sf_loop_uring_add(sf_loop *l, sf_loop_fd *w);
bool sf_loop_uring_want(sf_loop *l, sf_loop_fd *w, bool want_in, bool want_out);
bool sf_loop_uring_forget(sf_loop *l, sf_loop_fd *w);
/* Ends the receive in flight for a socket whose owner must not read it directly meanwhile
 * (bytes may wait in that receive, ahead of what the socket holds now). True when there
 * was one: its completion (what it got, perhaps nothing) comes to the input handler.
 * Always false on epoll. */
bool sf_loop_cancel_input(sf_loop *l, sf_loop_fd *w);
bool sf_loop_uring_turn(sf_loop *l, int timeout_ms);

/* Closes the epoll instance and frees a ring never started. */
static inline void sf_loop_free(sf_loop *l)
{
    sf_loop_drop_ring(l);
    sf_loop_close(l);
}

/* Stops watching a socket and closes it; its handlers are not called again. On io_uring
 * its requests in flight are cancelled, and w stays allocated until they end
 * (sf_loop_busy). False (errno set) when they could not be: the client then sees its
 * connection end only when they do. */
static inline bool sf_loop_remove(sf_loop *l, sf_loop_fd *w)
{
    bool cancelled = l->uring == NULL || sf_loop_uring_forget(l, w);
    sf_loop_close_fd(w);
    return cancelled;
}

/* "io_uring" or "epoll": what the loop runs on. */
static inline const char *sf_loop_backend(const sf_loop *l)
{
    return l->uring != NULL ? "io_uring" : "epoll";
}

/* Starts watching a socket for input, with its handlers. False (errno set) when it cannot. */
static inline bool sf_loop_add(sf_loop *l, sf_loop_fd *w, int fd, const sf_loop_handlers *h,
                               void *ctx)
{
    *w = (sf_loop_fd){.fd = fd, .handlers = h, .ctx = ctx};
    return l->uring != NULL ? sf_loop_uring_add(l, w) : sf_loop_epoll_add(l, w);
}

/* Waits for what the socket's owner wants: input, room to send, both or neither. On io_uring
 * a receive in flight that is no longer wanted is left to complete (its bytes come to the
 * input handler like any). False when it cannot: the failed handler has been called then
 * (SF_LOOP_WANT_FAILED), so that the caller's path stays one tail call. */
static inline bool sf_loop_want(sf_loop *l, sf_loop_fd *w, bool want_in, bool want_out)
{
    return l->uring != NULL ? sf_loop_uring_want(l, w, want_in, want_out)
                            : sf_loop_epoll_want(l, w, want_in, want_out);
}

/* True while a receive of w's is in flight: bytes may wait in it, so the socket must not be
 * read directly meanwhile (later bytes would be answered first). */
static inline bool sf_loop_receiving(const sf_loop_fd *w)
{
    return w->recv_queued;
}

/* True while a request of w's is in flight: w must stay allocated until it ends. */
static inline bool sf_loop_busy(const sf_loop_fd *w)
{
    return w->recv_queued || w->poll_queued;
}

/* One turn: waits at most timeout_ms and handles what arrived. False when the loop must end. */
static inline bool sf_loop_turn(sf_loop *l, int timeout_ms)
{
    return l->uring != NULL ? sf_loop_uring_turn(l, timeout_ms) : sf_loop_take(l, timeout_ms);
}

#endif /* SF_LOOP_H */
