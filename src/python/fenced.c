/* fenced.c -- snowflake.Fenced: a libsnowflake-zk handle (sfz), ids in process under a worker
 * id held in ZooKeeper, and one pair per process across fork().
 *
 * The fast path is one compare: `ready` holds the fork count at which the handle serves in
 * this process without leaving the GIL; the id is then sfz_next_id's, made with the GIL held.
 * Every other case takes the slow path, which settles the handle first:
 *   - the process that made it, lazy and not started: one thread runs sfz_run (on a thread
 *     of its own, so that Ctrl-C is heard and cancels it), the others wait for its outcome;
 *     a failed start leaves a freshly prepared handle for the next call (the C library's
 *     handle is stopped after a failed sfz_run, never run again);
 *   - a fork() child: sfz_claim_after_fork with the GIL released, which claims the child's own
 *     pair (on_fork 'claim') or refuses, naming the fork ('refuse');
 * then makes the ids, with the GIL released where the call may take long (a batch of more than
 * a millisecond's ids, a handle that may wait for the clock).
 *
 * close() takes the handle away (new calls find it closed), cancels a start under way, waits
 * for the calls inside with the GIL released (inside.h) and stops it; the handles still open
 * are kept in the module's list, which the module's atexit function closes. */
#include "sfpy.h"

#include <errno.h>
#include <string.h>
#include <time.h>

#include "common/threads.h"
#include "fenced_options.h"
#include "inside.h"

/* A call's result that is a Python exception already set, not a C library's code. */
#define SFPY_RAISED 1
/* How often a start waited for with Ctrl-C heard looks at the signals, in ms. */
#define SFPY_SIGNAL_POLL_MS 100

struct sfpy_fenced {
    PyObject_HEAD
    sfz *h;                 /* NULL once closed */
    unsigned ready;         /* the fork count next_id's fast path runs at, else SFPY_NOT_READY */
    unsigned started;       /* the fork count of the process h serves in, else SFPY_NOT_READY */
    unsigned made;          /* the fork count of the process that prepared h */
    bool may_wait;          /* max_clock_backward_wait_ms > 0: an id call may sleep */
    bool starting;          /* a thread runs the lazy start now */
    unsigned starts;        /* lazy starts ended (sfpy_inside_bump) */
    int start_rc;           /* the last one's outcome, for the threads that waited for it */
    char start_msg[SFZ_ERROR_MAX];
    sfpy_inside inside;
    sfpy_fenced_options opts;
    sfpy_fenced *next, **prev; /* in the module's list of open handles; prev NULL when not */
};

/* ---- sfz_run, waited for with Ctrl-C heard ---- */

typedef struct sfpy_run_job {
    sfz *h;
    sfz_error *err;
    int rc;
    bool done;
    pthread_mutex_t lock;
    pthread_cond_t finished;
} sfpy_run_job;

static void *sfpy_run_thread(void *arg)
{
    sfpy_run_job *job = arg;
    int rc = sfz_run(job->h, job->err);
    pthread_mutex_lock(&job->lock);
    job->rc = rc;
    job->done = true;
    pthread_cond_signal(&job->finished);
    pthread_mutex_unlock(&job->lock);
    return NULL;
}

/* Waits up to SFPY_SIGNAL_POLL_MS for the job, with the GIL released; true once done. */
static bool sfpy_run_wait(sfpy_run_job *job)
{
    bool done;
    Py_BEGIN_ALLOW_THREADS
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_nsec += SFPY_SIGNAL_POLL_MS * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&job->lock);
    while (!job->done &&
           pthread_cond_timedwait(&job->finished, &job->lock, &until) != ETIMEDOUT) {
    }
    done = job->done;
    pthread_mutex_unlock(&job->lock);
    Py_END_ALLOW_THREADS
    return done;
}

/* sfz_run(h): SFZ_OK, a C library's code with err filled, or SFPY_RAISED when a signal's
 * handler raised (Ctrl-C's KeyboardInterrupt): the start is then cancelled and waited for. */
