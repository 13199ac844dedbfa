/* snowflakemodule.c -- the Python module `snowflake`: its creation (multi-phase, a state of
 * its own per module object), its exceptions, the fork count and the handles stopped at
 * exit. Each type's file adds its type here; what they all use is sfpy.c, below them. */
#include "sfpy.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>

atomic_uint sfpy_forks;

/* In every fork() child, before anything else runs there: the handles made before see that
 * this is another process. The count skips SFPY_NOT_READY. */
static void sfpy_forked(void)
{
    unsigned next = atomic_load_explicit(&sfpy_forks, memory_order_relaxed) + 1;
    if (next == SFPY_NOT_READY)
        next = 0;
    atomic_store_explicit(&sfpy_forks, next, memory_order_relaxed);
}

static pthread_once_t sfpy_fork_watch = PTHREAD_ONCE_INIT;
static int sfpy_fork_watch_rc;

static void sfpy_watch_forks(void)
{
    sfpy_fork_watch_rc = pthread_atfork(NULL, NULL, sfpy_forked);
}

/* set_zookeeper_logging(verbose): the ZooKeeper C client's own log lines, process-wide. */
static PyObject *sfpy_set_zookeeper_logging(PyObject *module, PyObject *verbose)
{
    (void)module;
    int on = PyObject_IsTrue(verbose);
    if (on < 0)
        return NULL;
    sfz_set_client_logging(on != 0); /* the one level of the one client library */
    Py_RETURN_NONE;
}

/* _close_all(): what the module registers with atexit. */
static PyObject *sfpy_close_all(PyObject *module, PyObject *unused)
{
    (void)unused;
    sfpy_fenced_close_all(sfpy_state_of(module));
    Py_RETURN_NONE;
}

static PyMethodDef sfpy_methods[] = {
    {"_close_all", sfpy_close_all, METH_NOARGS,
     "_close_all()\n--\n\nCloses every Fenced handle still open; registered with atexit, so "
     "that the interpreter's exit releases their worker ids."},
    {"set_zookeeper_logging", sfpy_set_zookeeper_logging, METH_O,
     "set_zookeeper_logging(verbose, /)\n--\n\n"
     "The ZooKeeper C client's own log lines on standard error, for the whole process: its "
     "warnings when verbose, else none (the default from import on: it would log every "
     "refused reconnect while ZooKeeper is down). The handles' own lines go to the logger "
     "'snowflake' either way."},
    {NULL, NULL, 0, NULL},
};

/* Makes the exception name (snowflake.NAME) with base and doc, into *out and the module. */
static int sfpy_add_exception(PyObject *module, const char *name, PyObject *base,
                              const char *doc, PyObject **out)
{
    char qualified[64];
    snprintf(qualified, sizeof qualified, "snowflake.%s", name);
    *out = PyErr_NewExceptionWithDoc(qualified, doc, base, NULL);
    if (*out == NULL)
        return -1;
    return PyModule_AddObjectRef(module, name, *out);
}

/* Registers _close_all with atexit. */
static int sfpy_register_exit(PyObject *module)
{
    PyObject *atexit = PyImport_ImportModule("atexit");
    if (atexit == NULL)
        return -1;
    PyObject *close_all = PyObject_GetAttrString(module, "_close_all");
    PyObject *r = close_all != NULL ? PyObject_CallMethod(atexit, "register", "O", close_all)
                                    : NULL;
    Py_XDECREF(close_all);
    Py_DECREF(atexit);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    return 0;
}

