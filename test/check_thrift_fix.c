/* check_thrift_fix.c -- the run-time mend of Thrift 0.17's c_glib finalizers: a struct's
 * finalize then chains up to GObject's (which frees the instance's data), also for a
 * subclass that inherits the mended finalize. */
#include <check.h>
#include <glib-object.h>
#include <stdlib.h>
#include <thrift/c_glib/transport/thrift_memory_buffer.h>

#include "sf_scribe_scribe_types.h"
#include "sf_thrift_snowflake_types.h"
#include "thrift_fix.h"

/* A subclass of a generated struct without a finalize of its own, as a user of the
 * generated code might derive one. */
typedef struct { SfThriftAuditLogEntry parent; } TestEntry;
typedef struct { SfThriftAuditLogEntryClass parent; } TestEntryClass;
G_DEFINE_TYPE(TestEntry, test_entry, SF_THRIFT_TYPE_AUDIT_LOG_ENTRY)
static void test_entry_class_init(TestEntryClass *klass) { (void)klass; }
static void test_entry_init(TestEntry *self) { (void)self; }

/* Counts data destroyed by GObject's own finalize, which runs only when chained to. */
static int freed;
static void count_freed(gpointer data)
{
    g_free(data);
    freed++;
}

/* Creates an instance of type with data attached, drops it, and says whether GObject's
 * finalize freed the data. */
static gboolean data_freed_on_finalize(GType type)
{
    freed = 0;
    GObject *o = g_object_new(type, NULL);
    g_object_set_data_full(o, "probe", g_strdup("x"), count_freed);
    g_object_unref(o);
    return freed == 1;
}

START_TEST(test_structs_chain_up)
{
    ck_assert_msg(data_freed_on_finalize(SF_THRIFT_TYPE_AUDIT_LOG_ENTRY),
                  "the generated struct's finalize does not reach GObject's");
    ck_assert_msg(data_freed_on_finalize(SF_SCRIBE_TYPE_LOG_ENTRY),
                  "the scribe struct's finalize does not reach GObject's");
    ck_assert_msg(data_freed_on_finalize(THRIFT_TYPE_MEMORY_BUFFER),
                  "the memory buffer's finalize does not reach GObject's");
}
END_TEST

START_TEST(test_subclass_inherits_the_mend)
{
    /* Criticals abort the test: finding no saved finalize for the subclass is one. */
    g_log_set_always_fatal(G_LOG_LEVEL_CRITICAL);
    ck_assert_msg(data_freed_on_finalize(test_entry_get_type()),
                  "a subclass of a mended struct does not finalize through it");
}
END_TEST

int main(void)
{
    sf_thrift_fix_finalize();
    Suite *s = suite_create("thrift_fix");
    TCase *tc = tcase_create("finalize");
    tcase_add_test(tc, test_structs_chain_up);
    tcase_add_test(tc, test_subclass_inherits_the_mend);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
