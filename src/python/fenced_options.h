/* fenced_options.h -- the keyword arguments of snowflake.Fenced: libsnowflake-zk's options
 * (every integer one from its SFZ_INT_OPTIONS list, with its C default and range), on_fork
 * as a word, and lazy; and the class's documentation made from the same table, so that
 * help(snowflake.Fenced) cannot disagree with what the constructor takes. */
#ifndef SFPY_FENCED_OPTIONS_H
#define SFPY_FENCED_OPTIONS_H

#include "sfpy.h"

/* The options' strings that a handle keeps copies of. */
enum { SFPY_ZOOKEEPER, SFPY_AUTH, SFPY_PATH, SFPY_DATACENTER_PATHS, SFPY_HOLDER, SFPY_STRINGS };

typedef struct sfpy_fenced_options {
    sfz_options o;              /* its strings are the copies below */
    char *copies[SFPY_STRINGS]; /* NULL for an option not given */
    bool lazy;                  /* claim at the first id call, not in the constructor */
} sfpy_fenced_options;

/* Reads Fenced's arguments (zookeeper may be positional; all others are keywords) into out,
 * checked by sfz_options_check: false with TypeError for an unknown or mistyped argument and
 * ValueError with the C library's message for a bad value. out is to be freed either way. */
bool sfpy_fenced_options_parse(PyObject *args, PyObject *kwargs, sfpy_fenced_options *out);
void sfpy_fenced_options_free(sfpy_fenced_options *opts);

/* The class's docstring, its signature first (for help() and inspect.signature): every
 * argument with its default and, for the integers, its range. PyMem_Free it; NULL with an
 * exception on no memory. */
char *sfpy_fenced_doc(void);

#endif
