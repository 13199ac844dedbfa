/* registry_log.h -- how the registry's parts (the claims and the peer checks) report: a
 * message into the caller's err buffer, or a line to the caller's log. One pair of
 * functions, so that every part formats and routes its messages the same way; defined here,
 * so that reporting is no call into another file. */
#ifndef SF_REGISTRY_LOG_H
#define SF_REGISTRY_LOG_H

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

#include "common/registry_options.h"

/* Formats into the caller's buffer (nothing when err is NULL or errlen 0), so that no error
 * path loses its message. */
static inline __attribute__((format(printf, 3, 4))) void
sf_registry_set_err(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || errlen == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* Sends a message at level to log (with ctx), or to standard error when log is NULL. */
static inline __attribute__((format(printf, 4, 5))) void
sf_registry_log_to(sf_registry_log_fn log, void *ctx, const char *level, const char *fmt, ...)
{
    char msg[SF_REGISTRY_ERR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (log)
        log(ctx, level, msg);
    else
        fprintf(stderr, "snowflaked: registry: %s: %s\n", level, msg);
}

#endif /* SF_REGISTRY_LOG_H */
