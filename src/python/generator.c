/* generator.c -- snowflake.Generator: libsnowflake's worker (sf_worker) under a datacenter id
 * and worker id the program gives. The GIL is kept while an id is made (a lock, a clock read
 * and a few steps) and released for a batch of more than a millisecond's ids, and for any
 * call when the worker may wait out a backward clock step.
 *
 * A Generator is its worker id in memory, and fork() copies it: parent and child would make
 * the same ids. libsnowflake leaves that to its caller (a program that daemonizes uses one
 * copy); here the copy in a child refuses every call, naming the fork, which is the bug the
 * pre-fork servers' users meet otherwise. */
#include "sfpy.h"

#include <unistd.h>

typedef struct sfpy_generator {
    PyObject_HEAD
    sf_worker *w;
    unsigned forks;  /* the fork count of the process that made it */
    bool may_wait;   /* max_clock_backward_wait_ms > 0: a call may sleep */
    pid_t made_by;
} sfpy_generator;

static PyObject *sfpy_generator_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"datacenter_id", "worker_id", "epoch_ms",
                               "max_clock_backward_wait_ms", "random_first_sequence", NULL};
    PyObject *dc_obj, *worker_obj, *epoch_obj = NULL, *wait_obj = NULL;
    int random_first = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO|$OOp:Generator", keywords, &dc_obj,
                                     &worker_obj, &epoch_obj, &wait_obj, &random_first))
        return NULL;
    sf_worker_options o;
    sf_worker_options_init(&o);
    if (!sfpy_int64(dc_obj, "datacenter_id", 0, SF_MAX_DATACENTER_ID, false,
                    &o.datacenter_id) ||
        !sfpy_int64(worker_obj, "worker_id", 0, SF_MAX_WORKER_ID, false, &o.worker_id) ||
        (epoch_obj != NULL &&
         !sfpy_int64(epoch_obj, "epoch_ms", 0, SF_MAX_EPOCH_MS, false, &o.epoch_ms)) ||
        (wait_obj != NULL && !sfpy_int64(wait_obj, "max_clock_backward_wait_ms", 0,
                                         SFPY_MAX_CLOCK_WAIT_MS, false,
                                         &o.max_clock_backward_wait_ms)))
        return NULL;
    o.random_first_sequence = random_first != 0;
    sfpy_state *st = sfpy_state_of_type(type);
    sf_error err;
    sfpy_generator *self = (sfpy_generator *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->w = sf_worker_new(&o, &err);
    if (self->w == NULL) {
        Py_DECREF(self);
        return sfpy_raise_sf(st, &err);
    }
    self->forks = sfpy_forks_now();
    self->may_wait = o.max_clock_backward_wait_ms > 0;
    self->made_by = getpid();
    return (PyObject *)self;
}

static void sfpy_generator_dealloc(PyObject *op)
{
    sfpy_generator *self = (sfpy_generator *)op;
    PyTypeObject *type = Py_TYPE(op);
    sf_worker_free(self->w);
    type->tp_free(op);
    Py_DECREF(type);
}

/* The refusal in a fork() child; NULL. */
static PyObject *sfpy_generator_forked(sfpy_generator *self)
{
    PyErr_Format(sfpy_state_of_type(Py_TYPE(self))->error,
                 "this Generator was made by pid %ld; this process (pid %ld) is a fork() of "
                 "it and would make the same ids: make a Generator in each process after the "
                 "fork, each with a worker id of its own, or use snowflake.Fenced, which "
                 "claims one for each process",
                 (long)self->made_by, (long)getpid());
    return NULL;
}

static PyObject *sfpy_generator_next_id(PyObject *op, PyObject *unused)
{
    (void)unused;
    sfpy_generator *self = (sfpy_generator *)op;
    if (__builtin_expect(self->forks != sfpy_forks_now(), 0))
        return sfpy_generator_forked(self);
    int64_t id;
    sf_error err;
    int rc;
    if (__builtin_expect(self->may_wait, 0)) {
        Py_BEGIN_ALLOW_THREADS
        rc = sf_worker_next_id(self->w, &id, &err);
        Py_END_ALLOW_THREADS
    } else {
        rc = sf_worker_next_id(self->w, &id, &err);
    }
    if (__builtin_expect(rc == SF_OK, 1))
        return PyLong_FromLongLong(id);
    return sfpy_raise_sf(sfpy_state_of_type(Py_TYPE(op)), &err);
}

static PyObject *sfpy_generator_next_ids(PyObject *op, PyObject *count_obj)
{
    sfpy_generator *self = (sfpy_generator *)op;
    if (self->forks != sfpy_forks_now())
        return sfpy_generator_forked(self);
    size_t count;
    if (!sfpy_count(count_obj, &count))
        return NULL;
    int64_t *ids = PyMem_RawMalloc(count * sizeof *ids);
    if (ids == NULL)
        return PyErr_NoMemory();
    sf_error err;
    int rc;
    if (self->may_wait || count > SFPY_BATCH_UNLOCKED) {
        Py_BEGIN_ALLOW_THREADS
        rc = sf_worker_next_ids(self->w, ids, count, &err);
        Py_END_ALLOW_THREADS
    } else {
        rc = sf_worker_next_ids(self->w, ids, count, &err);
    }
    PyObject *list = rc == SF_OK ? sfpy_id_list(ids, count)
                                 : sfpy_raise_sf(sfpy_state_of_type(Py_TYPE(op)), &err);
    PyMem_RawFree(ids);
    return list;
}

