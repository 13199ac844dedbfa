/* audit.h -- sf_audit: the audit log of every id handed out, sent to scribe as the original's
 * Reporter did, or appended to a JSON-lines file, from a queue that never slows generation. */
#ifndef SF_AUDIT_H
#define SF_AUDIT_H

#include <glib.h>
#include <stddef.h>
#include <stdint.h>

#include "common/audit_options.h"

typedef struct sf_audit sf_audit;

/* The audit log's counters, each named once: X(name, help). Each is a field of
 * sf_audit_stats and a counter of the admin endpoint under that name. */
#define SF_AUDIT_COUNTERS(X)                                                                   \
    X(audit_sent, "Audit entries the sink accepted")                                          \
    X(audit_dropped, "Audit entries dropped: the queue was full, or undelivered at stop")     \
    X(audit_send_failures, "Failed deliveries to the audit sink (their entries are retried)")

/* Totals since start (audit_dropped is the original's scribe_enqueue_failures), and the
 * entries waiting now. */
typedef struct sf_audit_stats {
#define SF_AUDIT_STATS_FIELD(name, help) uint64_t name;
    SF_AUDIT_COUNTERS(SF_AUDIT_STATS_FIELD)
#undef SF_AUDIT_STATS_FIELD
    uint64_t queued;
    uint64_t queue_size; /* the most that may wait (queue_size); 0 without an audit log */
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

/* Call after the last sf_audit_record (the server stopped). Delivers what is queued for as
 * long as the sink takes it (a sink that took nothing for timeout_ms is given up), counts
 * the rest as dropped (and logs how many), stops the thread and frees a. NULL is allowed. */
void sf_audit_stop(sf_audit *a, int timeout_ms);

#define SF_AUDIT_ERROR (sf_audit_error_quark())
GQuark sf_audit_error_quark(void);

#endif /* SF_AUDIT_H */
