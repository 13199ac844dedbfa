/* thrift_fix.c -- mends Thrift 0.17's c_glib code at run time: struct finalize not
 * chaining up, method names lost on malformed requests, and a framed transport's flush
 * that hides a failed write. */
#include "thrift_fix.h"

#include <glib-object.h>
#include <thrift/c_glib/processor/thrift_dispatch_processor.h>
#include <thrift/c_glib/thrift_application_exception.h>
#include <thrift/c_glib/protocol/thrift_binary_protocol.h>
#include <thrift/c_glib/thrift_struct.h>
#include <thrift/c_glib/transport/thrift_framed_transport.h>
#include <thrift/c_glib/transport/thrift_memory_buffer.h>
#include <thrift/c_glib/transport/thrift_socket.h>

#include "sf_scribe_scribe.h"
#include "sf_thrift_snowflake.h"
#include "sf_thrift_snowflake_types.h"

#define SF_THRIFT_FIX_MAX 64

typedef struct sf_thrift_fix_entry {
    GType type;
    void (*finalize)(GObject *object);
} sf_thrift_fix_entry;

static sf_thrift_fix_entry sf_thrift_fix_entries[SF_THRIFT_FIX_MAX];
static int sf_thrift_fix_count;

/* The saved finalize of the patched class nearest to type: type itself, or the
 * ancestor a subclass without a finalize of its own inherited the patch from. */
static const sf_thrift_fix_entry *sf_thrift_fix_find(GType type)
{
    for (; type != 0; type = g_type_parent(type))
        for (int i = 0; i < sf_thrift_fix_count; i++)
            if (sf_thrift_fix_entries[i].type == type)
                return &sf_thrift_fix_entries[i];
    return NULL;
}

/* Runs the generated finalize, then the parent class's, which frees the instance's
 * qdata. The entries are complete before any class points here (g_once). */
static void sf_thrift_fix_finalize_chained(GObject *object)
{
    const sf_thrift_fix_entry *e = sf_thrift_fix_find(G_OBJECT_TYPE(object));
    if (e == NULL) {
        g_critical("no finalize recorded for %s or its ancestors", G_OBJECT_TYPE_NAME(object));
        return;
    }
    e->finalize(object);
    /* The parent's finalize, unless it is this wrapper too (a mended ancestor): then that
     * ancestor's saved one, and so on up, so that each runs once. */
    for (GType up = g_type_parent(e->type);; up = g_type_parent(e->type)) {
        GObjectClass *parent = g_type_class_peek(up);
        if (parent->finalize != sf_thrift_fix_finalize_chained) {
            parent->finalize(object);
            return;
        }
        e = sf_thrift_fix_find(up);
        if (e == NULL) {
            g_critical("no finalize recorded for %s", g_type_name(up));
            return;
        }
        e->finalize(object);
    }
}

/* Registers every generated struct type, so that all are found below. */
static void sf_thrift_fix_register_types(void)
{
    const GType types[] = {
        SF_THRIFT_TYPE_INVALID_SYSTEM_CLOCK,
        SF_THRIFT_TYPE_INVALID_USER_AGENT_ERROR,
        SF_THRIFT_TYPE_INVALID_REQUEST_ERROR,
        SF_THRIFT_TYPE_SERVICE_UNAVAILABLE,
        SF_THRIFT_TYPE_AUDIT_LOG_ENTRY,
        SF_THRIFT_TYPE_SNOWFLAKE_GET_WORKER_ID_ARGS,
        SF_THRIFT_TYPE_SNOWFLAKE_GET_WORKER_ID_RESULT,
        SF_THRIFT_TYPE_SNOWFLAKE_GET_TIMESTAMP_ARGS,
        SF_THRIFT_TYPE_SNOWFLAKE_GET_TIMESTAMP_RESULT,
        SF_THRIFT_TYPE_SNOWFLAKE_GET_ID_ARGS,
        SF_THRIFT_TYPE_SNOWFLAKE_GET_ID_RESULT,
        SF_THRIFT_TYPE_SNOWFLAKE_GET_DATACENTER_ID_ARGS,
        SF_THRIFT_TYPE_SNOWFLAKE_GET_DATACENTER_ID_RESULT,
        SF_THRIFT_TYPE_SNOWFLAKE_GET_IDS_ARGS,
        SF_THRIFT_TYPE_SNOWFLAKE_GET_IDS_RESULT,
        SF_SCRIBE_TYPE_LOG_ENTRY,
        SF_SCRIBE_TYPE_SCRIBE_LOG_ARGS,
        SF_SCRIBE_TYPE_SCRIBE_LOG_RESULT,
    };
    for (size_t i = 0; i < G_N_ELEMENTS(types); i++)
        g_type_ensure(types[i]);
    g_type_ensure(THRIFT_TYPE_APPLICATION_EXCEPTION);
}

