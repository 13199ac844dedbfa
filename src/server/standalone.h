/* standalone.h -- ids from a worker this process publishes itself, with no registry: the
 * daemon's standalone mode (the configured worker id) and the tests, which publish leases,
 * closures and new workers at will. A fence (zk/fence.h) carries what is published, so ids
 * made under one publish are never handed out under the next. Plain C. */
#ifndef SF_STANDALONE_H
#define SF_STANDALONE_H

#include <stdbool.h>
#include <stdint.h>

#include "idsource.h"
#include "lib/snowflake.h"

typedef struct sf_standalone sf_standalone;

/* Nothing published yet: ids refused, "starting". NULL when out of memory. */
sf_standalone *sf_standalone_new(void);

/* One serving w from now on, with no lease: the daemon's standalone mode. NULL when out of
 * memory (w is then still the caller's). */
sf_standalone *sf_standalone_new_serving(sf_worker *w);

/* Frees it and every worker ever published: no request may still be using its source. */
void sf_standalone_free(sf_standalone *s);

/* Publishes, all at once so no request pairs one state's worker with another's gate or
 * lease: w the worker ids come from (owned from now on; every worker published is kept
 * until sf_standalone_free, as a request may still use one; the same worker again is fine),
 * serving opens the gate, lease_until_boot_ms ends the right to hand out ids (CLOCK_BOOTTIME
 * ms; 0 = no lease), reserved_until_ms is the latest timestamp (Unix ms) an id may carry (0
 * = no limit), reason (copied) says why while closed. Apply any timestamp floor to w first.
 * Ids being made under the previous publish are discarded, never handed out. */
void sf_standalone_publish(sf_standalone *s, sf_worker *w, bool serving,
                           int64_t lease_until_boot_ms, int64_t reserved_until_ms,
                           const char *reason);

/* Extends the lease and the reservation of what is published: ids being made now are still
 * handed out. */
void sf_standalone_renew(sf_standalone *s, int64_t lease_until_boot_ms, int64_t reserved_until_ms);

/* The handler's source of ids over s (sf_handler_set_source); valid while s lives. */
const sf_id_source *sf_standalone_source(sf_standalone *s);

#endif /* SF_STANDALONE_H */
