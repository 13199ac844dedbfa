/* registry_log.c -- the registry's two ways to report (see registry_log.h). */
#include "registry_log.h"

#include <stdarg.h>
#include <stdio.h>

void sf_registry_set_err(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || errlen == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

void sf_registry_log_to(sf_registry_log_fn log, void *ctx, const char *level, const char *fmt,
                        ...)
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