static int sfpy_run(sfz *h, sfz_error *err)
{
    sfpy_run_job job = {.h = h, .err = err};
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_mutex_init(&job.lock, NULL);
    pthread_cond_init(&job.finished, &attr);
    pthread_condattr_destroy(&attr);
    /* The start's thread takes none of the process's signals, as none of the library's
     * threads does (common/threads.h): a handler of the program's (uWSGI's stop, which exits
     * and then waits for the GIL) runs on the program's own threads, and Ctrl-C reaches the
     * thread waiting below, which cancels the start. */
    pthread_t thread;
    bool threaded = sf_threads_start(&thread, NULL, sfpy_run_thread, &job) == 0;
    if (!threaded) { /* no thread to spare: the start runs here, deaf to signals */
        Py_BEGIN_ALLOW_THREADS
        sfpy_run_thread(&job);
        Py_END_ALLOW_THREADS
    }
    bool interrupted = false;
    while (!sfpy_run_wait(&job)) {
        if (!interrupted && PyErr_CheckSignals() < 0) {
            interrupted = true;
            sfz_cancel(h);
        }
    }
    if (threaded)
        pthread_join(thread, NULL);
    pthread_cond_destroy(&job.finished);
    pthread_mutex_destroy(&job.lock);
    if (interrupted) {
        snprintf(err->message, sizeof err->message, "the start was interrupted");
        err->code = SFZ_ERR_STOPPED;
        return SFPY_RAISED;
    }
    return job.rc;
}

/* ---- the handle in this process ---- */

static sfpy_state *sfpy_fenced_state(sfpy_fenced *self)
{
    return sfpy_state_of_type(Py_TYPE(self));
}

/* The error of a call on a closed handle; NULL. */
static PyObject *sfpy_fenced_closed(sfpy_fenced *self)
{
    PyErr_SetString(sfpy_fenced_state(self)->error, "this Fenced handle is closed");
    return NULL;
}

/* h serves in the process of fork count now. */
static void sfpy_fenced_serving(sfpy_fenced *self, unsigned now)
{
    self->started = now;
    self->ready = self->may_wait ? SFPY_NOT_READY : now;
}

/* After a failed start: a freshly prepared handle replaces h (none when that fails: the
 * handle is then closed), and h is stopped. No other call is inside h: the start was the
 * only one that left the GIL on it. */
static void sfpy_fenced_renew(sfpy_fenced *self)
{
    sfz *old = self->h, *fresh = NULL;
    sfz_error err;
    if (sfz_prepare(&self->opts.o, &fresh, &err) != SFZ_OK)
        fresh = NULL;
    self->h = fresh;
    Py_BEGIN_ALLOW_THREADS
    sfz_stop(old);
    Py_END_ALLOW_THREADS
}

/* The lazy start, in the process that made the handle: sfz_run, its outcome kept for the
 * threads that wait for it. True when it serves; else false with the exception set. */
static bool sfpy_fenced_start(sfpy_fenced *self, unsigned now)
{
    sfz *h = self->h;
    sfz_error err;
    self->starting = true;
    sfpy_inside_enter(&self->inside);
    int rc = sfpy_run(h, &err);
    sfpy_inside_leave(&self->inside);
    self->starting = false;
    self->start_rc = rc == SFPY_RAISED ? SFZ_ERR_STOPPED : rc;
    if (rc != SFZ_OK)
        snprintf(self->start_msg, sizeof self->start_msg, "%s", err.message);
    sfpy_inside_bump(&self->inside, &self->starts);
    if (rc == SFZ_OK) {
        if (self->h == h)
            sfpy_fenced_serving(self, now);
        return true;
    }
    if (self->h == h) /* else close() took it, and stops it */
        sfpy_fenced_renew(self);
    if (rc != SFPY_RAISED)
        sfpy_raise_sfz(sfpy_fenced_state(self), &err);
    return false;
}

/* Makes the handle serve in this process, or says why not: the handle, ready for id calls
 * here; NULL with the exception set. */
