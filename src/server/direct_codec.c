/* direct_codec.c -- sf_direct: answers the Snowflake service's five calls straight from a
 * frame's bytes into the reply's, without the c_glib processor's GObjects.
 *
 * The generated processor makes and frees an args object, a result object, protocol
 * property lookups and exception objects for every call: most of a get_id's CPU time.
 * Here the call is parsed in place and the reply encoded in place, in Thrift's binary
 * protocol, for the one shape each call has on the wire; anything else (unknown methods,
 * reordered or extra fields, other types, a truncated frame) is declined and left to the
 * processor, so that every odd frame keeps exactly the library's answer. The replies are
 * the processor's byte for byte; fuzz_direct holds the two side by side. */
#include "direct_codec.h"

#include <string.h>

#include <glib.h>

/* Thrift's binary protocol: type codes, message types and the strict version word. */
#define SF_T_STOP 0
#define SF_T_I32 8
#define SF_T_I64 10
#define SF_T_STRING 11
#define SF_T_STRUCT 12
#define SF_T_LIST 15
#define SF_MSG_CALL 1
#define SF_MSG_REPLY 2
#define SF_VERSION_1 0x80010000u

/* Agents up to this long are copied to the stack to add their NUL; longer ones to the heap. */
#define SF_DIRECT_AGENT_STACK 256

typedef enum {
    SF_DIRECT_GET_ID,
    SF_DIRECT_GET_IDS,
    SF_DIRECT_GET_WORKER_ID,
    SF_DIRECT_GET_DATACENTER_ID,
    SF_DIRECT_GET_TIMESTAMP,
    SF_DIRECT_UNKNOWN
} sf_direct_method;

/* A cursor over the frame: every read checks what is left. */
typedef struct sf_direct_in {
    const uint8_t *p;
    size_t left;
} sf_direct_in;

static bool sf_direct_take(sf_direct_in *in, size_t n, const uint8_t **at)
{
    if (in->left < n)
        return false;
    *at = in->p;
    in->p += n;
    in->left -= n;
    return true;
}

static bool sf_direct_u8(sf_direct_in *in, uint8_t *v)
{
    const uint8_t *p;
    if (!sf_direct_take(in, 1, &p))
        return false;
    *v = p[0];
    return true;
}

static bool sf_direct_u32(sf_direct_in *in, uint32_t *v)
{
    const uint8_t *p;
    if (!sf_direct_take(in, 4, &p))
        return false;
    *v = (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
    return true;
}

/* A field header of the given type and id, as a client writes each argument. */
static bool sf_direct_field(sf_direct_in *in, uint8_t type, uint16_t id)
{
    const uint8_t *p;
    return sf_direct_take(in, 3, &p) && p[0] == type && ((uint16_t)(p[1] << 8 | p[2])) == id;
}

/* A string of any length without a NUL byte: the processor would cut the agent at it. */
static bool sf_direct_string(sf_direct_in *in, const uint8_t **s, uint32_t *len)
{
    return sf_direct_u32(in, len) && *len <= INT32_MAX && sf_direct_take(in, *len, s) &&
           memchr(*s, 0, *len) == NULL;
}

/* The method a name of len bytes calls. */
static sf_direct_method sf_direct_method_named(const uint8_t *name, uint32_t len)
{
    static const char *const names[] = {"get_id", "get_ids", "get_worker_id",
                                        "get_datacenter_id", "get_timestamp"};
    for (int m = 0; m < SF_DIRECT_UNKNOWN; m++)
        if (strlen(names[m]) == len && memcmp(names[m], name, len) == 0)
            return (sf_direct_method)m;
    return SF_DIRECT_UNKNOWN;
}

/* Reads a CALL's header in either form: strict (version word with the type, name, seqid)
 * or the old one (name, type byte, seqid) that the original server also read. */
static bool sf_direct_header(sf_direct_in *in, const uint8_t **name, uint32_t *name_len,
                             uint32_t *seqid)
{
    uint32_t first;
    uint8_t type;
    if (!sf_direct_u32(in, &first))
        return false;
    if (first & 0x80000000u) {
        if (first != (SF_VERSION_1 | SF_MSG_CALL))
            return false;
        return sf_direct_string(in, name, name_len) && sf_direct_u32(in, seqid);
    }
    *name_len = first;
    return sf_direct_take(in, first, name) && sf_direct_u8(in, &type) && type == SF_MSG_CALL &&
           sf_direct_u32(in, seqid);
}

/* Encoding into the reply, which the caller sized exactly beforehand. */
static uint8_t *sf_direct_put_u8(uint8_t *p, uint8_t v)
{
    *p = v;
    return p + 1;
}

static uint8_t *sf_direct_put_u32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
    return p + 4;
}

