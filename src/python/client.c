/* client.c -- snowflake.Client: libsnowflake-client (sfc_client), ids from snowflaked nodes
 * with failover, every call made with the GIL released (it waits for a node).
 *
 * A client's connections and threads belong to the process that opened it; a fork() child
 * that used them would share its parent's sockets (and answers). So a child's first call
 * opens a client of its own with the same options, leaving the parent's copy untouched (its
 * threads do not exist there, and closing its sockets would need them). */
#include "sfpy.h"

#include <limits.h>
#include <stddef.h>
#include <string.h>

#include "inside.h"

/* The options' strings a client keeps copies of, to open again in a fork() child. */
enum { SFPY_C_SERVERS, SFPY_C_ZOOKEEPER, SFPY_C_PATH, SFPY_C_AGENT, SFPY_C_STRINGS };

typedef struct sfpy_client {
    PyObject_HEAD
    sfc_client *c;          /* NULL once closed */
    unsigned forks;         /* the fork count of the process c was opened in */
    bool closed;
    sfpy_inside inside;
    sfc_options o;          /* its strings are the copies below */
    char *copies[SFPY_C_STRINGS];
} sfpy_client;

/* Copies an optional string argument (NULL for None) into the client's copies[i]. */
static bool sfpy_client_string(sfpy_client *self, int i, const char *name, PyObject *value,
                               const char **field)
{
    if (value == NULL || value == Py_None)
        return true;
    Py_ssize_t len;
    const char *text = PyUnicode_Check(value) ? PyUnicode_AsUTF8AndSize(value, &len) : NULL;
    if (text == NULL) {
        if (!PyErr_Occurred())
            PyErr_Format(PyExc_TypeError, "%s must be a str or None, not %.100s", name,
                         Py_TYPE(value)->tp_name);
        return false;
    }
    if ((size_t)len != strlen(text)) {
        PyErr_Format(PyExc_ValueError, "%s %R holds a NUL character", name, value);
        return false;
    }
    self->copies[i] = PyMem_RawMalloc((size_t)len + 1);
    if (self->copies[i] == NULL) {
        PyErr_NoMemory();
        return false;
    }
    memcpy(self->copies[i], text, (size_t)len + 1);
    *field = self->copies[i];
    return true;
}

/* The integer options, in the order of the constructor's keywords after the strings. */
static const struct {
    const char *name;
    size_t offset;
} sfpy_client_ints[] = {
    {"timeout_ms", offsetof(sfc_options, timeout_ms)},
    {"try_timeout_ms", offsetof(sfc_options, try_timeout_ms)},
    {"connections_per_server", offsetof(sfc_options, connections_per_server)},
    {"backoff_ms", offsetof(sfc_options, backoff_ms)},
    {"backoff_max_ms", offsetof(sfc_options, backoff_max_ms)},
    {"prefetch", offsetof(sfc_options, prefetch)},
    {"prefetch_batch", offsetof(sfc_options, prefetch_batch)},
    {"max_id_age_ms", offsetof(sfc_options, max_id_age_ms)},
    {"zookeeper_session_timeout_ms", offsetof(sfc_options, zookeeper_session_timeout_ms)},
};
#define SFPY_CLIENT_INTS (sizeof sfpy_client_ints / sizeof sfpy_client_ints[0])

/* Integer option i: one that fits an int goes to the C library's check; one that does not
 * is refused with the range the C library states for it (its refusal of the nearest int). */
static bool sfpy_client_int(sfpy_client *self, size_t i, PyObject *value)
{
    if (value == NULL)
        return true;
    const char *name = sfpy_client_ints[i].name;
    int64_t v;
    if (!sfpy_int64(value, name, INT64_MIN, INT64_MAX, false, &v))
        return false;
    int *field = (int *)((char *)&self->o + sfpy_client_ints[i].offset);
    if (v >= INT_MIN && v <= INT_MAX) {
        *field = (int)v;
        return true;
    }
    *field = v < 0 ? INT_MIN : INT_MAX; /* no option takes either end of an int */
    sfc_error err = {.message = ""};
    sfc_client *probe = sfc_open(&self->o, &err);
    sfc_close(probe);
    const char *range = strstr(err.message, " is outside");
    bool ours = strncmp(err.message, name, strlen(name)) == 0 && range != NULL;
    PyErr_Format(PyExc_ValueError, "%s = %lld%s", name, (long long)v,
                 ours ? range : " does not fit a C int");
    return false;
}