static sfz *sfpy_fenced_settle(sfpy_fenced *self)
{
    for (;;) {
        sfpy_inside_here(&self->inside);
        sfz *h = self->h;
        if (h == NULL) {
            sfpy_fenced_closed(self);
            return NULL;
        }
        unsigned now = sfpy_forks_now();
        if (self->started == now)
            return h;
        if (self->made != now) { /* a fork() child: a pair of its own, or the refusal */
            sfz_error err;
            int rc;
            sfpy_inside_enter(&self->inside);
            Py_BEGIN_ALLOW_THREADS
            rc = sfz_claim_after_fork(h, &err);
            Py_END_ALLOW_THREADS
            sfpy_inside_leave(&self->inside);
            if (rc != SFZ_OK) {
                sfpy_raise_sfz(sfpy_fenced_state(self), &err);
                return NULL;
            }
            if (self->h == h)
                sfpy_fenced_serving(self, now);
        } else if (self->starting) { /* another thread starts it: its outcome is ours */
            unsigned seen = self->starts;
            sfpy_inside_wait_bump(&self->inside, &self->starts, seen);
            if (self->h != NULL && self->started != now && self->start_rc != SFZ_OK) {
                sfz_error err = {.code = self->start_rc};
                snprintf(err.message, sizeof err.message, "%s", self->start_msg);
                sfpy_raise_sfz(sfpy_fenced_state(self), &err);
                return NULL;
            }
        } else if (!sfpy_fenced_start(self, now)) {
            return NULL;
        }
    }
}

/* Ids off the fast path: settles the handle here, then makes count ids, leaving the GIL
 * where the call may take long. One id as an int, or a list. */
static PyObject *sfpy_fenced_ids(sfpy_fenced *self, size_t count, bool as_list)
{
    sfz *h = sfpy_fenced_settle(self);
    if (h == NULL)
        return NULL;
    int64_t one, *ids = count > 1 ? PyMem_RawMalloc(count * sizeof *ids) : &one;
    if (ids == NULL)
        return PyErr_NoMemory();
    sfz_error err;
    int rc;
    if (self->may_wait || count > SFPY_BATCH_UNLOCKED) {
        sfpy_inside_enter(&self->inside);
        Py_BEGIN_ALLOW_THREADS
        rc = sfz_next_ids(h, ids, count, &err);
        Py_END_ALLOW_THREADS
        sfpy_inside_leave(&self->inside);
    } else {
        rc = sfz_next_ids(h, ids, count, &err);
    }
    PyObject *result;
    if (rc != SFZ_OK)
        result = sfpy_raise_sfz(sfpy_fenced_state(self), &err);
    else
        result = as_list ? sfpy_id_list(ids, count) : PyLong_FromLongLong(ids[0]);
    if (ids != &one)
        PyMem_RawFree(ids);
    return result;
}

static PyObject *sfpy_fenced_next_id(PyObject *op, PyObject *unused)
{
    (void)unused;
    sfpy_fenced *self = (sfpy_fenced *)op;
    if (__builtin_expect(self->ready == sfpy_forks_now(), 1)) {
        int64_t id;
        sfz_error err;
        if (__builtin_expect(sfz_next_id(self->h, &id, &err) == SFZ_OK, 1))
            return PyLong_FromLongLong(id);
        return sfpy_raise_sfz(sfpy_fenced_state(self), &err);
    }
    return sfpy_fenced_ids(self, 1, false);
}

static PyObject *sfpy_fenced_next_ids(PyObject *op, PyObject *count_obj)
{
    sfpy_fenced *self = (sfpy_fenced *)op;
    size_t count;
    if (!sfpy_count(count_obj, &count))
        return NULL;
    if (self->ready != sfpy_forks_now() || count > SFPY_BATCH_UNLOCKED)
        return sfpy_fenced_ids(self, count, true);
    int64_t *ids = PyMem_RawMalloc(count * sizeof *ids);
    if (ids == NULL)
        return PyErr_NoMemory();
    sfz_error err;
    PyObject *list = sfz_next_ids(self->h, ids, count, &err) == SFZ_OK
                         ? sfpy_id_list(ids, count)
                         : sfpy_raise_sfz(sfpy_fenced_state(self), &err);
    PyMem_RawFree(ids);
    return list;
}

