/* uring.c -- sf_uring: one server thread's io_uring (see uring.h).
 *
 * The ring is made with SINGLE_ISSUER and COOP_TASKRUN: only its thread submits, and the
 * kernel finishes completions when that thread next enters the kernel, without
 * interrupting it. (DEFER_TASKRUN, which finishes them only in io_uring_enter, left some of
 * 1,000 connections a thread waiting: p99.9 40-60 ms against epoll's 14-27.) Buffers come from one provided-buffer ring per sf_uring; a completion names the
 * buffer it filled and the caller gives it back once it has copied what it needs. */
#define _GNU_SOURCE
#include "uring.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef SF_HAVE_URING
#include <liburing.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Room for a turn's requests: a ring that fills submits in the middle of a turn, and the
 * connections behind that point waited tens of ms at 300 connections a thread. */
#define SF_URING_SQ_ENTRIES 4096
#define SF_URING_CQ_ENTRIES 8192
/* A power of two, as the buffer ring requires: 4 MiB a thread, touched as they fill.
 * Data that finds them all taken is read at once instead (see the server). */
#define SF_URING_BUFFERS 256
#define SF_URING_GROUP 0

struct sf_uring {
    struct io_uring ring;
    struct io_uring_buf_ring *bufs;
    uint8_t *mem;          /* SF_URING_BUFFERS buffers of SF_URING_BUFFER_SIZE */
};

sf_uring *sf_uring_new(char *why, size_t whylen)
{
    sf_uring *r = calloc(1, sizeof *r);
    if (r == NULL) {
        snprintf(why, whylen, "out of memory");
        return NULL;
    }
    struct io_uring_params p = {
        .flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_COOP_TASKRUN |
                 IORING_SETUP_R_DISABLED | IORING_SETUP_CQSIZE,
        .cq_entries = SF_URING_CQ_ENTRIES,
    };
    int rc = io_uring_queue_init_params(SF_URING_SQ_ENTRIES, &r->ring, &p);
    if (rc < 0) {
        snprintf(why, whylen, "io_uring_setup failed: %s", strerror(-rc));
        free(r);
        return NULL;
    }
    if (!(p.features & IORING_FEAT_EXT_ARG)) {
        snprintf(why, whylen, "the kernel's io_uring cannot wait with a timeout in one call "
                 "(IORING_FEAT_EXT_ARG, Linux 5.11)");
        io_uring_queue_exit(&r->ring);
        free(r);
        return NULL;
    }
    /* Zeroed, so that tools that cannot see the kernel's writes take the bytes as set. */
    r->mem = calloc(SF_URING_BUFFERS, SF_URING_BUFFER_SIZE);
    if (r->mem == NULL ||
        posix_memalign((void **)&r->bufs, 4096, SF_URING_BUFFERS * sizeof(struct io_uring_buf))) {
        snprintf(why, whylen, "out of memory for io_uring buffers");
        r->bufs = NULL;
        sf_uring_free(r);
        return NULL;
    }
    memset(r->bufs, 0, SF_URING_BUFFERS * sizeof(struct io_uring_buf));
    struct io_uring_buf_reg reg = {.ring_addr = (unsigned long)r->bufs,
                                   .ring_entries = SF_URING_BUFFERS, .bgid = SF_URING_GROUP};
    rc = io_uring_register_buf_ring(&r->ring, &reg, 0);
    if (rc < 0) {
        snprintf(why, whylen, "io_uring provided buffer rings are unavailable (Linux 5.19): %s",
                 strerror(-rc));
        sf_uring_free(r);
        return NULL;
    }
    io_uring_buf_ring_init(r->bufs);
    int mask = io_uring_buf_ring_mask(SF_URING_BUFFERS);
    for (int i = 0; i < SF_URING_BUFFERS; i++)
        io_uring_buf_ring_add(r->bufs, r->mem + (size_t)i * SF_URING_BUFFER_SIZE,
                              SF_URING_BUFFER_SIZE, (unsigned short)i, mask, i);
    io_uring_buf_ring_advance(r->bufs, SF_URING_BUFFERS);
    return r;
}

bool sf_uring_start(sf_uring *r, char *why, size_t whylen)
{
    /* liburing 2.3 declares io_uring_enable_rings but does not export it. */
    if (syscall(__NR_io_uring_register, r->ring.ring_fd, IORING_REGISTER_ENABLE_RINGS, NULL, 0)
        != 0) {
        snprintf(why, whylen, "cannot enable the io_uring: %s", strerror(errno));
        return false;
    }
    return true;
}

void sf_uring_free(sf_uring *r)
{
    if (r == NULL)
        return;
    if (r->ring.ring_fd >= 0)
        io_uring_queue_exit(&r->ring); /* ends every request still in flight */
    free(r->bufs);
    free(r->mem);
    free(r);
}

/* A free submission slot, submitting what is queued when the ring is full. */
static struct io_uring_sqe *sf_uring_sqe(sf_uring *r)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(&r->ring);
    if (sqe == NULL) {
        int rc = io_uring_submit(&r->ring);
        if (rc < 0) {
            errno = -rc;
            return NULL;
        }
        sqe = io_uring_get_sqe(&r->ring);
        if (sqe == NULL)
            errno = EBUSY;
    }
    return sqe;
}