/* A client opened with the options, with the GIL released (it starts threads); NULL with
 * the exception. */
static sfc_client *sfpy_client_connect(sfpy_client *self)
{
    sfc_error err;
    sfc_client *c;
    Py_BEGIN_ALLOW_THREADS
    c = sfc_open(&self->o, &err);
    Py_END_ALLOW_THREADS
    if (c == NULL)
        sfpy_raise_sfc(sfpy_state_of_type(Py_TYPE(self)), &err);
    return c;
}

static void sfpy_client_disconnect(sfc_client *c)
{
    Py_BEGIN_ALLOW_THREADS
    sfc_close(c);
    Py_END_ALLOW_THREADS
}

/* In a fork() child: a client of the child's own (the parent's copy is left as it is here,
 * its threads being the parent's). False with the exception. */
static bool sfpy_client_reopen(sfpy_client *self)
{
    sfc_client *c = sfpy_client_connect(self);
    if (c == NULL)
        return false;
    unsigned now = sfpy_forks_now();
    if (self->closed || self->forks == now) { /* closed, or opened by another thread, since */
        sfpy_client_disconnect(c);
        return true;
    }
    self->c = c;
    self->forks = now;
    return true;
}

static PyObject *sfpy_client_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"servers", "zookeeper", "path", "agent", "timeout_ms",
                               "try_timeout_ms", "connections_per_server", "backoff_ms",
                               "backoff_max_ms", "prefetch", "prefetch_batch", "max_id_age_ms",
                               "zookeeper_session_timeout_ms", "epoch_ms", NULL};
    PyObject *strings[SFPY_C_STRINGS] = {NULL}, *ints[SFPY_CLIENT_INTS] = {NULL}, *epoch = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|$OOOOOOOOOOOOOO:Client", keywords,
                                     &strings[0], &strings[1], &strings[2], &strings[3],
                                     &ints[0], &ints[1], &ints[2], &ints[3], &ints[4], &ints[5],
                                     &ints[6], &ints[7], &ints[8], &epoch))
        return NULL;
    sfpy_client *self = (sfpy_client *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    sfpy_inside_init(&self->inside);
    sfc_options_init(&self->o);
    static const char *const names[SFPY_C_STRINGS] = {"servers", "zookeeper", "path", "agent"};
    const char **fields[SFPY_C_STRINGS] = {&self->o.servers, &self->o.zookeeper_hosts,
                                           &self->o.worker_id_path, &self->o.agent};
    bool ok = true;
    for (int i = 0; i < SFPY_C_STRINGS && ok; i++)
        ok = sfpy_client_string(self, i, names[i], strings[i], fields[i]);
    for (size_t i = 0; i < SFPY_CLIENT_INTS && ok; i++)
        ok = sfpy_client_int(self, i, ints[i]);
    if (ok && epoch != NULL)
        ok = sfpy_int64(epoch, "epoch_ms", 0, SF_MAX_EPOCH_MS, false, &self->o.epoch_ms);
    if (ok)
        self->c = sfpy_client_connect(self);
    if (self->c == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    self->forks = sfpy_forks_now();
    return (PyObject *)self;
}

/* The client of this process, with the call counted in; NULL (closed, or no client could be
 * opened in a fork() child) with the exception. */
static sfc_client *sfpy_client_enter(sfpy_client *self)
{
    sfpy_inside_here(&self->inside);
    if (self->forks != sfpy_forks_now() && !self->closed && !sfpy_client_reopen(self))
        return NULL;
    if (self->closed) {
        PyErr_SetString(sfpy_state_of_type(Py_TYPE(self))->error, "this Client is closed");
        return NULL;
    }
    sfpy_inside_enter(&self->inside);
    return self->c;
}

/* The agent keyword of a call: NULL for None (the client's). */
static bool sfpy_agent_arg(PyObject *agent_obj, const char **agent)
{
    *agent = NULL;
    if (agent_obj == NULL || agent_obj == Py_None)
        return true;
    Py_ssize_t len;
    *agent = PyUnicode_Check(agent_obj) ? PyUnicode_AsUTF8AndSize(agent_obj, &len) : NULL;
    if (*agent == NULL) {
        if (!PyErr_Occurred())
            PyErr_Format(PyExc_TypeError, "agent must be a str or None, not %.100s",
                         Py_TYPE(agent_obj)->tp_name);
        return false;
    }
    if ((size_t)len != strlen(*agent)) {
        PyErr_Format(PyExc_ValueError, "agent %R holds a NUL character", agent_obj);
        return false;
    }
    return true;
}

static PyObject *sfpy_client_next_id(PyObject *op, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"agent", NULL};
    PyObject *agent_obj = NULL;
    const char *agent;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|$O:next_id", keywords, &agent_obj) ||
        !sfpy_agent_arg(agent_obj, &agent))
        return NULL;
    sfpy_client *self = (sfpy_client *)op;
    sfc_client *c = sfpy_client_enter(self);
    if (c == NULL)
        return NULL;
    int64_t id;
    sfc_error err;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = sfc_next_id_as(c, agent, &id, NULL, &err);
    Py_END_ALLOW_THREADS
    sfpy_inside_leave(&self->inside);
    if (rc != SFC_OK)
        return sfpy_raise_sfc(sfpy_state_of_type(Py_TYPE(op)), &err);
    return PyLong_FromLongLong(id);
}

