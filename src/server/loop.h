/* loop.h -- how a server thread waits for its sockets: one interface, two backends.
 *
 * Both backends share every rule of a connection (conn.c, thread.c); they differ in how a
 * thread learns that a socket has data. On epoll (loop_epoll.c) it is told the socket is
 * readable and reads it; on io_uring (loop_uring.c) a receive is queued per connection and
 * completes with the bytes, so one system call per loop turn submits and reaps the receives
 * of every connection served in that turn. Replies are sent at once in both. On io_uring
 * the thread's epoll instance still holds the listener and the wake-up eventfd, and the ring
 * polls that instance: accepting and handing over connections is one code path. A thread
 * runs on io_uring when it has a ring (t->uring), else on epoll. */
#ifndef SF_LOOP_H
#define SF_LOOP_H

#include <stdbool.h>

#include "server_internal.h"

/* loop_epoll.c */
bool sf_loop_epoll_add(sf_thread *t, sf_conn *c);
bool sf_loop_epoll_watch(sf_thread *t, sf_conn *c, bool want_in, bool want_out);
/* Handles what the thread's epoll instance reports, waiting up to timeout_ms: on epoll
 * everything, on io_uring the listener and the wake-up. False when the loop must end. */
bool sf_loop_epoll_turn(sf_thread *t, bool draining, int timeout_ms);

/* loop_uring.c */
void sf_loop_uring_start(sf_thread *t);
bool sf_loop_uring_add(sf_thread *t, sf_conn *c);
bool sf_loop_uring_watch(sf_thread *t, sf_conn *c, bool want_in, bool want_out);
void sf_loop_uring_forget(sf_thread *t, sf_conn *c);
bool sf_loop_uring_cancel_recv(sf_thread *t, sf_conn *c);
bool sf_loop_uring_turn(sf_thread *t, bool draining);
void sf_loop_uring_close(sf_thread *t);

/* Watches a connection just adopted for input. False (errno set) when it cannot. */
static inline bool sf_loop_add(sf_thread *t, sf_conn *c)
{
    return t->uring != NULL ? sf_loop_uring_add(t, c) : sf_loop_epoll_add(t, c);
}

/* Waits for what c wants: input, room to send, both or neither. False when c was closed
 * (the ring could not take a request). */
static inline bool sf_loop_watch(sf_thread *t, sf_conn *c, bool want_in, bool want_out)
{
    return t->uring != NULL ? sf_loop_uring_watch(t, c, want_in, want_out)
                            : sf_loop_epoll_watch(t, c, want_in, want_out);
}

/* One turn: waits at most SF_TICK_MS and handles what arrived. False when the loop must end. */
static inline bool sf_loop_turn(sf_thread *t, bool draining)
{
    return t->uring != NULL ? sf_loop_uring_turn(t, draining)
                            : sf_loop_epoll_turn(t, draining, SF_TICK_MS);
}

#endif /* SF_LOOP_H */
