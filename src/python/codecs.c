/* codecs.c -- the module's functions on ids themselves: decode, compose, encode, parse and
 * id_range, each libsnowflake's (sf_decode, sf_compose, sf_id_encode, sf_id_parse,
 * sf_id_range) with its checks and messages; and Decoded, the named tuple decode returns. */
#include "sfpy.h"

#include <string.h>

static const char *const sfpy_decoded_fields[] = {"time_ms", "datacenter_id", "worker_id",
                                                  "sequence"};

int sfpy_codecs_init(PyObject *module, sfpy_state *st)
{
    PyObject *collections = PyImport_ImportModule("collections");
    if (collections == NULL)
        return -1;
    st->decoded = PyObject_CallMethod(collections, "namedtuple", "s(ssss)", "Decoded",
                                      sfpy_decoded_fields[0], sfpy_decoded_fields[1],
                                      sfpy_decoded_fields[2], sfpy_decoded_fields[3]);
    Py_DECREF(collections);
    if (st->decoded == NULL)
        return -1;
    PyObject *doc = PyUnicode_FromString(
        "Decoded(time_ms, datacenter_id, worker_id, sequence): the fields of an id, as "
        "snowflake.decode gives them; time_ms is Unix milliseconds (the id's timestamp plus "
        "the epoch).");
    PyObject *name = PyUnicode_FromString("snowflake");
    int rc = doc != NULL && name != NULL &&
                     PyObject_SetAttrString(st->decoded, "__doc__", doc) == 0 &&
                     PyObject_SetAttrString(st->decoded, "__module__", name) == 0
                 ? PyModule_AddObjectRef(module, "Decoded", st->decoded)
                 : -1;
    Py_XDECREF(doc);
    Py_XDECREF(name);
    return rc;
}

/* An id argument: 0..INT64_MAX (libsnowflake refuses a negative one with its message). */
static bool sfpy_id_arg(PyObject *o, int64_t *id)
{
    return sfpy_int64(o, "id", 0, INT64_MAX, false, id);
}

/* An epoch_ms argument, NULL for Twitter's (libsnowflake checks its range). */
static bool sfpy_epoch_arg(PyObject *o, int64_t *epoch_ms)
{
    *epoch_ms = SF_TWITTER_EPOCH_MS;
    return o == NULL || sfpy_int64(o, "epoch_ms", 0, SF_MAX_EPOCH_MS, false, epoch_ms);
}

/* The base of an alphabet's name; false with ValueError naming the allowed ones. */
static bool sfpy_alphabet(const char *name, sf_id_base *base)
{
    static const struct {
        const char *name;
        sf_id_base base;
    } alphabets[] = {{"base32", SF_BASE32}, {"base58", SF_BASE58}, {"base62", SF_BASE62}};
    for (size_t i = 0; i < sizeof alphabets / sizeof alphabets[0]; i++)
        if (strcmp(name, alphabets[i].name) == 0) {
            *base = alphabets[i].base;
            return true;
        }
    PyErr_Format(PyExc_ValueError, "alphabet '%s' is not allowed: allowed base32, base58, "
                 "base62", name);
    return false;
}

static PyObject *sfpy_decode(PyObject *module, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"id", "epoch_ms", NULL};
    PyObject *id_obj, *epoch_obj = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|$O:decode", keywords, &id_obj,
                                     &epoch_obj))
        return NULL;
    int64_t id, epoch_ms;
    if (!sfpy_id_arg(id_obj, &id) || !sfpy_epoch_arg(epoch_obj, &epoch_ms))
        return NULL;
    sf_decoded d;
    sf_error err;
    if (sf_decode(id, epoch_ms, &d, &err) != SF_OK)
        return sfpy_raise_sf(sfpy_state_of(module), &err);
    return PyObject_CallFunction(sfpy_state_of(module)->decoded, "LLLL",
                                 (long long)d.timestamp_ms, (long long)d.datacenter_id,
                                 (long long)d.worker_id, (long long)d.sequence);
}

static PyObject *sfpy_compose(PyObject *module, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"time_ms", "datacenter_id", "worker_id", "sequence", "epoch_ms",
                               NULL};
    PyObject *fields[4], *epoch_obj = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOO|$O:compose", keywords, &fields[0],
                                     &fields[1], &fields[2], &fields[3], &epoch_obj))
        return NULL;
    int64_t values[4], epoch_ms, id;
    if (!sfpy_epoch_arg(epoch_obj, &epoch_ms))
        return NULL;
    const int64_t highest[4] = {epoch_ms + SF_MAX_TIMESTAMP_DELTA, SF_MAX_DATACENTER_ID,
                                SF_MAX_WORKER_ID, SF_SEQUENCE_MASK};
    for (int i = 0; i < 4; i++)
        if (!sfpy_int64(fields[i], sfpy_decoded_fields[i], i == 0 ? epoch_ms : 0, highest[i],
                        false, &values[i]))
            return NULL;
    sf_decoded d = {.timestamp_ms = values[0], .datacenter_id = values[1],
                    .worker_id = values[2], .sequence = values[3]};
    sf_error err;
    if (sf_compose(&d, epoch_ms, &id, &err) != SF_OK)
        return sfpy_raise_sf(sfpy_state_of(module), &err);
    return PyLong_FromLongLong(id);
}