/* worker_id, datacenter_id, epoch_ms: the worker's, by the getter's closure. */
enum { SFPY_WORKER_ID, SFPY_DATACENTER_ID, SFPY_EPOCH_MS };

static PyObject *sfpy_generator_get(PyObject *op, void *closure)
{
    sf_worker *w = ((sfpy_generator *)op)->w;
    switch ((intptr_t)closure) {
    case SFPY_WORKER_ID:
        return PyLong_FromLongLong(sf_worker_worker_id(w));
    case SFPY_DATACENTER_ID:
        return PyLong_FromLongLong(sf_worker_datacenter_id(w));
    default:
        return PyLong_FromLongLong(sf_worker_epoch(w));
    }
}

static PyObject *sfpy_generator_stats(PyObject *op, PyObject *unused)
{
    (void)unused;
    sf_worker_stats s;
    sf_worker_get_stats(((sfpy_generator *)op)->w, &s);
    return Py_BuildValue("{sKsKsKsK}", "ids_generated", (unsigned long long)s.ids_generated,
                         "sequence_waits", (unsigned long long)s.sequence_waits,
                         "clock_backward_waits", (unsigned long long)s.clock_backward_waits,
                         "clock_backward_errors", (unsigned long long)s.clock_backward_errors);
}

static PyObject *sfpy_generator_repr(PyObject *op)
{
    sfpy_generator *self = (sfpy_generator *)op;
    return PyUnicode_FromFormat("snowflake.Generator(datacenter_id=%lld, worker_id=%lld)",
                                (long long)sf_worker_datacenter_id(self->w),
                                (long long)sf_worker_worker_id(self->w));
}

static PyMethodDef sfpy_generator_methods[] = {
    {"next_id", sfpy_generator_next_id, METH_NOARGS,
     "next_id($self, /)\n--\n\n"
     "One id. At most 4,096 ids a millisecond: the 4,097th waits for the next one. "
     "ClockError when the clock went back (further than max_clock_backward_wait_ms)."},
    {"next_ids", sfpy_generator_next_ids, METH_O,
     "next_ids($self, count, /)\n--\n\n"
     "count ids (1..1000000), strictly increasing, under one lock acquisition. On an error "
     "none is returned and none was handed out."},
    {"stats", sfpy_generator_stats, METH_NOARGS,
     "stats($self, /)\n--\n\n"
     "libsnowflake's counters: ids_generated, sequence_waits, clock_backward_waits, "
     "clock_backward_errors."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef sfpy_generator_getset[] = {
    {"worker_id", sfpy_generator_get, NULL, "The worker id, 0..31.",
     (void *)SFPY_WORKER_ID},
    {"datacenter_id", sfpy_generator_get, NULL, "The datacenter id, 0..31.",
     (void *)SFPY_DATACENTER_ID},
    {"epoch_ms", sfpy_generator_get, NULL, "The epoch the ids count from (Unix ms).",
     (void *)SFPY_EPOCH_MS},
    {NULL, NULL, NULL, NULL, NULL},
};

static const char sfpy_generator_doc[] =
    "Generator(datacenter_id, worker_id, *, epoch_ms=TWITTER_EPOCH_MS, "
    "max_clock_backward_wait_ms=0, random_first_sequence=False)\n--\n\n"
    "Ids made in this process by libsnowflake under the (datacenter_id, worker_id) pair "
    "given, exactly as Twitter's IdWorker makes them. Nothing checks that no other process "
    "uses the same pair: that is the caller's to ensure (snowflake.Fenced claims a pair in "
    "ZooKeeper instead).\n\n"
    "datacenter_id, worker_id: 0..31 each.\n"
    "epoch_ms: the Unix ms the ids' timestamps count from, 0..4102444800000 and not in the "
    "future (default Twitter's, 1288834974657).\n"
    "max_clock_backward_wait_ms: a backward clock step of at most this many ms is waited "
    "out (with the GIL released) instead of raising ClockError, 0..60000 (default 0: always "
    "raise).\n"
    "random_first_sequence: start each millisecond at a random sequence in 0..2047 instead "
    "of 0, so that ids taken at low rates spread over id % n (default False).\n\n"
    "Thread safe. In a fork() child every call raises snowflake.Error naming the fork: the "
    "child would repeat the parent's ids. Make a Generator in each process after the fork, "
    "each with its own pair, or use snowflake.Fenced. ValueError names a bad argument and its "
    "range.";

static PyType_Slot sfpy_generator_slots[] = {
    {Py_tp_new, sfpy_generator_new},
    {Py_tp_dealloc, sfpy_generator_dealloc},
    {Py_tp_repr, sfpy_generator_repr},
    {Py_tp_methods, sfpy_generator_methods},
    {Py_tp_getset, sfpy_generator_getset},
    {Py_tp_doc, (void *)sfpy_generator_doc},
    {0, NULL},
};

static PyType_Spec sfpy_generator_spec = {
    .name = "snowflake.Generator",
    .basicsize = sizeof(sfpy_generator),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = sfpy_generator_slots,
};

int sfpy_generator_init(PyObject *module, sfpy_state *st)
{
    return sfpy_add_type(module, &sfpy_generator_spec, &st->generator_type);
}
