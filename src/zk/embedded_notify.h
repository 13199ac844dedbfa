/* embedded_notify.h -- a handle's callbacks to the application (its log sink and on_state),
 * made from a thread of their own, in the order they came: a sink on a stalled disk or an
 * on_state that waits for something never delays the registry's thread, which renews the
 * lease. Part of libsnowflake-zk. */
#ifndef SFZ_EMBEDDED_NOTIFY_H
#define SFZ_EMBEDDED_NOTIFY_H

#include "embedded_options.h" /* SFZ_INTERNAL */
#include "snowflake_zk.h"

/* Calls waiting at most; a log line that finds them all taken is dropped (and counted in a
 * line of its own once there is room), a state never: it replaces the newest log line, or,
 * with only states waiting, the newest state. */
#define SFZ_NOTIFY_QUEUE 64

typedef struct sfz_notifier sfz_notifier;

/* Starts the thread that calls log (NULL: standard error) and on_state (NULL: none) with
 * their contexts. NULL when out of memory or threads. */
SFZ_INTERNAL sfz_notifier *sfz_notifier_start(sfz_log_fn log, void *log_ctx,
                                              sfz_state_fn on_state, void *state_ctx);

/* Queues one line for the log; never waits for the sink. */
SFZ_INTERNAL void sfz_notifier_log(sfz_notifier *n, const char *level, const char *line);

/* Queues one call of on_state with a copy of state; never waits for the callback. */
SFZ_INTERNAL void sfz_notifier_state(sfz_notifier *n, const sfz_state *state);

/* Makes the calls still queued, ends the thread and frees n (NULL is allowed). Waits for a
 * call in progress to return. In a process other than the one that started it (a child
 * after fork(), where the thread does not exist) it only frees the memory. */
SFZ_INTERNAL void sfz_notifier_stop(sfz_notifier *n);

#endif /* SFZ_EMBEDDED_NOTIFY_H */
