/* sfpy.c -- what the module's files share (sfpy.h), below the module and its types: the
 * module's state found from a module or a type, the errors of the C libraries raised as
 * Python exceptions with their own messages, Python's integers read into the C types and id
 * lists made, the bridge of a handle's log lines to Python's logging, and the with
 * statement. */
#include "sfpy.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

sfpy_state *sfpy_state_of(PyObject *module)
{
    return PyModule_GetState(module);
}

sfpy_state *sfpy_state_of_type(PyTypeObject *type)
{
    return PyType_GetModuleState(type);
}

/* Raises type with message and, for a ClockError, behind_ms (else None). */
static PyObject *sfpy_raise(PyObject *type, const char *message, int64_t behind_ms,
                            bool has_behind)
{
    PyObject *exc = PyObject_CallFunction(type, "s", message);
    if (exc == NULL)
        return NULL;
    PyObject *behind = has_behind ? PyLong_FromLongLong(behind_ms) : Py_NewRef(Py_None);
    if (behind == NULL || PyObject_SetAttrString(exc, "behind_ms", behind) < 0) {
        Py_XDECREF(behind);
        Py_DECREF(exc);
        return NULL;
    }
    Py_DECREF(behind);
    PyErr_SetObject(type, exc);
    Py_DECREF(exc);
    return NULL;
}

/* The exception of libsnowflake's code (shared by libsnowflake-zk) with message. */
static PyObject *sfpy_raise_code(sfpy_state *st, int code, const char *message,
                                 int64_t behind_ms)
{
    switch (code) {
    case SF_ERR_ARG:
        PyErr_SetString(PyExc_ValueError, message);
        return NULL;
    case SF_ERR_NOMEM:
        return PyErr_NoMemory();
    case SF_ERR_CLOCK_BACKWARDS:
        return sfpy_raise(st->clock_error, message, behind_ms, true);
    case SF_ERR_CLOCK:
        return sfpy_raise(st->clock_error, message, 0, false);
    default:
        return sfpy_raise(st->error, message, 0, false);
    }
}

PyObject *sfpy_raise_sf(sfpy_state *st, const sf_error *err)
{
    return sfpy_raise_code(st, err->code, err->message, err->behind_ms);
}

PyObject *sfpy_raise_sfz(sfpy_state *st, const sfz_error *err)
{
    switch (err->code) {
    case SFZ_ERR_FENCED:
    case SFZ_ERR_FORKED:
        return sfpy_raise(st->fenced_error, err->message, 0, false);
    case SFZ_ERR_UNREACHABLE:
    case SFZ_ERR_CLAIM:
    case SFZ_ERR_STOPPED:
        return sfpy_raise(st->start_error, err->message, 0, false);
    default:
        return sfpy_raise_code(st, err->code, err->message, err->behind_ms);
    }
}

PyObject *sfpy_raise_sfc(sfpy_state *st, const sfc_error *err)
{
    switch (err->code) {
    case SFC_ERR_ARG:
    case SFC_ERR_REFUSED:
        PyErr_SetString(PyExc_ValueError, err->message);
        return NULL;
    case SFC_ERR_NOMEM:
        return PyErr_NoMemory();
    case SFC_ERR_CLOCK:
        return sfpy_raise(st->clock_error, err->message, 0, false);
    case SFC_ERR_UNAVAILABLE:
        return sfpy_raise(st->unavailable_error, err->message, 0, false);
    default:
        return sfpy_raise(st->error, err->message, 0, false);
    }
}

bool sfpy_int64(PyObject *o, const char *what, int64_t lo, int64_t hi, bool check,
                int64_t *out)
{
    PyObject *n = PyNumber_Index(o);
    if (n == NULL) {
        PyErr_Format(PyExc_TypeError, "%s must be an integer, not %.100s", what,
                     Py_TYPE(o)->tp_name);
        return false;
    }
    int overflow;
    long long v = PyLong_AsLongLongAndOverflow(n, &overflow);
    if (v == -1 && PyErr_Occurred()) {
        Py_DECREF(n);
        return false;
    }
    if (overflow != 0 || (check && (v < lo || v > hi))) {
        PyErr_Format(PyExc_ValueError, "%s = %S is outside %lld..%lld", what, n, (long long)lo,
                     (long long)hi);
        Py_DECREF(n);
        return false;
    }
    Py_DECREF(n);
    *out = v;
    return true;
}

bool sfpy_count(PyObject *o, size_t *out)
{
    int64_t n;
    if (!sfpy_int64(o, "count", 1, SFPY_MAX_IDS, true, &n))
        return false;
    *out = (size_t)n;
    return true;
}

PyObject *sfpy_id_list(const int64_t *ids, size_t count)
{
    PyObject *list = PyList_New((Py_ssize_t)count);
    if (list == NULL)
        return NULL;
    for (size_t i = 0; i < count; i++) {
        PyObject *id = PyLong_FromLongLong(ids[i]);
        if (id == NULL) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, id);
    }
    return list;
}

/* A log line on its way to the logger, made in the process pid. */
typedef struct sfpy_line {
    pid_t pid;
    PyObject *logger;
    char level[16];
    char text[];
} sfpy_line;

/* Runs in the main thread, with the GIL: hands one line to the logger, unless this is a fork
 * child that inherited a line of its parent's. */
static int sfpy_log_pending(void *arg)
{
    sfpy_line *line = arg;
    if (line->pid == getpid()) {
        PyObject *r = PyObject_CallMethod(line->logger, line->level, "s", line->text);
        if (r == NULL) /* a handler that fails: say so, as logging itself does */
            PyErr_WriteUnraisable(line->logger);
        Py_XDECREF(r);
    }
    PyMem_RawFree(line);
    return 0;
}

/* The handle's log lines come from a thread of the library's, which never waits for the
 * GIL: a thread waiting for it asks its holder to let go, and a process forked meanwhile
 * by C code that does not tell Python (uWSGI's master, whose main thread keeps the GIL in
 * its own loop) inherits that request with no thread to answer it, and its main thread
 * stops for good at its next switch. The line is handed to the main thread instead, which
 * logs it at its next step in Python; a line that finds the queue full is dropped. */
void sfpy_log(void *ctx, const char *level, const char *message)
{
    size_t len = strlen(message) + 1;
    sfpy_line *line = PyMem_RawMalloc(sizeof *line + len);
    if (line == NULL)
        return;
    line->pid = getpid();
    line->logger = ctx;
    snprintf(line->level, sizeof line->level, "%s", level);
    memcpy(line->text, message, len);
    if (Py_AddPendingCall(sfpy_log_pending, line) != 0)
        PyMem_RawFree(line);
}

int sfpy_add_type(PyObject *module, PyType_Spec *spec, PyTypeObject **out)
{
    *out = (PyTypeObject *)PyType_FromModuleAndSpec(module, spec, NULL);
    if (*out == NULL)
        return -1;
    return PyModule_AddType(module, *out);
}

PyObject *sfpy_enter(PyObject *op, PyObject *unused)
{
    (void)unused;
    return Py_NewRef(op);
}

PyObject *sfpy_exit(PyObject *op, PyObject *const *args, Py_ssize_t nargs)
{
    (void)args;
    (void)nargs;
    PyObject *r = PyObject_CallMethod(op, "close", NULL);
    if (r == NULL)
        return NULL;
    Py_DECREF(r);
    Py_RETURN_FALSE;
}
