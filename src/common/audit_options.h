/* audit_options.h -- the audit log's settings: the struct, each integer setting's range and
 * default named once, the defaults, the sink's names and the check. Plain C, so that the
 * settings file's reader can hold and check them without starting a sender. */
#ifndef SF_AUDIT_OPTIONS_H
#define SF_AUDIT_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>

/* X(field, min, max, default) for every integer setting. */
#define SF_AUDIT_INT_OPTIONS(X)                                                                \
    X(scribe_port, 1, 65535, 1463)          /* the scribe collector's port, as the original */ \
    X(socket_timeout_ms, 1, 600000, 5000)   /* connect and each reply */                      \
    X(batch_size, 1, 10000, 100)            /* entries per Log call or file write */          \
    X(queue_size, 1, 10000000, 100000)      /* entries waiting at most; more are dropped */

/* SF_AUDIT_MIN_<field> and SF_AUDIT_MAX_<field>, for the settings file's key table. */
enum {
#define SF_AUDIT_RANGE(field, lo, hi, dflt) SF_AUDIT_MIN_##field = (lo), SF_AUDIT_MAX_##field = (hi),
    SF_AUDIT_INT_OPTIONS(SF_AUDIT_RANGE)
#undef SF_AUDIT_RANGE
};

typedef enum {
    SF_AUDIT_NONE,   /* no audit log */
    SF_AUDIT_SCRIBE, /* scribe's Log(list<LogEntry>), framed transport, binary protocol */
    SF_AUDIT_FILE,   /* one JSON object per line, appended to a file */
} sf_audit_sink;

/* Settings; start from sf_audit_options_init(). */
typedef struct sf_audit_options {
    sf_audit_sink sink;
    const char *scribe_host;   /* default "localhost", as the original */
    const char *category;      /* scribe category, default "snowflake" */
    const char *file;          /* the JSON-lines file (SF_AUDIT_FILE) */
#define SF_AUDIT_FIELD(field, lo, hi, dflt) int field;
    SF_AUDIT_INT_OPTIONS(SF_AUDIT_FIELD)
#undef SF_AUDIT_FIELD
} sf_audit_options;

/* The defaults listed above, sink SF_AUDIT_NONE, no file. */
void sf_audit_options_init(sf_audit_options *opts);

/* The sink named name ("none", "scribe" or "file"); false when there is none. */
bool sf_audit_sink_from_name(const char *name, sf_audit_sink *sink);

/* Checks the settings without touching the file: each integer within its range, and what
 * the sink needs (a file; a scribe host and category). False with err naming the setting
 * as the settings file does ([audit] key) and what is allowed. */
bool sf_audit_options_check(const sf_audit_options *opts, char *err, size_t errlen);

#endif
