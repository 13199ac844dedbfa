/* sfpy.h -- what the files of the Python module `snowflake` share: the module's state (its
 * types and exceptions), the fork count every handle checks, and the turning of the C
 * libraries' errors and Python's integers into each other.
 *
 * The module is the C libraries behind Python's names and nothing more: every id, check and
 * message is libsnowflake's, libsnowflake-zk's or libsnowflake-client's. Python.h comes
 * first, as the CPython API asks. */
#ifndef SFPY_H
#define SFPY_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "client/snowflake_client.h"
#include "lib/snowflake.h"
#include "zk/snowflake_zk.h"

/* The most ids one next_ids call makes: libsnowflake-zk's, and libsnowflake-client's too
 * (its header says 1..1000000). */
#define SFPY_MAX_IDS SFZ_MAX_IDS
/* Batches above this (more than a millisecond's ids) are made with the GIL released. */
#define SFPY_BATCH_UNLOCKED (SF_SEQUENCE_MASK + 1)

typedef struct sfpy_fenced sfpy_fenced;

/* The objects the module's state holds, X(type, name): what its traverse visits and its
 * clear drops, named once.
 *   error              snowflake.Error, the base of the others
 *   fenced_error       no lease now (or the handle is another process's): retry
 *   clock_error        the clock went back further than allowed, or is unusable
 *   start_error        no worker id could be claimed: the reason
 *   unavailable_error  Client: no node gave ids within the call's deadline
 *   decoded            the Decoded named tuple
 *   logger             logging.getLogger("snowflake"): libsnowflake-zk's log lines */
#define SFPY_STATE_OBJECTS(X)                                                               \
    X(PyObject, error) X(PyObject, fenced_error) X(PyObject, clock_error)                  \
    X(PyObject, start_error) X(PyObject, unavailable_error) X(PyObject, decoded)          \
    X(PyObject, logger) X(PyTypeObject, generator_type) X(PyTypeObject, fenced_type)      \
    X(PyTypeObject, client_type)

/* The module's state: one per module object (multi-phase init). */
typedef struct sfpy_state {
#define SFPY_STATE_FIELD(type, name) type *name;
    SFPY_STATE_OBJECTS(SFPY_STATE_FIELD)
#undef SFPY_STATE_FIELD
    sfpy_fenced *live; /* the Fenced handles not closed yet, closed at exit */
} sfpy_state;

sfpy_state *sfpy_state_of(PyObject *module);
/* The state of the module that made type (one of the module's own types). */
sfpy_state *sfpy_state_of_type(PyTypeObject *type);

/* The count of fork()s this process descends by, since the module was loaded: bumped in
 * every fork() child (a pthread_atfork handler, so also forks Python does not make). A
 * handle remembers the count it is ready at; a call finding another is in a child. */
extern atomic_uint sfpy_forks;
static inline unsigned sfpy_forks_now(void)
{
    return atomic_load_explicit(&sfpy_forks, memory_order_relaxed);
}
/* Never a fork count: a handle that must take the slow path. */
#define SFPY_NOT_READY UINT_MAX

/* An sfz_log_fn: a log line of libsnowflake-zk (made from a thread of its own) to the logger
 * ctx, at its level ("error", "warning", "info"), logged by the main thread at its next step
 * in Python (sfpy.c says why). */
void sfpy_log(void *ctx, const char *level, const char *message);

/* Raise the exception for a failed call of libsnowflake, libsnowflake-zk or
 * libsnowflake-client, with the library's message (and behind_ms on a ClockError); NULL. */
PyObject *sfpy_raise_sf(sfpy_state *st, const sf_error *err);
PyObject *sfpy_raise_sfz(sfpy_state *st, const sfz_error *err);
PyObject *sfpy_raise_sfc(sfpy_state *st, const sfc_error *err);

/* Reads an integer argument (anything with __index__) into *out; TypeError when it is no
 * integer. With check, refuses one outside lo..hi (ValueError "<what> = <value> is outside
 * <lo>..<hi>"); without, only one past int64's range, in the same words: the C library then
 * checks lo..hi, in its own. */
bool sfpy_int64(PyObject *o, const char *what, int64_t lo, int64_t hi, bool check,
                int64_t *out);

/* libsnowflake's bound of max_clock_backward_wait_ms (sf_worker_options_check's). */
#define SFPY_MAX_CLOCK_WAIT_MS 60000

/* Reads next_ids's count, 1..SFPY_MAX_IDS. */
bool sfpy_count(PyObject *o, size_t *out);

/* A list of count ids. */
PyObject *sfpy_id_list(const int64_t *ids, size_t count);

/* The module's functions: decode, compose, encode, parse, id_range (codecs.c); and the
 * Decoded type made for the state. */
extern PyMethodDef sfpy_codec_methods[];
int sfpy_codecs_init(PyObject *module, sfpy_state *st);

/* Makes a type of the module from spec into *out and adds it to the module. */
int sfpy_add_type(PyObject *module, PyType_Spec *spec, PyTypeObject **out);

/* __enter__ (the object itself) and __exit__ (its close(), and the exception goes on) of the
 * handles that close. */
PyObject *sfpy_enter(PyObject *op, PyObject *unused);
PyObject *sfpy_exit(PyObject *op, PyObject *const *args, Py_ssize_t nargs);

/* The types, made for a module (generator.c, fenced.c, client.c). */
int sfpy_generator_init(PyObject *module, sfpy_state *st);
int sfpy_fenced_init(PyObject *module, sfpy_state *st);
int sfpy_client_init(PyObject *module, sfpy_state *st);
/* Closes every Fenced handle of the module still open (interpreter exit). */
void sfpy_fenced_close_all(sfpy_state *st);

#endif
