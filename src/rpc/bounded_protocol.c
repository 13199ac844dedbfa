/* bounded_protocol.c -- SfBoundedProtocol: the binary protocol, with every read that
 * opens a struct or container counted against SF_BOUNDED_PROTOCOL_MAX_DEPTH, and every
 * string's claimed length checked against what the transport holds before anything is
 * allocated for it.
 *
 * thrift_protocol_skip() in Thrift 0.17 c_glib recurses once per level and goes on
 * after an error, reading field headers and element counts from whatever follows. So
 * refusing one level is not enough: once a limit is passed the protocol is "tripped" and
 * every read fails until the next message, a field header reads as T_STOP and a
 * container as empty, and the skip unwinds in as many steps as it had descended. */
#include "bounded_protocol.h"

#include <thrift/c_glib/protocol/thrift_protocol.h>
#include <thrift/c_glib/transport/thrift_transport.h>

struct _SfBoundedProtocol {
    ThriftBinaryProtocol parent;
    int depth;        /* structs and containers open now */
    gboolean tripped; /* a limit was passed: refuse every read until the next message */
};

struct _SfBoundedProtocolClass {
    ThriftBinaryProtocolClass parent;
};

G_DEFINE_TYPE(SfBoundedProtocol, sf_bounded_protocol, THRIFT_TYPE_BINARY_PROTOCOL)

#define SF_BP(p) ((SfBoundedProtocol *)(p))
#define SF_BP_PARENT (THRIFT_PROTOCOL_CLASS(sf_bounded_protocol_parent_class))

/* Sets the error unless one is set already (skip passes the same GError ** on after a
 * failure), and returns -1. */
static gint32 sf_bounded_protocol_fail(GError **error, const char *fmt, ...) G_GNUC_PRINTF(2, 3);
static gint32 sf_bounded_protocol_fail(GError **error, const char *fmt, ...)
{
    if (error != NULL && *error == NULL) {
        va_list ap;
        va_start(ap, fmt);
        char *msg = g_strdup_vprintf(fmt, ap);
        va_end(ap);
        g_set_error_literal(error, THRIFT_PROTOCOL_ERROR, THRIFT_PROTOCOL_ERROR_DEPTH_LIMIT, msg);
        g_free(msg);
    }
    return -1;
}

/* The refusal of every read after a limit was passed. */
static gint32 sf_bounded_protocol_refuse(GError **error)
{
    return sf_bounded_protocol_fail(error, "input refused after passing a limit");
}

/* Enters one level of nesting; -1 (tripped) past the limit. */
static gint32 sf_bounded_protocol_enter(SfBoundedProtocol *p, GError **error)
{
    if (p->tripped)
        return sf_bounded_protocol_refuse(error);
    if (++p->depth > SF_BOUNDED_PROTOCOL_MAX_DEPTH) {
        p->tripped = TRUE;
        return sf_bounded_protocol_fail(error, "structs and containers nested more than %d deep",
                                        SF_BOUNDED_PROTOCOL_MAX_DEPTH);
    }
    return 0;
}

/* Leaves one level of nesting. */
static void sf_bounded_protocol_leave(SfBoundedProtocol *p)
{
    if (p->depth > 0)
        p->depth--;
}

/* Checks a container's claimed element count after the parent read it; an empty
 * container when refused. */
static gint32 sf_bounded_protocol_check_size(SfBoundedProtocol *p, gint32 ret, guint32 *size,
                                             GError **error)
{
    if (ret < 0) {
        p->tripped = TRUE;
        *size = 0;
        return ret;
    }
    if (*size > SF_BOUNDED_PROTOCOL_MAX_ELEMENTS) {
        p->tripped = TRUE;
        guint32 claimed = *size;
        *size = 0;
        return sf_bounded_protocol_fail(error, "a container claims %u elements: at most %u allowed",
                                        claimed, SF_BOUNDED_PROTOCOL_MAX_ELEMENTS);
    }
    return ret;
}

static gint32 sf_bounded_protocol_read_message_begin(ThriftProtocol *protocol, gchar **name,
                                                     ThriftMessageType *message_type,
                                                     gint32 *seqid, GError **error)
{
    SF_BP(protocol)->depth = 0;
    SF_BP(protocol)->tripped = FALSE;
    return SF_BP_PARENT->read_message_begin(protocol, name, message_type, seqid, error);
}

