/* audit.h -- sf_audit: the audit log of every id handed out, sent to scribe as the original's
 * Reporter did, or appended to a JSON-lines file, from a queue that never slows generation. */
#ifndef SF_AUDIT_H
#define SF_AUDIT_H

#include <glib.h>
#include <stddef.h>
#include <stdint.h>

#include "audit_options.h"

typedef struct sf_audit sf_audit;

/* Totals since start. */
typedef struct sf_audit_stats {
    uint64_t sent;           /* entries the sink accepted */
    uint64_t dropped;        /* entries not queued: the queue was full (the original's
                              * scribe_enqueue_failures), or undelivered at stop */
    uint64_t send_failures;  /* failed Log calls or writes; their entries are retried */
    uint64_t queued;         /* entries waiting now */
} sf_audit_stats;

/* Checks the options and starts the sender thread. A sink that is down is not an error
 * here: entries queue and are sent once it answers. NULL with *error naming the bad value
 * and its range, or the file that cannot be opened. */
sf_audit *sf_audit_start(const sf_audit_options *opts, GError **error);

/* Queues one entry per id, each with a random 64-bit tag drawn now (a batch sent again
 * carries the same tags), for the sender thread. Never waits for the sink: when the queue
 * holds queue_size entries, or queue_size x 320 bytes with the agents, the ids are counted
 * as dropped. agent is copied. Thread-safe.
 *
 * Delivery is at least once: a Log call whose reply is lost after scribe took it, or a file
 * write that failed part-way (leaving a partial line, which readers skip), is sent again,
 * so an entry may appear twice, with the same tag. Entries are made when the handler
 * releases the ids: an id whose reply was then lost (the connection closed) is in the
 * log although the client never saw it. */
void sf_audit_record(sf_audit *a, const int64_t *ids, size_t n, const char *agent);

void sf_audit_get_stats(sf_audit *a, sf_audit_stats *out);

/* Call after the last sf_audit_record (the server stopped). Delivers what is queued,
 * waiting at most timeout_ms, counts the rest as dropped (and
 * logs how many), stops the thread and frees a. NULL is allowed. */
void sf_audit_stop(sf_audit *a, int timeout_ms);

#define SF_AUDIT_ERROR (sf_audit_error_quark())
GQuark sf_audit_error_quark(void);

#endif /* SF_AUDIT_H */
