/* embedded_gate.h -- how sfz_stop knows that no thread is inside sfz_next_ids, at the cost of
 * two plain stores on the id path instead of two locked instructions.
 *
 * Each thread that makes ids has a slot (its own cache line) naming the handle it is inside.
 * The id path stores the handle there, then reads the handle's stopping flag: plain accesses,
 * ordered only for the compiler. sfz_stop sets the flag, then has the kernel run a full
 * memory barrier on every thread of the process (membarrier, private expedited), then waits
 * until no slot names the handle: each thread either stored its slot before that barrier
 * (sfz_stop sees it and waits) or reads the flag after it (and refuses). Where membarrier is
 * not available the id path counts itself in and out instead (embedded_internal.h). */
#ifndef SFZ_EMBEDDED_GATE_H
#define SFZ_EMBEDDED_GATE_H

#include <stdatomic.h>
#include <stdbool.h>

#ifndef SFZ_INTERNAL
#define SFZ_INTERNAL __attribute__((visibility("hidden")))
#endif

typedef struct sfz_gate_slot {
    _Atomic(const void *) inside; /* the handle this thread is making ids of, or NULL */
    struct sfz_gate_slot *next;   /* every thread's, for sfz_gate_drain */
} __attribute__((aligned(64))) sfz_gate_slot;

/* This thread's slot, NULL until its first id (initial-exec: one load, no call). */
SFZ_INTERNAL extern __thread sfz_gate_slot *sfz_gate_mine __attribute__((tls_model("initial-exec")));

/* Registers the process for membarrier (once per handle: a fork()ed child is a process of
 * its own); false where the kernel refuses (the id path then counts). */
SFZ_INTERNAL bool sfz_gate_register(void);

/* This thread's slot, made on its first call; NULL when out of memory. */
SFZ_INTERNAL sfz_gate_slot *sfz_gate_slot_new(void);

/* After the handle's stopping flag was set: waits until no thread's slot names handle.
 * Returns 0, or the errno of a membarrier the kernel refused (registered at the start, it
 * does not): the caller must then not free what the id path reads. */
SFZ_INTERNAL int sfz_gate_drain(const void *handle);

#endif /* SFZ_EMBEDDED_GATE_H */
