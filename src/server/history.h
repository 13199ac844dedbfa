/* history.h -- sf_history: the node's recent past kept on the node (ids handed out and whether
 * it served, once a second for the last ten minutes), so that a status page opened during an
 * incident shows what led to it. */
#ifndef SF_HISTORY_H
#define SF_HISTORY_H

#include <glib.h>
#include <stdint.h>

#define SF_HISTORY_SAMPLES 600 /* ten minutes at one a second */
#define SF_HISTORY_INTERVAL_MS 1000

typedef struct sf_history sf_history;

/* Reads the figures sampled: ids handed out so far, and whether ids are served now. Called on
 * the history's own thread once a second; must not block for long. */
typedef void (*sf_history_sample_fn)(void *ctx, uint64_t *ids, gboolean *serving);

/* Starts sampling through fn on a thread of its own (the first sample at once). */
sf_history *sf_history_start(sf_history_sample_fn fn, void *ctx);

/* The samples as JSON, newly allocated: {"interval_ms":1000,"now_ms":<Unix ms>,
 * "now_mono_ms":<ms>,"samples":[[<mono ms>,<ids>,<1 serving|0>],...]}, oldest first; mono ms
 * are on the node's monotonic clock (rates from their differences do not jump with the wall
 * clock), now_ms places them in wall time. */
char *sf_history_render_json(sf_history *h);

/* Stops the thread and frees h. NULL is allowed. */
void sf_history_stop(sf_history *h);

#endif /* SF_HISTORY_H */