static gint32 sf_bounded_protocol_read_struct_begin(ThriftProtocol *protocol, gchar **name,
                                                    GError **error)
{
    if (name != NULL)
        *name = NULL;
    if (sf_bounded_protocol_enter(SF_BP(protocol), error) < 0)
        return -1;
    return SF_BP_PARENT->read_struct_begin(protocol, name, error);
}

static gint32 sf_bounded_protocol_read_struct_end(ThriftProtocol *protocol, GError **error)
{
    sf_bounded_protocol_leave(SF_BP(protocol));
    if (SF_BP(protocol)->tripped)
        return sf_bounded_protocol_refuse(error);
    return SF_BP_PARENT->read_struct_end(protocol, error);
}

static gint32 sf_bounded_protocol_read_field_begin(ThriftProtocol *protocol, gchar **name,
                                                   ThriftType *field_type, gint16 *field_id,
                                                   GError **error)
{
    *field_type = T_STOP;
    *field_id = 0;
    if (SF_BP(protocol)->tripped)
        return sf_bounded_protocol_refuse(error);
    gint32 ret = SF_BP_PARENT->read_field_begin(protocol, name, field_type, field_id, error);
    if (ret < 0) {
        SF_BP(protocol)->tripped = TRUE;
        *field_type = T_STOP;
    }
    return ret;
}

static gint32 sf_bounded_protocol_read_map_begin(ThriftProtocol *protocol, ThriftType *key_type,
                                                 ThriftType *value_type, guint32 *size,
                                                 GError **error)
{
    *size = 0;
    if (sf_bounded_protocol_enter(SF_BP(protocol), error) < 0)
        return -1;
    gint32 ret = SF_BP_PARENT->read_map_begin(protocol, key_type, value_type, size, error);
    return sf_bounded_protocol_check_size(SF_BP(protocol), ret, size, error);
}

static gint32 sf_bounded_protocol_read_map_end(ThriftProtocol *protocol, GError **error)
{
    sf_bounded_protocol_leave(SF_BP(protocol));
    if (SF_BP(protocol)->tripped)
        return sf_bounded_protocol_refuse(error);
    return SF_BP_PARENT->read_map_end(protocol, error);
}

static gint32 sf_bounded_protocol_read_list_begin(ThriftProtocol *protocol,
                                                  ThriftType *element_type, guint32 *size,
                                                  GError **error)
{
    *size = 0;
    if (sf_bounded_protocol_enter(SF_BP(protocol), error) < 0)
        return -1;
    gint32 ret = SF_BP_PARENT->read_list_begin(protocol, element_type, size, error);
    return sf_bounded_protocol_check_size(SF_BP(protocol), ret, size, error);
}

static gint32 sf_bounded_protocol_read_list_end(ThriftProtocol *protocol, GError **error)
{
    sf_bounded_protocol_leave(SF_BP(protocol));
    if (SF_BP(protocol)->tripped)
        return sf_bounded_protocol_refuse(error);
    return SF_BP_PARENT->read_list_end(protocol, error);
}

static gint32 sf_bounded_protocol_read_set_begin(ThriftProtocol *protocol,
                                                 ThriftType *element_type, guint32 *size,
                                                 GError **error)
{
    *size = 0;
    if (sf_bounded_protocol_enter(SF_BP(protocol), error) < 0)
        return -1;
    gint32 ret = SF_BP_PARENT->read_set_begin(protocol, element_type, size, error);
    return sf_bounded_protocol_check_size(SF_BP(protocol), ret, size, error);
}

static gint32 sf_bounded_protocol_read_set_end(ThriftProtocol *protocol, GError **error)
{
    sf_bounded_protocol_leave(SF_BP(protocol));
    if (SF_BP(protocol)->tripped)
        return sf_bounded_protocol_refuse(error);
    return SF_BP_PARENT->read_set_end(protocol, error);
}

/* Reads a string's length and, when positive, checks that the transport still holds that
 * many bytes. Thrift 0.17's binary protocol allocates the claimed length before it reads,
 * so a frame of a few bytes claiming 2 GiB would make a 2 GiB allocation, which aborts
 * the process under a memory limit (ulimit -v, strict overcommit). */