static PyObject *sfpy_fenced_claim(PyObject *op, PyObject *unused)
{
    (void)unused;
    if (sfpy_fenced_settle((sfpy_fenced *)op) == NULL)
        return NULL;
    Py_RETURN_NONE;
}

/* Closes the handle: releases this process's pair (or frees a fork() child's copy of the
 * parent's), after the calls inside returned. */
static void sfpy_fenced_stop(sfpy_fenced *self)
{
    sfpy_inside_here(&self->inside);
    sfz *h = self->h;
    if (h == NULL)
        return;
    self->h = NULL;
    self->ready = self->started = SFPY_NOT_READY;
    if (self->starting && self->made == sfpy_forks_now())
        sfz_cancel(h); /* the lazy start under way ends soon */
    sfpy_inside_wait_idle(&self->inside);
    Py_BEGIN_ALLOW_THREADS
    sfz_stop(h);
    Py_END_ALLOW_THREADS
}

static PyObject *sfpy_fenced_close(PyObject *op, PyObject *unused)
{
    (void)unused;
    sfpy_fenced_stop((sfpy_fenced *)op);
    Py_RETURN_NONE;
}

/* The handle of a call that answers with the GIL held; NULL (closed) with the exception. */
static sfz *sfpy_fenced_open(PyObject *op)
{
    sfpy_fenced *self = (sfpy_fenced *)op;
    if (self->h == NULL)
        sfpy_fenced_closed(self);
    return self->h;
}

static PyObject *sfpy_fenced_health(PyObject *op, PyObject *unused)
{
    (void)unused;
    sfz *h = sfpy_fenced_open(op);
    if (h == NULL)
        return NULL;
    sfz_state state;
    sfz_health health;
    sfz_get_state(h, &state);
    sfz_get_health(h, &health);
    return Py_BuildValue(
        "{sOsssssLsssKsKsisLsLsL}", "serving", state.serving ? Py_True : Py_False, "reason",
        sfz_reason_name(health.reason), "message", state.reason, "since_ms",
        (long long)health.since_ms, "session", sfz_session_name(health.session), "reconnects",
        (unsigned long long)health.reconnects, "sessions_expired",
        (unsigned long long)health.sessions_expired, "start_tries", health.start_tries,
        "next_try_ms", (long long)health.next_try_ms, "worker_id",
        (long long)sfz_worker_id(h), "datacenter_id", (long long)sfz_datacenter_id(h));
}

/* worker_id, datacenter_id and serving, by the getter's closure. */
enum { SFPY_GET_WORKER_ID, SFPY_GET_DATACENTER_ID, SFPY_GET_SERVING };

static PyObject *sfpy_fenced_get(PyObject *op, void *closure)
{
    sfz *h = sfpy_fenced_open(op);
    if (h == NULL)
        return NULL;
    sfz_state state;
    switch ((intptr_t)closure) {
    case SFPY_GET_WORKER_ID:
        return PyLong_FromLongLong(sfz_worker_id(h));
    case SFPY_GET_DATACENTER_ID:
        return PyLong_FromLongLong(sfz_datacenter_id(h));
    default:
        sfz_get_state(h, &state);
        return PyBool_FromLong(state.serving);
    }
}

static PyObject *sfpy_fenced_closed_get(PyObject *op, void *closure)
{
    (void)closure;
    return PyBool_FromLong(((sfpy_fenced *)op)->h == NULL);
}

static PyObject *sfpy_fenced_repr(PyObject *op)
{
    sfz *h = ((sfpy_fenced *)op)->h;
    if (h == NULL)
        return PyUnicode_FromString("<snowflake.Fenced closed>");
    sfz_state state;
    sfz_get_state(h, &state);
    if (state.serving)
        return PyUnicode_FromFormat("<snowflake.Fenced datacenter_id=%lld worker_id=%lld "
                                    "serving>", (long long)sfz_datacenter_id(h),
                                    (long long)sfz_worker_id(h));
    return PyUnicode_FromFormat("<snowflake.Fenced not serving: %s>", state.reason);
}

