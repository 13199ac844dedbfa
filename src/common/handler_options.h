/* handler_options.h -- the handler's limits: the struct, each one's range and default named
 * once, the defaults and the check. Plain C, so that the settings file's reader can hold
 * and check them without linking the Thrift service. */
#ifndef SF_HANDLER_OPTIONS_H
#define SF_HANDLER_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>

/* X(field, min, max, default) for every limit. */
#define SF_HANDLER_INT_OPTIONS(X)                                                              \
    X(max_batch_size, 1, 1000000, 10000)    /* get_ids' largest count */                     \
    X(max_useragent_length, 1, 4096, 255)   /* longer agents are refused, bytes */           \
    X(max_tracked_useragents, 0, 100000, 1000) /* counted by name; the rest under "other" */

/* SF_HANDLER_MIN_<field> and SF_HANDLER_MAX_<field>, for the settings file's key table. */
enum {
#define SF_HANDLER_RANGE(field, lo, hi, dflt) \
    SF_HANDLER_MIN_##field = (lo), SF_HANDLER_MAX_##field = (hi),
    SF_HANDLER_INT_OPTIONS(SF_HANDLER_RANGE)
#undef SF_HANDLER_RANGE
};

/* The handler's limits; start from sf_handler_options_init(). */
typedef struct sf_handler_options {
#define SF_HANDLER_FIELD(field, lo, hi, dflt) int field;
    SF_HANDLER_INT_OPTIONS(SF_HANDLER_FIELD)
#undef SF_HANDLER_FIELD
} sf_handler_options;

/* Fills the defaults of SF_HANDLER_INT_OPTIONS. */
void sf_handler_options_init(sf_handler_options *o);

/* Checks every limit against its range; false with err naming the limit, its value and
 * the range. */
bool sf_handler_options_check(const sf_handler_options *o, char *err, size_t errlen);

#endif