/* Makes type's finalize chain up, if the type has a finalize of its own: one it
 * inherited already chains (wrapping it would run the parent's twice). The class
 * stays referenced for the life of the process. */
static void sf_thrift_fix_wrap(GType type)
{
    GObjectClass *klass = g_type_class_ref(type);
    GObjectClass *parent = g_type_class_peek(g_type_parent(type));
    if (klass->finalize == parent->finalize || klass->finalize == sf_thrift_fix_finalize_chained)
        return;
    sf_thrift_fix_entries[sf_thrift_fix_count].type = type;
    sf_thrift_fix_entries[sf_thrift_fix_count].finalize = klass->finalize;
    sf_thrift_fix_count++;
    klass->finalize = sf_thrift_fix_finalize_chained;
}

void sf_thrift_fix_finalize(void)
{
    static gsize done = 0;
    if (!g_once_init_enter(&done))
        return;
    sf_thrift_fix_register_types();
    guint n = 0;
    GType *children = g_type_children(THRIFT_TYPE_STRUCT, &n);
    for (guint i = 0; i < n; i++) {
        /* The library's own application exception has the same flaw. */
        if (!g_str_has_prefix(g_type_name(children[i]), "SfThrift") &&
            !g_str_has_prefix(g_type_name(children[i]), "SfScribe") &&
            children[i] != THRIFT_TYPE_APPLICATION_EXCEPTION)
            continue;
        if (sf_thrift_fix_count == SF_THRIFT_FIX_MAX) {
            g_critical("more than %d generated Thrift structs: raise SF_THRIFT_FIX_MAX",
                       SF_THRIFT_FIX_MAX);
            break;
        }
        sf_thrift_fix_wrap(children[i]);
    }
    g_free(children);
    /* So do the library's socket, framed transport and memory buffer, which every client
     * connection (peer checks, the CLI, the audit log) creates and drops. */
    const GType library[] = { THRIFT_TYPE_SOCKET, THRIFT_TYPE_FRAMED_TRANSPORT,
                              THRIFT_TYPE_BINARY_PROTOCOL, THRIFT_TYPE_MEMORY_BUFFER };
    for (size_t i = 0; i < G_N_ELEMENTS(library) && sf_thrift_fix_count < SF_THRIFT_FIX_MAX; i++)
        sf_thrift_fix_wrap(library[i]);
    g_once_init_leave(&done, 1);
}

/* Skips an unknown call and answers it with an UNKNOWN_METHOD application
 * exception; takes ownership of fname and frees it whatever happens. */