/* ---- the module's list of open handles ---- */

static void sfpy_fenced_link(sfpy_fenced *self)
{
    sfpy_state *st = sfpy_fenced_state(self);
    self->next = st->live;
    if (st->live != NULL)
        st->live->prev = &self->next;
    self->prev = &st->live;
    st->live = self;
}

static void sfpy_fenced_unlink(sfpy_fenced *self)
{
    if (self->prev == NULL)
        return;
    *self->prev = self->next;
    if (self->next != NULL)
        self->next->prev = self->prev;
    self->prev = NULL;
    self->next = NULL;
}

void sfpy_fenced_close_all(sfpy_state *st)
{
    /* Strong references first: a close leaves the GIL, and other threads may make or free
     * handles meanwhile. */
    PyObject *open = PyList_New(0);
    if (open == NULL) {
        PyErr_Clear();
        return;
    }
    for (sfpy_fenced *f = st->live; f != NULL; f = f->next)
        if (f->h != NULL && PyList_Append(open, (PyObject *)f) < 0)
            PyErr_Clear();
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(open); i++)
        sfpy_fenced_stop((sfpy_fenced *)PyList_GET_ITEM(open, i));
    Py_DECREF(open);
    /* The stops' log lines wait for the main thread (sfpy_log), and at the interpreter's exit
     * the pending calls were made before the exit functions ran: make them now. */
    if (Py_MakePendingCalls() < 0)
        PyErr_Clear();
}

/* ---- the type ---- */

static PyObject *sfpy_fenced_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    sfpy_fenced *self = (sfpy_fenced *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->ready = self->started = SFPY_NOT_READY;
    self->made = sfpy_forks_now();
    sfpy_inside_init(&self->inside);
    if (!sfpy_fenced_options_parse(args, kwargs, &self->opts)) {
        Py_DECREF(self);
        return NULL;
    }
    self->may_wait = self->opts.o.max_clock_backward_wait_ms > 0;
    self->opts.o.log = sfpy_log; /* the module's logger outlives the handle: it holds the type */
    self->opts.o.log_ctx = sfpy_state_of_type(type)->logger;
    sfz_error err;
    if (sfz_prepare(&self->opts.o, &self->h, &err) != SFZ_OK) {
        self->h = NULL;
        sfpy_raise_sfz(sfpy_state_of_type(type), &err);
        Py_DECREF(self);
        return NULL;
    }
    if (!self->opts.lazy) { /* no other thread knows the handle yet */
        int rc = sfpy_run(self->h, &err);
        if (rc != SFZ_OK) {
            if (rc != SFPY_RAISED)
                sfpy_raise_sfz(sfpy_state_of_type(type), &err);
            Py_DECREF(self);
            return NULL;
        }
        sfpy_fenced_serving(self, self->made);
    }
    sfpy_fenced_link(self);
    return (PyObject *)self;
}

static void sfpy_fenced_dealloc(PyObject *op)
{
    sfpy_fenced *self = (sfpy_fenced *)op;
    PyTypeObject *type = Py_TYPE(op);
    PyObject *exc_type, *exc, *tb;
    PyErr_Fetch(&exc_type, &exc, &tb); /* the stop must not lose an exception in flight */
    sfpy_fenced_unlink(self);
    sfpy_fenced_stop(self);
    sfpy_inside_destroy(&self->inside);
    sfpy_fenced_options_free(&self->opts);
    PyErr_Restore(exc_type, exc, tb);
    type->tp_free(op);
    Py_DECREF(type);
}

