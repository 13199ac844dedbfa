/* embedded_skew.h -- libsnowflake-zk's live clock check (see sfz_get_skew in snowflake_zk.h):
 * a thread that asks a few peers for their clock every SFZ_SKEW_INTERVAL_MS, through the
 * registry's peer list and the program's query_peer, and says when our clock is out of line.
 * Knows nothing of sockets: the peers are asked through the callback. */
#ifndef SFZ_EMBEDDED_SKEW_H
#define SFZ_EMBEDDED_SKEW_H

#include <stdbool.h>
#include <stdint.h>

#include "embedded_options.h"
#include "registry.h"
#include "snowflake_zk.h"

typedef struct sfz_skew_watch sfz_skew_watch;

/* Told after each round that changed the verdict: out_of_line with why (a sentence naming
 * the skew and the bound), or back within it (why NULL). From the watch's thread. */
typedef void (*sfz_skew_verdict_fn)(void *ctx, bool out_of_line, const char *why);

/* Starts asking the peers of r through query (with peer_ctx); max_ms 0 = measure only, never
 * out of line. NULL with msg filled when the thread cannot start. */
SFZ_INTERNAL sfz_skew_watch *sfz_skew_start(sf_registry *r, sfz_peer_fn query, void *peer_ctx,
                                            int64_t max_ms, sfz_skew_verdict_fn verdict,
                                            void *ctx, char *msg, size_t len);

/* The figures now. */
SFZ_INTERNAL void sfz_skew_read(sfz_skew_watch *w, sfz_skew *out);

/* Stops the thread (within one peer's answer) and frees w. NULL is allowed. */
SFZ_INTERNAL void sfz_skew_stop(sfz_skew_watch *w);

/* In a child process (fork()): frees w, whose thread is the parent's, taking no lock. */
SFZ_INTERNAL void sfz_skew_forget(sfz_skew_watch *w);

#endif /* SFZ_EMBEDDED_SKEW_H */
