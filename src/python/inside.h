/* inside.h -- the calls inside a handle with the GIL released, counted so that close() frees
 * nothing under them.
 *
 * A call that keeps the GIL cannot meet close(), which needs it. A call that releases it (a
 * claim, a batch, a wait for the clock, a call to a node) reads the handle's pointer, counts
 * itself in, and only then lets other threads run; close() takes the pointer away (new calls
 * find the handle closed), then waits, without the GIL, until the count is back to 0.
 *
 * A fork() child has none of its parent's threads: the first use there starts afresh (the
 * count at 0, the lock and the condition made anew), whatever they were at the fork. */
#ifndef SFPY_INSIDE_H
#define SFPY_INSIDE_H

#include "sfpy.h"

typedef struct sfpy_inside {
    pthread_mutex_t lock;
    pthread_cond_t changed; /* count reached 0, or a counter was bumped */
    int count;              /* calls inside now */
    unsigned forks;         /* the fork count the lock was made at */
} sfpy_inside;

/* Makes the count for this process (a new handle, or a fork() child's first use). With
 * the GIL held. */
void sfpy_inside_init(sfpy_inside *in);

/* With the GIL held: the count is this process's from now on. */
static inline void sfpy_inside_here(sfpy_inside *in)
{
    if (in->forks != sfpy_forks_now())
        sfpy_inside_init(in);
}

/* Counts a call in (with the GIL held, before releasing it) and out (after taking it back). */
void sfpy_inside_enter(sfpy_inside *in);
void sfpy_inside_leave(sfpy_inside *in);

/* Waits with the GIL released until no call is inside. */
void sfpy_inside_wait_idle(sfpy_inside *in);

/* A counter of events the handle's threads wait for (a start that ended): bumped with the
 * GIL held, waited for with it released, until *counter is no longer seen (read with the
 * GIL held before the wait). */
void sfpy_inside_bump(sfpy_inside *in, unsigned *counter);
void sfpy_inside_wait_bump(sfpy_inside *in, const unsigned *counter, unsigned seen);

/* Frees what init made (the handle's end, no call inside). */
void sfpy_inside_destroy(sfpy_inside *in);

#endif