static PyObject *sfpy_client_next_ids(PyObject *op, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"count", "agent", NULL};
    PyObject *count_obj, *agent_obj = NULL;
    const char *agent;
    size_t count;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|$O:next_ids", keywords, &count_obj,
                                     &agent_obj) ||
        !sfpy_count(count_obj, &count) || !sfpy_agent_arg(agent_obj, &agent))
        return NULL;
    int64_t *ids = PyMem_RawMalloc(count * sizeof *ids);
    if (ids == NULL)
        return PyErr_NoMemory();
    sfpy_client *self = (sfpy_client *)op;
    sfc_client *c = sfpy_client_enter(self);
    if (c == NULL) {
        PyMem_RawFree(ids);
        return NULL;
    }
    sfc_error err;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = sfc_next_ids_as(c, agent, ids, (int)count, NULL, &err);
    Py_END_ALLOW_THREADS
    sfpy_inside_leave(&self->inside);
    PyObject *list = rc == SFC_OK ? sfpy_id_list(ids, count)
                                  : sfpy_raise_sfc(sfpy_state_of_type(Py_TYPE(op)), &err);
    PyMem_RawFree(ids);
    return list;
}

static PyObject *sfpy_client_stats(PyObject *op, PyObject *unused)
{
    (void)unused;
    sfpy_client *self = (sfpy_client *)op;
    sfc_client *c = sfpy_client_enter(self);
    if (c == NULL)
        return NULL;
    sfc_stats s;
    sfc_get_stats(c, &s);
    sfpy_inside_leave(&self->inside);
    return Py_BuildValue("{sKsKsKsKsKsKsKsisi}", "calls", (unsigned long long)s.calls, "ids",
                         (unsigned long long)s.ids, "failovers", (unsigned long long)s.failovers,
                         "errors", (unsigned long long)s.errors, "prefetched",
                         (unsigned long long)s.prefetched, "prefetch_stale",
                         (unsigned long long)s.prefetch_stale, "prefetch_misses",
                         (unsigned long long)s.prefetch_misses, "servers", s.servers,
                         "servers_up", s.servers_up);
}

/* Closes the client once the calls inside returned; a fork() child's copy of its parent's is
 * left as it is (its threads are the parent's). */
static void sfpy_client_stop(sfpy_client *self)
{
    sfpy_inside_here(&self->inside);
    if (self->closed)
        return;
    self->closed = true;
    sfc_client *c = self->forks == sfpy_forks_now() ? self->c : NULL;
    self->c = NULL;
    sfpy_inside_wait_idle(&self->inside);
    sfpy_client_disconnect(c);
}

static PyObject *sfpy_client_close(PyObject *op, PyObject *unused)
{
    (void)unused;
    sfpy_client_stop((sfpy_client *)op);
    Py_RETURN_NONE;
}

static void sfpy_client_dealloc(PyObject *op)
{
    sfpy_client *self = (sfpy_client *)op;
    PyTypeObject *type = Py_TYPE(op);
    PyObject *exc_type, *exc, *tb;
    PyErr_Fetch(&exc_type, &exc, &tb);
    sfpy_client_stop(self);
    sfpy_inside_destroy(&self->inside);
    for (int i = 0; i < SFPY_C_STRINGS; i++)
        PyMem_RawFree(self->copies[i]);
    PyErr_Restore(exc_type, exc, tb);
    type->tp_free(op);
    Py_DECREF(type);
}

