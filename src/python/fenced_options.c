/* fenced_options.c -- see fenced_options.h. One table names every argument: its kind, where
 * it goes in sfz_options and what it means; the integer options come from libsnowflake-zk's
 * SFZ_INT_OPTIONS list, each with a description here (SFPY_DOC_<name>: an option added to
 * the list without one does not compile). Defaults are read from sfz_options_init, ranges
 * from the list, checks and their messages from sfz_options_check. */
#include "fenced_options.h"

#include <limits.h>
#include <stddef.h>
#include <string.h>

typedef enum sfpy_kind {
    SFPY_STRING,  /* a str, or None where the option may be left out */
    SFPY_INT64,   /* an integer field of sfz_options checked by the C library */
    SFPY_BOOL,
    SFPY_INT,     /* one of SFZ_INT_OPTIONS */
} sfpy_kind;

typedef struct sfpy_option {
    const char *name;
    sfpy_kind kind;
    size_t offset;  /* in sfz_options */
    int copy;       /* SFPY_STRING: the index of its copy */
    int64_t lo, hi; /* SFPY_INT: the range; SFPY_INT64: the range the C library checks, named
                     * here only for an integer past int64's */
    const char *doc;
} sfpy_option;

#define SFPY_DOC_session_timeout_ms \
    "the ZooKeeper session timeout asked for: a process that dies without close() frees its " \
    "worker id this long after"
#define SFPY_DOC_start_timeout_ms \
    "how long a start (and a fork() child's claim) keeps trying a failure that can pass " \
    "(ZooKeeper unreachable, every id taken) before StartError; 0 = for ever"
#define SFPY_DOC_start_retry_wait_ms \
    "the wait before the start's first retry, doubling up to 30 s"
#define SFPY_DOC_claim_retries \
    "a taken static worker_id is tried this many more times within one try of the start"
#define SFPY_DOC_claim_retry_wait_ms "the wait between those tries"
#define SFPY_DOC_state_interval_ms \
    "how often the last timestamp is recorded in ZooKeeper for the next holder"
#define SFPY_DOC_startup_sleep_ms "after the claim, wait this long before serving"
#define SFPY_DOC_max_peer_skew_ms \
    "the live clock check against the peers; it needs a query_peer function, which a Python " \
    "handle does not give, so only 0 (off) is accepted"
#define SFPY_DOC_on_fork \
    "what a fork() child does with a handle made before the fork: 'claim' (a worker id of " \
    "its own, claimed at its first id call, which waits for it) or 'refuse' (every id call " \
    "raises FencedError naming the fork)"

