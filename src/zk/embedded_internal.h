/* embedded_internal.h -- what libsnowflake-zk's files share and nothing outside them sees:
 * the handle's struct and the gate every public call passes first, once. The public
 * interface is snowflake_zk.h; this header may change with any commit.
 *
 * The gate (embedded_gate.h): a handle belongs to one process (a fork() makes a child whose
 * copy must never hand out the parent's ids: the fork word tells it, for one relaxed load),
 * and sfz_stop frees nothing while a call is inside (the calls counter it waits on, and for
 * the id path the threads' slots, which cost no locked instruction). */
#ifndef SFZ_EMBEDDED_INTERNAL_H
#define SFZ_EMBEDDED_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "embedded_gate.h"
#include "embedded_notify.h"
#include "embedded_options.h"
#include "embedded_skew.h"
#include "fence.h"
#include "registry.h"
#include "snowflake_zk.h"

/* In sfz.calls once sfz_stop began: every call entering after it is refused. */
#define SFZ_STOPPING ((uint_fast64_t)1 << 63)

struct sfz {
    /* What every call reads: first, so that they share a cache line. */
    sf_fence *fence;             /* owns every worker made for the handle */
    atomic_uint fork_word;       /* sfz_fork_word of the process it belongs to, no fork under
                                  * way: the id path's one compare (embedded_gate.h) */
    atomic_uint_fast64_t calls;  /* public calls inside now, | SFZ_STOPPING */
    bool gate_light;             /* sfz_gate_register held: the id path takes a slot */
    sfz_owner owner;             /* the process it belongs to (under the gate's claims lock) */
    pid_t made_by;               /* the pid of that process, for the refusal's message */
    pid_t claiming;              /* a thread of this pid claims the handle for its process */
    pid_t adopted_by;            /* the process whose parts the handle has, its claim not
                                  * done (a fork() child whose claim failed); 0 = none */
    int claim_rc;                /* the last failed claim of a child, for the threads that */
    char claim_msg[SFZ_ERROR_MAX]; /* waited for it */

    char *zookeeper, *auth, *worker_id_path, *holder;
    bool default_holder;         /* holder is ours: it names the datacenter tried */
    sfz_datacenters *dcs;        /* datacenter_paths, parsed; NULL for a fixed datacenter */
    int dc_index;                /* with dcs: the datacenter tried now (first: at random) */
    sfz_options o;               /* the options, its strings pointing at the copies above */
    pthread_mutex_t lock;        /* guards registry (while starting), cancelled, started, the
                                  * start's tries, state */
    pthread_cond_t wake;         /* a cancel during a retry wait */
    sf_registry *registry;
    bool cancelled;
    bool started;                /* the start returned: sfz_cancel does nothing any more */
    int start_tries;             /* the start's tries so far, while it runs (else 0) */
    int64_t next_try_ms;         /* Unix ms of its next try while it waits (else 0) */
    bool shut;                   /* sfz_shut: the fence never opens again */
    sfz_state state;
    int64_t since_ms;            /* Unix ms: when state.serving last changed (or the start) */
    int event_fd;                /* readable after a transition, until sfz_read_state_fd */
    pthread_mutex_t transition;  /* one transition at a time: the registry's or the skew's */
    sfz_skew_watch *skew;        /* the live clock check; NULL without query_peer */
    sfz_notifier *notifier;      /* makes the application's callbacks, never the registry */
};

/* True when h does not belong to this process (a fork() child's copy of it): one relaxed
 * load and a compare, and the slow path (embedded_gate.h) only after a fork. */
static inline bool sfz_forked(const sfz *h)
{
    if (__builtin_expect(atomic_load_explicit(&sfz_fork_word, memory_order_relaxed) ==
                             atomic_load_explicit(&h->fork_word, memory_order_acquire), 1))
        return false;
    return sfz_gate_foreign(&h->owner);
}

/* Fills err with SFZ_ERR_FORKED, naming the process h belongs to; returns the code. */
static inline int sfz_fail_forked(const sfz *h, sfz_error *err)
{
    return sfz_gate_refuse(h->made_by, err);
}

/* A fork() child's id call on a handle not its own: with SFZ_ON_FORK_CLAIM, claims the
 * child's own worker id (waiting for another thread's claim of it instead, if one is under
 * way) and returns SFZ_OK once the handle is this process's; else the refusal, or the
 * claim's failure (embedded.c). */
SFZ_INTERNAL int sfz_claim_here(sfz *h, sfz_error *err);

static inline void sfz_leave(sfz *h)
{
    atomic_fetch_sub_explicit(&h->calls, 1, memory_order_release);
}

/* Enters a public call: false once sfz_stop began (the call then touches h no more). */
static inline bool sfz_enter(sfz *h)
{
    if (__builtin_expect(atomic_fetch_add_explicit(&h->calls, 1, memory_order_acquire) &
                             SFZ_STOPPING, 0)) {
        sfz_leave(h);
        return false;
    }
    void (*hook)(const void *) = atomic_load_explicit(&sfz_gate_inside_hook,
                                                      memory_order_relaxed);
    if (__builtin_expect(hook != NULL, 0))
        hook(h);
    return true;
}

/* The gate of a call that takes no id and returns no code: false, touching h no more, where
 * h is not this process's or sfz_stop began; else the call is inside until sfz_leave. */
static inline bool sfz_enter_here(sfz *h)
{
    return !sfz_forked(h) && sfz_enter(h);
}

/* Enters the id path (embedded_gate.h): false once sfz_stop began. *slot is what
 * sfz_id_leave takes: this thread's slot, or NULL where the call was counted in. */
static inline bool sfz_id_enter(sfz *h, sfz_gate_slot **slot)
{
    sfz_gate_slot *s = sfz_gate_mine;
    if (__builtin_expect(s == NULL, 0) && h->gate_light)
        s = sfz_gate_slot_new();
    if (__builtin_expect(s == NULL || !h->gate_light, 0)) {
        *slot = NULL;
        return sfz_enter(h);
    }
    atomic_store_explicit(&s->inside, h, memory_order_relaxed);
    atomic_signal_fence(memory_order_seq_cst); /* the store, then the load: sfz_gate_drain */
    if (__builtin_expect(atomic_load_explicit(&h->calls, memory_order_relaxed) & SFZ_STOPPING,
                         0)) {
        atomic_store_explicit(&s->inside, NULL, memory_order_release);
        return false;
    }
    *slot = s;
    return true;
}

static inline void sfz_id_leave(sfz *h, sfz_gate_slot *slot)
{
    if (slot != NULL)
        atomic_store_explicit(&slot->inside, NULL, memory_order_release);
    else
        sfz_leave(h);
}

/* A line to the application's log, or standard error. */
SFZ_INTERNAL void sfz_log_line(sfz *h, const char *level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The worker id and datacenter id held (or last held), -1 before the first claim: for the
 * handle's own threads, which pass no gate. */
static inline int64_t sfz_held_id(sfz *h, bool datacenter)
{
    sf_worker *w = sf_fence_worker(h->fence);
    if (w == NULL)
        return -1;
    return datacenter ? sf_worker_datacenter_id(w) : sf_worker_worker_id(w);
}

#endif /* SFZ_EMBEDDED_INTERNAL_H */