static PyMethodDef sfpy_client_methods[] = {
    {"next_id", (PyCFunction)(void (*)(void))sfpy_client_next_id, METH_VARARGS | METH_KEYWORDS,
     "next_id($self, /, *, agent=None)\n--\n\n"
     "One id from a node, moving to another when one fails, within timeout_ms (or from the "
     "prefetch buffer). agent: this call's user agent (None: the client's). "
     "UnavailableError naming each node tried and why when none gave one in time; ClockError "
     "on InvalidSystemClock from two nodes in a row; ValueError when the node refused the "
     "request as the caller's error."},
    {"next_ids", (PyCFunction)(void (*)(void))sfpy_client_next_ids,
     METH_VARARGS | METH_KEYWORDS,
     "next_ids($self, /, count, *, agent=None)\n--\n\n"
     "count ids (1..1000000; the nodes' max_batch_size may be lower) from one node, with "
     "get_ids, never from the prefetch buffer; as next_id raises."},
    {"stats", sfpy_client_stats, METH_NOARGS,
     "stats($self, /)\n--\n\n"
     "Totals since the client opened: calls, ids, failovers, errors, prefetched, "
     "prefetch_stale, prefetch_misses; servers known and servers_up."},
    {"close", sfpy_client_close, METH_NOARGS,
     "close($self, /)\n--\n\n"
     "Stops the client's threads and closes its connections, once the calls inside returned. "
     "Idempotent; later calls raise snowflake.Error."},
    {"__enter__", sfpy_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)(void (*)(void))sfpy_exit, METH_FASTCALL, NULL},
    {NULL, NULL, 0, NULL},
};

static const char sfpy_client_doc[] =
    "Client(*, servers=None, zookeeper=None, path='/snowflake-servers', "
    "agent='snowflake-client', timeout_ms=1000, try_timeout_ms=250, connections_per_server=4, "
    "backoff_ms=100, backoff_max_ms=5000, prefetch=0, prefetch_batch=1000, "
    "max_id_age_ms=1000, zookeeper_session_timeout_ms=10000, epoch_ms=TWITTER_EPOCH_MS)\n"
    "--\n\n"
    "Ids from snowflaked nodes over Thrift (libsnowflake-client): pooled connections, a call "
    "that moves to another node when one fails or fences, within its deadline, and optional "
    "prefetching. Every call releases the GIL while it waits.\n\n"
    "servers: \"host:port,...\" (IPv6 as [addr]:port); or zookeeper: \"host:port,...\" of an "
    "ensemble, whose nodes under path are followed (exactly one of the two).\n"
    "agent: the user agent sent, [a-zA-Z][a-zA-Z0-9-]*; a call may name another.\n"
    "timeout_ms: a call's deadline, failovers included, 1..600000.\n"
    "try_timeout_ms: one node's connect and answer, 1..timeout_ms.\n"
    "connections_per_server: pooled connections to one node, 1..1024.\n"
    "backoff_ms, backoff_max_ms: a failed node's first skip (1..60000), doubling up to "
    "backoff_max_ms (backoff_ms..600000).\n"
    "prefetch: ids kept fetched by a thread of the client's, 0 (off) or 1..1000000; "
    "prefetch_batch: asked per get_ids, 1..10000; max_id_age_ms: a prefetched id older than "
    "this is dropped, 1..60000.\n"
    "zookeeper_session_timeout_ms: 1000..600000. epoch_ms: the nodes' epoch, for the ids' "
    "age.\n\n"
    "Thread safe. A fork() child's first call opens a client of its own with the same "
    "options; the parent's connections are never used there. ValueError names a bad "
    "argument and its range.";

static PyType_Slot sfpy_client_slots[] = {
    {Py_tp_new, sfpy_client_new},
    {Py_tp_dealloc, sfpy_client_dealloc},
    {Py_tp_methods, sfpy_client_methods},
    {Py_tp_doc, (void *)sfpy_client_doc},
    {0, NULL},
};

static PyType_Spec sfpy_client_spec = {
    .name = "snowflake.Client",
    .basicsize = sizeof(sfpy_client),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = sfpy_client_slots,
};

int sfpy_client_init(PyObject *module, sfpy_state *st)
{
    return sfpy_add_type(module, &sfpy_client_spec, &st->client_type);
}
