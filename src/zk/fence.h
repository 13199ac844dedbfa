/* fence.h -- ids from a worker only while its registration holds: the fenced generator that
 * snowflaked's handler and the embedded library (snowflake_zk.h) both make ids with.
 *
 * The registry publishes a view: the worker for the id held, whether it may serve, the end
 * of its lease (CLOCK_BOOTTIME ms) and its reservation (no id with a timestamp past it).
 * Callers read the view without locking (a sequence lock) on every call; an id is handed
 * out only if, after it was made, the view is still the one it was made under, the lease
 * still runs and its timestamp is within the reservation. Otherwise it is discarded, never
 * handed out: a process frozen between the two checks loses the id, not the guarantee.
 * The hot path reads one clock beyond the generator's own (the boot clock, after).
 *
 * Plain C: knows nothing of ZooKeeper, Thrift or GLib. */
#ifndef SF_FENCE_H
#define SF_FENCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/snowflake.h"

/* Returned by sf_fence_next_ids beside libsnowflake's SF_ERR_* codes. */
enum {
    SF_FENCE_CLOSED = -20,    /* refused before any id was made; *why says why */
    SF_FENCE_DISCARDED = -21  /* ids were made, then the check failed: discarded; *why */
};

typedef struct sf_fence sf_fence;

/* A closed fence: no worker, not serving, reason "starting". NULL when out of memory. */
sf_fence *sf_fence_new(void);

/* Frees the fence and every worker ever published to it: no caller may still be making ids. */
void sf_fence_free(sf_fence *f);

/* The same in a child process (fork()): takes and destroys no lock, which a thread of the
 * parent may have held at the fork. NULL is allowed. */
void sf_fence_forget(sf_fence *f);

/* Makes w the fence's (freed with it) before it is published: false when out of memory (w
 * stays the caller's). */
bool sf_fence_adopt(sf_fence *f, sf_worker *w);

/* The worker of (datacenter_id, worker_id) the fence owns, or NULL: one made before for a
 * worker id held again goes on from its last id. */
sf_worker *sf_fence_find(sf_fence *f, int64_t datacenter_id, int64_t worker_id);

/* Publishes w (owned by the fence from now on, unless memory ran out: the gate then shuts
 * saying so, and w is the caller's; NULL = none held) in one step with the gate
 * (serving), the lease end (CLOCK_BOOTTIME ms; 0 = no lease, as standalone), the reservation
 * (Unix ms; 0 = none) and, when not serving, why. Ids made under the view before are
 * discarded. One writer at a time (the fence's lock). True when the gate is open after it
 * (serving, and not held). */
bool sf_fence_publish(sf_fence *f, sf_worker *w, bool serving, int64_t lease_until_boot_ms,
                      int64_t reserved_until_ms, const char *reason);

/* Shuts the gate for reason, keeping the worker (its fields still answer). */
void sf_fence_close(sf_fence *f, const char *reason);

/* A renewal: a new lease end and reservation for the same worker and gate; ids made under
 * the view before stay good. */
void sf_fence_renew(sf_fence *f, int64_t lease_until_boot_ms, int64_t reserved_until_ms);

/* Holds the gate shut for reason whatever the registry publishes (e.g. the clock is too far
 * from the peers'), keeping the worker and the lease; a publish while held keeps it shut
 * and /health says reason. sf_fence_release opens it again if the last publish serves.
 * Each returns true when it changed the gate: hold shut an open one, release opened it. */
bool sf_fence_hold(sf_fence *f, const char *reason);
bool sf_fence_release(sf_fence *f);

/* True while held, with why (len bytes) the hold's reason. */
bool sf_fence_held(sf_fence *f, char *why, size_t len);

/* The worker published last (NULL while none): owned by the fence. */
sf_worker *sf_fence_worker(sf_fence *f);

/* The end of the lease published last (CLOCK_BOOTTIME ms, 0 = none). */
int64_t sf_fence_lease_until(sf_fence *f);

/* Makes count (>= 1) ids into ids, strictly increasing, fenced as above. Returns SF_OK;
 * SF_FENCE_CLOSED or SF_FENCE_DISCARDED with why (len bytes) saying why; or the generator's
 * SF_ERR_* with err filled (a backward clock step is waited out for no longer than the
 * lease has left). */
int sf_fence_next_ids(sf_fence *f, int64_t *ids, size_t count, char *why, size_t len,
                      sf_error *err);

/* False while ids would be handed out now; otherwise true with why (len bytes) saying why
 * not. */
bool sf_fence_refusal(sf_fence *f, char *why, size_t len);

/* Room for any reason the fence gives (a registry's reasons are at most this long). */
#define SF_FENCE_REASON_MAX 2048

#endif /* SF_FENCE_H */