static PyMethodDef sfpy_fenced_methods[] = {
    {"next_id", sfpy_fenced_next_id, METH_NOARGS,
     "next_id($self, /)\n--\n\n"
     "One id, made under the pair held now (decode it to see which). FencedError while no "
     "lease is held (retry later), or in a fork() child with on_fork='refuse'; ClockError "
     "when the clock went back; StartError when a lazy start or a child's claim failed (the "
     "next call tries again)."},
    {"next_ids", sfpy_fenced_next_ids, METH_O,
     "next_ids($self, count, /)\n--\n\n"
     "count ids (1..1000000), strictly increasing, as next_id raises. A batch of more than "
     "4,096 ids takes a millisecond per 4,096 and is made with the GIL released."},
    {"claim", sfpy_fenced_claim, METH_NOARGS,
     "claim($self, /)\n--\n\n"
     "Does now what the first id call would: a lazy handle's start, or a fork() child's "
     "claim of a pair of its own (e.g. from a pre-fork server's post-fork hook, so that no "
     "request waits for it); nothing where the handle serves in this process already. "
     "Raises as next_id does."},
    {"health", sfpy_fenced_health, METH_NOARGS,
     "health($self, /)\n--\n\n"
     "The state as a dict: serving (bool), reason (why not: none, starting, "
     "zookeeper_unreachable, session_expired, lease_unconfirmed, worker_node_lost, "
     "claim_failed, waiting_for_floor, clock_skew, stopping), message (the reason in words), "
     "since_ms (when it last began or stopped serving), session (connecting, connected, "
     "disconnected, expired), reconnects, sessions_expired, start_tries and next_try_ms "
     "(while starting), worker_id and datacenter_id (-1 before the first claim)."},
    {"close", sfpy_fenced_close, METH_NOARGS,
     "close($self, /)\n--\n\n"
     "Stops the handle: records the last timestamp and releases the pair in ZooKeeper, after "
     "the calls inside it returned (a start under way is stopped). Idempotent; every later "
     "call raises snowflake.Error. In a fork() child that did not claim, frees the child's "
     "copy only: the parent's pair is untouched."},
    {"__enter__", sfpy_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)(void (*)(void))sfpy_exit, METH_FASTCALL, NULL},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef sfpy_fenced_getset[] = {
    {"worker_id", sfpy_fenced_get, NULL,
     "The worker id held now, or last held; -1 before the first claim (and in a fork() child "
     "before its own).", (void *)SFPY_GET_WORKER_ID},
    {"datacenter_id", sfpy_fenced_get, NULL,
     "The datacenter id of the pair held (-1 before the first claim with datacenter_id=-1).",
     (void *)SFPY_GET_DATACENTER_ID},
    {"serving", sfpy_fenced_get, NULL, "True while ids are handed out (the lease holds).",
     (void *)SFPY_GET_SERVING},
    {"closed", sfpy_fenced_closed_get, NULL, "True once close() was called.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot sfpy_fenced_slots[] = {
    {Py_tp_new, sfpy_fenced_new},
    {Py_tp_dealloc, sfpy_fenced_dealloc},
    {Py_tp_repr, sfpy_fenced_repr},
    {Py_tp_methods, sfpy_fenced_methods},
    {Py_tp_getset, sfpy_fenced_getset},
    {Py_tp_doc, NULL}, /* made by sfpy_fenced_doc */
    {0, NULL},
};

static PyType_Spec sfpy_fenced_spec = {
    .name = "snowflake.Fenced",
    .basicsize = sizeof(sfpy_fenced),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = sfpy_fenced_slots,
};

int sfpy_fenced_init(PyObject *module, sfpy_state *st)
{
    char *doc = sfpy_fenced_doc();
    if (doc == NULL)
        return -1;
    PyType_Slot slots[sizeof sfpy_fenced_slots / sizeof sfpy_fenced_slots[0]];
    PyType_Spec spec = sfpy_fenced_spec;
    memcpy(slots, sfpy_fenced_slots, sizeof slots);
    for (PyType_Slot *s = slots; s->slot != 0; s++)
        if (s->slot == Py_tp_doc)
            s->pfunc = doc; /* copied by the type */
    spec.slots = slots;
    int rc = sfpy_add_type(module, &spec, &st->fenced_type);
    PyMem_Free(doc);
    return rc;
}