static uint64_t sf_uring_tag(void *owner, int kind)
{
    return (uint64_t)(uintptr_t)owner | (uint64_t)kind;
}

bool sf_uring_recv(sf_uring *r, int fd, void *owner, int kind)
{
    struct io_uring_sqe *sqe = sf_uring_sqe(r);
    if (sqe == NULL)
        return false;
    io_uring_prep_recv(sqe, fd, NULL, SF_URING_BUFFER_SIZE, 0);
    sqe->flags |= IOSQE_BUFFER_SELECT;
    sqe->buf_group = SF_URING_GROUP;
    io_uring_sqe_set_data64(sqe, sf_uring_tag(owner, kind));
    return true;
}

bool sf_uring_poll(sf_uring *r, int fd, unsigned mask, void *owner, int kind)
{
    struct io_uring_sqe *sqe = sf_uring_sqe(r);
    if (sqe == NULL)
        return false;
    io_uring_prep_poll_add(sqe, fd, mask);
    io_uring_sqe_set_data64(sqe, sf_uring_tag(owner, kind));
    return true;
}

bool sf_uring_cancel(sf_uring *r, void *owner, int kind)
{
    struct io_uring_sqe *sqe = sf_uring_sqe(r);
    if (sqe == NULL)
        return false;
    io_uring_prep_cancel64(sqe, sf_uring_tag(owner, kind), 0);
    sqe->flags |= IOSQE_CQE_SKIP_SUCCESS;
    io_uring_sqe_set_data64(sqe, 0); /* a failed cancel's completion is ignored */
    return true;
}

int sf_uring_wait(sf_uring *r, int timeout_ms, sf_uring_event *events, int max)
{
    struct __kernel_timespec ts = {.tv_sec = timeout_ms / 1000,
                                   .tv_nsec = (long long)(timeout_ms % 1000) * 1000000};
    struct io_uring_cqe *cqe;
    int rc = io_uring_submit_and_wait_timeout(&r->ring, &cqe, 1, &ts, NULL);
    if (rc < 0 && rc != -ETIME && rc != -EINTR)
        return rc;
    return sf_uring_harvest(r, events, max);
}

int sf_uring_harvest(sf_uring *r, sf_uring_event *events, int max)
{
    struct io_uring_cqe *cqe;
    int n = 0;
    unsigned head, seen = 0;
    io_uring_for_each_cqe(&r->ring, head, cqe) {
        if (n == max)
            break;
        seen++;
        if (cqe->user_data == 0)
            continue;
        sf_uring_event *e = &events[n++];
        e->owner = (void *)(uintptr_t)(cqe->user_data & ~(uint64_t)7);
        e->kind = (int)(cqe->user_data & 7);
        e->res = cqe->res;
        e->data = NULL;
        e->buffer = -1;
        if (cqe->flags & IORING_CQE_F_BUFFER) {
            e->buffer = (int)(cqe->flags >> IORING_CQE_BUFFER_SHIFT);
            e->data = r->mem + (size_t)e->buffer * SF_URING_BUFFER_SIZE;
        }
    }
    io_uring_cq_advance(&r->ring, seen);
    return n;
}

void sf_uring_release(sf_uring *r, sf_uring_event *event)
{
    if (event->buffer < 0)
        return;
    io_uring_buf_ring_add(r->bufs, r->mem + (size_t)event->buffer * SF_URING_BUFFER_SIZE,
                          SF_URING_BUFFER_SIZE, (unsigned short)event->buffer,
                          io_uring_buf_ring_mask(SF_URING_BUFFERS), 0);
    io_uring_buf_ring_advance(r->bufs, 1);
    event->buffer = -1;
    event->data = NULL;
}

#else /* !SF_HAVE_URING */

sf_uring *sf_uring_new(char *why, size_t whylen)
{
    snprintf(why, whylen, "built without liburing (apt-get install liburing-dev, then "
             "configure again)");
    return NULL;
}

bool sf_uring_start(sf_uring *r, char *why, size_t whylen)
{
    (void)r;
    snprintf(why, whylen, "built without liburing");
    return false;
}

void sf_uring_free(sf_uring *r)
{
    (void)r;
}

bool sf_uring_recv(sf_uring *r, int fd, void *owner, int kind)
{
    (void)r, (void)fd, (void)owner, (void)kind;
    errno = ENOSYS;
    return false;
}

bool sf_uring_poll(sf_uring *r, int fd, unsigned mask, void *owner, int kind)
{
    (void)r, (void)fd, (void)mask, (void)owner, (void)kind;
    errno = ENOSYS;
    return false;
}

bool sf_uring_cancel(sf_uring *r, void *owner, int kind)
{
    (void)r, (void)owner, (void)kind;
    errno = ENOSYS;
    return false;
}

int sf_uring_wait(sf_uring *r, int timeout_ms, sf_uring_event *events, int max)
{
    (void)r, (void)timeout_ms, (void)events, (void)max;
    return -ENOSYS;
}

int sf_uring_harvest(sf_uring *r, sf_uring_event *events, int max)
{
    (void)r, (void)events, (void)max;
    return 0;
}

void sf_uring_release(sf_uring *r, sf_uring_event *event)
{
    (void)r, (void)event;
}

#endif /* SF_HAVE_URING */