static gint32 sf_bounded_protocol_read_length(ThriftProtocol *protocol, gint32 *len,
                                              GError **error)
{
    SfBoundedProtocol *p = SF_BP(protocol);
    *len = 0;
    if (p->tripped)
        return sf_bounded_protocol_refuse(error);
    gint32 ret = thrift_protocol_read_i32(protocol, len, error);
    if (ret < 0) {
        p->tripped = TRUE;
        return -1;
    }
    ThriftTransportClass *tc = THRIFT_TRANSPORT_GET_CLASS(protocol->transport);
    if (*len > 0 && tc->checkReadBytesAvailable != NULL &&
        !tc->checkReadBytesAvailable(protocol->transport, *len, error)) {
        p->tripped = TRUE;
        *len = 0;
        return -1;
    }
    return ret;
}

/* Reads len (> 0) bytes into a new buffer of len + extra bytes, zero beyond the data;
 * NULL, the protocol tripped, when the transport cannot supply them. */
static gpointer sf_bounded_protocol_read_bytes(ThriftProtocol *protocol, gint32 len, gsize extra,
                                               gint32 *got, GError **error)
{
    gpointer buf = g_malloc0((gsize)len + extra);
    *got = thrift_transport_read_all(protocol->transport, buf, (guint32)len, error);
    if (*got < 0) {
        g_free(buf);
        SF_BP(protocol)->tripped = TRUE;
        return NULL;
    }
    return buf;
}

/* The library's read_string, with the length checked before the allocation: NULL for an
 * empty or negative length, as the library gives. */
static gint32 sf_bounded_protocol_read_string(ThriftProtocol *protocol, gchar **str,
                                              GError **error)
{
    gint32 len, got;
    *str = NULL;
    gint32 ret = sf_bounded_protocol_read_length(protocol, &len, error);
    if (ret < 0 || len <= 0)
        return ret;
    *str = sf_bounded_protocol_read_bytes(protocol, len, 1, &got, error);
    return *str != NULL ? ret + got : -1;
}

/* The library's read_binary (what skipping a string field reads), likewise; the length of
 * an empty or negative one is passed on as the library does. */
static gint32 sf_bounded_protocol_read_binary(ThriftProtocol *protocol, gpointer *buf,
                                              guint32 *len, GError **error)
{
    gint32 claimed, got;
    *buf = NULL;
    gint32 ret = sf_bounded_protocol_read_length(protocol, &claimed, error);
    *len = ret < 0 ? 0 : (guint32)claimed;
    if (ret < 0 || claimed <= 0)
        return ret;
    *buf = sf_bounded_protocol_read_bytes(protocol, claimed, 0, &got, error);
    if (*buf == NULL) {
        *len = 0;
        return -1;
    }
    return ret + got;
}

/* The binary protocol's finalize does not chain up (see thrift_fix.c) and holds no state
 * of its own: go straight to ThriftProtocol's. */
static void sf_bounded_protocol_finalize(GObject *object)
{
    GObjectClass *base = g_type_class_peek(THRIFT_TYPE_PROTOCOL);
    base->finalize(object);
}

static void sf_bounded_protocol_init(SfBoundedProtocol *p)
{
    p->depth = 0;
    p->tripped = FALSE;
}

/* Plugs the bounded reads into the binary protocol's vtable. */
static void sf_bounded_protocol_class_init(SfBoundedProtocolClass *klass)
{
    ThriftProtocolClass *pc = THRIFT_PROTOCOL_CLASS(klass);
    G_OBJECT_CLASS(klass)->finalize = sf_bounded_protocol_finalize;
    pc->read_message_begin = sf_bounded_protocol_read_message_begin;
    pc->read_struct_begin = sf_bounded_protocol_read_struct_begin;
    pc->read_struct_end = sf_bounded_protocol_read_struct_end;
    pc->read_field_begin = sf_bounded_protocol_read_field_begin;
    pc->read_map_begin = sf_bounded_protocol_read_map_begin;
    pc->read_map_end = sf_bounded_protocol_read_map_end;
    pc->read_list_begin = sf_bounded_protocol_read_list_begin;
    pc->read_list_end = sf_bounded_protocol_read_list_end;
    pc->read_set_begin = sf_bounded_protocol_read_set_begin;
    pc->read_set_end = sf_bounded_protocol_read_set_end;
    pc->read_string = sf_bounded_protocol_read_string;
    pc->read_binary = sf_bounded_protocol_read_binary;
}

ThriftProtocol *sf_bounded_protocol_new(ThriftTransport *transport)
{
    return g_object_new(SF_TYPE_BOUNDED_PROTOCOL, "transport", transport, NULL);
}