static gboolean sf_thrift_fix_dispatch_unknown(ThriftDispatchProcessor *processor,
                                               ThriftProtocol *in, ThriftProtocol *out,
                                               gchar *fname, gint32 seqid, GError **error)
{
    (void)processor;
    if (thrift_protocol_skip(in, T_STRUCT, error) < 0 ||
        thrift_protocol_read_message_end(in, error) < 0) {
        g_free(fname);
        return FALSE;
    }
    char *message = g_strconcat("Invalid method name: '", fname, "'", NULL);
    ThriftApplicationException *x =
        g_object_new(THRIFT_TYPE_APPLICATION_EXCEPTION, "type",
                     THRIFT_APPLICATION_EXCEPTION_ERROR_UNKNOWN_METHOD, "message", message, NULL);
    g_free(message);
    ThriftTransport *transport = NULL;
    g_object_get(out, "transport", &transport, NULL);
    gboolean ok = thrift_protocol_write_message_begin(out, fname, T_EXCEPTION, seqid, error) >= 0 &&
                  thrift_struct_write(THRIFT_STRUCT(x), out, error) >= 0 &&
                  thrift_protocol_write_message_end(out, error) >= 0 &&
                  thrift_transport_write_end(transport, error) &&
                  thrift_transport_flush(transport, error);
    g_object_unref(transport);
    g_object_unref(x);
    g_free(fname);
    return ok;
}

/* Reads a call's header and dispatches it, as the library's process does,
 * but frees the method name when the header is cut short or not a call, and
 * never passes on a NULL name. */
static gboolean sf_thrift_fix_process(ThriftProcessor *processor, ThriftProtocol *in,
                                      ThriftProtocol *out, GError **error)
{
    /* The library can report success without setting the type (a message
     * in the old, non-strict form): 0 is no call, and is refused below. */
    gchar *fname = NULL;
    ThriftMessageType type = 0;
    gint32 seqid = 0;
    if (thrift_protocol_read_message_begin(in, &fname, &type, &seqid, error) < 0) {
        g_free(fname);
        return FALSE;
    }
    /* A name can come back NULL (an empty or unreadable one); the generated
     * dispatch would hash it. It is an unknown method like any other. */
    if (fname == NULL)
        fname = g_strdup("");
    if (type != T_CALL && type != T_ONEWAY) {
        g_set_error(error, THRIFT_PROTOCOL_ERROR, THRIFT_PROTOCOL_ERROR_INVALID_DATA,
                    "message type %d is not a call", (int)type);
        g_free(fname);
        return FALSE;
    }
    return THRIFT_DISPATCH_PROCESSOR_GET_CLASS(processor)->dispatch_call(
        THRIFT_DISPATCH_PROCESSOR(processor), in, out, fname, seqid, error);
}

void sf_thrift_fix_processor(void)
{
    static gsize done = 0;
    if (!g_once_init_enter(&done))
        return;
    /* Classes stay referenced for the life of the process. The generated
     * processor copied `process` from its parent when its class was made, so
     * both are patched; it reaches `dispatch_call` of its parent at call time. */
    ThriftDispatchProcessorClass *dispatch = g_type_class_ref(THRIFT_TYPE_DISPATCH_PROCESSOR);
    dispatch->dispatch_call = sf_thrift_fix_dispatch_unknown;
    THRIFT_PROCESSOR_CLASS(dispatch)->process = sf_thrift_fix_process;
    ThriftProcessorClass *generated = g_type_class_ref(SF_THRIFT_TYPE_SNOWFLAKE_PROCESSOR);
    generated->process = sf_thrift_fix_process;
    g_once_init_leave(&done, 1);
}

/* The library's framed flush, which the wrapper below calls. */
static gboolean (*sf_thrift_fix_framed_flush_saved)(ThriftTransport *transport, GError **error);

/* Runs the library's flush and fails when anything inside it failed, keeping that error. */
static gboolean sf_thrift_fix_framed_flush(ThriftTransport *transport, GError **error)
{
    GError *local = NULL;
    gboolean ok = sf_thrift_fix_framed_flush_saved(transport, &local);
    if (local != NULL) {
        g_propagate_error(error, local);
        return FALSE;
    }
    return ok;
}

void sf_thrift_fix_transport(void)
{
    static gsize done = 0;
    if (!g_once_init_enter(&done))
        return;
    ThriftTransportClass *framed = g_type_class_ref(THRIFT_TYPE_FRAMED_TRANSPORT);
    sf_thrift_fix_framed_flush_saved = framed->flush;
    framed->flush = sf_thrift_fix_framed_flush;
    g_once_init_leave(&done, 1);
}