#define SFPY_FIELD(field) offsetof(sfz_options, field)
static const sfpy_option sfpy_options[] = {
    {"zookeeper", SFPY_STRING, SFPY_FIELD(zookeeper), SFPY_ZOOKEEPER, 0, 0,
     "the ZooKeeper ensemble, \"host:port,host:port\" (required)"},
    {"path", SFPY_STRING, SFPY_FIELD(worker_id_path), SFPY_PATH, 0, 0,
     "the worker id path; its lock and state paths are path + '-locks' and + '-state'"},
    {"datacenter_id", SFPY_INT64, SFPY_FIELD(datacenter_id), -1, -1, SF_MAX_DATACENTER_ID,
     "0..31, or -1 for a free (datacenter, worker) pair over datacenter_paths"},
    {"worker_id", SFPY_INT64, SFPY_FIELD(worker_id), -1, -1, SF_MAX_WORKER_ID,
     "0..31, or -1 for the lowest free one"},
    {"datacenter_paths", SFPY_STRING, SFPY_FIELD(datacenter_paths), SFPY_DATACENTER_PATHS, 0, 0,
     "with datacenter_id=-1: \"D=/path,D=/path\" (D 0..31, each its own path), tried from one "
     "chosen at random"},
    {"auth", SFPY_STRING, SFPY_FIELD(auth), SFPY_AUTH, 0, 0,
     "\"user:password\" for ZooKeeper's digest authentication and ACLs"},
    {"epoch_ms", SFPY_INT64, SFPY_FIELD(epoch_ms), -1, 0, SF_MAX_EPOCH_MS,
     "the Unix ms the ids count from, 0..4102444800000 and in the past; one per path (its "
     "first holder records it)"},
    {"max_clock_backward_wait_ms", SFPY_INT64, SFPY_FIELD(max_clock_backward_wait_ms), -1, 0,
     SFPY_MAX_CLOCK_WAIT_MS, "a backward clock step of at most this many ms is waited out (GIL released) instead "
     "of raising ClockError, 0..60000"},
    {"random_first_sequence", SFPY_BOOL, SFPY_FIELD(random_first_sequence), -1, 0, 0,
     "start each millisecond at a random sequence in 0..2047, so that ids spread over id % n"},
    {"holder", SFPY_STRING, SFPY_FIELD(holder), SFPY_HOLDER, 0, 0,
     "the worker node's data; None for \"embedded pid=<pid> host=<host> datacenter=<id>\""},
    {"skip_sanity_checks", SFPY_BOOL, SFPY_FIELD(skip_sanity_checks), -1, 0, 0,
     "no check of the peers' datacenters nor of our clock against ZooKeeper's before a claim"},
    {"skip_unreachable_peers", SFPY_BOOL, SFPY_FIELD(skip_unreachable_peers), -1, 0, 0,
     "a peer that does not answer its check is logged, not fatal"},
#define SFPY_INT_OPTION(field, lo, hi, dflt) \
    {#field, SFPY_INT, SFPY_FIELD(field), -1, (lo), (hi), SFPY_DOC_##field},
    SFZ_INT_OPTIONS(SFPY_INT_OPTION)
#undef SFPY_INT_OPTION
};
#define SFPY_OPTIONS (sizeof sfpy_options / sizeof sfpy_options[0])

/* on_fork's words, by the C value. */
static const char *const sfpy_on_fork_words[] = {
    [SFZ_ON_FORK_REFUSE] = "refuse",
    [SFZ_ON_FORK_CLAIM] = "claim",
};
#define SFPY_ON_FORK_DEFAULT SFZ_ON_FORK_CLAIM

static const char sfpy_lazy_doc[] =
    "claim at the first id call instead of in the constructor: a pre-fork server's master "
    "that makes no ids then holds no worker id (with on_fork='claim' each worker claims its "
    "own)";

/* The defaults: the C library's, but for on_fork. */
static void sfpy_defaults(sfpy_fenced_options *out)
{
    memset(out, 0, sizeof *out);
    sfz_options_init(&out->o);
    out->o.on_fork = SFPY_ON_FORK_DEFAULT;
}

static const sfpy_option *sfpy_find(const char *name)
{
    for (size_t i = 0; i < SFPY_OPTIONS; i++)
        if (strcmp(sfpy_options[i].name, name) == 0)
            return &sfpy_options[i];
    return NULL;
}

/* A string option's value (None leaves it out, but for zookeeper and path). */
static bool sfpy_set_string(const sfpy_option *opt, PyObject *value, sfpy_fenced_options *out)
{
    const char **field = (const char **)((char *)&out->o + opt->offset);
    bool may_be_none = opt->copy != SFPY_ZOOKEEPER && opt->copy != SFPY_PATH;
    if (value == Py_None && may_be_none) {
        *field = NULL;
        return true;
    }
    if (!PyUnicode_Check(value)) {
        PyErr_Format(PyExc_TypeError, "%s must be a str%s, not %.100s", opt->name,
                     may_be_none ? " or None" : "", Py_TYPE(value)->tp_name);
        return false;
    }
    Py_ssize_t len;
    const char *text = PyUnicode_AsUTF8AndSize(value, &len);
    if (text == NULL)
        return false;
    if ((size_t)len != strlen(text)) {
        PyErr_Format(PyExc_ValueError, "%s %R holds a NUL character", opt->name, value);
        return false;
    }
    char *copy = PyMem_RawMalloc((size_t)len + 1);
    if (copy == NULL) {
        PyErr_NoMemory();
        return false;
    }
    memcpy(copy, text, (size_t)len + 1);
    PyMem_RawFree(out->copies[opt->copy]);
    out->copies[opt->copy] = copy;
    *field = copy;
    return true;
}

/* on_fork's value: 'claim' or 'refuse'. */
static bool sfpy_set_on_fork(PyObject *value, sfpy_fenced_options *out)
{
    const char *word = PyUnicode_Check(value) ? PyUnicode_AsUTF8(value) : NULL;
    for (int v = SFZ_ON_FORK_REFUSE; word != NULL && v <= SFZ_ON_FORK_CLAIM; v++)
        if (strcmp(word, sfpy_on_fork_words[v]) == 0) {
            out->o.on_fork = v;
            return true;
        }
    PyErr_Clear();
    PyErr_Format(PyExc_ValueError, "on_fork = %R is not allowed: allowed 'claim' or 'refuse'",
                 value);
    return false;
}

/* An integer of SFZ_INT_OPTIONS: one that fits an int goes to the C library's check; one that
 * does not is refused in its words, with the option's range. */
static bool sfpy_set_int(const sfpy_option *opt, PyObject *value, sfpy_fenced_options *out)
{
    int64_t v;
    if (!sfpy_int64(value, opt->name, opt->lo, opt->hi, false, &v))
        return false;
    if (v < INT_MIN || v > INT_MAX) {
        PyErr_Format(PyExc_ValueError, "%s = %lld is outside %lld..%lld", opt->name,
                     (long long)v, (long long)opt->lo, (long long)opt->hi);
        return false;
    }
    *(int *)((char *)&out->o + opt->offset) = (int)v;
    return true;
}

static bool sfpy_set(const sfpy_option *opt, PyObject *value, sfpy_fenced_options *out)
{
    char *field = (char *)&out->o + opt->offset;
    int truth;
    switch (opt->kind) {
    case SFPY_STRING:
        return sfpy_set_string(opt, value, out);
    case SFPY_INT64:
        return sfpy_int64(value, opt->name, opt->lo, opt->hi, false, (int64_t *)field);
    case SFPY_BOOL:
        if ((truth = PyObject_IsTrue(value)) < 0)
            return false;
        *(bool *)field = truth != 0;
        return true;
    case SFPY_INT:
        if (strcmp(opt->name, "on_fork") == 0)
            return sfpy_set_on_fork(value, out);
        return sfpy_set_int(opt, value, out);
    }
    return false;
}

/* The C library's check; its message names the path option by its Python name. */
static bool sfpy_check(const sfpy_fenced_options *out)
{
    sfz_error err;
    if (sfz_options_check(&out->o, &err) == SFZ_OK)
        return true;
    static const char c_name[] = "worker_id_path ";
    if (strncmp(err.message, c_name, strlen(c_name)) == 0)
        PyErr_Format(PyExc_ValueError, "path %s", err.message + strlen(c_name));
    else
        PyErr_SetString(PyExc_ValueError, err.message);
    return false;
}

bool sfpy_fenced_options_parse(PyObject *args, PyObject *kwargs, sfpy_fenced_options *out)
{
    sfpy_defaults(out);
    Py_ssize_t positional = PyTuple_GET_SIZE(args);
    if (positional > 1) {
        PyErr_Format(PyExc_TypeError, "Fenced() takes at most 1 positional argument "
                     "(zookeeper), %zd given: the others are keywords", positional);
        return false;
    }
    if (positional == 1 && !sfpy_set(&sfpy_options[0], PyTuple_GET_ITEM(args, 0), out))
        return false;
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    while (kwargs != NULL && PyDict_Next(kwargs, &pos, &key, &value)) {
        const char *name = PyUnicode_AsUTF8(key);
        if (name == NULL)
            return false;
        if (strcmp(name, "lazy") == 0) {
            int truth = PyObject_IsTrue(value);
            if (truth < 0)
                return false;
            out->lazy = truth != 0;
            continue;
        }
        const sfpy_option *opt = sfpy_find(name);
        if (opt == NULL) {
            PyErr_Format(PyExc_TypeError, "Fenced() got an unexpected keyword argument '%s'",
                         name);
            return false;
        }
        if (opt == &sfpy_options[0] && positional == 1) {
            PyErr_SetString(PyExc_TypeError, "Fenced() got zookeeper by position and by "
                            "keyword");
            return false;
        }
        if (!sfpy_set(opt, value, out))
            return false;
    }
    if (out->o.zookeeper == NULL) {
        PyErr_SetString(PyExc_TypeError, "Fenced() missing required argument 'zookeeper' "
                        "(\"host:port,host:port\")");
        return false;
    }
    return sfpy_check(out);
}

void sfpy_fenced_options_free(sfpy_fenced_options *opts)
{
    for (int i = 0; i < SFPY_STRINGS; i++) {
        PyMem_RawFree(opts->copies[i]);
        opts->copies[i] = NULL;
    }
}

/* The default of opt, as Python writes it, into a string object. */
static PyObject *sfpy_default_repr(const sfpy_option *opt, const sfz_options *d)
{
    const char *field = (const char *)d + opt->offset;
    switch (opt->kind) {
    case SFPY_STRING: {
        const char *s = *(const char *const *)field;
        if (s == NULL)
            return PyUnicode_FromString("None");
        PyObject *str = PyUnicode_FromString(s);
        PyObject *r = str != NULL ? PyObject_Repr(str) : NULL;
        Py_XDECREF(str);
        return r;
    }
    case SFPY_INT64:
        return PyUnicode_FromFormat("%lld", (long long)*(const int64_t *)field);
    case SFPY_BOOL:
        return PyUnicode_FromString(*(const bool *)field ? "True" : "False");
    case SFPY_INT:
        if (strcmp(opt->name, "on_fork") == 0)
            return PyUnicode_FromFormat("'%s'", sfpy_on_fork_words[d->on_fork]);
        return PyUnicode_FromFormat("%d", *(const int *)field);
    }
    return NULL;
}

static const char sfpy_fenced_about[] =
    "Ids made in this process by libsnowflake under a (datacenter, worker) pair held in "
    "ZooKeeper, claimed as snowflaked claims one, and handed out only while the pair's lease "
    "holds. The constructor claims (unless lazy) and waits until the clock is past the floor "
    "recorded for the pair; a failure that can pass is tried again for start_timeout_ms, "
    "then StartError names it. Ctrl-C stops a start.\n\n"
    "next_id() and next_ids(count) raise FencedError while no lease is held (ZooKeeper "
    "unreachable, the session expired): the handle claims again by itself; retry later. "
    "worker_id, datacenter_id and serving say what it holds; health() says why it does not "
    "serve, as figures; its log lines (claims, fencing and why) go to the logger "
    "'snowflake' of the logging module, from the main thread at its next step in Python. "
    "close() (or the with block's end) releases the pair at once; a handle collected or "
    "left open at the interpreter's exit is closed then. A process that "
    "ends without it (os._exit, kill -9) frees its pair when its session expires.\n\n"
    "fork(): a child never gets the parent's ids. With on_fork='claim' (the default) its "
    "first id call claims a pair of its own (its own session and floor; the GIL released "
    "while it waits) and close() there releases the child's pair; the parent keeps its own. "
    "A pre-fork server takes one pair per worker, plus one for the master if it made ids "
    "(lazy=True: none unless it does).\n\n"
    "Thread safe; ids are made with the GIL held (a lock, two clock reads), released for a "
    "claim, a batch of more than 4,096 ids and any call with max_clock_backward_wait_ms > 0. "
    "close() waits for the calls inside to return. Errors raise ValueError naming the "
    "argument and its range, in the C library's words.\n\nArguments:\n";

/* One argument's line of the docstring, and its part of the signature (none for zookeeper,
 * which has no default). */
static PyObject *sfpy_doc_line(const sfpy_option *opt, const sfz_options *d, PyObject **sig)
{
    if (opt == &sfpy_options[0])
        return PyUnicode_FromFormat("  %s: %s\n", opt->name, opt->doc);
    PyObject *dflt = opt != NULL ? sfpy_default_repr(opt, d) : PyUnicode_FromString("False");
    if (dflt == NULL)
        return NULL;
    const char *name = opt != NULL ? opt->name : "lazy";
    PyUnicode_AppendAndDel(sig, PyUnicode_FromFormat(", %s=%U", name, dflt));
    PyObject *line;
    if (opt != NULL && opt->kind == SFPY_INT && strcmp(opt->name, "on_fork") != 0)
        line = PyUnicode_FromFormat("  %s: %s (%lld..%lld, default %U)\n", name, opt->doc,
                                    (long long)opt->lo, (long long)opt->hi, dflt);
    else
        line = PyUnicode_FromFormat("  %s: %s (default %U)\n", name,
                                    opt != NULL ? opt->doc : sfpy_lazy_doc, dflt);
    Py_DECREF(dflt);
    if (*sig == NULL)
        Py_CLEAR(line);
    return line;
}

char *sfpy_fenced_doc(void)
{
    sfpy_fenced_options d;
    sfpy_defaults(&d);
    PyObject *sig = PyUnicode_FromString("Fenced(zookeeper, *");
    PyObject *lines = PyUnicode_FromString("");
    for (size_t i = 0; i <= SFPY_OPTIONS && sig != NULL && lines != NULL; i++)
        PyUnicode_AppendAndDel(&lines, sfpy_doc_line(i < SFPY_OPTIONS ? &sfpy_options[i] : NULL,
                                                     &d.o, &sig));
    PyObject *doc = NULL;
    if (sig != NULL && lines != NULL)
        doc = PyUnicode_FromFormat("%U)\n--\n\n%s%U", sig, sfpy_fenced_about, lines);
    Py_XDECREF(sig);
    Py_XDECREF(lines);
    if (doc == NULL)
        return NULL;
    Py_ssize_t len;
    const char *text = PyUnicode_AsUTF8AndSize(doc, &len);
    char *out = text != NULL ? PyMem_Malloc((size_t)len + 1) : NULL;
    if (out != NULL)
        memcpy(out, text, (size_t)len + 1);
    else if (text != NULL)
        PyErr_NoMemory();
    Py_DECREF(doc);
    return out;
}