static PyObject *sfpy_encode(PyObject *module, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"id", "alphabet", NULL};
    PyObject *id_obj;
    const char *alphabet;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "Os:encode", keywords, &id_obj, &alphabet))
        return NULL;
    int64_t id;
    sf_id_base base;
    if (!sfpy_id_arg(id_obj, &id) || !sfpy_alphabet(alphabet, &base))
        return NULL;
    char text[SF_ID_TEXT_MAX];
    sf_error err;
    if (sf_id_encode(id, base, text, sizeof text, &err) != SF_OK)
        return sfpy_raise_sf(sfpy_state_of(module), &err);
    return PyUnicode_FromString(text);
}

static PyObject *sfpy_parse(PyObject *module, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"text", "alphabet", NULL};
    PyObject *text_obj;
    const char *alphabet;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "Us:parse", keywords, &text_obj, &alphabet))
        return NULL;
    sf_id_base base;
    if (!sfpy_alphabet(alphabet, &base))
        return NULL;
    Py_ssize_t len;
    const char *text = PyUnicode_AsUTF8AndSize(text_obj, &len);
    if (text == NULL)
        return NULL;
    if ((size_t)len != strlen(text)) { /* the C reading would stop at the NUL */
        PyErr_Format(PyExc_ValueError, "%R is not a %s id: it holds a NUL character", text_obj,
                     alphabet);
        return NULL;
    }
    int64_t id;
    sf_error err;
    if (sf_id_parse(text, base, &id, &err) != SF_OK)
        return sfpy_raise_sf(sfpy_state_of(module), &err);
    return PyLong_FromLongLong(id);
}

static PyObject *sfpy_id_range(PyObject *module, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"start_ms", "end_ms", "epoch_ms", NULL};
    PyObject *start_obj, *end_obj, *epoch_obj = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO|$O:id_range", keywords, &start_obj,
                                     &end_obj, &epoch_obj))
        return NULL;
    int64_t start_ms, end_ms, epoch_ms, lo, hi;
    if (!sfpy_epoch_arg(epoch_obj, &epoch_ms))
        return NULL;
    int64_t last_ms = epoch_ms + SF_MAX_TIMESTAMP_DELTA;
    if (!sfpy_int64(start_obj, "start_ms", epoch_ms, last_ms, false, &start_ms) ||
        !sfpy_int64(end_obj, "end_ms", epoch_ms, last_ms, false, &end_ms))
        return NULL;
    sf_error err;
    if (sf_id_range(start_ms, end_ms, epoch_ms, &lo, &hi, &err) != SF_OK)
        return sfpy_raise_sf(sfpy_state_of(module), &err);
    return Py_BuildValue("(LL)", (long long)lo, (long long)hi);
}

PyMethodDef sfpy_codec_methods[] = {
    {"decode", (PyCFunction)(void (*)(void))sfpy_decode, METH_VARARGS | METH_KEYWORDS,
     "decode(id, *, epoch_ms=TWITTER_EPOCH_MS)\n--\n\n"
     "The fields of id (0..2**63-1) as Decoded(time_ms, datacenter_id, worker_id, sequence), "
     "time_ms in Unix milliseconds. ValueError for a negative id or an epoch outside "
     "0..4102444800000."},
    {"compose", (PyCFunction)(void (*)(void))sfpy_compose, METH_VARARGS | METH_KEYWORDS,
     "compose(time_ms, datacenter_id, worker_id, sequence, *, epoch_ms=TWITTER_EPOCH_MS)\n--\n\n"
     "The id of those fields, the inverse of decode: time_ms Unix ms within the ids' 41-bit "
     "range after the epoch, datacenter_id and worker_id 0..31, sequence 0..4095. ValueError "
     "naming a field outside its range."},
    {"encode", (PyCFunction)(void (*)(void))sfpy_encode, METH_VARARGS | METH_KEYWORDS,
     "encode(id, alphabet)\n--\n\n"
     "id as a string in alphabet: 'base32' (Crockford's, 13 characters) or 'base62' "
     "(0-9A-Za-z, 11 characters), fixed width, so that strings sort as the ids do; or "
     "'base58' (bwmarrin/snowflake's form, no padding, not in the ids' order)."},
    {"parse", (PyCFunction)(void (*)(void))sfpy_parse, METH_VARARGS | METH_KEYWORDS,
     "parse(text, alphabet)\n--\n\n"
     "The id text writes in alphabet ('base32', 'base58' or 'base62'), the inverse of encode: "
     "digits of the alphabet only, leading zeros allowed; base32 reads both cases and "
     "Crockford's aliases. ValueError naming the bad character, or an overflow past 2**63-1."},
    {"id_range", (PyCFunction)(void (*)(void))sfpy_id_range, METH_VARARGS | METH_KEYWORDS,
     "id_range(start_ms, end_ms, *, epoch_ms=TWITTER_EPOCH_MS)\n--\n\n"
     "(lo, hi): the lowest id any worker can make at start_ms and the highest at end_ms (Unix "
     "ms, both inclusive), for WHERE id BETWEEN lo AND hi. ValueError for a time outside the "
     "ids' range or start_ms after end_ms."},
    {NULL, NULL, 0, NULL},
};
