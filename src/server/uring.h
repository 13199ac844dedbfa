/* uring.h -- sf_uring: one server thread's io_uring, the loop that batches its system calls.
 *
 * Receives are queued one at a time per socket and land in a ring of buffers the kernel
 * picks from when data arrives, so an idle connection holds no buffer; polls are one-shot.
 * sf_uring_wait submits everything queued and waits for completions in one system call, so
 * a loop turn that serves many connections enters the kernel once for all their receives.
 * Plain C and liburing; built without liburing, sf_uring_new says so and the server uses
 * epoll. */
#ifndef SF_URING_H
#define SF_URING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct sf_uring sf_uring;

/* One completion. owner and kind are what was queued (kind 1..7; owner 8-byte aligned). */
typedef struct sf_uring_event {
    void *owner;
    int kind;
    int res;               /* bytes received, the poll's revents, or -errno */
    const uint8_t *data;   /* a receive's bytes (res > 0), valid until sf_uring_release */
    int buffer;            /* the buffer holding them, -1 = none */
} sf_uring_event;

/* The most bytes one receive completion carries; a receive that fills it may have left
 * more in the socket. */
#define SF_URING_BUFFER_SIZE 16384

/* Creates a ring disabled until sf_uring_start, so that the thread that will use it
 * can own it alone. NULL when io_uring or a feature the loop needs is unavailable (an
 * old kernel, a container's seccomp filter, a build without liburing); why then says
 * which. */
sf_uring *sf_uring_new(char *why, size_t whylen);

/* Enables the ring for the calling thread, the only one that may use it afterwards. */
bool sf_uring_start(sf_uring *r, char *why, size_t whylen);

/* Cancels whatever is still queued or in flight and frees the ring. NULL is allowed. */
void sf_uring_free(sf_uring *r);

/* Queues one receive on fd into a provided buffer. False (errno set) when the ring
 * cannot take it. */
bool sf_uring_recv(sf_uring *r, int fd, void *owner, int kind);

/* Queues one poll of fd for the poll(2) events in mask. */
bool sf_uring_poll(sf_uring *r, int fd, unsigned mask, void *owner, int kind);

/* Asks the kernel to end the receive or poll queued as (owner, kind): it then completes
 * with -ECANCELED, unless it completed already. */
bool sf_uring_cancel(sf_uring *r, void *owner, int kind);

/* Submits what was queued and waits up to timeout_ms for a completion; fills at most max
 * events. Returns how many (0 after the timeout), or -errno. Every event with a buffer
 * must be given back with sf_uring_release before the next wait. */
int sf_uring_wait(sf_uring *r, int timeout_ms, sf_uring_event *events, int max);

/* Takes at most max more completions that have arrived, without entering the kernel:
 * after a wait that filled all max events, the rest of the turn's completions are read
 * with this before the next wait, so that none waits behind newer ones. */
int sf_uring_harvest(sf_uring *r, sf_uring_event *events, int max);

/* Gives an event's buffer back to the kernel. */
void sf_uring_release(sf_uring *r, sf_uring_event *event);

#endif /* SF_URING_H */
