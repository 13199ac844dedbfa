/* embedded_health.h -- libsnowflake-zk's health figures (sfz_get_health in snowflake_zk.h):
 * why a handle does not serve, as one of a fixed set, from the registry's view and the
 * fence's. */
#ifndef SFZ_EMBEDDED_HEALTH_H
#define SFZ_EMBEDDED_HEALTH_H

#include <stdbool.h>
#include <stdint.h>

#include "embedded_options.h"
#include "fence.h"
#include "registry.h"
#include "snowflake_zk.h"

/* Fills out for a handle that serves or not (serving), was shut, claims through registry
 * (NULL before its start made one) with its ids through fence, and last began or stopped
 * serving at since_ms (Unix ms). */
SFZ_INTERNAL void sfz_health_fill(sfz_health *out, bool serving, bool shut,
                                  sf_registry *registry, sf_fence *fence, int64_t since_ms);

#endif /* SFZ_EMBEDDED_HEALTH_H */
