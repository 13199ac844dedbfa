/* option_range.c -- see option_range.h. */
#include "option_range.h"

#include <stdio.h>

bool sf_option_in_range(const char *prefix, const char *name, int value, int lo, int hi,
                        char *err, size_t errlen)
{
    if (value >= lo && value <= hi)
        return true;
    snprintf(err, errlen, "%s%s = %d is outside %d..%d", prefix, name, value, lo, hi);
    return false;
}
