/* thrift_fix.c -- makes the generated Thrift structs' finalize chain up to GObject, which Thrift 0.17's c_glib generator omits. */
#include "thrift_fix.h"

#include <glib-object.h>
#include <thrift/c_glib/thrift_struct.h>

#include "sf_thrift_snowflake.h"
#include "sf_thrift_snowflake_types.h"

#define SF_THRIFT_FIX_MAX 64

typedef struct sf_thrift_fix_entry {
    GType type;
    void (*finalize)(GObject *object);
} sf_thrift_fix_entry;

static sf_thrift_fix_entry sf_thrift_fix_entries[SF_THRIFT_FIX_MAX];
static int sf_thrift_fix_count;

/* Runs the generated finalize, then the parent class's (GObject's), which
 * frees the instance's qdata. */
static void sf_thrift_fix_finalize(GObject *object)
{
    GType type = G_OBJECT_TYPE(object);
    for (int i = 0; i < sf_thrift_fix_count; i++) {
        if (sf_thrift_fix_entries[i].type == type) {
            sf_thrift_fix_entries[i].finalize(object);
            GObjectClass *parent = g_type_class_peek(g_type_parent(type));
            parent->finalize(object);
            return;
        }
    }
    g_critical("no finalize recorded for %s", G_OBJECT_TYPE_NAME(object));
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
    };
    for (size_t i = 0; i < G_N_ELEMENTS(types); i++)
        g_type_ensure(types[i]);
}

void sf_thrift_fix_struct_finalize(void)
{
    static gsize done = 0;
    if (!g_once_init_enter(&done))
        return;
    sf_thrift_fix_register_types();
    guint n = 0;
    GType *children = g_type_children(THRIFT_TYPE_STRUCT, &n);
    for (guint i = 0; i < n; i++) {
        if (!g_str_has_prefix(g_type_name(children[i]), "SfThrift"))
            continue;
        if (sf_thrift_fix_count == SF_THRIFT_FIX_MAX) {
            g_critical("more than %d generated Thrift structs: raise SF_THRIFT_FIX_MAX",
                       SF_THRIFT_FIX_MAX);
            break;
        }
        /* The class stays referenced for the life of the process. */
        GObjectClass *klass = g_type_class_ref(children[i]);
        sf_thrift_fix_entries[sf_thrift_fix_count].type = children[i];
        sf_thrift_fix_entries[sf_thrift_fix_count].finalize = klass->finalize;
        sf_thrift_fix_count++;
        klass->finalize = sf_thrift_fix_finalize;
    }
    g_free(children);
    g_once_init_leave(&done, 1);
}