static uint8_t *sf_direct_put_u64(uint8_t *p, uint64_t v)
{
    p = sf_direct_put_u32(p, (uint32_t)(v >> 32));
    return sf_direct_put_u32(p, (uint32_t)v);
}

static uint8_t *sf_direct_put_field(uint8_t *p, uint8_t type, uint16_t id)
{
    p[0] = type;
    p[1] = (uint8_t)(id >> 8);
    p[2] = (uint8_t)id;
    return p + 3;
}

static uint8_t *sf_direct_put_bytes(uint8_t *p, const void *s, uint32_t len)
{
    p = sf_direct_put_u32(p, len);
    memcpy(p, s, len);
    return p + len;
}

/* Size of a REPLY header for a name of name_len bytes. */
static size_t sf_direct_header_size(uint32_t name_len)
{
    return 4 + 4 + (size_t)name_len + 4;
}

/* Starts a reply of size bytes (header included) with the REPLY header. */
static uint8_t *sf_direct_begin(SfFrameTransport *t, size_t size, const uint8_t *name,
                                uint32_t name_len, uint32_t seqid)
{
    uint8_t *p = sf_frame_transport_extend(t, size);
    p = sf_direct_put_u32(p, SF_VERSION_1 | SF_MSG_REPLY);
    p = sf_direct_put_bytes(p, name, name_len);
    return sf_direct_put_u32(p, seqid);
}

/* result { 0: i64 success } */
static void sf_direct_reply_i64(SfFrameTransport *t, const uint8_t *name, uint32_t name_len,
                                uint32_t seqid, int64_t v)
{
    uint8_t *p = sf_direct_begin(t, sf_direct_header_size(name_len) + 3 + 8 + 1, name,
                                 name_len, seqid);
    p = sf_direct_put_field(p, SF_T_I64, 0);
    p = sf_direct_put_u64(p, (uint64_t)v);
    sf_direct_put_u8(p, SF_T_STOP);
}

/* result { field: Exception { 1: string message } }. */
static void sf_direct_reply_exception(SfFrameTransport *t, const uint8_t *name,
                                      uint32_t name_len, uint32_t seqid, uint16_t field,
                                      const char *message)
{
    uint32_t mlen = (uint32_t)strlen(message);
    uint8_t *p = sf_direct_begin(t, sf_direct_header_size(name_len) + 3 + 3 + 4 + mlen + 1 + 1,
                                 name, name_len, seqid);
    p = sf_direct_put_field(p, SF_T_STRUCT, field);
    p = sf_direct_put_field(p, SF_T_STRING, 1);
    p = sf_direct_put_bytes(p, message, mlen);
    p = sf_direct_put_u8(p, SF_T_STOP);
    sf_direct_put_u8(p, SF_T_STOP);
}

/* The result struct's field id of each refusal, as the IDL numbers them: get_id declares
 * no InvalidRequestError, so its ServiceUnavailable is 3 where get_ids' is 4. */
static uint16_t sf_direct_exception_field(sf_handler_outcome o, bool batch)
{
    switch (o) {
    case SF_HANDLER_INVALID_SYSTEM_CLOCK:
        return 1;
    case SF_HANDLER_INVALID_USER_AGENT:
        return 2;
    case SF_HANDLER_INVALID_REQUEST:
        return 3;
    case SF_HANDLER_SERVICE_UNAVAILABLE:
        return batch ? 4 : 3;
    case SF_HANDLER_OK:
        break;
    }
    g_error("direct codec: no exception field for outcome %d", (int)o);
    return 0;
}

