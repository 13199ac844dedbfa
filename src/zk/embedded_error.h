/* embedded_error.h -- libsnowflake-zk's one way to fail, as snowflake_zk.h states it to its
 * callers: a negative SFZ_ERR_* code returned, and, when the caller gave an sfz_error, the
 * code and a message a person can act on written into it (the caller's memory: the text is
 * the caller's to keep). Every part fails through sfz_fail, so that no path forgets the
 * code or the message. */
#ifndef SFZ_EMBEDDED_ERROR_H
#define SFZ_EMBEDDED_ERROR_H

#include <stdarg.h>
#include <stdio.h>

#include "snowflake_zk.h"

/* The library's own functions: hidden, so that only the public API is exported. */
#ifndef SFZ_INTERNAL
#define SFZ_INTERNAL __attribute__((visibility("hidden")))
#endif

/* Fills err (if any) with code and a formatted message; returns code. */
static inline __attribute__((format(printf, 3, 4))) int
sfz_fail(sfz_error *err, int code, const char *fmt, ...)
{
    if (err != NULL) {
        va_list ap;
        va_start(ap, fmt);
        err->code = code;
        err->behind_ms = 0;
        err->discarded = 0;
        vsnprintf(err->message, sizeof err->message, fmt, ap);
        va_end(ap);
    }
    return code;
}

#endif /* SFZ_EMBEDDED_ERROR_H */
