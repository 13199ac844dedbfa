/* option_range.h -- the range check every module's integer settings go through, so that
 * each refusal reads the same. Plain C. */
#ifndef SF_OPTION_RANGE_H
#define SF_OPTION_RANGE_H

#include <stdbool.h>
#include <stddef.h>

/* True when lo <= value <= hi; otherwise false with err saying
 * "<prefix><name> = <value> is outside <lo>..<hi>". */
bool sf_option_in_range(const char *prefix, const char *name, int value, int lo, int hi,
                        char *err, size_t errlen);

#endif
