/* sf_error.c -- the one place an sf_error is filled in. */
#include "sf_error.h"

#include <stdarg.h>
#include <stdio.h>

int sf_error_fail(sf_error *err, int code, const char *fmt, ...)
{
    if (err != NULL) {
        va_list ap;
        err->code = code;
        err->behind_ms = 0;
        va_start(ap, fmt);
        vsnprintf(err->message, sizeof err->message, fmt, ap);
        va_end(ap);
    }
    return code;
}
