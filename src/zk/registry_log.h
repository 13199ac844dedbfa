/* registry_log.h -- how the registry's parts (the claims and the peer checks) report: a
 * message into the caller's err buffer, or a line to the caller's log. One pair of
 * functions, so that every part formats and routes its messages the same way. */
#ifndef SF_REGISTRY_LOG_H
#define SF_REGISTRY_LOG_H

#include <stddef.h>

#include "common/registry_options.h"

/* Formats into the caller's buffer (nothing when err is NULL or errlen 0), so that no error
 * path loses its message. */
void sf_registry_set_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Sends a message at level to log (with ctx), or to standard error when log is NULL. */
void sf_registry_log_to(sf_registry_log_fn log, void *ctx, const char *level, const char *fmt,
                        ...) __attribute__((format(printf, 4, 5)));

#endif /* SF_REGISTRY_LOG_H */
