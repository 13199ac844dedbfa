/* embedded_gate.h -- the gate every public call of libsnowflake-zk passes first: whether the
 * handle belongs to this process (fork()), and how sfz_stop knows that no thread is inside.
 *
 * Processes. A handle belongs to the process that made it. A word of the process's (below)
 * changes at every fork(), in the parent from the moment the fork begins (a prepare handler:
 * those run before the fork, whatever the order they were registered in) until it returned
 * there, and for good in the child; a handle keeps the word of its process, so the id path
 * tells its own process by one relaxed load and a compare. A word that differs sends the call
 * down the slow path, which asks who this process is (getpid() against the process the gate
 * last settled in): a child is settled there at its first call, even when that call is made
 * from a program's own pthread_atfork child handler that runs before the library's, so no
 * call in a child is ever answered with the parent's handle.
 *
 * Stop. Each thread that makes ids has a slot (its own cache line) naming the handle it is
 * inside. The id path stores the handle there, then reads the handle's stopping flag: plain
 * accesses, ordered only for the compiler. sfz_stop sets the flag, then has the kernel run a
 * full memory barrier on every thread of the process (membarrier, private expedited), then
 * waits until no slot names the handle: each thread either stored its slot before that
 * barrier (sfz_stop sees it and waits) or reads the flag after it (and refuses). Where
 * membarrier is not available the id path counts itself in and out instead
 * (embedded_internal.h), as every other call does. */
#ifndef SFZ_EMBEDDED_GATE_H
#define SFZ_EMBEDDED_GATE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <sys/types.h>

#include "snowflake_zk.h"

#ifndef SFZ_INTERNAL
#define SFZ_INTERNAL __attribute__((visibility("hidden")))
#endif

/* The process's word: its fork generation (one more in each child) above the low bits, and
 * in the low bits how many fork()s are under way in it. */
#define SFZ_FORKS_UNDER_WAY 0xffffu
SFZ_INTERNAL extern atomic_uint sfz_fork_word;

/* Who a handle belongs to: a process, told apart from its own children by its pid and from
 * a later process that got the same pid by how many forks separate it from the process that
 * loaded the library. */
typedef struct sfz_owner {
    pid_t pid;
    unsigned depth;
} sfz_owner;

/* Sets up the fork handlers and the first process once; false with *rc the errno-style code
 * when pthread_atfork could not. */
SFZ_INTERNAL bool sfz_gate_watch_forks(int *rc);

/* This process, and its word with no fork under way in it (what a handle made now keeps). */
SFZ_INTERNAL void sfz_gate_owner_here(sfz_owner *owner, unsigned *word);

/* The slow path: true when owner is not this process (settling a fork()ed child first). It
 * reads owner under the claims' lock, which a child's claim of its parent's handle holds
 * while it makes the handle this process's. */
SFZ_INTERNAL bool sfz_gate_foreign(const sfz_owner *owner);

/* The claims' lock (settling a fork()ed child first), a wait on it for a claim to end, and
 * the word that one ended; with it held, whether owner is this process. */
SFZ_INTERNAL void sfz_gate_lock_claims(void);
SFZ_INTERNAL void sfz_gate_unlock_claims(void);
SFZ_INTERNAL void sfz_gate_wait_claims(void);
SFZ_INTERNAL void sfz_gate_claims_changed(void);
SFZ_INTERNAL bool sfz_gate_owned_here(const sfz_owner *owner);

/* The refusal of a call in a process a handle does not belong to: fills err with
 * SFZ_ERR_FORKED, naming made_by (the process the handle belongs to) and this one; returns
 * the code. */
SFZ_INTERNAL int sfz_gate_refuse(pid_t made_by, sfz_error *err);

typedef struct sfz_gate_slot {
    _Atomic(const void *) inside; /* the handle this thread is making ids of, or NULL */
    struct sfz_gate_slot *next;   /* every thread's, for sfz_gate_drain */
} __attribute__((aligned(64))) sfz_gate_slot;

/* This thread's slot, NULL until its first id (initial-exec: one load, no call). */
SFZ_INTERNAL extern __thread sfz_gate_slot *sfz_gate_mine __attribute__((tls_model("initial-exec")));

/* Registers the process for membarrier (once per handle, and again by a child that claims a
 * handle of its parent's: a fork()ed child is a process of its own); false where the kernel
 * refuses (the id path then counts). */
SFZ_INTERNAL bool sfz_gate_register(void);

/* This thread's slot, made on its first call; NULL when out of memory. */
SFZ_INTERNAL sfz_gate_slot *sfz_gate_slot_new(void);

/* After the handle's stopping flag was set: waits until no thread's slot names handle.
 * Returns 0, or the errno of a membarrier the kernel refused (registered at the start, it
 * does not): the caller must then not free what the id path reads. */
SFZ_INTERNAL int sfz_gate_drain(const void *handle);

/* For the library's own tests: called with the handle by every call that takes no id, once
 * it is inside the gate (sfz_stop waits for it to return). NULL, the default, calls nothing. */
SFZ_INTERNAL extern void (*_Atomic sfz_gate_inside_hook)(const void *handle);

#endif /* SFZ_EMBEDDED_GATE_H */