/* result { 0: list<i64> success } */
static void sf_direct_reply_ids(SfFrameTransport *t, const uint8_t *name, uint32_t name_len,
                                uint32_t seqid, const int64_t *ids, int32_t count)
{
    uint8_t *p = sf_direct_begin(t,
                                 sf_direct_header_size(name_len) + 3 + 5 + 8 * (size_t)count + 1,
                                 name, name_len, seqid);
    p = sf_direct_put_field(p, SF_T_LIST, 0);
    p = sf_direct_put_u8(p, SF_T_I64);
    p = sf_direct_put_u32(p, (uint32_t)count);
    for (int32_t i = 0; i < count; i++)
        p = sf_direct_put_u64(p, (uint64_t)ids[i]);
    sf_direct_put_u8(p, SF_T_STOP);
}

/* Calls get_id or get_ids with the agent made a C string, and encodes what it returned. */
static void sf_direct_call_ids(SfHandler *h, SfFrameTransport *t, sf_direct_method m,
                               const uint8_t *name, uint32_t name_len, uint32_t seqid,
                               const uint8_t *agent_bytes, uint32_t agent_len, int32_t count)
{
    char stack[SF_DIRECT_AGENT_STACK];
    char *agent = agent_len < sizeof stack ? stack : g_malloc((size_t)agent_len + 1);
    memcpy(agent, agent_bytes, agent_len);
    agent[agent_len] = '\0';
    GError *refusal = NULL;
    if (m == SF_DIRECT_GET_ID) {
        int64_t id;
        if (sf_handler_call_get_id(h, agent, &id, &refusal))
            sf_direct_reply_i64(t, name, name_len, seqid, id);
    } else {
        bool fits = count >= 1 && count <= sf_handler_max_batch_size(h);
        int64_t *ids = fits ? g_new(int64_t, (size_t)count) : NULL;
        if (sf_handler_call_get_ids(h, agent, count, ids, &refusal))
            sf_direct_reply_ids(t, name, name_len, seqid, ids, count);
        g_free(ids);
    }
    if (refusal != NULL) {
        sf_direct_reply_exception(t, name, name_len, seqid,
                                  sf_direct_exception_field((sf_handler_outcome)refusal->code,
                                                            m == SF_DIRECT_GET_IDS),
                                  refusal->message);
        g_error_free(refusal);
    }
    if (agent != stack)
        g_free(agent);
}

bool sf_direct_answer(void *handler, SfFrameTransport *t, const uint8_t *frame, size_t len)
{
    SfHandler *h = handler;
    sf_direct_in in = {frame, len};
    const uint8_t *name, *agent = NULL;
    uint32_t name_len, seqid, agent_len = 0, count = 0;
    if (!sf_direct_header(&in, &name, &name_len, &seqid))
        return false;
    sf_direct_method m = sf_direct_method_named(name, name_len);
    if (m == SF_DIRECT_UNKNOWN)
        return false;
    if (m == SF_DIRECT_GET_ID || m == SF_DIRECT_GET_IDS) {
        if (!sf_direct_field(&in, SF_T_STRING, 1) || !sf_direct_string(&in, &agent, &agent_len))
            return false;
        if (m == SF_DIRECT_GET_IDS &&
            (!sf_direct_field(&in, SF_T_I32, 2) || !sf_direct_u32(&in, &count)))
            return false;
    }
    uint8_t stop;
    if (!sf_direct_u8(&in, &stop) || stop != SF_T_STOP || in.left != 0)
        return false;
    switch (m) {
    case SF_DIRECT_GET_WORKER_ID:
        sf_direct_reply_i64(t, name, name_len, seqid, sf_handler_call_get_worker_id(h));
        break;
    case SF_DIRECT_GET_DATACENTER_ID:
        sf_direct_reply_i64(t, name, name_len, seqid, sf_handler_call_get_datacenter_id(h));
        break;
    case SF_DIRECT_GET_TIMESTAMP:
        sf_direct_reply_i64(t, name, name_len, seqid, sf_handler_call_get_timestamp(h));
        break;
    default:
        sf_direct_call_ids(h, t, m, name, name_len, seqid, agent, agent_len, (int32_t)count);
        break;
    }
    return true;
}
