/* embedded_options.h -- what embedded.c takes from embedded_options.c: the options' check
 * and defaults (public, in snowflake_zk.h) and the helpers below. Plain C. */
#ifndef SF_EMBEDDED_OPTIONS_H
#define SF_EMBEDDED_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/zkpath.h"
#include "snowflake_zk.h"

/* The longest node data a holder may have (its terminating NUL included). */
#define SFZ_HOLDER_MAX 256

/* The datacenters an automatic datacenter id is chosen from, in the order tried. */
typedef struct sfz_datacenters {
    int count;
    int64_t ids[SF_MAX_DATACENTER_ID + 1];
    char paths[SF_MAX_DATACENTER_ID + 1][SF_ZKPATH_MAX + 1];
} sfz_datacenters;

#include "embedded_error.h"

/* The generator's options for worker_id under opts. */
SFZ_INTERNAL void sfz_worker_options(const sfz_options *opts, int64_t worker_id,
                                     sf_worker_options *wo);

/* Parses datacenter_paths ("D=/path,D=/path") into out, ordered by datacenter id; false
 * with msg saying what is wrong. */
SFZ_INTERNAL bool sfz_parse_datacenters(const char *spec, sfz_datacenters *out, char *msg,
                                        size_t len);

#endif /* SF_EMBEDDED_OPTIONS_H */
