/* sf_error.h -- filling an sf_error, shared by the generator core's modules and hidden
 * from libsnowflake's exported symbols. */
#ifndef SF_ERROR_H
#define SF_ERROR_H

#include "snowflake.h"

/* Fills err (when given) with code and the formatted message, behind_ms 0, and returns
 * code, so that each error path is one line. */
__attribute__((visibility("hidden"), format(printf, 3, 4)))
int sf_error_fail(sf_error *err, int code, const char *fmt, ...);

#endif
