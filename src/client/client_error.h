/* client_error.h -- libsnowflake-client's one way to fail, as snowflake_client.h states it to
 * its callers: a negative SFC_ERR_* code returned, and, when the caller gave an sfc_error,
 * the code and a message a person can act on written into it (the caller's memory: the text
 * is the caller's to keep). Every part fails through sfc_fail, so that no path forgets the
 * code or the message. */
#ifndef SFC_CLIENT_ERROR_H
#define SFC_CLIENT_ERROR_H

#include <stdarg.h>
#include <stdio.h>

#include "snowflake_client.h"

/* Fills err (if not NULL) with code and a formatted message; returns code. */
static inline int sfc_fail(sfc_error *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static inline int sfc_fail(sfc_error *err, int code, const char *fmt, ...)
{
    if (err != NULL) {
        va_list ap;
        va_start(ap, fmt);
        err->code = code;
        vsnprintf(err->message, sizeof err->message, fmt, ap);
        va_end(ap);
    }
    return code;
}

#endif /* SFC_CLIENT_ERROR_H */