static int sfpy_exec(PyObject *module)
{
    sfpy_state *st = sfpy_state_of(module);
    pthread_once(&sfpy_fork_watch, sfpy_watch_forks);
    if (sfpy_fork_watch_rc != 0) {
        errno = sfpy_fork_watch_rc;
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    if (sfpy_add_exception(module, "Error", PyExc_Exception,
                           "The base of the module's errors; str() is the C library's message.",
                           &st->error) < 0 ||
        sfpy_add_exception(module, "FencedError", st->error,
                           "No lease is held now (ZooKeeper unreachable, the session expired, "
                           "the handle starting or stopping, or this process a fork() of the "
                           "one that made the handle, with on_fork='refuse'): retry later.",
                           &st->fenced_error) < 0 ||
        sfpy_add_exception(module, "ClockError", st->error,
                           "The clock went back further than allowed (behind_ms says by how "
                           "much), or is unusable (behind_ms None).",
                           &st->clock_error) < 0 ||
        sfpy_add_exception(module, "StartError", st->error,
                           "No worker id could be claimed: ZooKeeper did not answer, every id "
                           "was taken, a check failed, or the start was stopped; the message "
                           "says which.",
                           &st->start_error) < 0 ||
        sfpy_add_exception(module, "UnavailableError", st->error,
                           "Client: no node gave ids within the call's deadline; the message "
                           "names each node tried and why it failed.",
                           &st->unavailable_error) < 0)
        return -1;
    PyObject *logging = PyImport_ImportModule("logging");
    st->logger = logging != NULL ? PyObject_CallMethod(logging, "getLogger", "s", "snowflake")
                                 : NULL;
    Py_XDECREF(logging);
    if (st->logger == NULL)
        return -1;
    sfz_set_client_logging(false);
    if (PyModule_AddIntConstant(module, "TWITTER_EPOCH_MS", SF_TWITTER_EPOCH_MS) < 0 ||
        PyModule_AddIntConstant(module, "MAX_WORKER_ID", SF_MAX_WORKER_ID) < 0 ||
        PyModule_AddIntConstant(module, "MAX_DATACENTER_ID", SF_MAX_DATACENTER_ID) < 0 ||
        PyModule_AddIntConstant(module, "MAX_SEQUENCE", SF_SEQUENCE_MASK) < 0 ||
        PyModule_AddIntConstant(module, "MAX_IDS", SFPY_MAX_IDS) < 0)
        return -1;
    if (PyModule_AddFunctions(module, sfpy_codec_methods) < 0 || sfpy_codecs_init(module, st) < 0 || sfpy_generator_init(module, st) < 0 ||
        sfpy_fenced_init(module, st) < 0 || sfpy_client_init(module, st) < 0)
        return -1;
    return sfpy_register_exit(module);
}

static int sfpy_traverse(PyObject *module, visitproc visit, void *arg)
{
    sfpy_state *st = sfpy_state_of(module);
#define SFPY_VISIT(type, name) Py_VISIT(st->name);
    SFPY_STATE_OBJECTS(SFPY_VISIT)
#undef SFPY_VISIT
    return 0;
}

static int sfpy_clear(PyObject *module)
{
    sfpy_state *st = sfpy_state_of(module);
#define SFPY_CLEAR(type, name) Py_CLEAR(st->name);
    SFPY_STATE_OBJECTS(SFPY_CLEAR)
#undef SFPY_CLEAR
    return 0;
}

static void sfpy_free(void *module)
{
    sfpy_clear(module);
}

static PyModuleDef_Slot sfpy_slots[] = {
    {Py_mod_exec, sfpy_exec},
    {0, NULL},
};

static struct PyModuleDef sfpy_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "snowflake",
    .m_doc = "Twitter Snowflake ids, made by snowflake-c's C libraries.\n\n"
             "Generator: ids in process under a worker id you give (libsnowflake).\n"
             "Fenced: ids in process under a worker id held in ZooKeeper, handed out only "
             "while its lease holds, one pair per process across fork() (libsnowflake-zk).\n"
             "Client: ids from snowflaked nodes, with failover (libsnowflake-client).\n"
             "decode, compose, encode, parse, id_range: the ids' fields, string forms and "
             "time ranges.",
    .m_size = sizeof(sfpy_state),
    .m_methods = sfpy_methods,
    .m_slots = sfpy_slots,
    .m_traverse = sfpy_traverse,
    .m_clear = sfpy_clear,
    .m_free = sfpy_free,
};

PyMODINIT_FUNC PyInit_snowflake(void);

PyMODINIT_FUNC PyInit_snowflake(void)
{
    return PyModuleDef_Init(&sfpy_module);
}
